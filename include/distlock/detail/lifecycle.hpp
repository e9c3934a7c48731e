// Lifecycle: everything a lock object does between its wire protocol and
// its user, written once for every lock type.
//
// It keeps the object's holds (detail/hold_table.hpp: the lease record, the
// depth of re-entry), runs the acquire loop under the deadline rules of
// detail/acquire.hpp (attempt; subscribe to the release channel; sleep until
// a release, the policy's pause, the holder's lease or the deadline; try
// again), decides re-entry and "held by this object", registers renewed
// leases with the Watchdog, and does the bookkeeping of release and extend.
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
#include <utility>
#include <vector>

#include "distlock/detail/acquire.hpp"
#include "distlock/detail/hold_table.hpp"
#include "distlock/detail/thread_annotations.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

template <class Protocol, class Policy>
class Lifecycle {
 public:
  using Kind = typename Protocol::Kind;
  using clock = SteadyClock;

  Lifecycle(Protocol protocol, LockOptions options, Policy policy, Cancellation cancellation = {})
      : protocol_(std::move(protocol)),
        options_(std::move(options)),
        policy_(std::move(policy)),
        cancellation_(std::move(cancellation)) {}

  /// Gives back every hold the object still has, of any thread.
  ~Lifecycle() { give_back_all(); }

  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  /// Acquires a hold of `kind` for the calling thread (see the top of file).
  Outcome acquire(Kind kind, clock::time_point deadline, bool wait) {
    const std::uint64_t cancel_seen = cancellation_.generation();
    bool busy_at_start = false;  // busy_here(), as reenter() saw it under the same lock
    if (reenter(kind, busy_at_start)) return Outcome::acquired;
    std::string id = protocol_.id_for(kind);  // moved into the hold once adopted
    std::optional<Notifier::Subscription> subscription;
    bool subscribed = false;
    clock::time_point first_sent{};
    for (unsigned attempt = 1;; ++attempt) {
      // Read before the attempt, so a release announced between a failed
      // attempt and the sleep ends that sleep at once.
      const std::uint64_t seen = subscription ? subscription->generation() : 0;
      const clock::time_point sent = clock::now();
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
      if (local_holder) {
        result.holder_pttl = -1;  // our own holder: wait for its unlock, not for Redis
      } else {
        const std::optional<Attempt> answered = protocol_.attempt(kind, id, step_deadline);
        if (!answered) return Outcome::timed_out;  // the deadline cut the step short
        result = *answered;
        if (result.not_replicated) {
          // Granted, but fewer replicas have it than asked: never held.
          give_back(kind, result.id.empty() ? id : result.id);
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
      if (last_chance || clock::now() >= deadline) return Outcome::timed_out;
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
          subscription.emplace(std::move(*made));
          continue;
        }
      }
      long long holder_pttl = result.holder_pttl;
      if (holder_pttl == -3) {
        const std::optional<long long> pttl = protocol_.holder_pttl(deadline);
        if (!pttl || clock::now() >= deadline) return Outcome::timed_out;
        holder_pttl = *pttl;
      }
      // While the server confirms our subscription, the release announcement
      // is what wakes us; the holder's lease bounds the wait in case it is
      // lost. Otherwise we poll at the policy's pace.
      const bool announced = subscription && subscription->active();
      const clock::time_point until =
          next_attempt_at(policy_, attempt, holder_pttl, deadline, announced);
      if (subscription && !local_holder) {
        subscription->wait(seen, until);
      } else {
        cancellation_.sleep_until(cancel_seen, until);
      }
      if (cancellation_.since(cancel_seen)) return Outcome::cancelled;
    }
  }

  /// Gives back one hold of `kind` and says what happened (see Mutex).
  Release release(Kind kind) {
    protocol_.check_process();  // a forked child gives back nothing
    return give_back_one(kind, /*quietly=*/false);
  }

  /// release(), never throwing; does nothing if the caller holds nothing.
  /// What it cannot release (the lease then runs out) goes to the Client's
  /// event hook as unlock_failed.
  void unlock(Kind kind) noexcept {
    if (protocol_.forked()) return;  // the parent's holds stay the parent's
    reporting_unlock_failure(protocol_.events(), protocol_.key(),
                             [&] { static_cast<void>(give_back_one(kind, /*quietly=*/true)); });
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

  bool owns(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    return holds_.mine(kind) != nullptr;
  }
  unsigned depth(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    return hold == nullptr ? 0 : hold->depth;
  }
  /// In a forked child every inherited hold counts as lost: it is the
  /// parent's, and nothing in the child renews it.
  bool lost(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    return hold != nullptr && (hold->lost() || protocol_.forked());
  }
  std::chrono::milliseconds validity(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    if (hold == nullptr || hold->lost() || protocol_.forked()) return std::chrono::milliseconds(0);
    const clock::time_point end = hold->lease ? hold->lease->expires() : hold->expires;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }
  /// The hold's id (a token, or a hash field); empty when not held.
  std::string id(Kind kind) const {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    return hold == nullptr ? std::string() : hold->id;
  }
  /// Replicas that acknowledged the hold's grant; nullopt if not held or not asked for.
  std::optional<int> replicas(Kind kind) const {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    if (hold == nullptr || hold->replicas < 0) return std::nullopt;
    return hold->replicas;
  }
  long long fence(Kind kind) const {
    if (!options_.fencing()) throw InvalidArgument("fencing is off for " + protocol_.key());
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    if (hold == nullptr) throw NotHeldError(not_held_message(kind));
    return hold->fence;
  }

  /// Makes every acquire of this object that is waiting now give up.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) protocol_.wake();
  }

  Protocol& protocol() noexcept { return protocol_; }
  const Protocol& protocol() const noexcept { return protocol_; }
  const LockOptions& options() const noexcept { return options_; }

 private:
  using Holds = HoldTable<Kind, Protocol::per_thread>;
  using Hold = typename Holds::Hold;
  using Ended = typename Holds::Ended;

  // When a lease of `ttl` sent at `sent` runs out, as the holder counts it
  // (less the protocol's margin: a Redlock's drift allowance).
  clock::time_point expiry(clock::time_point sent, std::chrono::milliseconds ttl) const {
    return sent + ttl - std::chrono::ceil<clock::duration>(protocol_.margin(ttl));
  }

  // The time a last attempt after waiting may take past the deadline: a
  // round trip to a few servers, and no more.
  static constexpr std::chrono::milliseconds last_step{5};

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
    hold.expires = expiry(sent, options_.ttl());
    if (options_.auto_renew()) {
      hold.lease = protocol_.watched(kind, id, sent, options_);
      hold.lease->events = protocol_.events();
    }
    {
      MutexLock guard(mutex_);
      if (Protocol::per_thread || holds_.empty()) {
        // Registered under our mutex, so that no unlock from another thread
        // can come between the record and the registration.
        if (hold.lease) {
          const clock::time_point cap = options_.max_hold().count() > 0 ? sent + options_.max_hold()
                                                                        : clock::time_point::max();
          protocol_.watchdog().add(hold.lease, cap);
        }
        hold.id = std::move(id);  // the caller returns at once
        holds_.add(std::move(hold));
        protocol_.held(kind, +1);
        return true;
      }
    }
    give_back(kind, id);
    return false;
  }

  // Releases a grant not to be held; best effort: if Redis cannot be reached, the lease expires.
  void give_back(Kind kind, const std::string& id) noexcept {
    try {
      static_cast<void>(protocol_.release(kind, id));
    } catch (...) {
    }
  }

  // Drops the hold `id` of `kind` at every depth: it is gone on the server,
  // as a failed extend found (`outcome`, for the next release()).
  void forget(Kind kind, const std::string& id, Release outcome) {
    std::shared_ptr<LeaseState> lease;
    {
      MutexLock guard(mutex_);
      Hold* hold = holds_.with_id(kind, id);
      if (hold == nullptr) return;
      lease = holds_.end(hold, outcome);
    }
    protocol_.held(kind, -1);
    cancellation_.nudge();
    if (lease) protocol_.watchdog().remove(*lease);
  }

  // release() and unlock() in one pass under our mutex: gives back the
  // calling thread's hold of `kind` (one level of it, if re-entered). With
  // no hold, release() answers what a failed extend() found, or throws
  // NotHeldError; unlock() (`quietly`) only forgets that finding.
  Release give_back_one(Kind kind, bool quietly) {
    MutexLock guard(mutex_);
    Hold* hold = holds_.mine(kind);
    if (hold == nullptr) {
      // After a failed extend(): what it found, once, instead of NotHeldError.
      const std::optional<Ended> ended = holds_.take_ended(kind);
      if (quietly) return Release::lost;
      if (!ended) throw NotHeldError(not_held_message(kind));
      guard.unlock();
      told_released(ended->acquired, ended->outcome);
      return ended->outcome;
    }
    if (hold->depth > 1) {
      --hold->depth;
      return hold->lost() ? Release::lost : Release::released;
    }
    const Hold last = holds_.take(hold);
    guard.unlock();
    protocol_.held(kind, -1);
    cancellation_.nudge();
    Release outcome = Release::lost;
    if (last.lease) protocol_.watchdog().remove(*last.lease);  // no renewal of it after this
    if (!last.lost()) {
      outcome = to_release(
          naming_acl_refusal([&] { return protocol_.describe(kind) + " " + protocol_.key(); },
                             [&] { return protocol_.release(kind, last.id); }));
    }
    told_released(last.acquired, outcome);
    return outcome;
  }

  // Tells the hook, if any, of a release of a hold taken at `acquired`.
  void told_released(clock::time_point acquired, Release outcome) const noexcept {
    if (const SharedEventHook& hook = protocol_.events()) {
      emit_released(hook, protocol_.key(), clock::now() - acquired, outcome);
    }
  }

  std::string not_held_message(Kind kind) const DISTLOCK_REQUIRES(mutex_) {
    if (Protocol::per_thread && !holds_.empty()) {
      return protocol_.key() + ": this thread holds no " + protocol_.describe(kind) +
             " (another thread does; only the owner may unlock it)";
    }
    return protocol_.key() + " is not held";
  }

  void give_back_all() noexcept {
    // A child must not even take our mutex: a parent thread may have held
    // it at the fork. The parent's holds stay the parent's.
    if (protocol_.forked()) return;
    std::vector<Hold> holds;
    {
      MutexLock guard(mutex_);
      holds = holds_.take_all();
    }
    // Read holds first (SharedMutex): a write release then finds no readers
    // left and frees the lock with one announcement.
    std::stable_partition(holds.begin(), holds.end(),
                          [](const Hold& hold) { return Protocol::given_back_first(hold.kind); });
    for (const Hold& hold : holds) {
      if (hold.thread == std::this_thread::get_id()) protocol_.held(hold.kind, -1);
      reporting_unlock_failure(protocol_.events(), protocol_.key(), [&] {
        if (hold.lease) {
          protocol_.watchdog().remove(*hold.lease);
          if (hold.lease->lost) return;
        }
        told_released(hold.acquired, to_release(protocol_.release(hold.kind, hold.id)));
      });
    }
  }

  Protocol protocol_;
  const LockOptions options_;
  const Policy policy_;

  // The holds as this object knows them; Redis, not this mutex, decides who holds the lock.
  mutable Mutex mutex_;
  Holds holds_ DISTLOCK_GUARDED_BY(mutex_);
  Cancellation cancellation_;
};

}  // namespace distlock::detail
