// Lifecycle: everything a lock object does between its wire protocol and
// its user, written once for every lock type.
//
// It keeps the object's holds (detail/lifecycle/hold_keeper.hpp: the lease record,
// the depth of re-entry, and giving them back), runs the acquire loop
// under the deadline rules of detail/lifecycle/acquire.hpp (attempt; subscribe to the
// release channel; sleep until a release, the policy's pause, the holder's
// lease or the deadline, with the next attempt armed where the protocol
// allows (detail/lifecycle/armed_sleep.hpp); try again), decides re-entry and "held
// by this object", registers leases with the Watchdog (renewed, or of fixed
// ttl and kept for revalidation only), and extends them.
//
// Busy or unanswered: an acquire that ends at its deadline without the
// lock says which (Outcome). Busy means Redis answered a step of the call
// in its last `probe` (two of the call's slowest round trips, and
// last_step) and the lock was held; unanswered, that it did not (an
// outage, a stopped or partitioned server). So that a healthy server
// always has answered in that window, a waiter whose sleep would run to
// the deadline makes its last attempt `probe` before it: one round trip
// more, on waits that end without the lock only.
// A Protocol supplies the server steps:
//
//   using Kind;                        the kinds of hold (read/write, or one)
//   static constexpr bool per_thread;  holds belong to threads (re-entrant)
//                                      rather than to the object
//   given_back_first(kind)             which kinds a destructor releases first
//   check_process(), forked()          Error(forked) / true in a forked child
//   id_for(kind), before_first(kind, depth_of)   hold id; refusals (upgrade)
//   attempt(kind, id, deadline)        -> optional<Attempt>, undo included
//   release(kind, id) / extend(kind, id, ttl)  -> TokenCheck
//   holder_pttl(deadline), subscribe(deadline), wake()   for waiting
//   watched(kind, id, sent, options)   -> the Watchdog's LeaseState
//   watchdog(), margin(ttl), held(kind, +1/-1), key(), describe(kind)
//   events()                           the Client's event hook (events.hpp)
//
// Holds: with per_thread false (Mutex, SimpleMutex, Redlock) the object
// has at most one, as a shared std::mutex: another thread of the object
// waits for it, the holding thread may not lock again, any thread may
// unlock. With per_thread true (ReentrantMutex, SharedMutex) each thread
// has its own per kind, counted locally: only a thread's first lock and
// last unlock of a kind reach Redis.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/armed_sleep.hpp"
#include "distlock/detail/lifecycle/hold_keeper.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// What one acquire heard from Redis: when it last answered a step, and
/// the slowest round trip of an attempt the waiter sent itself (see the
/// top of file).
class Heard {
 public:
  using clock = SteadyClock;

  /// A step the waiter sent at `sent` answered now; its round trip counts
  /// toward the probe window.
  void answered(clock::time_point sent) {
    answer();
    slowest_ = std::max(slowest_, at_ - sent);
  }
  /// Redis answered now, by a reply the waiter did not time (a release
  /// message, another thread's step).
  void answer() { at_ = clock::now(); }

  /// How a call the deadline ended without the lock comes out: busy if
  /// Redis answered within the probe window before `deadline`.
  Outcome outcome_at(clock::time_point deadline) const {
    return at_ != clock::time_point{} && at_ + probe() >= deadline ? Outcome::timed_out
                                                                   : Outcome::unanswered;
  }

  /// `until`, or the start of the probe window if the sleep would run into
  /// it before Redis has answered there.
  clock::time_point probe_by(clock::time_point until, clock::time_point deadline) const {
    if (deadline == no_deadline || deadline - clock::time_point{} <= probe()) return until;
    const clock::time_point window = deadline - probe();
    if (until <= window || at_ >= window || clock::now() >= window) return until;
    return window;
  }

 private:
  clock::duration probe() const { return last_step + 2 * slowest_; }

  clock::time_point at_{};
  clock::duration slowest_{0};
};

template <class Protocol>
class Lifecycle : public HoldKeeper<Protocol> {
  using Keeper = HoldKeeper<Protocol>;

 public:
  using Kind = typename Protocol::Kind;
  using clock = SteadyClock;

  Lifecycle(Protocol protocol, LockOptions options, AcquirePolicy policy,
            Cancellation cancellation = {})
      : Keeper(std::move(protocol), std::move(options), std::move(cancellation)),
        policy_(std::move(policy)) {}

  /// Acquires a hold of `kind` for the calling thread (see the top of file).
  Outcome acquire(Kind kind, clock::time_point deadline, bool wait) {
    const std::uint64_t cancel_seen = cancellation_.generation();
    bool busy_at_start = false;  // busy_here(), as reenter() saw it under the same lock
    if (reenter(kind, busy_at_start)) return Outcome::acquired;
    std::string id = protocol_.id_for(kind);  // moved into the hold once adopted
    std::optional<Notifier::Subscription> subscription;
    bool subscribed = false;
    clock::time_point first_sent{};
    Presented presented;  // an attempt the notifier thread sent while we slept
    Heard heard;          // when Redis last answered, and how fast
    for (unsigned attempt = 1;; ++attempt) {
      // Read before the attempt, so a release announced between a failed
      // attempt and the sleep ends that sleep at once.
      const std::uint64_t seen = presented.answer ? presented.seen
                                 : subscription   ? subscription->generation()
                                                  : 0;
      const clock::time_point sent = presented.answer ? presented.sent : clock::now();
      if (attempt == 1) first_sent = sent;
      const bool last_chance = !wait || sent >= deadline;
      // A first attempt past the deadline is a try_lock(); after waiting, a last
      // attempt gets what little is left, and a step that ends late ends the call.
      clock::time_point step_deadline = deadline;
      if (last_chance) {
        step_deadline = attempt == 1 ? no_deadline : std::max(deadline, sent + last_step);
      }
      Attempt result;
      bool local_holder = attempt == 1 ? busy_at_start : busy_here();
      if (presented.answer) {
        // Settled as one we sent ourselves at `sent` (adopt() still defers
        // to a holder of this object that got there first).
        heard.answer();
        result = *std::exchange(presented.answer, std::nullopt);
        local_holder = false;
      } else if (local_holder) {
        result.holder_pttl = -1;  // our own holder: wait for its unlock, not for Redis
      } else {
        const std::optional<Attempt> answered = protocol_.attempt(kind, id, step_deadline);
        if (!answered) return heard.outcome_at(deadline);  // the deadline cut the step short
        if (!answered->unheard) heard.answered(sent);
        result = *answered;
      }
      if (!local_holder) {
        if (result.not_replicated) {
          // Granted, but fewer replicas have it than asked: never held.
          if (!result.undone) give_back(kind, result.id.empty() ? id : result.id);
          if (result.deadline_cut) return Outcome::timed_out;
          throw not_replicated_error(protocol_.key(), "grant", result.replicas,
                                     result.replicas_wanted);
        }
        if (result.acquired) {
          if (adopt(kind, result.id.empty() ? id : result.id, result.fence, sent,
                    result.replicas)) {
            if (const SharedEventHook& hook = protocol_.events()) {
              emit_acquired(hook, protocol_.key(), clock::now() - first_sent, attempt);
            }
            return Outcome::acquired;
          }
          // Another thread of this object got there first: wait for its unlock.
          local_holder = true;
          result = Attempt{};
          result.holder_pttl = -1;
        }
      }
      if (last_chance && attempt == 1 && !local_holder && result.holder_pttl == -3) {
        // A try_lock() refused without a reason (SET NX) looks once at the
        // key, as a waiter would: holder_pttl() throws for one that no lock
        // can be taken on, which must not pass for a busy lock.
        static_cast<void>(protocol_.holder_pttl(step_deadline));
      }
      if (last_chance || clock::now() >= deadline) {
        // Busy if Redis answered lately; a wait on this object's own holder
        // asked Redis nothing.
        return local_holder ? Outcome::timed_out : heard.outcome_at(deadline);
      }
      if (cancellation_.since(cancel_seen)) return Outcome::cancelled;
      if (subscription && subscription->moved()) {
        // A cluster node dropped it (the slot moved): again, at the owner now.
        subscription.reset();
        subscribed = false;
      }
      if (!subscribed && options_.wake_on_release()) {
        // Subscribed (and confirmed) before the next attempt: a release from
        // now on cannot go unannounced to us.
        subscribed = true;
        if (std::optional<Notifier::Subscription> made = protocol_.subscribe(deadline)) {
          if (!made->moved()) {
            subscription.emplace(std::move(*made));
            continue;
          }
          // Refused at once (a cluster whose map still names the slot's old
          // owner): this round waits by the timer, the next subscribes again.
          // Going round at once would spin while our own holder holds on.
          subscribed = false;
        }
      }
      long long holder_pttl = result.holder_pttl;
      if (holder_pttl == -3) {
        const std::optional<long long> pttl = protocol_.holder_pttl(deadline);
        if (!pttl) return heard.outcome_at(deadline);
        heard.answer();
        if (clock::now() >= deadline) return Outcome::timed_out;
        holder_pttl = *pttl;
      }
      // While the server confirms our subscription, the release announcement
      // is what wakes us; the holder's lease bounds the wait in case it is
      // lost. Otherwise we poll at the policy's pace.
      const bool announced = subscription && subscription->active();
      const clock::time_point until = heard.probe_by(
          next_attempt_at(policy_, attempt, holder_pttl, deadline, announced), deadline);
      if (subscription && !local_holder) {
        if (!sleep_armed(protocol_, *subscription, kind, id, seen, until, deadline, presented)) {
          return heard.outcome_at(deadline);  // the deadline cut the sent attempt's reply short
        }
      } else {
        cancellation_.sleep_until(cancel_seen, until);
      }
      // A sent attempt is settled first: it may have taken the lock.
      if (!presented.answer && cancellation_.since(cancel_seen)) return Outcome::cancelled;
    }
  }

  /// Sets the hold's lease to `ttl` if it is still ours (see Mutex::extend).
  bool extend(Kind kind, std::chrono::milliseconds ttl) {
    std::string id;
    std::shared_ptr<LeaseState> lease;
    {
      MutexLock guard(mutex_);
      const Hold* hold = holds_.mine(kind);
      if (hold == nullptr) throw NotHeldError(not_held_message(kind));
      id = hold->id;
      lease = hold->lease;
    }
    protocol_.check_process();
    if (lease && lease->lost) {
      forget(kind, id, Release::lost);
      return false;
    }
    // Renewals of this lease wait meanwhile, so none sent before this
    // extend can land after it and set the old lease back.
    std::optional<Watchdog::HoldOff> quiet;
    if (lease) quiet.emplace(protocol_.watchdog().hold_off(*lease));
    const clock::time_point sent = clock::now();
    const TokenCheck found =
        lease && lease->lost ? TokenCheck::no_key : protocol_.extend(kind, id, ttl);
    if (found != TokenCheck::done) {
      quiet.reset();
      forget(kind, id, lease && lease->lost ? Release::lost : to_release(found));
      return false;
    }
    if (quiet) quiet->extended(ttl, sent);
    MutexLock guard(mutex_);
    if (Hold* hold = holds_.with_id(kind, id)) hold->expires = expiry(sent, ttl);
    return true;
  }

  /// Makes every acquire of this object that is waiting now give up.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) protocol_.wake();
  }

 private:
  using Keeper::cancellation_;
  using Keeper::expiry;
  using Keeper::forget;
  using Keeper::give_back;
  using Keeper::holds_;
  using Keeper::mutex_;
  using Keeper::not_held_message;
  using Keeper::options_;
  using Keeper::protocol_;
  using typename Keeper::Hold;

  // Counts one more hold if the calling thread has one of `kind` (re-
  // entrant protocols), or refuses the lock (the others; or a protocol rule).
  // Sets `busy` as busy_here() would, so that a first attempt takes our
  // mutex once less.
  bool reenter(Kind kind, bool& busy) {
    MutexLock guard(mutex_);
    busy = !Protocol::per_thread && !holds_.empty();
    const std::thread::id me = std::this_thread::get_id();
    if (!Protocol::per_thread && holds_.any_of(me)) {
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              protocol_.key() + " is already held by this thread");
    }
    if (Hold* hold = holds_.of(me, kind)) {
      if (hold->lost()) {
        throw LockLostError(protocol_.key() +
                            " was lost while this thread held it; unlock it before locking again");
      }
      ++hold->depth;
      return true;
    }
    // before_first() calls it at once, under our mutex.
    protocol_.before_first(kind, [&](Kind other) DISTLOCK_NO_THREAD_SAFETY_ANALYSIS {
      return holds_.depth(me, other);
    });
    return false;
  }

  // Another thread holds this single-holder object: as with a shared
  // std::mutex, wait for its unlock rather than race it in Redis (should
  // its lease have run out there, taking the key would overwrite its record
  // here, and its unlock would then release our lock).
  bool busy_here() const {
    if (Protocol::per_thread) return false;
    MutexLock guard(mutex_);
    return !holds_.empty();
  }

  // Records the hold just taken, moving `id` into it; false, after giving
  // it back (and with `id` left as it was), if another thread of a
  // single-holder object recorded one meanwhile.
  bool adopt(Kind kind, std::string& id, long long fence, clock::time_point sent, int replicas) {
    Hold hold;
    hold.replicas = replicas;
    hold.thread = std::this_thread::get_id();
    hold.kind = kind;
    hold.fence = fence;
    hold.acquired = sent;
    hold.granted = clock::now();
    hold.expires = expiry(sent, options_.ttl());
    // Every lease goes to the Watchdog: one of fixed ttl too, not to be
    // renewed but to be revalidated when the backend finds a new master
    // (or a new server process), like the others, and never believed then.
    hold.lease = protocol_.watched(kind, id, sent, options_);
    hold.lease->events = protocol_.events();
    {
      MutexLock guard(mutex_);
      if (Protocol::per_thread || holds_.empty()) {
        // Registered under our mutex, so that no unlock from another thread
        // can come between the record and the registration.
        const clock::time_point cap =
            options_.max_hold().count() > 0 ? sent + options_.max_hold() : clock::time_point::max();
        protocol_.watchdog().add(hold.lease, cap, /*renew=*/options_.auto_renew());
        hold.id = std::move(id);  // the caller returns at once
        holds_.add(std::move(hold));
        protocol_.held(kind, +1);
        return true;
      }
    }
    give_back(kind, id);
    return false;
  }

  const AcquirePolicy policy_;
};

}  // namespace distlock::detail
