// FunctionRef: a non-owning reference to something callable, for a step
// handed through a virtual call (Site::run) without an allocation. It must
// not outlive the callable it was made from.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace distlock::detail {

template <class Signature>
class FunctionRef;

template <class Result, class... Arg>
class FunctionRef<Result(Arg...)> {
 public:
  template <class Callable,
            class = std::enable_if_t<!std::is_same_v<std::decay_t<Callable>, FunctionRef>>>
  FunctionRef(Callable&& callable) noexcept  // NOLINT: converts like std::function
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        call_([](void* target, Arg... args) -> Result {
          return (*static_cast<std::remove_reference_t<Callable>*>(target))(
              std::forward<Arg>(args)...);
        }) {}

  Result operator()(Arg... args) const { return call_(callable_, std::forward<Arg>(args)...); }

 private:
  void* callable_;
  Result (*call_)(void*, Arg...);
};

}  // namespace distlock::detail
