// distlock::Semaphore: at most N holders of a name at once, across
// processes and machines ("at most 4 exports against a fragile API").
//
// Each permit is a lease of its own: a random permit id in a sorted set at
// the name's key, scored by its expiry on the server's clock (TIME inside
// the scripts; no caller sends a time), so a crashed holder's permit comes
// back when its lease ends, whatever the clocks of the other callers say.
// Otherwise a permit behaves as a Mutex lease: the client's Watchdog renews
// it (all held permits of a Client in one script call per batch), a permit
// it cannot keep is reported lost (lost(), the on_lost callback), waiters
// sleep until a release is announced on "{key}:released" or the first live
// permit's lease ends, and the count can change at run time (resize()).
//
// The count is the name's, kept at "{key}:permits", so that every object on
// the name enforces the same one. Its expiry says where it came from:
// - none: resize() stored it. It is configuration, an administrator's
//   explicit choice, and wins over every object's count without a word;
// - one: the first acquire while no count was in force adopted its
//   object's count. It lives as long as the name's permits (acquire,
//   extend and renewal lengthen its expiry with the set's; giving back the
//   last live permit deletes it) and counts only while one is live. An
//   acquire through an object made with another count is refused with
//   InvalidArgument naming both counts, and takes nothing.
// Deleting "{key}:permits" by hand returns the name to adoption.
//
//   distlock::Semaphore exports{redis, "exports", 4};
//   if (auto permit = exports.try_acquire_for(5s)) { run_export(); }   // RAII
//
//   distlock::PermitLock one{exports};              // the Lockable vocabulary
//   std::unique_lock lock{one, 2s};                 // try_lock_for(2s)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/lifecycle/semaphore_protocol.hpp"
#include "distlock/detail/lifecycle/single_server.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/counting_scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {

class Semaphore;
namespace detail {
struct AsyncAccess;
}  // namespace detail

/// One permit of a Semaphore as a lock: Lockable and TimedLockable, so
/// std::unique_lock and std::lock_guard work (see detail::ExclusiveLock for
/// each member's contract; fence() is not available). Like a Mutex, it
/// holds at most one permit at a time.
class PermitLock : public detail::ExclusiveLock<detail::SemaphoreProtocol> {
  using Base = detail::ExclusiveLock<detail::SemaphoreProtocol>;

 public:
  /// Takes nothing yet; keeps what it needs of `semaphore` (it may
  /// outlive it).
  DISTLOCK_DECL explicit PermitLock(const Semaphore& semaphore);

  /// Gives the permit back if held.
  ~PermitLock() = default;
  /// Takes `other`'s permit, its lease and renewal; the moved-from lock may
  /// only be destroyed or assigned to.
  PermitLock(PermitLock&&) noexcept = default;
  /// Gives back the permit held, if any, then takes `other`'s.
  PermitLock& operator=(PermitLock&&) noexcept = default;

  /// The held permit's id (its member in the sorted set); empty when none.
  std::string id() const { return this->life_->id(Base::kind); }
};

/// A held permit, given back when it goes away (RAII); or nothing, when an
/// acquire timed out (then it converts to false). Movable, not copyable.
class Permit {
 public:
  Permit() noexcept = default;
  /// Takes `other`'s permit, leaving `other` empty.
  Permit(Permit&&) noexcept = default;
  /// Gives back the permit held, if any, and takes `other`'s.
  Permit& operator=(Permit&&) noexcept = default;

  /// Gives the permit back if held (never throws).
  ~Permit() = default;

  /// Whether a permit is held (even one reported lost: see lost()).
  explicit operator bool() const noexcept { return held(); }
  /// As operator bool.
  bool held() const noexcept { return lock_ && lock_->owns_lock(); }

  /// Gives the permit back and says what happened: released, expired (its
  /// lease had run out) or lost (already reported lost; nothing sent).
  /// Throws NotHeldError when none is held, and the connection errors.
  Release release() {
    if (!lock_) throw NotHeldError("no permit is held");
    const Release result = lock_->release();
    lock_.reset();
    return result;
  }

  /// True once the watchdog found the permit gone or let it run out.
  bool lost() const noexcept { return lock_ && lock_->lost(); }
  /// Time left on the lease by the steady clock; zero when none or lost.
  std::chrono::milliseconds validity() const noexcept {
    return lock_ ? lock_->validity() : std::chrono::milliseconds(0);
  }
  /// Sets the permit's lease to `ttl` if it is still ours (see Mutex::extend).
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    if (!lock_) throw NotHeldError("no permit is held");
    return lock_->extend(ttl);
  }
  /// The permit's id; empty when none is held.
  std::string id() const { return lock_ ? lock_->id() : std::string(); }

 private:
  friend class Semaphore;
  explicit Permit(std::unique_ptr<PermitLock> lock) noexcept : lock_(std::move(lock)) {}

  std::unique_ptr<PermitLock> lock_;
};

/// A counting semaphore on any Backend, waiting by any AcquirePolicy.
/// Thread-safe: any number of threads may take permits through one object.
class Semaphore {
 public:
  /// The held permit acquire() and its kin return.
  using Permit = distlock::Permit;
  /// One permit as a lock, for std::unique_lock and its kin.
  using PermitLock = distlock::PermitLock;

  /// `permits` (1 to 10^9) is this object's count: adopted for the name by
  /// an acquire when none is in force (see the top of file); an adopted
  /// count that differs makes its acquires throw InvalidArgument, and one
  /// resize() stored wins. `options` are each permit's (ttl, auto
  /// renewal, on_lost, wake_on_release, key_prefix; fencing and min_hold
  /// are refused, as are replicas and max_hold without auto-renewal).
  /// Validates (InvalidArgument); contacts no server.
  DISTLOCK_DECL Semaphore(const Backend& backend, std::string_view name, std::size_t permits,
                          LockOptions options = {}, AcquirePolicy policy = {});

  DISTLOCK_DECL ~Semaphore();
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  /// Blocks until a permit is free and returns it (as PermitLock::lock():
  /// woken by releases, never polling while subscribed; throws on Redis
  /// failures). Every acquire, this and the ones below, throws
  /// InvalidArgument at once (the error_code forms set
  /// Errc::invalid_argument) when this object's count differs from the
  /// count the name adopted: waiting would not change it.
  Permit acquire() {
    auto lock = std::make_unique<PermitLock>(*this);
    lock->lock();
    return Permit(std::move(lock));
  }

  /// One attempt; an empty Permit if all are taken.
  Permit try_acquire() {
    auto lock = std::make_unique<PermitLock>(*this);
    return lock->try_lock() ? Permit(std::move(lock)) : Permit();
  }

  /// Attempts until a permit is taken or `timeout` passes (zero or negative:
  /// one attempt); an empty Permit then, when every permit was taken (an
  /// outage throws TimeoutError, as PermitLock::try_lock_for). Returns by
  /// the deadline.
  template <class Rep, class Period>
  Permit try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    auto lock = std::make_unique<PermitLock>(*this);
    return lock->try_lock_for(timeout) ? Permit(std::move(lock)) : Permit();
  }

  /// try_acquire_for without exceptions: an empty Permit with `ec` clear
  /// when every permit was taken, with `ec` set otherwise (as
  /// PermitLock::try_lock_for(timeout, ec)).
  template <class Rep, class Period>
  Permit try_acquire_for(const std::chrono::duration<Rep, Period>& timeout, std::error_code& ec) {
    auto lock = std::make_unique<PermitLock>(*this);
    return lock->try_lock_for(timeout, ec) ? Permit(std::move(lock)) : Permit();
  }

  /// As try_acquire_for, until `deadline` of any clock.
  template <class Clock, class Duration>
  Permit try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    auto lock = std::make_unique<PermitLock>(*this);
    return lock->try_lock_until(deadline) ? Permit(std::move(lock)) : Permit();
  }

  /// try_acquire_until without exceptions, as try_acquire_for(timeout, ec).
  template <class Clock, class Duration>
  Permit try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline,
                           std::error_code& ec) {
    auto lock = std::make_unique<PermitLock>(*this);
    return lock->try_lock_until(deadline, ec) ? Permit(std::move(lock)) : Permit();
  }

  /// Makes every acquire through this object that is waiting now give up
  /// (as Mutex::cancel_waits): try_acquire_for/until return an empty
  /// Permit, acquire() throws Error(cancelled); so do the waits of the
  /// PermitLocks made from it. Callable from any thread; acquires that
  /// start later are unaffected.
  void cancel_waits() {
    core_.cancellation.cancel();
    if (!core_.options.wake_on_release()) return;
    core_.site->wake(detail::companion_key(core_.key, "released"));
  }

  /// permit.release(), for symmetry with acquire().
  Release release(Permit& permit) { return permit.release(); }

  /// Permits free now: the count less the live permits (never negative).
  std::size_t available() {
    const auto [count, live] = read_count();
    return count > live ? count - live : 0;
  }
  /// The count in force: resize()'s, else the one adopted while a permit is
  /// live, else the one this object was made with.
  std::size_t permits() { return read_count().first; }
  /// Live permits held now, by anyone.
  std::size_t held() { return read_count().second; }

  /// Stores a new count (0 to 10^9) for every user of the name, whatever
  /// count each object was made with, and wakes waiters. Holders keep their
  /// permits: after a shrink below what is held, new permits are granted
  /// only once enough are given back. The stored count has no expiry (it
  /// replaces an adopted one); delete "{key}:permits" to return the name to
  /// adoption by its next acquire.
  void resize(std::size_t permits) {
    const detail::Decimal count(static_cast<long long>(checked_count(permits, 0)));
    detail::on_site(*core_.site, detail::no_deadline, [&](Connection& connection) {
      return connection.eval(scripts::semaphore_resize,
                             {detail::companion_key(core_.key, "permits"),
                              detail::companion_key(core_.key, "released")},
                             {count});
    });
  }

  /// The Redis key of the permits' sorted set (prefix and name).
  const std::string& key() const noexcept { return core_.key; }
  /// Each permit's options, as given.
  const LockOptions& options() const noexcept { return core_.options; }

 private:
  friend class distlock::PermitLock;
  friend struct detail::AsyncAccess;

  // The state of a permit lock of its own, for an async acquire
  // (distlock/asio.hpp), whose hold keeps it.
  std::shared_ptr<detail::Lifecycle<detail::SemaphoreProtocol>> permit_life() const {
    return std::make_shared<detail::Lifecycle<detail::SemaphoreProtocol>>(
        core_.protocol(), core_.options, core_.policy, core_.cancellation);
  }

  // The site of the key (where the counts, resize() and renewals go) is
  // the Semaphore's and its permits' alike.
  static detail::SemaphoreCore core_for(const Backend& backend, std::string_view name,
                                        std::size_t permits, LockOptions options,
                                        AcquirePolicy policy) {
    std::string key = detail::lock_key(options, name);
    detail::SitePtr site = backend.site_for(key);
    auto renewer = std::make_shared<detail::PermitRenewer>(site);
    return {std::move(site),
            std::move(key),
            checked_count(permits, 1),
            std::move(options),
            std::move(policy),
            std::move(renewer),
            {}};
  }

  static std::size_t checked_count(std::size_t count, std::size_t least) {
    if (count < least || count > detail::max_permits) {
      throw InvalidArgument("a semaphore's count must be " + std::to_string(least) + " to " +
                            std::to_string(detail::max_permits) + ", not " + std::to_string(count));
    }
    return count;
  }

  std::pair<std::size_t, std::size_t> read_count() {
    const detail::Decimal fallback(static_cast<long long>(core_.permits));
    const Reply reply =
        detail::on_site(*core_.site, detail::no_deadline, [&](Connection& connection) {
          return connection.eval(scripts::semaphore_count,
                                 {core_.key, detail::companion_key(core_.key, "permits")},
                                 {fallback});
        });
    if (reply.size() != 2) throw ConnectionError(Errc::protocol_error, "bad semaphore reply");
    const auto count = static_cast<std::size_t>(std::max(reply[0].integer(), 0LL));
    const auto live = static_cast<std::size_t>(std::max(reply[1].integer(), 0LL));
    return {count, live};
  }

  detail::SemaphoreCore core_;
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(SemaphoreProtocol)
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL PermitLock::PermitLock(const Semaphore& semaphore)
    : Base(semaphore.core_.protocol(), semaphore.core_.options, semaphore.core_.policy,
           semaphore.core_.cancellation) {}

DISTLOCK_DECL Semaphore::Semaphore(const Backend& backend, std::string_view name,
                                   std::size_t permits, LockOptions options, AcquirePolicy policy)
    : core_(core_for(backend, name, permits, std::move(options), std::move(policy))) {
  if (core_.options.fencing()) {
    throw InvalidArgument("semaphore " + core_.key + ": permits have no fencing token");
  }
  if (core_.options.min_hold().count() > 0) {
    // A permit bounds how many run at once, not how often: one kept past
    // its work would only take a place from the next holder.
    throw InvalidArgument("semaphore " + core_.key + ": permits have no minimum hold (min_hold)");
  }
  if (core_.options.replicas() != 0) {
    // Neither a permit's grant nor its renewal waits for replicas: asked
    // for, the acknowledgement would be dropped without a word.
    throw InvalidArgument("semaphore " + core_.key +
                          ": permits are not acknowledged by replicas (replicas)");
  }
  // Each permit checks again when made; here it is refused at once.
  detail::check_combination(core_.options, "semaphore " + core_.key);
}

DISTLOCK_DECL Semaphore::~Semaphore() = default;
#endif

}  // namespace distlock
