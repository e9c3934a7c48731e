// What the async calls (distlock/asio.hpp) reach of a lock object (or a
// Semaphore) and of their holds, and the error code an exception from a
// step stands for.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/lifecycle.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock {

namespace detail {
/// Which side of a lock an async hold is: the exclusive one of every lock,
/// or a SharedMutex's read side.
enum class Side { exclusive, shared };
}  // namespace detail

template <class Lock, detail::Side side = detail::Side::exclusive>
class AsyncHold;

namespace detail {

template <class Life>
struct LifeTraits;
template <class P>
struct LifeTraits<Lifecycle<P>> {
  using Protocol = P;
  static constexpr typename P::Kind exclusive = P::exclusive;
  /// The protocol's kind of hold for `side` (a shared one only where the
  /// protocol has one).
  template <Side side>
  static constexpr typename P::Kind kind() noexcept {
    if constexpr (side == Side::shared) {
      return P::shared;
    } else {
      return P::exclusive;
    }
  }
};

/// What an async acquire on `Source` holds: a hold of the lock `Source`,
/// or, where it names one (a Semaphore's PermitLock), of its `PermitLock`.
template <class Source, class = void>
struct HeldLock {
  using type = Source;
};
template <class Source>
struct HeldLock<Source, std::void_t<typename Source::PermitLock>> {
  using type = typename Source::PermitLock;
};
template <class Source>
using HeldLockOf = typename HeldLock<Source>::type;

/// A lock object's shared state, and the parts of an async hold.
struct AsyncAccess {
  /// The state an async acquire on `source` runs on: the lock's own, or
  /// a new permit lock's, which its hold keeps.
  template <class Source>
  static auto life_of(Source& source) {
    if constexpr (std::is_same_v<HeldLockOf<Source>, Source>) {
      return source.life_;
    } else {
      return source.permit_life();
    }
  }
  /// A StripedMutex's stripes, which its async waits share.
  template <class Striped>
  static auto stripes_of(Striped& striped) {
    return striped.stripes_;
  }
  template <class Lock, Side side, class Life, class Link>
  static AsyncHold<Lock, side> hold(std::shared_ptr<Life> life, std::string id,
                                    const std::shared_ptr<Link>& link) noexcept {
    return AsyncHold<Lock, side>(std::move(life), std::move(id), link);
  }
  template <class Lock, Side side>
  static auto parts(const AsyncHold<Lock, side>& hold) {
    return std::make_pair(hold.life_, hold.id_);
  }
  template <class Lock, Side side>
  static auto take(AsyncHold<Lock, side>& hold) noexcept {
    return std::make_pair(std::move(hold.life_), std::move(hold.id_));
  }
};

/// Whether a Protocol has its steps in a form a link sends (see
/// LeaseProtocol::send_attempt).
template <class P, class = void>
struct HasLinkSteps : std::false_type {};
template <class P>
struct HasLinkSteps<P, std::void_t<decltype(std::declval<const P&>().attempt_answer(
                           std::declval<typename P::Kind>(), std::declval<const Reply&>()))>>
    : std::true_type {};

/// Whether a Protocol writes an attempt's undo behind it on the link
/// (send_undo). One that cannot (a SimpleMutex: its token-checked delete
/// reads first) gives a late grant back on a connection of its own.
template <class P, class = void>
struct UndoesBehind : std::false_type {};
template <class P>
struct UndoesBehind<P, std::void_t<decltype(std::declval<const P&>().send_undo(
                           std::declval<typename P::Kind>(), std::declval<Link&>(),
                           std::declval<const std::string&>()))>> : std::true_type {};

/// Whether a Protocol releases on a link (send_release); one that does not
/// releases on a connection of its own, through the backend's connector.
template <class P, class = void>
struct ReleasesOnLink : std::false_type {};
template <class P>
struct ReleasesOnLink<P, std::void_t<decltype(std::declval<const P&>().send_release(
                             std::declval<typename P::Kind>(), std::declval<Link&>(),
                             std::declval<const std::string&>(), Link::Sink()))>> : std::true_type {
};

template <class Source>
using LifeOf = typename decltype(AsyncAccess::life_of(std::declval<Source&>()))::element_type;
template <class Lock, Side side = Side::exclusive>
using HoldParts = decltype(AsyncAccess::take(std::declval<AsyncHold<Lock, side>&>()));

/// The error code an async acquire that ended with `outcome` completes
/// with: none with the lock, nor when busy (an empty hold); timed_out when
/// Redis left it unanswered, cancelled after cancel_waits().
inline std::error_code code_of(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::unanswered: return make_error_code(Errc::timed_out);
    case Outcome::cancelled: return make_error_code(Errc::cancelled);
    case Outcome::acquired:
    case Outcome::timed_out: break;
  }
  return {};
}

/// The error code an exception from a step stands for.
inline std::error_code code_of(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const std::system_error& error) {
    return error.code();
  } catch (const std::bad_alloc&) {
    return std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    return make_error_code(Errc::protocol_error);
  }
}

}  // namespace detail
}  // namespace distlock
