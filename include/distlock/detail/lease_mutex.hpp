// LeaseMutex: the single-key lease lock that Mutex and SimpleMutex share.
//
// Everything but the wire protocol lives here: validation, the local record
// of the lease, and the Lockable / TimedLockable surface over the acquire
// loop, ambiguous-timeout cleanup and Watchdog registration that every lock
// type shares (detail/acquire.hpp). The Protocol parameter says how one
// attempt, one release and one extend are sent (a Lua script for Mutex,
// WATCH/MULTI/EXEC for SimpleMutex); each is one atomic server step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/token.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// The keys one lease lock touches, all in the lock key's hash slot.
struct LeaseKeys {
  explicit LeaseKeys(std::string lock_key)
      : key(std::move(lock_key)),
        fence(companion_key(key, "fence")),
        channel(companion_key(key, "released")) {}
  std::string key;      ///< holds the token, with the lease as its PTTL
  std::string fence;    ///< fencing counter (INCR per acquisition)
  std::string channel;  ///< release announcements
};

/// The plain acquire both protocols share: SET NX PX, one atomic step.
inline Attempt set_if_absent(Connection& connection, const LeaseKeys& keys,
                             const std::string& token, const Decimal& ttl) {
  Attempt attempt;
  attempt.acquired = connection.command("SET", keys.key, token, "NX", "PX", ttl).is_ok();
  return attempt;
}

template <class Protocol, class Backend, class Policy>
class LeaseMutex {
 public:
  using clock = std::chrono::steady_clock;

  /// Validates name and options (InvalidArgument); contacts no server.
  LeaseMutex(Backend& backend, std::string_view name, LockOptions options = {}, Policy policy = {})
      : backend_(backend),
        options_(std::move(options)),
        policy_(std::move(policy)),
        keys_(lock_key(options_, name)) {}

  /// Releases the lease if this object still holds it.
  ~LeaseMutex() { unlock(); }

  LeaseMutex(const LeaseMutex&) = delete;
  LeaseMutex& operator=(const LeaseMutex&) = delete;

  /// Blocks until the lock is acquired. The first attempt is immediate (a
  /// free lock costs one round trip); after that the caller sleeps until the
  /// holder's release is announced or the holder's lease ends, whichever is
  /// first, and tries again (polling at the policy's pace instead while no
  /// announcement can be relied on: subscription unconfirmed, or
  /// wake_on_release(false)).
  /// Throws ConnectionError/TimeoutError/ServerError when Redis fails,
  /// Error(cancelled) after cancel_waits(), Error(too_many_waiters) when the
  /// Client's waiter bound is reached, and
  /// std::system_error(resource_deadlock_would_occur) if the calling thread
  /// already holds the lock through this object.
  void lock() {
    if (acquire(clock::time_point::max(), /*wait=*/true) == Outcome::cancelled) {
      throw Error(Errc::cancelled, "lock() of " + keys_.key + " was cancelled");
    }
  }

  /// One attempt; false if another owner holds the lock.
  [[nodiscard]] bool try_lock() {
    return acquire(clock::now(), /*wait=*/false) == Outcome::acquired;
  }

  /// Attempts until acquired or `timeout` has passed on the steady clock. A
  /// zero or negative timeout makes exactly one attempt. False when the time
  /// ran out or cancel_waits() was called. No call waits on Redis past the
  /// deadline: a reply that misses it counts as the time running out (the
  /// attempt's key is removed if it landed); only a reply that misses the
  /// command timeout, inside the deadline, throws TimeoutError.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(deadline_after(timeout), /*wait=*/true) == Outcome::acquired;
  }

  /// Attempts until acquired or `deadline` (of any clock) has passed. A
  /// deadline already past makes exactly one attempt.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(to_steady_deadline(deadline), /*wait=*/true) == Outcome::acquired;
  }

  /// Gives the lease back if held; does nothing otherwise. Never throws: a
  /// release Redis could not confirm simply lets the lease run out. Use
  /// release() to learn what happened.
  void unlock() noexcept {
    try {
      if (owns_lock()) static_cast<void>(release());
    } catch (...) {
      // The lease expires by itself; unlock() runs in destructors and must not throw.
    }
  }

  /// Gives the lease back and says what happened: released, expired (the
  /// lease had run out), not_owner (it ran out and another took it; that
  /// lock is left alone) or lost (the watchdog had already reported it lost:
  /// nothing is sent). Throws NotHeldError if this object holds no lease,
  /// and the connection errors if Redis cannot be asked; either way the
  /// object no longer holds the lease afterwards.
  Release release() {
    auto [token, lease] = take_lease();
    if (lease) {
      backend_.watchdog().remove(*lease);  // no renewal of it is sent after this
      if (lease->lost) return Release::lost;
    }
    auto connection = backend_.borrow();
    return to_release(Protocol::release(*connection, keys_, token));
  }

  /// Sets the lease's remaining time to `ttl` if it is still ours (with
  /// auto-renewal, later renewals use `ttl` too). Returns false if the lease
  /// was already gone or reported lost: the object then no longer holds it.
  /// Throws NotHeldError if not held, InvalidArgument for a bad ttl.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    const std::chrono::milliseconds lease_ttl = checked_milliseconds(ttl, max_ttl, "extend ttl");
    const auto [token, lease] = current_lease();
    if (lease && lease->lost) {
      forget(token);
      return false;
    }
    const clock::time_point sent = clock::now();
    TokenCheck result;
    {
      auto connection = backend_.borrow();
      result = Protocol::extend(*connection, keys_, token, Decimal(lease_ttl.count()));
    }
    if (result != TokenCheck::done) {
      forget(token);
      return false;
    }
    std::lock_guard guard(state_mutex_);
    if (!held_ || token_ != token) return false;  // released meanwhile
    expires_ = sent + lease_ttl;
    if (lease_) {
      lease_->set_expires(expires_);
      backend_.watchdog().extended(*lease_, lease_ttl, sent);
    }
    return true;
  }

  /// Whether this object holds a lease, as far as it knows locally. A held
  /// lease can still be lost(); owns_lock() stays true until unlock().
  bool owns_lock() const noexcept {
    std::lock_guard guard(state_mutex_);
    return held_;
  }

  /// True once the watchdog found this auto-renewed lease gone or let it run
  /// out; code working under the lock should stop. Always false without
  /// auto-renewal (see validity()).
  bool lost() const noexcept {
    std::lock_guard guard(state_mutex_);
    return lease_ && lease_->lost;
  }

  /// Time left on the lease by the steady clock, counted from when the
  /// acquire or the last (auto-)renewal was sent; zero when not held or lost.
  std::chrono::milliseconds validity() const noexcept {
    std::lock_guard guard(state_mutex_);
    return held_ ? time_left(lease_, expires_) : std::chrono::milliseconds(0);
  }

  /// The token of the current lease; empty when not held.
  std::string token() const {
    std::lock_guard guard(state_mutex_);
    return held_ ? token_ : std::string();
  }

  /// The fencing token of the current lease. Throws NotHeldError when not
  /// held, InvalidArgument when fencing is off.
  long long fence() const {
    if (!options_.fencing()) throw InvalidArgument("fencing is off for " + keys_.key);
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(keys_.key + " is not held");
    return fence_;
  }

  /// Makes every acquire of this object that is waiting now give up:
  /// try_lock_for/until return false, lock() throws Error(cancelled).
  /// Callable from any thread; acquires that start later are unaffected.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) backend_.notifier().wake(keys_.channel);
  }

  /// The Redis key of the lock (prefix and name).
  const std::string& key() const noexcept { return keys_.key; }
  const LockOptions& options() const noexcept { return options_; }

 private:
  Outcome acquire(clock::time_point deadline, bool wait) {
    const std::uint64_t cancel_seen = check_not_held_by_this_thread();
    const std::string token = make_token();
    const Decimal ttl(options_.ttl().count());
    return acquire_loop(
        backend_, options_, policy_, keys_.key, keys_.channel, cancellation_, cancel_seen, deadline,
        wait,
        [&](clock::time_point sent, clock::time_point reply_deadline) -> std::optional<Attempt> {
          // Another thread holds the lease through this object: as with a
          // shared std::mutex, wait for its unlock rather than race it in
          // Redis. Should its lease have run out there, taking the key
          // would overwrite its record here, and its unlock() would then
          // release our lock. (-1: no PTTL to go by; retry at the policy's pace.)
          if (owns_lock()) return Attempt{false, 0, -1};
          std::optional<Attempt> result = attempt_once(token, ttl, reply_deadline);
          if (result && result->acquired && !adopt(token, result->fence, sent)) {
            result->acquired = false;
            result->holder_pttl = -1;
          }
          return result;
        });
  }

  // One attempt; if its reply never came, the key is deleted if it holds
  // our token.
  std::optional<Attempt> attempt_once(const std::string& token, const Decimal& ttl,
                                      clock::time_point deadline) {
    return attempt_or_undo(
        backend_, deadline,
        [&](Connection& connection) {
          return Protocol::acquire(connection, keys_, token, ttl, options_.fencing());
        },
        [&](Connection& connection) {
          static_cast<void>(Protocol::release(connection, keys_, token));
        });
  }

  // Returns the cancel generation an acquire starting now must watch.
  std::uint64_t check_not_held_by_this_thread() const {
    {
      std::lock_guard guard(state_mutex_);
      if (held_ && owner_ == std::this_thread::get_id()) {
        throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                                keys_.key + " is already held by this thread");
      }
    }
    return cancellation_.generation();
  }

  // Records the lease just taken. False, after giving it back, if another
  // thread of this object recorded one meanwhile (see acquire()).
  bool adopt(const std::string& token, long long fence, clock::time_point sent) {
    if (owns_lock()) {
      try {
        auto connection = backend_.borrow();
        static_cast<void>(Protocol::release(*connection, keys_, token));
      } catch (...) {
        // Best effort: if Redis cannot be reached now, the lease expires.
      }
      return false;
    }
    std::shared_ptr<LeaseState> lease =
        watch_lease(backend_, options_, keys_.key, token, sent, Protocol::renewer(keys_));
    std::lock_guard guard(state_mutex_);
    held_ = true;
    token_ = token;
    fence_ = fence;
    expires_ = sent + options_.ttl();
    owner_ = std::this_thread::get_id();
    lease_ = std::move(lease);
    return true;
  }

  // Marks the lease as given back; returns its token and watchdog record.
  std::pair<std::string, std::shared_ptr<LeaseState>> take_lease() {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(keys_.key + " is not held");
    return take_lease_locked();
  }

  std::pair<std::string, std::shared_ptr<LeaseState>> take_lease_locked() {
    std::pair<std::string, std::shared_ptr<LeaseState>> taken{std::move(token_), std::move(lease_)};
    held_ = false;
    token_.clear();
    fence_ = 0;
    owner_ = std::thread::id();
    return taken;
  }

  std::pair<std::string, std::shared_ptr<LeaseState>> current_lease() const {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(keys_.key + " is not held");
    return {token_, lease_};
  }

  // Drops the lease `token` locally (it is gone on the server).
  void forget(const std::string& token) {
    std::shared_ptr<LeaseState> lease;
    {
      std::lock_guard guard(state_mutex_);
      if (!held_ || token_ != token) return;
      lease = take_lease_locked().second;
    }
    if (lease) backend_.watchdog().remove(*lease);
  }

  Backend& backend_;
  const LockOptions options_;
  const Policy policy_;
  const LeaseKeys keys_;

  // The lease as this object knows it. Several threads may share one lock
  // object, as they would a std::mutex, so this is guarded; Redis, not this
  // mutex, decides who holds the lock.
  mutable std::mutex state_mutex_;
  bool held_ = false;
  std::string token_;
  long long fence_ = 0;
  clock::time_point expires_{};
  std::thread::id owner_{};
  std::shared_ptr<LeaseState> lease_;  // set while the watchdog renews it
  Cancellation cancellation_;
};

}  // namespace distlock::detail
