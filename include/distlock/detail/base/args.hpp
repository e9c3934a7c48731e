// Argument lists for Redis commands: Args (a borrowed span of string_views),
// Decimal (an integer formatted on the stack) and a script call's argv, so
// that commands can be built without allocating.
#pragma once

#include <charconv>
#include <cstddef>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace distlock::detail {

/// A borrowed, contiguous list of arguments; the caller keeps them alive.
class Args {
 public:
  Args() noexcept = default;
  // Meant for parameters: a braced list's array lives until the end of the
  // full expression that calls the function, which outlives the call.
  Args(std::initializer_list<std::string_view> args) noexcept {
    data_ = args.begin();
    size_ = args.size();
  }
  Args(const std::vector<std::string_view>& args) noexcept
      : data_(args.data()), size_(args.size()) {}
  Args(const std::string_view* data, std::size_t size) noexcept : data_(data), size_(size) {}

  const std::string_view* begin() const noexcept { return data_; }
  const std::string_view* end() const noexcept { return data_ + size_; }
  std::size_t size() const noexcept { return size_; }

 private:
  const std::string_view* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The decimal text of an integer, kept in the object itself.
class Decimal {
 public:
  explicit Decimal(long long value) noexcept : value_(value) {
    size_ = static_cast<std::size_t>(std::to_chars(buffer_, buffer_ + sizeof buffer_, value).ptr -
                                     buffer_);
  }
  long long value() const noexcept { return value_; }
  std::string_view view() const noexcept { return {buffer_, size_}; }
  operator std::string_view() const noexcept { return view(); }

 private:
  long long value_;
  char buffer_[24];
  std::size_t size_;
};

/// Calls use(argv) with "<verb> <body> <numkeys> <keys...> <args...>" (a
/// script call), laid out on the stack when it has at most `stack` entries.
template <std::size_t stack, class Use>
void with_script_argv(std::string_view verb, std::string_view body, Args keys, Args args,
                      Use&& use) {
  const Decimal numkeys(static_cast<long long>(keys.size()));
  const std::size_t argc = 3 + keys.size() + args.size();
  if (argc <= stack) {
    std::string_view argv[stack];
    std::size_t i = 0;
    argv[i++] = verb;
    argv[i++] = body;
    argv[i++] = numkeys;
    for (const std::string_view key : keys) argv[i++] = key;
    for (const std::string_view arg : args) argv[i++] = arg;
    use(Args(argv, argc));
    return;
  }
  std::vector<std::string_view> argv{verb, body, numkeys};
  argv.reserve(argc);
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  use(Args(argv));
}

}  // namespace distlock::detail
