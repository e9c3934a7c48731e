// The parts of acquiring a lock that every lock type shares, whatever it
// stores in Redis: the wait loop (attempt, subscribe to the release channel,
// sleep until a release, the policy's pause, the holder's lease or the
// deadline, try again), cancel_waits(), the best-effort undo of an attempt
// whose reply never came, and the registration of a held lease with the
// Watchdog.
//
// A lock type supplies one attempt (one atomic server step) and one undo;
// this header decides when to send them.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// What one acquire attempt found.
struct Attempt {
  bool acquired = false;
  long long fence = 0;         ///< with fencing, when acquired
  long long holder_pttl = -3;  ///< when refused: the holder's PTTL, -3 if not asked
};

/// How an acquire ended.
enum class Outcome { acquired, timed_out, cancelled };

/// The cancel_waits() of one lock object: a generation every acquire notes
/// when it starts and gives up on once it changes, and the condition a
/// polling waiter sleeps on.
class Cancellation {
 public:
  std::uint64_t generation() const {
    std::lock_guard guard(mutex_);
    return generation_;
  }

  bool since(std::uint64_t seen) const {
    std::lock_guard guard(mutex_);
    return generation_ != seen;
  }

  /// Ends every acquire that noted an earlier generation. A waiter asleep on
  /// a subscription is woken by the caller through the Notifier.
  void cancel() {
    {
      std::lock_guard guard(mutex_);
      ++generation_;
    }
    cancelled_.notify_all();
  }

  /// Sleeps until `until` or a cancel after generation `seen`.
  void sleep_until(std::uint64_t seen, SteadyClock::time_point until) {
    std::unique_lock guard(mutex_);
    cancelled_.wait_until(guard, until, [&] { return generation_ != seen; });
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cancelled_;
  std::uint64_t generation_ = 0;
};

/// The reply timeout for a call with a deadline: no longer than the time
/// left, no longer than the configured command timeout.
template <class Backend>
std::chrono::milliseconds reply_timeout(const Backend& backend, SteadyClock::time_point deadline) {
  if (deadline == SteadyClock::time_point::max()) return backend.options().command_timeout;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return std::clamp(left, std::chrono::milliseconds(1), backend.options().command_timeout);
}

/// When to try again: after the policy's pause (or, when a release will be
/// announced, no pause of our own), but no later than the deadline nor the
/// end of the holder's lease (the lock is free then). A PTTL of -1 (a key
/// with no expiry, not ours) leaves the policy's pause.
template <class Policy>
SteadyClock::time_point next_attempt_at(const Policy& policy, unsigned attempt,
                                        long long holder_pttl, SteadyClock::time_point deadline,
                                        bool announced) {
  std::chrono::nanoseconds pause = announced && holder_pttl >= 0
                                       ? std::chrono::nanoseconds::max()
                                       : policy.pause(attempt, jitter_unit());
  if (holder_pttl >= 0) {
    pause = std::min<std::chrono::nanoseconds>(pause, std::chrono::milliseconds(holder_pttl));
  } else if (holder_pttl == -2) {
    pause = std::chrono::nanoseconds(0);  // released since our attempt: go again now
  }
  const SteadyClock::time_point now = SteadyClock::now();
  return deadline - now < pause ? deadline : now + pause;
}

/// Attempts until acquired, the deadline passes or the waits are cancelled.
/// `try_once(sent, reply_deadline)` makes one attempt, records the hold
/// itself when it succeeds, and returns what it found (nullopt: no reply
/// before the caller's deadline, see attempt_or_undo); `key` is where the
/// holder's PTTL is read when the attempt did not say, `channel` where
/// releases are announced. The first attempt is immediate; with `wait`
/// false it is the only one.
template <class Backend, class Policy, class TryOnce>
Outcome acquire_loop(Backend& backend, const LockOptions& options, const Policy& policy,
                     const std::string& key, const std::string& channel, Cancellation& cancellation,
                     std::uint64_t cancel_seen, SteadyClock::time_point deadline, bool wait,
                     TryOnce&& try_once) {
  std::optional<Notifier::Subscription> subscription;
  for (unsigned attempt = 1;; ++attempt) {
    // Read before the attempt, so a release announced between a failed
    // attempt and the sleep ends that sleep at once.
    const std::uint64_t seen = subscription ? subscription->generation() : 0;
    const SteadyClock::time_point sent = SteadyClock::now();
    const bool last_chance = !wait || sent >= deadline;
    const std::optional<Attempt> answered =
        try_once(sent, last_chance ? SteadyClock::time_point::max() : deadline);
    if (!answered) return Outcome::timed_out;  // no reply before the caller's deadline
    const Attempt& result = *answered;
    if (result.acquired) return Outcome::acquired;
    if (last_chance) return Outcome::timed_out;
    if (cancellation.since(cancel_seen)) return Outcome::cancelled;
    if (!subscription && options.wake_on_release()) {
      // Subscribed (and confirmed) before the next attempt: a release from
      // now on cannot go unannounced to us.
      subscription.emplace(backend.notifier().subscribe(channel, deadline));
      continue;
    }
    long long holder_pttl = result.holder_pttl;
    if (holder_pttl == -3) {
      auto connection = backend.borrow();
      const std::chrono::milliseconds timeout = reply_timeout(backend, deadline);
      connection->set_timeout(timeout);
      try {
        holder_pttl = connection->command("PTTL", key).integer();
      } catch (const TimeoutError&) {
        // A reply that misses the caller's deadline is the caller's timeout.
        if (timeout < backend.options().command_timeout) return Outcome::timed_out;
        throw;
      }
    }
    // While the server confirms our subscription, the release announcement
    // is what wakes us; the holder's lease bounds the wait in case it is
    // lost. Otherwise we poll at the policy's pace.
    const bool announced = subscription && subscription->active();
    const SteadyClock::time_point until =
        next_attempt_at(policy, attempt, holder_pttl, deadline, announced);
    if (subscription) {
      subscription->wait(seen, until);
    } else {
      cancellation.sleep_until(cancel_seen, until);
    }
    if (cancellation.since(cancel_seen)) return Outcome::cancelled;
  }
}

/// One attempt, `send(connection)`, with its reply cut to `deadline`
/// (time_point::max() for the command timeout). A reply that never came is
/// ambiguous (the server may have applied it), so before the error reaches
/// the caller `undo(connection)` is sent on a fresh connection, best effort:
/// no lock is left that the caller thinks it lacks. Returns nullopt when the
/// reply did not come before the caller's own deadline (shorter than the
/// command timeout): that is the caller's timeout, not a failure of Redis,
/// so no call waits on Redis past the caller's deadline.
template <class Backend, class Send, class Undo>
std::optional<Attempt> attempt_or_undo(Backend& backend, SteadyClock::time_point deadline,
                                       Send&& send, Undo&& undo) {
  auto connection = backend.borrow();
  const std::chrono::milliseconds timeout = reply_timeout(backend, deadline);
  connection->set_timeout(timeout);
  try {
    return send(*connection);
  } catch (const Error& error) {
    const std::error_code code = error.code();
    if (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error) {
      try {
        auto fresh = backend.borrow();
        // A little past the caller's deadline is better than a lock left
        // behind for a whole lease; a server that cannot answer in this
        // budget gets the lease's expiry instead.
        constexpr std::chrono::milliseconds cleanup_floor(10);
        if (deadline != SteadyClock::time_point::max()) {
          fresh->set_timeout(std::max(reply_timeout(backend, deadline), cleanup_floor));
        }
        undo(*fresh);
      } catch (...) {
        // Best effort: if Redis cannot be reached now, the lease expires.
      }
    }
    if (code == Errc::timed_out && timeout < backend.options().command_timeout) {
      return std::nullopt;
    }
    throw;
  }
}

/// With auto-renewal on: a lease record for `key` held as `token` (a lock
/// token, or a Redisson owner field), registered with the Watchdog from
/// `sent` on, renewed by `renewer` (empty: the batch script). Null otherwise.
template <class Backend>
std::shared_ptr<LeaseState> watch_lease(Backend& backend, const LockOptions& options,
                                        const std::string& key, const std::string& token,
                                        SteadyClock::time_point sent,
                                        Watchdog::RenewAlone renewer) {
  if (!options.auto_renew()) return nullptr;
  auto lease = std::make_shared<LeaseState>(key, token, options.ttl(), sent, options.on_lost());
  const SteadyClock::time_point hold_until =
      options.max_hold().count() > 0 ? sent + options.max_hold() : SteadyClock::time_point::max();
  backend.watchdog().add(lease, std::move(renewer), hold_until);
  return lease;
}

/// Time left on a lease by the steady clock: from the watchdog's record
/// when it renews the lease, else from `expires`; zero once lost.
inline std::chrono::milliseconds time_left(const std::shared_ptr<LeaseState>& lease,
                                           SteadyClock::time_point expires) noexcept {
  if (lease && lease->lost) return std::chrono::milliseconds(0);
  const SteadyClock::time_point end = lease ? lease->expires() : expires;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - SteadyClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace distlock::detail
