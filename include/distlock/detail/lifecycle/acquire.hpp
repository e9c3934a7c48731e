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
//   ends the call: busy (false) or unanswered (TimeoutError) by when Redis
//   last answered it (Heard, in detail/lifecycle/lifecycle.hpp).
// An attempt whose reply never came is ambiguous: the server may still
// apply it. Its undo is written on the same connection, behind it, and not
// waited for: if the attempt lands late, the undo lands right after it.
// Where nothing written behind can arrive (the connection broke mid-reply,
// or a WAIT blocks it), the undo goes on a fresh connection, on the
// backend's connector thread (undo_apart): the call returns by its
// deadline meanwhile, and the grant is still given back rather than kept
// for its whole lease.
//
// With replica acknowledgement (LockOptions::replicas), an attempt carries
// WAIT behind it in the same write (ReplicaCheck); a grant too few
// replicas acknowledged comes back as not_replicated, for the Lifecycle to
// give back.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/base/wake.hpp"
#include "distlock/detail/lifecycle/holder_lease.hpp"
#include "distlock/detail/lifecycle/replica_check.hpp"
#include "distlock/detail/lifecycle/undo.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// What one acquire attempt found.
struct Attempt {
  bool acquired = false;
  long long fence = 0;  ///< with fencing, when acquired
  HolderLease holder;   ///< when refused: what the attempt learned of the holder
  /// When acquired under an id of the attempt's own (a Redlock's fresh
  /// token per attempt): that id; empty for the id the attempt was given.
  std::string id;
  /// With replica acknowledgement: replicas that acknowledged the grant
  /// (WAIT's answer) and replicas asked for; -1 without.
  int replicas = -1;
  int replicas_wanted = -1;
  /// Granted, but fewer replicas acknowledged than asked: `acquired` is
  /// false and the grant is still on the server, for the caller to give back.
  bool not_replicated = false;
  /// With not_replicated: the caller's deadline, not the replica timeout,
  /// cut WAIT short.
  bool deadline_cut = false;
  /// With not_replicated: the grant was taken back already (undo_apart).
  bool undone = false;
  /// A "no" for want of answers rather than from one (a Redlock step that
  /// fewer than a quorum of masters answered in time): not a sign that
  /// Redis is answering.
  bool unheard = false;
};

/// What a Protocol (lifecycle.hpp) with one kind of hold, taken once per
/// thread and object and counted nowhere else, answers the Lifecycle's
/// questions about kinds: every lock type but ReentrantMutex and SharedMutex.
struct OneKindProtocol {
  enum class Kind { exclusive };
  static constexpr Kind exclusive = Kind::exclusive;
  static constexpr bool per_thread = false;
  static constexpr bool given_back_first(Kind) noexcept { return false; }
  void keeping(Kind, const std::string&) const noexcept {}
  template <class DepthOf>
  void before_first(Kind, DepthOf&&) const noexcept {}
  void held(Kind, int) noexcept {}
};

/// The attempt a script answered with nil when it granted and, when it
/// refused, with the holder's PTTL (an integer: nothing else). `what` names
/// the step in the error any other reply gets.
inline Attempt granted_on_nil(const Reply& reply, const char* what) {
  reply.throw_if_error();
  Attempt attempt;
  attempt.acquired = reply.is_nil();
  if (!attempt.acquired) attempt.holder = HolderLease::from_pttl(reply.expect_integer(what));
  return attempt;
}

/// How a token-checked release or extend script answers: 1 (or 2: a
/// Redisson-layout hold that stays) done, 0 no key (or the hold's own lease
/// had run out), -1 another owner. An error reply (a link's answer may be
/// one: an ACL refusal) is thrown as the ServerError it is.
inline TokenCheck token_check(const Reply& reply, const char* what) {
  const long long answer = reply.throw_if_error().expect_integer(what);
  if (answer >= 1) return TokenCheck::done;
  return answer == 0 ? TokenCheck::no_key : TokenCheck::other_token;
}

/// The attempt a fenced acquire script answered in its first two elements:
/// granted (1) and the fence, or refused (0) and the holder's PTTL.
inline Attempt fenced_attempt(const Reply& reply) {
  Attempt attempt;
  attempt.acquired = reply[0].expect_integer("fenced acquire") == 1;
  const long long second = reply[1].expect_integer("fenced acquire");
  if (attempt.acquired) {
    attempt.fence = second;
  } else {
    attempt.holder = HolderLease::from_pttl(second);
  }
  return attempt;
}

/// How an acquire ended: with the lock; at its deadline with the lock held
/// elsewhere (timed_out: busy) or with Redis silent (unanswered); or
/// cancelled.
enum class Outcome { acquired, timed_out, unanswered, cancelled };

/// What a throwing acquire answers for `outcome`: true with the lock,
/// false when busy or cancelled; TimeoutError when Redis left the call
/// unanswered, as when it misses a command timeout: the same outage gives
/// the same answer whatever the deadline. `call` names the caller's call.
inline bool acquired_or_throw(Outcome outcome, std::string_view call, const std::string& key) {
  if (outcome == Outcome::unanswered) {
    throw TimeoutError(Errc::timed_out,
                       std::string(call) + " of " + key +
                           ": Redis did not answer before the deadline (an outage, not a busy "
                           "lock); an attempt that lands late is undone");
  }
  return outcome == Outcome::acquired;
}

/// The std::error_code form of an acquire: true with the lock; false with
/// `ec` clear when the lock was busy, or set to what went wrong
/// (Errc::timed_out when Redis left the call unanswered, Errc::cancelled,
/// or the code of the error the throwing form throws). Throws only what is
/// not a std::system_error (std::bad_alloc).
template <class Acquire>
bool acquired_into(std::error_code& ec, Acquire&& acquire) {
  ec.clear();
  try {
    switch (acquire()) {
      case Outcome::acquired: return true;
      case Outcome::timed_out: return false;
      case Outcome::unanswered: ec = Errc::timed_out; return false;
      case Outcome::cancelled: ec = Errc::cancelled; return false;
    }
  } catch (const std::system_error& error) {
    ec = error.code();
  }
  return false;
}

/// The cancel_waits() of one lock object: a generation every acquire notes
/// when it starts and gives up on once it changes, and the condition a
/// polling waiter sleeps on. Copies share it (a Semaphore shares its own
/// with every permit lock it makes).
class Cancellation {
 public:
  // Read without the mutex (every acquire reads it, and a lock per cycle
  // is client-side work); written under it, so that a sleeper's check and
  // its wait are one step against cancel().
  std::uint64_t generation() const noexcept {
    return state_->generation.load(std::memory_order_acquire);
  }

  bool since(std::uint64_t seen) const noexcept { return generation() != seen; }

  /// Ends every acquire that noted an earlier generation. A waiter asleep on
  /// a subscription is woken by the caller through the Notifier.
  void cancel() {
    {
      MutexLock guard(state_->mutex);
      state_->generation.fetch_add(1, std::memory_order_acq_rel);
      state_->armed.fire_all();
    }
    state_->cancelled.notify_all();
  }

  /// Wakes polling waiters without cancelling them (the lock object's own
  /// holder let go): the threads, and the event-loop waiter next in turn.
  void nudge() {
    {
      MutexLock guard(state_->mutex);
      state_->armed.fire_next();
    }
    state_->cancelled.notify_all();
  }

  /// For a waiter that is not a thread (detail/base/wake.hpp): `wake` fires
  /// at the next cancel(), or at a nudge() in its turn; once, unless
  /// disarmed first. Not armed (false) if a cancel after generation `seen`,
  /// or a nudge nobody was armed for, came first: the caller looks now.
  bool sleep_on(Wake& wake, std::uint64_t seen) {
    MutexLock guard(state_->mutex);
    if (state_->generation.load(std::memory_order_acquire) != seen ||
        state_->armed.claim_missed()) {
      return false;
    }
    state_->armed.arm(wake);
    return true;
  }
  void disarm(Wake& wake) {
    MutexLock guard(state_->mutex);
    state_->armed.disarm(wake);
  }
  /// Whether `wake` was fired by a nudge with the baton, now used.
  bool take_baton(Wake& wake) {
    MutexLock guard(state_->mutex);
    return state_->armed.take_baton(wake);
  }

  /// Sleeps until `until`, a cancel after generation `seen`, or a nudge.
  void sleep_until(std::uint64_t seen, SteadyClock::time_point until) {
    MutexLock guard(state_->mutex);
    if (state_->generation.load(std::memory_order_acquire) != seen) return;
    guard.wait_until(state_->cancelled, until);
  }

 private:
  struct State {
    Mutex mutex;
    std::condition_variable cancelled;
    std::atomic<std::uint64_t> generation{0};
    WakeList armed DISTLOCK_GUARDED_BY(mutex);
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

/// When to try again: after the policy's pause (or, when a release will be
/// announced, no pause of our own), but no later than the deadline nor the
/// end of the holder's lease (the lock is free then). A holder with no end
/// in sight leaves the policy's pause; one released since, none.
inline SteadyClock::time_point next_attempt_at(const AcquirePolicy& policy, unsigned attempt,
                                               HolderLease holder, SteadyClock::time_point deadline,
                                               bool announced) {
  std::chrono::nanoseconds pause{0};
  if (const std::chrono::milliseconds* left = holder.left()) {
    pause = announced
                ? *left
                : std::min<std::chrono::nanoseconds>(policy.pause(attempt, jitter_unit()), *left);
  } else if (!holder.released()) {
    pause = policy.pause(attempt, jitter_unit());
  }
  const SteadyClock::time_point now = SteadyClock::now();
  return deadline - now < pause ? deadline : now + pause;
}

/// `send(connection)` by on_site(); nullopt when a TimeoutError was the
/// caller's own deadline cutting the step short.
template <class Send>
auto on_site_by(Site& site, SteadyClock::time_point deadline, Send&& send)
    -> std::optional<decltype(send(std::declval<Connection&>()))> {
  try {
    return on_site(site, deadline, std::forward<Send>(send));
  } catch (const TimeoutError&) {
    if (deadline_reached(deadline)) return std::nullopt;
    throw;
  }
}

/// One attempt on a single server: `send(connection)` on a connection
/// borrowed and timed by the deadline rules above. If the reply never came,
/// `undo(writer)` gives the attempt's undo to an UndoWriter that sends it
/// behind the attempt (Connection::send_eval_behind) and, where nothing
/// behind can arrive, apart too (undo_apart), before the error goes on. Returns
/// nullopt when the caller's deadline cut the step short. With `replicas`,
/// the attempt carries its WAIT behind it on the same connection; a WAIT
/// that fails after a grant undoes the grant apart (the grant is known, and
/// the WAIT blocks its own connection).
///
/// An undo sent apart may land after the call returned: every call that
/// sends one ends there, and the next names its hold anew (a new token; a
/// field hold retires its owner id when it writes an undo), so the late
/// undo can take nothing but the grant it undoes.
template <class Send, class Undo>
std::optional<Attempt> attempt_or_undo(Site& site, SteadyClock::time_point deadline, Send&& send,
                                       Undo&& undo, ReplicaCheck* replicas = nullptr,
                                       std::string_view key = {}) {
  return on_site_by(site, deadline, [&](Connection& connection) {
    const std::chrono::milliseconds command_timeout = site.options().command_timeout;
    const int needed = replicas != nullptr ? replicas->needed(connection, key) : 0;
    const TrailGuard guard(connection);
    Attempt attempt;
    // A grant `count` replicas acknowledged; too few makes it not_replicated
    // (for the Lifecycle to give back).
    const auto acknowledged = [&](int count, bool cut) {
      attempt.replicas = count;
      attempt.replicas_wanted = needed;
      if (count >= needed) return;
      attempt.acquired = false;
      attempt.not_replicated = true;
      attempt.deadline_cut = cut;
    };
    // The undo, behind the attempt and or apart from it. Best effort: what
    // its hand-over throws (an allocation, copying what it will send) must
    // not replace the attempt's error, which is the one the caller acts on.
    const auto undo_by = [&](bool behind, bool apart) noexcept {
      try {
        AttemptUndo writer(site, connection, behind, apart);
        undo(static_cast<UndoWriter&>(writer));
      } catch (...) {
      }
    };
    try {
      // Whether the caller's deadline cut WAIT short; acknowledged() may find so too.
      bool cut = needed > 0 && replicas->trail_wait(connection, needed, deadline, command_timeout);
      attempt = send(connection);
      if (needed > 0 && attempt.acquired) {
        const int count =
            replicas->acknowledged(connection, needed, deadline, command_timeout, cut);
        acknowledged(count, cut);
        // A replica may have gone: the next attempt counts them again.
        if (count < needed) replicas->reread();
      } else if (needed > 0) {
        ReplicaCheck::skip(connection);
      }
      return attempt;
    } catch (const Error& error) {
      const std::error_code code = error.code();
      if (attempt.acquired) {
        undo_by(/*behind=*/false, /*apart=*/true);
        if (code == Errc::timed_out && needed > 0 && deadline_reached(deadline)) {
          // The grant was answered, its WAIT not by the deadline: too few
          // replicas in time, as when WAIT answers short at the deadline.
          acknowledged(0, /*cut=*/true);
          attempt.undone = true;
          return attempt;
        }
      } else if (code == Errc::timed_out || code == Errc::io_error ||
                 code == Errc::protocol_error) {
        // With its WAIT sent behind it, an unanswered attempt's undo may
        // queue behind a WAIT that blocks, and be dropped with the
        // connection: undo it apart too (a grant that landed is found
        // there; one still on the wire then lives out its lease). So too
        // where the connection broke (the server closed it mid-reply):
        // nothing written behind on it arrives, and the grant may have
        // been applied.
        undo_by(/*behind=*/true, /*apart=*/connection.trailed() || code == Errc::io_error);
      }
      throw;
    }
  });
}

/// The holder's lease (its PTTL), read by the deadline rules; nullopt when
/// the caller's deadline cut the read short.
inline std::optional<HolderLease> read_holder(Site& site, const std::string& key,
                                              SteadyClock::time_point deadline) {
  return on_site_by(site, deadline, [&](Connection& connection) {
    return HolderLease::from_pttl(connection.command("PTTL", key).integer());
  });
}

/// send(); a refusal by the server's ACL (NOPERM: e.g. a user with SET but
/// no EVALSHA, which Mutex releases by) is rethrown naming `what()` it
/// refused and what becomes of the lock. `what` is called only then: its
/// text costs an allocation the release has no need of otherwise.
template <class What, class Send>
auto naming_acl_refusal(What&& what, Send&& send) -> decltype(send()) {
  try {
    return send();
  } catch (const ServerError& error) {
    if (error.kind() != ServerErrorKind::noperm) throw;
    throw ServerError(std::string(error.what()) + " (the server's ACL refused the release of the " +
                      what() + "; it stays held until its lease runs out)");
  }
}

}  // namespace distlock::detail
