// LeaseMutex: the single-key lease lock that Mutex and SimpleMutex share.
//
// Everything but the wire protocol lives here: validation, the acquire loop
// with its policy and deadline, the ambiguous-timeout cleanup, the local
// record of the lease, and the Lockable / TimedLockable surface. The
// Protocol parameter says how one attempt, one release and one extend are
// sent (a Lua script for Mutex, WATCH/MULTI/EXEC for SimpleMutex); each of
// them is a single atomic step on the server.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/token.hpp"

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

/// What one acquire attempt found.
struct Attempt {
  bool acquired = false;
  long long fence = 0;         ///< with fencing, when acquired
  long long holder_pttl = -3;  ///< when refused: the holder's PTTL, -3 if not asked
};

/// What the server said to a token-checked release or extend.
enum class TokenCheck { done, no_key, other_token };

inline Release to_release(TokenCheck check) noexcept {
  switch (check) {
    case TokenCheck::done: return Release::released;
    case TokenCheck::no_key: return Release::expired;
    case TokenCheck::other_token: return Release::not_owner;
  }
  return Release::not_owner;
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

  /// Blocks until the lock is acquired, pausing between attempts as the
  /// policy says (never before the first: a free lock costs one round trip).
  /// Throws ConnectionError/TimeoutError/ServerError when Redis fails, and
  /// std::system_error(resource_deadlock_would_occur) if the calling thread
  /// already holds the lock through this object.
  void lock() { acquire(clock::time_point::max(), /*wait=*/true); }

  /// One attempt; false if another owner holds the lock.
  [[nodiscard]] bool try_lock() { return acquire(clock::now(), /*wait=*/false); }

  /// Attempts until acquired or `timeout` has passed on the steady clock. A
  /// zero or negative timeout makes exactly one attempt.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(deadline_after(timeout), /*wait=*/true);
  }

  /// Attempts until acquired or `deadline` (of any clock) has passed. A
  /// deadline already past makes exactly one attempt.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(to_steady_deadline(deadline), /*wait=*/true);
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

  /// Gives the lease back and says what the server found: released, expired
  /// (the lease had run out) or not_owner (it ran out and another took it;
  /// that lock is left alone). Throws NotHeldError if this object holds no
  /// lease, and the connection errors if Redis cannot be asked; either way
  /// the object no longer holds the lease afterwards.
  Release release() {
    const std::string token = take_lease();
    auto connection = backend_.borrow();
    return to_release(Protocol::release(*connection, keys_, token));
  }

  /// Sets the lease's remaining time to `ttl` if it is still ours. Returns
  /// false if the lease was already gone (the object then no longer holds
  /// it). Throws NotHeldError if not held, InvalidArgument for a bad ttl.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    const std::chrono::milliseconds lease = checked_milliseconds(ttl, max_ttl, "extend ttl");
    const std::string token = current_token();
    const clock::time_point sent = clock::now();
    TokenCheck result;
    {
      auto connection = backend_.borrow();
      result = Protocol::extend(*connection, keys_, token, Decimal(lease.count()));
    }
    std::lock_guard guard(state_mutex_);
    if (!held_ || token_ != token) return false;  // released meanwhile
    if (result != TokenCheck::done) {
      forget();
      return false;
    }
    expires_ = sent + lease;
    return true;
  }

  /// Whether this object holds a lease, as far as it knows locally (a lease
  /// can also run out on the server; see validity()).
  bool owns_lock() const noexcept {
    std::lock_guard guard(state_mutex_);
    return held_;
  }

  /// Time left on the lease by the steady clock, counted from when the
  /// acquire (or last extend) was sent; zero when not held.
  std::chrono::milliseconds validity() const noexcept {
    std::lock_guard guard(state_mutex_);
    if (!held_) return std::chrono::milliseconds(0);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(expires_ - clock::now());
    return std::max(left, std::chrono::milliseconds(0));
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

  /// The Redis key of the lock (prefix and name).
  const std::string& key() const noexcept { return keys_.key; }
  const LockOptions& options() const noexcept { return options_; }

 private:
  bool acquire(clock::time_point deadline, bool wait) {
    check_not_held_by_this_thread();
    const std::string token = make_token();
    const Decimal ttl(options_.ttl().count());
    for (unsigned attempt = 1;; ++attempt) {
      const clock::time_point sent = clock::now();
      const bool last_chance = !wait || sent >= deadline;
      const Attempt result =
          attempt_once(token, ttl, last_chance ? clock::time_point::max() : deadline);
      if (result.acquired) {
        adopt(token, result.fence, sent);
        return true;
      }
      if (last_chance) return false;
      long long holder_pttl = result.holder_pttl;
      if (holder_pttl == -3) holder_pttl = ask_pttl();
      pause_before_retry(attempt, holder_pttl, deadline);
    }
  }

  // One attempt. A reply that never came is ambiguous (the server may have
  // set our key), so before the error reaches the caller we delete the key
  // if it holds our token: no lock is left that the caller thinks it lacks.
  Attempt attempt_once(const std::string& token, const Decimal& ttl, clock::time_point deadline) {
    auto connection = backend_.borrow();
    if (deadline != clock::time_point::max()) {
      connection->set_timeout(reply_timeout(deadline));
    }
    try {
      return Protocol::acquire(*connection, keys_, token, ttl, options_.fencing());
    } catch (const Error& error) {
      const std::error_code code = error.code();
      if (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error) {
        clean_up_after_ambiguous_attempt(token, deadline);
      }
      throw;
    }
  }

  void clean_up_after_ambiguous_attempt(const std::string& token,
                                        clock::time_point deadline) noexcept {
    try {
      auto connection = backend_.borrow();
      // A little past the caller's deadline is better than a lock left behind
      // for a whole lease; a server that cannot answer in this budget gets the
      // lease's expiry instead.
      constexpr std::chrono::milliseconds cleanup_floor(10);
      if (deadline != clock::time_point::max()) {
        connection->set_timeout(std::max(reply_timeout(deadline), cleanup_floor));
      }
      static_cast<void>(Protocol::release(*connection, keys_, token));
    } catch (...) {
      // Best effort: if Redis cannot be reached now, the lease expires.
    }
  }

  // The reply timeout for an attempt with a deadline: no longer than the
  // time left, no longer than the configured command timeout.
  std::chrono::milliseconds reply_timeout(clock::time_point deadline) const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    return std::clamp(left, std::chrono::milliseconds(1), backend_.options().command_timeout);
  }

  long long ask_pttl() {
    auto connection = backend_.borrow();
    return connection->command("PTTL", keys_.key).integer();
  }

  // Sleeps the policy's pause, cut short by the deadline and by the holder's
  // remaining lease (after which the lock is free for the taking).
  void pause_before_retry(unsigned attempt, long long holder_pttl, clock::time_point deadline) {
    std::chrono::nanoseconds pause = policy_.pause(attempt, jitter_unit());
    if (holder_pttl >= 0)
      pause = std::min<std::chrono::nanoseconds>(pause, std::chrono::milliseconds(holder_pttl));
    const clock::time_point now = clock::now();
    if (deadline - now < pause) pause = deadline - now;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }

  void check_not_held_by_this_thread() const {
    std::lock_guard guard(state_mutex_);
    if (held_ && owner_ == std::this_thread::get_id()) {
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              keys_.key + " is already held by this thread");
    }
  }

  void adopt(const std::string& token, long long fence, clock::time_point sent) {
    std::lock_guard guard(state_mutex_);
    held_ = true;
    token_ = token;
    fence_ = fence;
    expires_ = sent + options_.ttl();
    owner_ = std::this_thread::get_id();
  }

  // Marks the lease as given back and returns its token.
  std::string take_lease() {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(keys_.key + " is not held");
    std::string token = std::move(token_);
    forget();
    return token;
  }

  std::string current_token() const {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(keys_.key + " is not held");
    return token_;
  }

  void forget() noexcept {
    held_ = false;
    token_.clear();
    fence_ = 0;
    owner_ = std::thread::id();
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
};

}  // namespace distlock::detail
