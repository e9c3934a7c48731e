// HoldKeeper: what a lock object holds, for the Lifecycle (lifecycle.hpp)
// that takes the holds: the questions about them (owns, depth, lost,
// validity, id, replicas, fence) and every way of giving them back:
// release() and unlock(), forgetting one a failed extend found gone, and
// giving back all that are left when the object is destroyed.
//
// A given-back hold leaves the Watchdog before its release is sent, so no
// renewal of it goes out after, and its local waiters (threads of a single-
// holder object, waiting on the Cancellation) are nudged to try again. One
// given back before its minimum hold (LockOptions::min_hold) has passed is
// kept on the server until then instead of released.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/hold_table.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

template <class Protocol>
class HoldKeeper {
 public:
  using Kind = typename Protocol::Kind;
  using clock = SteadyClock;

  HoldKeeper(Protocol protocol, LockOptions options, Cancellation cancellation)
      : protocol_(std::move(protocol)),
        options_(std::move(options)),
        cancellation_(std::move(cancellation)) {
    // Here, where every lock type's holds are kept, so none of them can
    // accept what another refuses.
    check_combination(options_, "lock " + protocol_.key());
  }

  /// Gives back every hold the object still has, of any thread.
  ~HoldKeeper() { give_back_all(); }

  HoldKeeper(const HoldKeeper&) = delete;
  HoldKeeper& operator=(const HoldKeeper&) = delete;

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

  /// Gives back the hold `id` of `kind` only, from any thread (an async
  /// guard's), as release() does: Release::lost if it is no longer this
  /// object's (another thread's unlock gave it back, or its lease was lost).
  Release release_hold(Kind kind, const std::string& id) {
    protocol_.check_process();
    return give_back_one(kind, /*quietly=*/false, &id);
  }
  /// What an event loop may give back without waiting: the hold `id` of
  /// `kind`, taken out as release_hold() takes it, unless a renewal of its
  /// lease is in flight (a release may not overtake it) or part of a
  /// minimum hold is left (an extend, not a release): nullopt then, with
  /// nothing done, for release_hold() on a thread that may wait. Otherwise
  /// the server step is the caller's, and its outcome for told_released().
  struct Unheld {
    bool send = false;  // false: gone already (Release::lost), nothing to send
    clock::time_point acquired{};
  };
  std::optional<Unheld> unhold(Kind kind, const std::string& id) {
    protocol_.check_process();
    std::optional<Hold> last;
    {
      MutexLock guard(mutex_);
      Hold* hold = holds_.with_id(kind, id);
      if (hold == nullptr) return Unheld{};
      if (hold->depth > 1 || min_hold_left(*hold).count() > 0 ||
          !protocol_.watchdog().try_remove(*hold->lease)) {
        return std::nullopt;
      }
      last.emplace(holds_.take(hold));
    }
    let_go(*last);
    if (last->lost()) {
      told_released(last->acquired, Release::lost);
      return Unheld{};
    }
    return Unheld{true, last->acquired};
  }

  /// Tells the hook, if any, of a release of a hold taken at `acquired`.
  void told_released(clock::time_point acquired, Release outcome) const noexcept {
    if (const SharedEventHook& hook = protocol_.events()) {
      emit_released(hook, protocol_.key(), clock::now() - acquired, outcome);
    }
  }

  /// release_hold(), never throwing, as unlock() is.
  void unlock_hold(Kind kind, const std::string& id) noexcept {
    if (protocol_.forked()) return;
    reporting_unlock_failure(protocol_.events(), protocol_.key(), [&] {
      static_cast<void>(give_back_one(kind, /*quietly=*/true, &id));
    });
  }

  bool owns(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    return holds_.mine(kind) != nullptr;
  }
  /// Whether the hold `id` of `kind` is still this object's (an async
  /// hold's question, from any thread; as are the overloads by id below).
  bool owns(Kind kind, const std::string& id) const noexcept {
    MutexLock guard(mutex_);
    return holds_.with_id(kind, id) != nullptr;
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
    return lost(holds_.mine(kind));
  }
  bool lost(Kind kind, const std::string& id) const noexcept {
    MutexLock guard(mutex_);
    return lost(holds_.with_id(kind, id));
  }
  std::chrono::milliseconds validity(Kind kind) const noexcept {
    MutexLock guard(mutex_);
    return validity(holds_.mine(kind));
  }
  std::chrono::milliseconds validity(Kind kind, const std::string& id) const noexcept {
    MutexLock guard(mutex_);
    return validity(holds_.with_id(kind, id));
  }
  /// The hold's id (a token, or a hash field); empty when not held.
  std::string id(Kind kind) const {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    return hold == nullptr ? std::string() : hold->id;
  }
  /// The lease of the hold `id` of `kind`; null once it is given back.
  std::shared_ptr<LeaseState> lease_of(Kind kind, const std::string& id) {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.with_id(kind, id);
    return hold == nullptr ? nullptr : hold->lease;
  }
  /// Replicas that acknowledged the hold's grant; nullopt if not held or not asked for.
  std::optional<int> replicas(Kind kind) const {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.mine(kind);
    if (hold == nullptr || hold->replicas < 0) return std::nullopt;
    return hold->replicas;
  }
  /// The same of the hold `id` of `kind` (an async hold's).
  std::optional<int> replicas(Kind kind, const std::string& id) const {
    MutexLock guard(mutex_);
    const Hold* hold = holds_.with_id(kind, id);
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
  long long fence(Kind kind, const std::string& id) const {
    if (!options_.fencing()) throw InvalidArgument("fencing is off for " + protocol_.key());
    MutexLock guard(mutex_);
    const Hold* hold = holds_.with_id(kind, id);
    if (hold == nullptr) throw NotHeldError(protocol_.key() + ": this hold was given back");
    return hold->fence;
  }

  Protocol& protocol() noexcept { return protocol_; }
  const Protocol& protocol() const noexcept { return protocol_; }
  const LockOptions& options() const noexcept { return options_; }

 protected:
  using Holds = HoldTable<Kind, Protocol::per_thread>;
  using Hold = typename Holds::Hold;
  using Ended = typename Holds::Ended;

  // In a forked child every inherited hold counts as lost (see above).
  bool lost(const Hold* hold) const noexcept DISTLOCK_REQUIRES(mutex_) {
    return hold != nullptr && (hold->lost() || protocol_.forked());
  }
  std::chrono::milliseconds validity(const Hold* hold) const noexcept DISTLOCK_REQUIRES(mutex_) {
    if (hold == nullptr || hold->lost() || protocol_.forked()) return std::chrono::milliseconds(0);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(hold->lease->expires() -
                                                                            clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

  // `hold` just left the table: its thread's count of it goes down, and a
  // waiter of this object, next in turn, looks again.
  void let_go(const Hold& hold) {
    uncount(hold);
    cancellation_.nudge();
  }
  // The count of `hold` that its owner thread keeps (re-entrant protocols:
  // see HashFieldCore::held): this thread's own, or left for the owner to
  // settle. An async hold is no thread's, and counted nowhere.
  void uncount(const Hold& hold) noexcept {
    if (hold.thread == std::this_thread::get_id()) {
      protocol_.held(hold.kind, -1);
    } else if constexpr (Protocol::per_thread) {
      if (hold.thread != std::thread::id()) protocol_.held_elsewhere(hold.kind, hold.id);
    }
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
    Hold gone;
    {
      MutexLock guard(mutex_);
      Hold* hold = holds_.with_id(kind, id);
      if (hold == nullptr) return;
      gone.thread = hold->thread;
      gone.kind = kind;
      gone.id = id;
      lease = holds_.end(hold, outcome);
    }
    let_go(gone);
    protocol_.watchdog().remove(*lease);
  }

  // release() and unlock() in one pass under our mutex: gives back the
  // calling thread's hold of `kind` (one level of it, if re-entered), or
  // the hold `id` when given. With no hold, release() answers what a failed
  // extend() found, or throws NotHeldError; unlock() (`quietly`) only
  // forgets that finding; a hold named by id that is gone was lost.
  Release give_back_one(Kind kind, bool quietly, const std::string* id = nullptr) {
    MutexLock guard(mutex_);
    Hold* hold = id != nullptr ? holds_.with_id(kind, *id) : holds_.mine(kind);
    if (hold == nullptr && id != nullptr) return Release::lost;
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
    let_go(last);
    Release outcome = Release::lost;
    protocol_.watchdog().remove(*last.lease);  // no renewal of it after this
    if (!last.lost()) {
      outcome = naming_acl_refusal([&] { return protocol_.describe(kind) + " " + protocol_.key(); },
                                   [&] { return given_back(last); });
    }
    told_released(last.acquired, outcome);
    return outcome;
  }

  // Gives `hold` back on the server: released, or, while part of the
  // minimum hold (LockOptions::min_hold) is left, kept until it ends by a
  // token-checked change of its lease to what is left. Kept, it is neither
  // deleted nor announced: waiters wake when it runs out, as for a holder
  // that vanished.
  Release given_back(const Hold& hold) {
    const std::chrono::milliseconds left = min_hold_left(hold);
    if (left.count() <= 0) return to_release(protocol_.release(hold.kind, hold.id));
    protocol_.keeping(hold.kind, hold.id);
    const TokenCheck found = protocol_.extend(hold.kind, hold.id, left);
    return found == TokenCheck::done ? Release::kept : to_release(found);
  }

  // What is left of `hold`'s minimum hold, rounded up; zero when none is.
  // Counted from when the grant's reply was in, not from when its attempt
  // was sent: the server granted it in between, and reads the new lease
  // after now, so the lease ends no earlier than min_hold after the grant.
  // Counted from the send, it could end up to a round trip early.
  std::chrono::milliseconds min_hold_left(const Hold& hold) const {
    if (options_.min_hold().count() == 0 || !Protocol::holds_at_least(hold.kind)) {
      return std::chrono::milliseconds(0);
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        hold.granted + options_.min_hold() - clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

  std::string not_held_message(Kind kind) const DISTLOCK_REQUIRES(mutex_) {
    if (Protocol::per_thread && !holds_.empty()) {
      return protocol_.key() + ": this thread holds no " + protocol_.describe(kind) +
             " (another thread or an async hold does; only its owner may give it back)";
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
      uncount(hold);
      reporting_unlock_failure(protocol_.events(), protocol_.key(), [&] {
        protocol_.watchdog().remove(*hold.lease);
        if (hold.lease->lost) return;
        told_released(hold.acquired, given_back(hold));
      });
    }
  }

  Protocol protocol_;
  const LockOptions options_;
  // The holds as this object knows them; Redis, not this mutex, decides who holds the lock.
  mutable Mutex mutex_;
  Holds holds_ DISTLOCK_GUARDED_BY(mutex_);
  Cancellation cancellation_;
};

}  // namespace distlock::detail
