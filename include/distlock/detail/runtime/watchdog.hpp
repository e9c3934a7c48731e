// Watchdog: keeps held leases alive while their holders work, and tells a
// holder at once when its lease is gone.
//
// One per Client, started on first use: one thread, waiting on a condition
// variable, never spinning. It knows nothing of any lock's protocol: each
// lease comes with a Renewer (lease.hpp) that renews leases of its kind
// through the lease's own backend. Leases fall due about every TTL/3; those
// due together and sharing a batch key go to one renew() call, so a round
// over N leases of one kind costs one round trip. A lease is lost when a
// renewal finds it gone, or when its validity (from the last confirmed
// renewal, on the steady clock) reaches zero unrenewed: server unreachable,
// paused, or the renewal cap reached. Lost leases are never re-acquired;
// their holder's callback runs on this thread with no internal lock held.
//
// Ordering with the holder: remove() (before a release is sent) and
// hold_off() (around an extend) wait for a renewal of that lease that is in
// flight and keep new ones from starting, so no renewal of a released lease
// is ever sent, and no renewal sent before an extend can land after it and
// cut the lease back. Renewal scripts only ever lengthen a lease, so a
// renewal whose reply was lost and that lands late cannot shorten it either.
// The wait is for one round at most (a command timeout, against a silent
// server): new ones are kept from starting first.
//
// The thread keeps its state alive itself: a Watchdog destroyed from its own
// thread (an on_lost callback dropping the last Client) detaches instead of
// joining, and the thread ends after the callback returns.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/runtime/renewal_round.hpp"
#include "distlock/detail/runtime/renewal_schedule.hpp"
#include "distlock/events.hpp"

namespace distlock {

/// Renews the leases of one Client. Thread-safe.
class Watchdog {
 public:
  using clock = std::chrono::steady_clock;

  /// Most leases one batched renewal call (one script call, or one
  /// transaction) carries; a round sends all its calls in one pipeline.
  static constexpr std::size_t batch_size = 100;
  /// The longest the thread sleeps without looking at its leases.
  static constexpr std::chrono::seconds idle_look{1};

  Watchdog() : state_(std::make_shared<State>()) {
    thread_ = std::thread([state = state_] { run(*state); });
    detail::MutexLock lock(state_->mutex);
    state_->spare.reserve(State::max_spare);  // remove() is noexcept: it never grows it
  }

  ~Watchdog() {
    {
      detail::MutexLock lock(state_->mutex);
      state_->stopping = true;
    }
    state_->changed.notify_all();
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();  // we are inside a callback; the thread ends after it
    } else {
      thread_.join();
    }
  }

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Starts renewing `lease` with its renewer until remove(); none after
  /// `hold_until` (clock::time_point::max() for no cap). With `renew`
  /// false (a lease of fixed ttl) it is only kept for revalidate(): never
  /// renewed on a schedule, never reported lost for running out.
  void add(std::shared_ptr<detail::LeaseState> lease, clock::time_point hold_until,
           bool renew = true);

  /// Stops renewing `lease`; waits for a renewal of it that is in flight.
  /// No renewal of it is sent afterwards.
  void remove(const detail::LeaseState& lease) noexcept;
  /// remove(), for a caller that may not wait (an event loop's): false,
  /// with nothing done, while a renewal of `lease` is in flight.
  bool try_remove(const detail::LeaseState& lease) noexcept;

  struct State;

  /// Keeps renewals of one lease off while its holder extends it: made by
  /// hold_off(), which waits for a renewal in flight; extended() records
  /// the new lease; the destructor lets renewals go on.
  class HoldOff {
   public:
    HoldOff(HoldOff&& other) noexcept
        : state_(std::move(other.state_)), lease_(std::exchange(other.lease_, nullptr)) {}
    HoldOff& operator=(HoldOff&&) = delete;
    ~HoldOff() { release(); }
    /// The holder set the lease to `ttl` at `sent`: renew with it from now on.
    void extended(std::chrono::milliseconds ttl, clock::time_point sent);

   private:
    friend class Watchdog;
    HoldOff(std::shared_ptr<State> state, const detail::LeaseState* lease)
        : state_(std::move(state)), lease_(lease) {}
    void release() noexcept;
    std::shared_ptr<State> state_;
    const detail::LeaseState* lease_;
  };
  HoldOff hold_off(const detail::LeaseState& lease);

  /// Runs one renewal round over every lease now and returns when it is
  /// done. From the watchdog's own thread (an on_lost callback) it only
  /// asks for the round and returns.
  void renew_all_now();

  /// Asks for a renewal round over every lease now and returns at once:
  /// how a backend that learned of a new master (or of a restarted server)
  /// has every lease revalidated there. A lease whose key still holds its
  /// token is renewed (its validity counted afresh from the round); one
  /// whose key is gone or another's is reported lost (LostReason::taken),
  /// by the same path as any renewal that finds it so.
  void revalidate() {
    revalidate([](const detail::LeaseState&) { return true; });
  }

  /// Re-reads at once, in the next round, every lease `through(lease)`
  /// picks (those held through a node that failed over, say): one whose
  /// key still holds its token is renewed and its validity counted from
  /// that round; one that is gone is reported lost (lost(), on_lost), as
  /// any renewal would. `through` is called under the Watchdog's mutex:
  /// it must only look at the lease. Does not wait for the round, so it
  /// may be called from any thread, the Watchdog's own included.
  template <class Through>
  void revalidate(Through&& through);

  /// Whether any lease is held: renewed, or of fixed ttl.
  bool holding() const {
    detail::MutexLock lock(state_->mutex);
    return !state_->entries.empty();
  }

  /// Leases being renewed (those of fixed ttl, kept only for
  /// revalidate(), do not count).
  std::size_t size() const {
    detail::MutexLock lock(state_->mutex);
    return static_cast<std::size_t>(
        std::count_if(state_->entries.begin(), state_->entries.end(),
                      [](const auto& entry) { return !entry.second.fixed; }));
  }

 private:
  // When each lease falls due, and why: detail/runtime/renewal_schedule.hpp.
  using Entry = detail::RenewalEntry;

 public:
  /// Shared by the Watchdog and its thread (see the top of this file).
  struct State {
    detail::Mutex mutex;
    std::condition_variable changed;     // wakes the thread
    std::condition_variable round_done;  // wakes remove(), hold_off(), renew_all_now()
    using Entries = detail::RenewalEntries;
    Entries entries DISTLOCK_GUARDED_BY(mutex);
    // Nodes of leases removed lately, for add() to reuse: a lock that is
    // taken and given back over and over allocates no node per cycle.
    std::vector<Entries::node_type> spare DISTLOCK_GUARDED_BY(mutex);
    static constexpr std::size_t max_spare = 16;
    // Leases added or rescheduled: the thread recomputes its wake-up.
    std::uint64_t changes DISTLOCK_GUARDED_BY(mutex) = 0;
    // When the thread wakes next, unless notified.
    clock::time_point planned_wake DISTLOCK_GUARDED_BY(mutex){};
    std::uint64_t forced_rounds DISTLOCK_GUARDED_BY(mutex) = 0;  // rounds run for renew_all_now()
    bool force_round DISTLOCK_GUARDED_BY(mutex) = false;
    bool stopping DISTLOCK_GUARDED_BY(mutex) = false;

    // Keeps an entry taken out for reuse, its lease record dropped now.
    void drop(Entries::node_type node) DISTLOCK_REQUIRES(mutex) {
      if (spare.size() >= max_spare) return;
      node.mapped() = Entry{};
      spare.push_back(std::move(node));
    }

    // Waits until `lease` has no renewal in flight; false if it is not registered.
    bool settle(detail::MutexLock& lock, const detail::LeaseState* lease) DISTLOCK_REQUIRES(mutex) {
      lock.wait(round_done, [&]() DISTLOCK_REQUIRES(mutex) {
        const auto it = entries.find(lease);
        return it == entries.end() || !it->second.in_flight;
      });
      return entries.count(lease) != 0;
    }
  };

 private:
  using Told = std::vector<std::pair<std::shared_ptr<detail::LeaseState>, LockEventType>>;
  using Lost = std::vector<std::pair<std::shared_ptr<detail::LeaseState>, LostReason>>;
  static void run(State& state);
  // Sends the round's events and calls the lost leases' on_lost, then
  // drops both lists' lease records.
  static void tell(Told& told, Lost& lost) noexcept;

  std::shared_ptr<State> state_;
  std::thread thread_;
};

inline void Watchdog::add(std::shared_ptr<detail::LeaseState> lease, clock::time_point hold_until,
                          bool renew) {
  bool sooner;
  {
    detail::MutexLock lock(state_->mutex);
    Entry entry = detail::first_entry(*lease, hold_until, renew);
    // Waking the thread costs a system call and a context switch, as much as
    // the rest of a lock's client-side work: only when it would otherwise
    // sleep past this lease's first renewal.
    sooner = entry.next_renewal < state_->planned_wake;
    const detail::LeaseState* key = lease.get();
    entry.lease = std::move(lease);
    if (state_->spare.empty()) {
      state_->entries[key] = std::move(entry);
    } else {
      State::Entries::node_type node = std::move(state_->spare.back());
      state_->spare.pop_back();
      node.key() = key;
      node.mapped() = std::move(entry);
      // A key is a live lease's address, which no entry has yet.
      state_->entries.insert(std::move(node));
    }
    if (sooner) ++state_->changes;
  }
  if (sooner) state_->changed.notify_all();
}

inline void Watchdog::remove(const detail::LeaseState& lease) noexcept {
  detail::MutexLock lock(state_->mutex);
  // Held off first, so that no round after the one in flight takes it: a
  // renewal that failed after waiting out its timeout is retried at once,
  // and the wait would otherwise last as long as the lease (a silent
  // server).
  const auto found = state_->entries.find(&lease);
  if (found != state_->entries.end()) ++found->second.held_off;
  // Looked up again after the wait: the thread may have dropped the entry
  // (lost) meanwhile.
  if (!state_->settle(lock, &lease)) return;
  state_->drop(state_->entries.extract(&lease));
}

inline bool Watchdog::try_remove(const detail::LeaseState& lease) noexcept {
  detail::MutexLock lock(state_->mutex);
  const auto found = state_->entries.find(&lease);
  if (found == state_->entries.end()) return true;  // reported lost: nothing is renewed
  if (found->second.in_flight) return false;
  state_->drop(state_->entries.extract(found));
  return true;
}

inline Watchdog::HoldOff Watchdog::hold_off(const detail::LeaseState& lease) {
  detail::MutexLock lock(state_->mutex);
  if (!state_->settle(lock, &lease)) return HoldOff(nullptr, nullptr);
  ++state_->entries.at(&lease).held_off;
  return HoldOff(state_, &lease);
}

inline void Watchdog::HoldOff::extended(std::chrono::milliseconds ttl, clock::time_point sent) {
  if (!state_) return;
  {
    detail::MutexLock lock(state_->mutex);
    const auto it = state_->entries.find(lease_);
    if (it == state_->entries.end()) return;
    detail::extended(it->second, ttl, sent);
    ++state_->changes;
  }
  state_->changed.notify_all();
}

inline void Watchdog::HoldOff::release() noexcept {
  if (!state_) return;
  {
    detail::MutexLock lock(state_->mutex);
    const auto it = state_->entries.find(lease_);
    if (it != state_->entries.end()) --it->second.held_off;
    ++state_->changes;
  }
  state_->changed.notify_all();
  state_.reset();
}

inline void Watchdog::renew_all_now() {
  detail::MutexLock lock(state_->mutex);
  state_->force_round = true;
  const std::uint64_t target = state_->forced_rounds + 1;
  state_->changed.notify_all();
  if (std::this_thread::get_id() == thread_.get_id()) return;  // would wait for itself
  lock.wait(state_->round_done, [&]() DISTLOCK_REQUIRES(state_->mutex) {
    return state_->forced_rounds >= target || state_->stopping;
  });
}

template <class Through>
void Watchdog::revalidate(Through&& through) {
  bool any = false;
  {
    detail::MutexLock lock(state_->mutex);
    const clock::time_point now = clock::now();
    for (auto& [key, entry] : state_->entries) {
      if (entry.lease->lost || !through(*entry.lease)) continue;
      // One in flight may be asking the old node: another round follows.
      if (entry.in_flight) state_->force_round = true;
      entry.next_renewal = std::min(entry.next_renewal, now);
      any = true;
    }
    if (any) ++state_->changes;
  }
  if (any) state_->changed.notify_all();
}

inline void Watchdog::run(State& state) {
  detail::MutexLock lock(state.mutex);
  std::vector<Entry*> work;
  std::vector<detail::LeaseState*> leases;
  std::vector<detail::Renewed> outcomes;
  // Renewal events for leases whose Client has a hook (events.hpp), told
  // with no lock held; stays empty, and allocates nothing, without hooks.
  Told told;
  while (!state.stopping) {
    // Sleep until the next renewal or expiry falls due. With nothing due it
    // still looks once a second, so a lease added with a long TTL need not
    // wake it (see add()).
    const clock::time_point wake = detail::next_wake(state.entries, clock::now() + idle_look);
    state.planned_wake = wake;
    const std::uint64_t seen = state.changes;
    lock.wait_until(state.changed, wake, [&]() DISTLOCK_REQUIRES(state.mutex) {
      return state.stopping || state.force_round || state.changes != seen;
    });
    if (state.stopping) break;

    const clock::time_point now = clock::now();
    const bool all = std::exchange(state.force_round, false);
    detail::take_due(state.entries, now, all, work);

    const clock::time_point sent = clock::now();
    if (!work.empty()) {
      leases.clear();
      for (const Entry* entry : work) leases.push_back(entry->lease.get());
      lock.unlock();
      detail::renew_by_kind(leases, outcomes);  // all in flight: none changes meanwhile
      lock.lock();
    }

    Lost lost;
    const clock::time_point after = clock::now();
    for (std::size_t i = 0; i < work.size(); ++i) {
      Entry& entry = *work[i];
      entry.in_flight = false;
      if (outcomes[i] == detail::Renewed::gone) {
        lost.emplace_back(entry.lease, LostReason::taken);
        continue;
      }
      const bool renewed = outcomes[i] == detail::Renewed::yes;
      if (entry.lease->events && !entry.fixed) {
        told.emplace_back(entry.lease,
                          renewed ? LockEventType::renewed : LockEventType::renewal_failed);
      }
      detail::reschedule(entry, renewed, sent, after);
    }
    for (const auto& [key, entry] : state.entries) {
      if (entry.held_off || entry.fixed || entry.lease->expires() > after) continue;
      const auto& lease = entry.lease;
      if (std::none_of(lost.begin(), lost.end(), [&](const auto& l) { return l.first == lease; })) {
        lost.emplace_back(lease, LostReason::expired);
      }
    }
    for (const auto& [lease, reason] : lost) {
      lease->lost = true;
      state.entries.erase(lease.get());
    }
    if (all) ++state.forced_rounds;
    state.round_done.notify_all();

    if (!lost.empty() || !told.empty()) {
      lock.unlock();
      tell(told, lost);  // may drop the last owner of a Client: with no lock held
      lock.lock();
    }
  }
  state.round_done.notify_all();
}

inline void Watchdog::tell(Told& told, Lost& lost) noexcept {
  for (const auto& [lease, type] : told) detail::emit_about(lease->events, type, lease->key);
  told.clear();
  for (const auto& [lease, reason] : lost) {
    detail::emit_about(lease->events, LockEventType::lost, lease->key, reason);
    lease->tell_loss();
    if (!lease->on_lost) continue;
    try {
      lease->on_lost(LeaseInfo{lease->key, lease->token, reason});
    } catch (...) {
      // The holder's callback must not take the watchdog down.
    }
  }
  lost.clear();
}

}  // namespace distlock
