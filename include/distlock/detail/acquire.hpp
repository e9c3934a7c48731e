// The server steps every single-server lock type sends the same way, and
// the rules that keep each within its caller's deadline: one attempt (and
// the undo of one whose reply never came), one PTTL read, when to try
// again, and cancel_waits().
//
// The deadline rules, for every step:
// - a call without a deadline (lock(), try_lock()) waits for Redis at most
//   one command timeout per step, and a step that gets no reply throws
//   TimeoutError naming the command, the endpoint and the timeout;
// - a call with a deadline cuts every step's wait (the pool, the connect,
//   the reply) to the time it has left, and a step the deadline cuts short
//   is the caller's timeout (try_lock_for returns false), not an error.
// An attempt whose reply never came is ambiguous: the server may still
// apply it. Its undo is written on the same connection, behind it, and not
// waited for: if the attempt lands late, the undo lands right after it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/thread_annotations.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

/// What one acquire attempt found.
struct Attempt {
  bool acquired = false;
  long long fence = 0;         ///< with fencing, when acquired
  long long holder_pttl = -3;  ///< when refused: the holder's PTTL, -3 if not asked
  /// When acquired under an id of the attempt's own (a Redlock's fresh
  /// token per attempt): that id; empty for the id the attempt was given.
  std::string id;
};

/// How an acquire ended.
enum class Outcome { acquired, timed_out, cancelled };

/// No deadline: the step may take one command timeout.
inline constexpr SteadyClock::time_point no_deadline = SteadyClock::time_point::max();

/// The cancel_waits() of one lock object: a generation every acquire notes
/// when it starts and gives up on once it changes, and the condition a
/// polling waiter sleeps on.
class Cancellation {
 public:
  std::uint64_t generation() const {
    MutexLock guard(mutex_);
    return generation_;
  }

  bool since(std::uint64_t seen) const {
    MutexLock guard(mutex_);
    return generation_ != seen;
  }

  /// Ends every acquire that noted an earlier generation. A waiter asleep on
  /// a subscription is woken by the caller through the Notifier.
  void cancel() {
    {
      MutexLock guard(mutex_);
      ++generation_;
    }
    cancelled_.notify_all();
  }

  /// Wakes polling waiters without cancelling them (the lock object's own
  /// holder let go).
  void nudge() { cancelled_.notify_all(); }

  /// Sleeps until `until`, a cancel after generation `seen`, or a nudge.
  void sleep_until(std::uint64_t seen, SteadyClock::time_point until) {
    MutexLock guard(mutex_);
    if (generation_ != seen) return;
    guard.wait_until(cancelled_, until);
  }

 private:
  mutable Mutex mutex_;
  std::condition_variable cancelled_;
  std::uint64_t generation_ DISTLOCK_GUARDED_BY(mutex_) = 0;
};

/// The reply timeout for a step: the command timeout, cut to the time left
/// before `deadline` (at least 1 ms, the finest a socket timeout goes).
inline std::chrono::milliseconds reply_timeout(std::chrono::milliseconds command_timeout,
                                               SteadyClock::time_point deadline) {
  if (deadline == no_deadline) return command_timeout;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return std::clamp(left, std::chrono::milliseconds(1), command_timeout);
}

/// Whether a TimeoutError seen now is the caller's own deadline running
/// out (the step was cut to it) rather than Redis missing a command timeout.
inline bool deadline_reached(SteadyClock::time_point deadline) {
  return deadline != no_deadline && SteadyClock::now() + std::chrono::milliseconds(2) >= deadline;
}

/// When to try again: after the policy's pause (or, when a release will be
/// announced, no pause of our own), but no later than the deadline nor the
/// end of the holder's lease (the lock is free then). A PTTL of -1 (a key
/// with no expiry, not ours; or nothing to go by) leaves the policy's pause.
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

/// Whether `Backend` routes each step itself (ClusterClient: by the hash
/// slot its lock object was bound to) instead of lending one endpoint's
/// connections.
template <class Backend, class = void>
inline constexpr bool routes_by_slot = false;
template <class Backend>
inline constexpr bool routes_by_slot<Backend, std::void_t<typename Backend::routes_by_slot>> = true;

/// `send(connection)` on a connection to where the lock lives, timed by the
/// deadline rules above: borrowed from a single-endpoint Backend, or sent
/// through a routing Backend's route() (which follows its redirects).
template <class Backend, class Send>
auto on_connection(Backend& backend, SteadyClock::time_point deadline, Send&& send) {
  if constexpr (routes_by_slot<Backend>) {
    return backend.route(deadline, std::forward<Send>(send));
  } else {
    auto connection = backend.borrow(deadline);
    connection->set_timeout(reply_timeout(backend.options().command_timeout, deadline));
    return send(*connection);
  }
}

/// The copy of `backend` a lock on `key` keeps: bound to the key's slot for
/// a routing Backend, the same handle otherwise.
template <class Backend>
Backend for_lock_key(Backend backend, const std::string& key) {
  if constexpr (routes_by_slot<Backend>) {
    return backend.for_key(key);
  } else {
    return backend;
  }
}

/// What the leases of one renewal batch share besides their kind: the
/// endpoint for a single-endpoint Backend; the hash slot for a routing one
/// (a cluster runs a script or a transaction only over keys of one slot).
template <class Backend>
const void* batch_identity(const Backend& backend) noexcept {
  if constexpr (routes_by_slot<Backend>) {
    return backend.slot_identity();
  } else {
    return &backend.options();
  }
}

/// One attempt on a single server: `send(connection)` on a connection
/// borrowed and timed by the deadline rules above. If the reply never came,
/// `undo(connection)` writes the undo behind it (Connection::send_behind)
/// before the error goes on. Returns nullopt when the caller's deadline cut
/// the step short.
template <class Backend, class Send, class Undo>
std::optional<Attempt> attempt_or_undo(Backend& backend, SteadyClock::time_point deadline,
                                       Send&& send, Undo&& undo) {
  try {
    return on_connection(backend, deadline, [&](Connection& connection) {
      try {
        return send(connection);
      } catch (const Error& error) {
        const std::error_code code = error.code();
        if (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error) {
          undo(connection);
        }
        throw;
      }
    });
  } catch (const TimeoutError&) {
    if (deadline_reached(deadline)) return std::nullopt;
    throw;
  }
}

/// The holder's PTTL, read by the deadline rules; nullopt when the
/// caller's deadline cut the read short.
template <class Backend>
std::optional<long long> read_pttl(Backend& backend, const std::string& key,
                                   SteadyClock::time_point deadline) {
  try {
    return on_connection(backend, deadline, [&](Connection& connection) {
      return connection.command("PTTL", key).integer();
    });
  } catch (const TimeoutError&) {
    if (deadline_reached(deadline)) return std::nullopt;
    throw;
  }
}

/// A token-checked step (release, extend) on a single server within the
/// deadline rules; throws on failure like any command.
template <class Backend, class Send>
auto send_checked(Backend& backend, SteadyClock::time_point deadline, Send&& send) {
  return on_connection(backend, deadline, std::forward<Send>(send));
}

}  // namespace distlock::detail
