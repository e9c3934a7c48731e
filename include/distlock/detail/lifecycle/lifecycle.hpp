// Lifecycle: everything a lock object does between its wire protocol and
// its user, written once for every lock type.
//
// It keeps the object's holds (detail/lifecycle/hold_keeper.hpp), runs the
// acquire loop under the deadline rules of detail/lifecycle/acquire.hpp
// (attempt; subscribe to the release channel; sleep until a release, the
// policy's pause, the holder's lease or the deadline; try again), decides
// re-entry and "held by this object", registers leases with the Watchdog
// (renewed, or of fixed ttl and kept for revalidation only), and extends
// them.
//
// The acquire loop runs in named steps over one Waiter, the state of one
// acquire: attempt, settle (a grant kept or given back), give_up, subscribe,
// sleep. Each step holds the decisions of its part of the loop and at most
// one server call, so that another driver can run the same steps.
// How a call that ends at its deadline without the lock tells a busy lock
// from a silent Redis: detail/lifecycle/heard.hpp.
//
// A Protocol supplies the server steps (OneKindProtocol, in acquire.hpp,
// answers the questions about kinds for a protocol with one):
//
//   using Kind;                        the kinds of hold (read/write, or one)
//   static constexpr bool per_thread;  holds belong to threads (re-entrant)
//                                      rather than to the object
//   given_back_first(kind)             which kinds a destructor releases first
//   check_process(), forked()          Error(forked) / true in a forked child
//   id_for(kind), before_first(kind, depth_of)   hold id; refusals (upgrade)
//   attempt(kind, id, deadline)        -> optional<Attempt>, undo included
//   release(kind, id) / extend(kind, id, ttl)  -> TokenCheck
//   read_holder(deadline), subscribe(deadline), wake()   for waiting
//   watched(kind, id, sent, options)   -> the Watchdog's LeaseState, never
//                                      null: every hold has one, and its
//                                      expiry_after() takes off any margin
//   watchdog(), held(kind, +1/-1), key(), describe(kind)
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

#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/lifecycle/hold_keeper.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

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
    Waiter waiter(kind, deadline, wait, cancellation_.generation());
    if (reenter(kind, waiter.local_holder)) return Outcome::acquired;
    waiter.id = protocol_.id_for(kind);
    for (;;) {
      std::optional<Attempt> result = attempt(waiter);
      if (!result) return waiter.heard.outcome_at(deadline);  // the deadline cut the step short
      if (std::optional<Outcome> end = settle(waiter, *result)) return *end;
      if (std::optional<Outcome> end = give_up(waiter, result->holder)) return *end;
      if (subscribe(waiter)) continue;  // the next attempt at once, now that a release is told
      if (std::optional<Outcome> end = sleep(waiter, result->holder)) return *end;
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
    if (lease->lost) {
      forget(kind, id, Release::lost);
      return false;
    }
    // Renewals of this lease wait meanwhile, so none sent before this
    // extend can land after it and set the old lease back.
    std::optional<Watchdog::HoldOff> quiet = protocol_.watchdog().hold_off(*lease);
    const clock::time_point sent = clock::now();
    const TokenCheck found = lease->lost ? TokenCheck::no_key : protocol_.extend(kind, id, ttl);
    if (found != TokenCheck::done) {
      quiet.reset();
      forget(kind, id, lease->lost ? Release::lost : to_release(found));
      return false;
    }
    quiet->extended(ttl, sent);
    return true;
  }

  /// Makes every acquire of this object that is waiting now give up.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) protocol_.wake();
  }

 private:
  using Keeper::cancellation_;
  using Keeper::forget;
  using Keeper::give_back;
  using Keeper::holds_;
  using Keeper::mutex_;
  using Keeper::not_held_message;
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
    std::string id;                   // moved into the hold once adopted
    unsigned attempts = 0;
    clock::time_point first_sent{};
    clock::time_point sent{};  // the latest attempt's
    std::uint64_t seen = 0;    // the release channel's generation before it
    bool last_chance = false;  // no sleep follows the latest attempt
    clock::time_point step_deadline{};
    std::optional<Notifier::Subscription> subscription;
    bool subscribed = false;
    Heard heard;  // when Redis last answered, and how fast
  };

  // The attempt: none while a holder of this object holds (its unlock is
  // what we wait for, not Redis); else the protocol's. nullopt when the
  // deadline cut the step short.
  std::optional<Attempt> attempt(Waiter& waiter) {
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
    // A first attempt past the deadline is a try_lock(); after waiting, a last
    // attempt gets what little is left, and a step that ends late ends the call.
    waiter.step_deadline = waiter.deadline;
    if (waiter.last_chance) {
      waiter.step_deadline =
          waiter.attempts == 1 ? no_deadline : std::max(waiter.deadline, waiter.sent + last_step);
    }
    if (waiter.local_holder) return behind_own_holder();
    std::optional<Attempt> answered =
        protocol_.attempt(waiter.kind, waiter.id, waiter.step_deadline);
    if (answered && !answered->unheard) waiter.heard.answered(waiter.sent);
    return answered;
  }

  // A grant becomes this object's hold, or is given back: when too few
  // replicas have it, or when another thread of this object recorded a hold
  // first (whose unlock is then waited for).
  std::optional<Outcome> settle(Waiter& waiter, Attempt& result) {
    if (waiter.local_holder) return std::nullopt;
    std::string& id = result.id.empty() ? waiter.id : result.id;
    if (result.not_replicated) {
      // Granted, but fewer replicas have it than asked: never held.
      if (!result.undone) give_back(waiter.kind, id);
      if (result.deadline_cut) return Outcome::timed_out;
      throw not_replicated_error(protocol_.key(), "grant", result.replicas, result.replicas_wanted);
    }
    if (!result.acquired) return std::nullopt;
    if (adopt(waiter.kind, id, result.fence, waiter.sent, result.replicas)) {
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

  // Whether a refused call ends here: a try_lock() or a last attempt, the
  // deadline, or cancel_waits().
  std::optional<Outcome> give_up(Waiter& waiter, HolderLease holder) {
    if (waiter.last_chance && waiter.attempts == 1 && !waiter.local_holder && !holder.known()) {
      // A try_lock() refused without a reason (SET NX) looks once at the
      // key, as a waiter would: read_holder() throws for one that no lock
      // can be taken on, which must not pass for a busy lock.
      static_cast<void>(protocol_.read_holder(waiter.step_deadline));
    }
    if (waiter.last_chance || clock::now() >= waiter.deadline) {
      // Busy if Redis answered lately; a wait on this object's own holder
      // asked Redis nothing.
      return waiter.local_holder ? Outcome::timed_out : waiter.heard.outcome_at(waiter.deadline);
    }
    if (cancellation_.since(waiter.cancel_seen)) return Outcome::cancelled;
    return std::nullopt;
  }

  // Subscribes to the release channel, once (again when a cluster node
  // dropped the subscription: the slot moved). True when it did: the next
  // attempt follows at once, and a release from then on cannot go
  // unannounced to us.
  bool subscribe(Waiter& waiter) {
    if (waiter.subscription && waiter.subscription->moved()) {
      waiter.subscription.reset();
      waiter.subscribed = false;
    }
    if (waiter.subscribed || !options_.wake_on_release()) return false;
    waiter.subscribed = true;
    std::optional<Notifier::Subscription> made = protocol_.subscribe(waiter.deadline);
    if (!made) return false;  // none to be had: the waiter polls
    if (made->moved()) {
      // Refused at once (a cluster whose map still names the slot's old
      // owner): this round waits by the timer, the next subscribes again.
      // Going round at once would spin while our own holder holds on.
      waiter.subscribed = false;
      return false;
    }
    waiter.subscription.emplace(std::move(*made));
    return true;
  }

  // Sleeps until a release is announced, the policy's pause, the end of
  // the holder's lease (read first if the attempt did not tell it) or the
  // deadline. Ends the call when the deadline cut a step short, or on
  // cancel_waits().
  std::optional<Outcome> sleep(Waiter& waiter, HolderLease holder) {
    if (!holder.known()) {
      const std::optional<HolderLease> read = protocol_.read_holder(waiter.deadline);
      if (!read) return waiter.heard.outcome_at(waiter.deadline);
      waiter.heard.answer();
      if (clock::now() >= waiter.deadline) return Outcome::timed_out;
      holder = *read;
    }
    // While the server confirms our subscription, the release announcement
    // is what wakes us; the holder's lease bounds the wait in case it is
    // lost. Otherwise we poll at the policy's pace.
    const bool announced = waiter.subscription && waiter.subscription->active();
    const clock::time_point until = waiter.heard.probe_by(
        next_attempt_at(policy_, waiter.attempts, holder, waiter.deadline, announced),
        waiter.deadline);
    if (waiter.subscription && !waiter.local_holder) {
      waiter.subscription->wait(waiter.seen, until);
    } else {
      cancellation_.sleep_until(waiter.cancel_seen, until);
    }
    if (cancellation_.since(waiter.cancel_seen)) return Outcome::cancelled;
    return std::nullopt;
  }

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
