// AcquireSteps: the acquire loop every lock type runs, as steps over one
// Waiter (the state of one acquire) that decide and send nothing: each names
// what comes next (an attempt, a read of the holder, a subscription, a
// sleep, or the end) with the deadline it must keep, and its driver hands
// back what that brought. Lifecycle::acquire() is the blocking driver; an
// event loop can be another. The deadline rules the steps keep are those
// of detail/lifecycle/acquire.hpp; how a call that ends at its deadline
// tells a busy lock from a silent Redis, detail/lifecycle/heard.hpp.
//
// Also here, the questions the steps ask of the object's holds: re-entry,
// a holder of this object to wait behind, and the grant recorded.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/lifecycle/hold_keeper.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

template <class Protocol>
class AcquireSteps : public HoldKeeper<Protocol> {
  using Keeper = HoldKeeper<Protocol>;

 public:
  using Kind = typename Protocol::Kind;
  using clock = SteadyClock;

  AcquireSteps(Protocol protocol, LockOptions options, AcquirePolicy policy,
               Cancellation cancellation)
      : Keeper(std::move(protocol), std::move(options), std::move(cancellation)),
        policy_(std::move(policy)) {}

 protected:
  using Keeper::cancellation_;
  using Keeper::give_back;
  using Keeper::holds_;
  using Keeper::mutex_;
  using Keeper::options_;
  using Keeper::protocol_;
  using typename Keeper::Hold;

  // One acquire, between its steps.
  struct Waiter {
    Waiter(Kind of, clock::time_point by, bool waits, std::uint64_t cancels_seen)
        : kind(of), deadline(by), wait(waits), cancel_seen(cancels_seen) {}

    const Kind kind;
    const clock::time_point deadline;
    const bool wait;                  // false for try_lock()
    const std::uint64_t cancel_seen;  // a cancel_waits() after this ends the call
    bool local_holder = false;        // a holder of this object: its unlock is waited for
    bool async = false;               // an event loop's: no thread owns the hold (see Lifecycle)
    std::string id;                   // moved into the hold once adopted
    unsigned attempts = 0;
    clock::time_point first_sent{};
    clock::time_point sent{};       // the latest attempt's
    clock::time_point came_back{};  // when the latest step's answer (or cut) was handed in
    std::uint64_t seen = 0;         // the release channel's generation before it
    bool last_chance = false;       // no sleep follows the latest attempt
    bool answered = false;          // the latest attempt's answer came
    clock::time_point step_deadline{};
    HolderLease holder;    // what the latest attempt (or a read) learned of the holder
    bool probing = false;  // the holder read under way is a try_lock()'s look at the key
    std::optional<Notifier::Subscription> subscription;
    bool subscribed = false;
    Heard heard;  // when Redis last answered, and how fast
  };

  // What comes next. A driver runs the server step or the sleep a Next
  // names, within the deadline it carries, and hands what it brought to the
  // matching step: attempted(), holder_read(), subscribed(), woken(). No
  // step sends anything itself but settle(), which gives back a grant it
  // cannot keep.
  enum class Step { attempt, read_holder, subscribe, sleep, done };
  struct Next {
    Step step;
    clock::time_point by{};                // the server step's deadline, or the sleep's end
    Outcome outcome = Outcome::timed_out;  // with done
  };
  static Next done(Outcome outcome) { return {Step::done, {}, outcome}; }

  // The first step of an acquire: done at once on re-entry, else the first
  // attempt (or, behind a holder of this object, a wait for its unlock).
  // An async waiter of a re-entrant protocol is an owner of its own, whose
  // id names no thread and is never used again.
  Next start(Waiter& waiter) {
    if (reenter(waiter)) return done(Outcome::acquired);
    if constexpr (Protocol::per_thread) {
      waiter.id =
          waiter.async ? protocol_.async_id_for(waiter.kind) : protocol_.id_for(waiter.kind);
    } else {
      waiter.id = protocol_.id_for(waiter.kind);
    }
    return before_attempt(waiter);
  }

  // The attempt's answer; nullopt when the deadline cut the step short.
  Next attempted(Waiter& waiter, std::optional<Attempt> answered) {
    waiter.came_back = clock::now();
    waiter.answered = answered.has_value();
    if (!answered) return done(waiter.heard.outcome_at(waiter.deadline));
    if (!answered->unheard) waiter.heard.answered(waiter.sent);
    if (std::optional<Outcome> end = settle(waiter, *answered)) return done(*end);
    return refused(waiter, *answered);
  }

  // The holder's lease; nullopt when the deadline cut the read short.
  Next holder_read(Waiter& waiter, std::optional<HolderLease> read) {
    waiter.came_back = clock::now();
    if (read) waiter.heard.answer();
    if (std::exchange(waiter.probing, false)) return give_up_or_wait(waiter);
    if (!read) return done(waiter.heard.outcome_at(waiter.deadline));
    if (clock::now() >= waiter.deadline) return done(Outcome::timed_out);
    waiter.holder = *read;
    return sleep_until(waiter);
  }

  // The subscription asked for; nullopt when none is to be had (the waiter
  // polls). Made, the next attempt follows at once: a release from then on
  // cannot go unannounced to us.
  Next subscribed(Waiter& waiter, std::optional<Notifier::Subscription> made) {
    if (!made) return before_sleep(waiter);
    if (made->moved()) {
      // Refused at once (a cluster whose map still names the slot's old
      // owner): this round waits by the timer, the next subscribes again.
      // Going round at once would spin while our own holder holds on.
      waiter.subscribed = false;
      return before_sleep(waiter);
    }
    waiter.subscription.emplace(std::move(*made));
    return before_attempt(waiter);
  }

  // After the sleep: cancelled, or the next attempt.
  Next woken(Waiter& waiter) {
    if (cancellation_.since(waiter.cancel_seen)) return done(Outcome::cancelled);
    return before_attempt(waiter);
  }

 private:
  // Counts one more hold if the calling thread has one of the waiter's
  // kind (re-entrant protocols), or refuses the lock (the others; or a
  // protocol rule). Sets local_holder as busy_here() would, so that a first
  // attempt takes our mutex once less. An async waiter is no thread's: it
  // waits for any holder of this object, this thread's too.
  bool reenter(Waiter& waiter) {
    const Kind kind = waiter.kind;
    MutexLock guard(mutex_);
    waiter.local_holder = !Protocol::per_thread && !holds_.empty();
    if (waiter.async) return false;
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

  // Before each attempt: none while a holder of this object holds (its
  // unlock is what we wait for, not Redis); else the protocol's.
  Next before_attempt(Waiter& waiter) {
    // Read before the attempt, so a release announced between a failed
    // attempt and the sleep ends that sleep at once.
    waiter.seen = waiter.subscription ? waiter.subscription->generation() : 0;
    waiter.sent = clock::now();
    if (++waiter.attempts == 1) {
      waiter.first_sent = waiter.sent;  // reenter() saw local_holder under the same lock
    } else {
      waiter.local_holder = busy_here();
    }
    waiter.last_chance = !waiter.wait || waiter.sent >= waiter.deadline;
    // An attempt is cut at the deadline (one attempt of a wait that drives
    // several locks, a StripedMutex's, has one ahead). A first attempt past
    // it is a try_lock(); after waiting, a last attempt gets what little is
    // left, and a step that ends late ends the call.
    waiter.step_deadline = waiter.deadline;
    if (waiter.sent >= waiter.deadline) {
      waiter.step_deadline = waiter.attempts == 1 ? no_deadline : waiter.sent + last_step;
    }
    if (waiter.local_holder) return refused(waiter, behind_own_holder());
    return {Step::attempt, waiter.step_deadline};
  }

  // A grant becomes this object's hold, or is given back: when too few
  // replicas have it, or when another thread of this object recorded a hold
  // first (whose unlock is then waited for).
  std::optional<Outcome> settle(Waiter& waiter, Attempt& result) {
    std::string& id = result.id.empty() ? waiter.id : result.id;
    if (result.not_replicated) {
      // Granted, but fewer replicas have it than asked: never held.
      if (!result.undone) give_back(waiter.kind, id);
      if (result.deadline_cut) return Outcome::timed_out;
      throw not_replicated_error(protocol_.key(), "grant", result.replicas, result.replicas_wanted);
    }
    if (!result.acquired) return std::nullopt;
    if (adopt(waiter, id, result.fence, result.replicas)) {
      if (const SharedEventHook& hook = protocol_.events()) {
        emit_acquired(hook, protocol_.key(), clock::now() - waiter.first_sent, waiter.attempts);
      }
      return Outcome::acquired;
    }
    waiter.local_holder = true;
    result = behind_own_holder();
    return std::nullopt;
  }

  // The attempt that stands for none while a holder of this object holds:
  // no grant, and a holder with no end Redis could tell (its unlock ends it).
  static Attempt behind_own_holder() {
    Attempt none;
    none.holder = HolderLease::endless();
    return none;
  }

  // Not granted. A try_lock() refused without a reason (SET NX) looks once
  // at the key, as a waiter would: read_holder() throws for one that no
  // lock can be taken on, which must not pass for a busy lock.
  Next refused(Waiter& waiter, const Attempt& result) {
    waiter.holder = result.holder;
    if (waiter.last_chance && waiter.attempts == 1 && !waiter.local_holder &&
        !waiter.holder.known()) {
      waiter.probing = true;
      return {Step::read_holder, waiter.step_deadline};
    }
    return give_up_or_wait(waiter);
  }

  // Ends a refused call that is out of time (a try_lock() or a last
  // attempt, the deadline) or cancelled; else subscribes to the release
  // channel once (again when a cluster node dropped the subscription: the
  // slot moved; or when the refusal names another channel: a MultiMutex's
  // other name), or goes to sleep.
  Next give_up_or_wait(Waiter& waiter) {
    const clock::time_point now = clock::now();
    if (waiter.last_chance || now >= waiter.deadline) {
      // Busy if Redis answered lately: before the deadline, or before the
      // answer came back for a step refused ahead of it (not before now: a
      // thread descheduled since, on a loaded host, must not turn a refusal
      // Redis just gave into an outage). A wait on this object's own holder
      // asked Redis nothing.
      return done(waiter.local_holder
                      ? Outcome::timed_out
                      : waiter.heard.outcome_at(std::min(waiter.came_back, waiter.deadline)));
    }
    if (cancellation_.since(waiter.cancel_seen)) return done(Outcome::cancelled);
    if (waiter.subscription &&
        (waiter.subscription->moved() || protocol_.listens_elsewhere(waiter.id))) {
      waiter.subscription.reset();
      waiter.subscribed = false;
    }
    if (!waiter.subscribed && options_.wake_on_release()) {
      waiter.subscribed = true;
      return {Step::subscribe, waiter.deadline};
    }
    return before_sleep(waiter);
  }

  // A sleep needs the holder's lease: read first if the attempt did not
  // tell it.
  Next before_sleep(Waiter& waiter) {
    if (!waiter.holder.known()) return {Step::read_holder, waiter.deadline};
    return sleep_until(waiter);
  }

  // The sleep: until a release is announced, the policy's pause, the end
  // of the holder's lease or the deadline. While the server confirms our
  // subscription, the release announcement is what wakes us; the holder's
  // lease bounds the wait in case it is lost. Otherwise we poll at the
  // policy's pace.
  Next sleep_until(Waiter& waiter) {
    const bool announced = waiter.subscription && waiter.subscription->active();
    HolderLease holder = waiter.holder;
    // Released by a holder that announced it since our attempt: that turn
    // went to a waiter asleep before us (or, missed, comes to us as we go to
    // sleep), so we wait for ours, at the policy's pace at most, instead of
    // racing the one whose turn it is. Many waiters racing each release
    // would make a herd of every waiter between an attempt and its sleep.
    if (announced && holder.released() && waiter.subscription->generation() != waiter.seen) {
      holder = HolderLease::endless();
    }
    return {Step::sleep, waiter.heard.probe_by(next_attempt_at(policy_, waiter.attempts, holder,
                                                               waiter.deadline, announced),
                                               waiter.deadline)};
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
  // single-holder object recorded one meanwhile. An async hold is no
  // thread's (a default thread id).
  bool adopt(const Waiter& waiter, std::string& id, long long fence, int replicas) {
    const Kind kind = waiter.kind;
    const clock::time_point sent = waiter.sent;
    Hold hold;
    hold.replicas = replicas;
    hold.thread = waiter.async ? std::thread::id() : std::this_thread::get_id();
    hold.kind = kind;
    hold.fence = fence;
    hold.acquired = sent;
    hold.granted = clock::now();
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
        if (!waiter.async) protocol_.held(kind, +1);  // an async hold is no thread's
        return true;
      }
    }
    give_back(kind, id);
    return false;
  }

  const AcquirePolicy policy_;
};

}  // namespace distlock::detail
