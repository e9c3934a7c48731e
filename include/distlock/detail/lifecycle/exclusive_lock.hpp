// ExclusiveLock: the Lockable / TimedLockable surface every exclusive lock
// type shares (Mutex, SimpleMutex, ReentrantMutex, Redlock), over the one
// Lifecycle. A lock type is this plus its Protocol and its own accessors.
//
// The Lifecycle lives on the heap, so that a lock object moves, held or
// not (a factory can return one, a vector can hold them), as
// std::unique_lock does: its holds, their leases and the Watchdog's
// renewals go with it; a move assignment first gives back what the target
// held. A moved-from object may only be destroyed or assigned to. Moving
// is not thread-safe: no other thread may use either object meanwhile.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/lifecycle.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {
class StripedMutex;
}

namespace distlock::detail {

template <class Protocol>
class ExclusiveLock {
 public:
  using clock = std::chrono::steady_clock;

  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;
  ExclusiveLock(ExclusiveLock&&) noexcept;
  ExclusiveLock& operator=(ExclusiveLock&&) noexcept;

  /// Blocks until the lock is acquired. The first attempt is immediate (a
  /// free lock costs one round trip); after that the caller sleeps until the
  /// holder's release is announced or the holder's lease ends, whichever is
  /// first, and tries again (polling at the policy's pace instead while no
  /// announcement can be relied on). Each step waits for Redis at most one
  /// command timeout. Throws ConnectionError/TimeoutError/ServerError when
  /// Redis fails, Error(cancelled) after cancel_waits(),
  /// Error(too_many_waiters) past the Client's waiter bound, Error(forked)
  /// in a child forked after the Client was made, NotReplicatedError
  /// when LockOptions::replicas is set and too few replicas acknowledged
  /// the grant (which is then given back), and
  /// std::system_error(resource_deadlock_would_occur) if the calling thread
  /// already holds a lock that is not re-entrant.
  void lock() { lock_as(kind, "lock()"); }

  /// One attempt (none when re-entered); false if another owner holds the
  /// lock. Waits for Redis at most one command timeout; throws as lock().
  [[nodiscard]] bool try_lock() { return try_as(kind); }

  /// Attempts until acquired or `timeout` has passed on the steady clock. A
  /// zero or negative timeout is try_lock(). Returns by the deadline: every
  /// wait on Redis is cut to the time left. False means busy: Redis
  /// answered shortly before the deadline, and the lock was held (or
  /// cancel_waits() was called; or the deadline cut a replica WAIT short,
  /// while a full replica timeout that ends short throws
  /// NotReplicatedError). An outage is never false: Redis silent until the
  /// deadline throws TimeoutError, as a command timeout does (an attempt
  /// that lands late is undone). Otherwise throws as lock().
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return until_as(kind, deadline_after(timeout), "try_lock_for");
  }

  /// As try_lock_for, until `deadline` of any clock.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return until_as(kind, to_steady_deadline(deadline), "try_lock_until");
  }

  /// try_lock(), try_lock_for() and try_lock_until() without exceptions, in
  /// the standard's style: true with the lock; false with `ec` clear when
  /// it is busy; false with `ec` set to what the throwing form would throw
  /// (Errc::timed_out for an outage, Errc::cancelled after cancel_waits(),
  /// ...). Only std::bad_alloc escapes.
  [[nodiscard]] bool try_lock(std::error_code& ec) { return try_as(kind, ec); }
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout,
                                  std::error_code& ec) {
    return until_as(kind, deadline_after(timeout), ec);
  }
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline,
                                    std::error_code& ec) {
    return until_as(kind, to_steady_deadline(deadline), ec);
  }

  /// Gives the lease (or one re-entrant hold) back if held; does nothing
  /// otherwise. Never throws: a release Redis could not confirm lets the
  /// lease run out. Use release() to learn what happened.
  void unlock() noexcept { unlock_as(kind); }

  /// Gives the lease back and says what happened: released, expired (the
  /// lease had run out), not_owner (it ran out and another took it; that
  /// lock is left alone) or lost (the watchdog had already reported it lost:
  /// nothing is sent). Throws NotHeldError if not held (by the calling
  /// thread, for a re-entrant lock), Error(forked) in a forked child, and
  /// the connection errors if Redis cannot be asked; the hold is given back
  /// locally either way.
  Release release() { return release_as(kind); }

  /// Sets the lease's remaining time to `ttl` if it is still ours (with
  /// auto-renewal, later renewals use `ttl` too). Returns false if the lease
  /// was already gone or reported lost: it is then no longer held. Throws
  /// NotHeldError if not held, InvalidArgument for a bad ttl.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    return extend_as(kind, checked_milliseconds(ttl, max_ttl, "extend ttl"));
  }

  /// Whether the lock is held through this object (by the calling thread,
  /// for a re-entrant lock), as far as it knows locally. A held lease can
  /// still be lost(); owns_lock() stays true until unlock().
  bool owns_lock() const noexcept;

  /// True once the watchdog found this auto-renewed lease gone or let it run
  /// out; code working under the lock should stop. Always false without
  /// auto-renewal (see validity()).
  bool lost() const noexcept;

  /// Time left on the lease by the steady clock, counted from when the
  /// acquire or the last (auto-)renewal was sent; zero when not held or lost.
  std::chrono::milliseconds validity() const noexcept;

  /// The fencing token of the current hold. Throws NotHeldError when not
  /// held, InvalidArgument when fencing is off.
  long long fence() const;

  /// With LockOptions::replicas: how many replicas acknowledged the current
  /// hold's grant (WAIT's answer, at least the count asked for). nullopt
  /// when not held or without replica acknowledgement.
  std::optional<int> replicas_acknowledged() const;

  /// Makes every acquire of this object that is waiting now give up:
  /// try_lock_for/until return false, lock() throws Error(cancelled).
  /// Callable from any thread; acquires that start later are unaffected.
  void cancel_waits();

  /// The Redis key of the lock (prefix and name).
  const std::string& key() const noexcept;
  const LockOptions& options() const noexcept;

 protected:
  using Kind = typename Protocol::Kind;
  static constexpr Kind kind = Protocol::exclusive;

  ExclusiveLock(Protocol protocol, LockOptions options, AcquirePolicy policy,
                Cancellation cancellation = {});
  ~ExclusiveLock();

  // The calls above for either kind of hold (a SharedMutex has two); `call`
  // names the caller's call in errors.
  void lock_as(Kind as, const char* call);
  bool try_as(Kind as);
  bool try_as(Kind as, std::error_code& ec);
  bool until_as(Kind as, clock::time_point deadline, const char* call);
  bool until_as(Kind as, clock::time_point deadline, std::error_code& ec);
  bool extend_as(Kind as, std::chrono::milliseconds ttl);
  void unlock_as(Kind as) noexcept;
  Release release_as(Kind as);

  // Shared with async operations and guards (distlock/asio.hpp), which
  // may outlive the object: a release posted by a guard still finds it.
  std::shared_ptr<Lifecycle<Protocol>> life_;

 private:
  friend struct AsyncAccess;
  friend class distlock::StripedMutex;

  // One attempt, cut at `cut` if that is ahead (a StripedMutex's wait, which
  // tries one stripe after another, keeps the deadline and the verdict).
  Outcome attempt_until(clock::time_point cut) { return life_->acquire(kind, cut, /*wait=*/false); }
};

// Defined out of the class, so that a program compiled separately
// (detail/base/config.hpp) compiles them, and the lifecycle under them,
// once: an explicit instantiation declaration holds back every member
// except those defined inline.

template <class Protocol>
ExclusiveLock<Protocol>::ExclusiveLock(Protocol protocol, LockOptions options, AcquirePolicy policy,
                                       Cancellation cancellation)
    : life_(std::make_shared<Lifecycle<Protocol>>(std::move(protocol), std::move(options),
                                                  std::move(policy), std::move(cancellation))) {}
template <class Protocol>
ExclusiveLock<Protocol>::~ExclusiveLock() = default;
template <class Protocol>
ExclusiveLock<Protocol>::ExclusiveLock(ExclusiveLock&&) noexcept = default;
template <class Protocol>
ExclusiveLock<Protocol>& ExclusiveLock<Protocol>::operator=(ExclusiveLock&&) noexcept = default;

template <class Protocol>
void ExclusiveLock<Protocol>::lock_as(Kind as, const char* call) {
  if (life_->acquire(as, no_deadline, /*wait=*/true) == Outcome::cancelled) {
    throw Error(Errc::cancelled, std::string(call) + " of " + key() + " was cancelled");
  }
}
template <class Protocol>
bool ExclusiveLock<Protocol>::try_as(Kind as) {
  return life_->acquire(as, clock::now(), /*wait=*/false) == Outcome::acquired;
}
template <class Protocol>
bool ExclusiveLock<Protocol>::try_as(Kind as, std::error_code& ec) {
  return acquired_into(ec, [&] { return life_->acquire(as, clock::now(), /*wait=*/false); });
}
template <class Protocol>
bool ExclusiveLock<Protocol>::until_as(Kind as, clock::time_point deadline, const char* call) {
  return acquired_or_throw(life_->acquire(as, deadline, /*wait=*/true), call, key());
}
template <class Protocol>
bool ExclusiveLock<Protocol>::until_as(Kind as, clock::time_point deadline, std::error_code& ec) {
  return acquired_into(ec, [&] { return life_->acquire(as, deadline, /*wait=*/true); });
}
template <class Protocol>
bool ExclusiveLock<Protocol>::extend_as(Kind as, std::chrono::milliseconds ttl) {
  return life_->extend(as, ttl);
}

template <class Protocol>
void ExclusiveLock<Protocol>::unlock_as(Kind as) noexcept {
  life_->unlock(as);
}
template <class Protocol>
Release ExclusiveLock<Protocol>::release_as(Kind as) {
  return life_->release(as);
}
template <class Protocol>
bool ExclusiveLock<Protocol>::owns_lock() const noexcept {
  return life_->owns(kind);
}
template <class Protocol>
bool ExclusiveLock<Protocol>::lost() const noexcept {
  return life_->lost(kind);
}
template <class Protocol>
std::chrono::milliseconds ExclusiveLock<Protocol>::validity() const noexcept {
  return life_->validity(kind);
}
template <class Protocol>
long long ExclusiveLock<Protocol>::fence() const {
  return life_->fence(kind);
}
template <class Protocol>
std::optional<int> ExclusiveLock<Protocol>::replicas_acknowledged() const {
  return life_->replicas(kind);
}
template <class Protocol>
void ExclusiveLock<Protocol>::cancel_waits() {
  life_->cancel_waits();
}
template <class Protocol>
const std::string& ExclusiveLock<Protocol>::key() const noexcept {
  return life_->protocol().key();
}
template <class Protocol>
const LockOptions& ExclusiveLock<Protocol>::options() const noexcept {
  return life_->options();
}

}  // namespace distlock::detail

// A lock type's specializations, made once by the compiled unit in the
// separately compiled mode (detail/base/config.hpp); write it after the lock
// type's class, at namespace distlock::detail.
#define DISTLOCK_EXCLUSIVE_LOCK_OF(...)                 \
  DISTLOCK_LOCK_TEMPLATE(class HoldKeeper<__VA_ARGS__>) \
  DISTLOCK_LOCK_TEMPLATE(class Lifecycle<__VA_ARGS__>)  \
  DISTLOCK_LOCK_TEMPLATE(class ExclusiveLock<__VA_ARGS__>)
