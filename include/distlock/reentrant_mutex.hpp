// distlock::ReentrantMutex: an exclusive lock that the thread holding it may
// take again, stored as Redisson's RLock stores it.
//
// The lock is a hash at the lock's key with one field, the owner id
// "<client id>:<thread number>", whose value counts the owner's holds; the
// hash carries the lease as its PTTL. Acquire succeeds when the hash does
// not exist or has the owner's field; release counts one hold down and the
// last one deletes the hash and publishes "0" on
// "redisson_lock__channel:{<key>}". That is exactly what Redisson's RLock
// does, so a Java service on Redisson and a C++ service on distlock exclude
// each other on one name and wake each other's waiters.
//
// Re-entry through the same lock object costs no round trip: the object
// counts the holding thread's depth itself and touches Redis only on the
// first lock and the last unlock. Another thread of the same process is
// another owner and waits as a remote one would. (Two lock objects of one
// thread on one name are one owner to Redis: the second lock counts up the
// same field, as a nested Redisson lock() does.)
//
//   distlock::ReentrantMutex tree{redis, "menu-tree"};
//   void visit(Node& n) {
//     std::lock_guard guard(tree);       // one round trip at the top only
//     for (Node& child : n.children) visit(child);
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/field_hold.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/scripts.hpp"
#include "distlock/watchdog.hpp"

namespace distlock {

/// A re-entrant lease lock in Redisson's RLock layout over any Backend (a
/// Client) and AcquirePolicy. Meets Lockable and TimedLockable. Threads may
/// share one object, as they would a std::recursive_mutex.
template <class Backend = Client, class Policy = DefaultPolicy>
class BasicReentrantMutex {
 public:
  using clock = std::chrono::steady_clock;

  /// Validates name and options (InvalidArgument); contacts no server.
  BasicReentrantMutex(Backend& backend, std::string_view name, LockOptions options = {},
                      Policy policy = {})
      : backend_(backend),
        options_(std::move(options)),
        policy_(std::move(policy)),
        key_(detail::lock_key(options_, name)),
        channel_(detail::redisson_prefixed("redisson_lock__channel", key_)),
        fence_key_(detail::companion_key(key_, "fence")),
        ttl_(options_.ttl().count()),
        hold_id_(detail::ThreadFieldHolds::id(backend.id(), key_, "lock")) {}

  /// Gives back every hold this object still has, of any thread.
  ~BasicReentrantMutex() { give_back_all(); }

  BasicReentrantMutex(const BasicReentrantMutex&) = delete;
  BasicReentrantMutex& operator=(const BasicReentrantMutex&) = delete;

  /// Blocks until the calling thread holds the lock. If it already does,
  /// counts one more hold at once, with no round trip. Otherwise the first
  /// attempt is immediate and later ones follow the release announcement,
  /// the policy's pause or the holder's lease, as Mutex's do.
  /// Throws ConnectionError/TimeoutError/ServerError when Redis fails,
  /// Error(cancelled) after cancel_waits(), Error(too_many_waiters) past the
  /// Client's waiter bound, and LockLostError when the calling thread's hold
  /// was reported lost (unlock it first).
  void lock() {
    if (acquire(clock::time_point::max(), /*wait=*/true) == detail::Outcome::cancelled) {
      throw Error(Errc::cancelled, "lock() of " + key_ + " was cancelled");
    }
  }

  /// One attempt (none when the calling thread already holds the lock);
  /// false if another owner holds it. Throws as lock() does.
  [[nodiscard]] bool try_lock() {
    return acquire(clock::now(), /*wait=*/false) == detail::Outcome::acquired;
  }

  /// Attempts until held or `timeout` has passed on the steady clock; a zero
  /// or negative timeout makes exactly one attempt. False when the time ran
  /// out or cancel_waits() was called; otherwise throws as lock() does.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(detail::deadline_after(timeout), /*wait=*/true) == detail::Outcome::acquired;
  }

  /// Attempts until held or `deadline` (of any clock) has passed; a deadline
  /// already past makes exactly one attempt.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(detail::to_steady_deadline(deadline), /*wait=*/true) ==
           detail::Outcome::acquired;
  }

  /// Gives back one of the calling thread's holds; the last one goes to
  /// Redis. Does nothing if the calling thread holds none (another thread's
  /// hold is never touched). Never throws; use release() to learn what
  /// happened.
  void unlock() noexcept {
    try {
      if (owns_lock()) static_cast<void>(release());
    } catch (...) {
      // The lease expires by itself; unlock() runs in destructors and must not throw.
    }
  }

  /// Gives back one of the calling thread's holds and says what happened.
  /// While holds remain it is released (or lost, once reported) with no
  /// round trip. For the last one: released, expired (the lease had run
  /// out), not_owner (it ran out and another owner took the lock; theirs
  /// is left alone) or lost (the watchdog had reported it; nothing is
  /// sent). Throws NotHeldError if the calling thread holds none, even
  /// while another thread does: only the owner may unlock. Connection
  /// errors throw too; the hold is given back locally either way.
  Release release() {
    std::unique_lock guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) throw NotHeldError(not_held_message());
    if (it->second.depth > 1) {
      --it->second.depth;
      return it->second.lost() ? Release::lost : Release::released;
    }
    const detail::FieldHold last = std::move(it->second);
    holds_.erase(it);
    guard.unlock();
    detail::ThreadFieldHolds::remove(hold_id_);
    if (detail::stop_watching(backend_, last)) return Release::lost;
    auto connection = backend_.borrow();
    return detail::to_release(send_release(*connection, last.field));
  }

  /// Sets the calling thread's lease to `ttl` if it is still its own (with
  /// auto-renewal, later renewals use `ttl` too). Returns false if it was
  /// already gone or reported lost: the thread then holds nothing any more,
  /// at any depth. Throws NotHeldError if the calling thread holds none,
  /// InvalidArgument for a bad ttl.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    const std::chrono::milliseconds lease_ttl =
        detail::checked_milliseconds(ttl, max_ttl, "extend ttl");
    std::string field;
    bool lost_already = false;
    {
      std::lock_guard guard(state_mutex_);
      const auto it = holds_.find(std::this_thread::get_id());
      if (it == holds_.end()) throw NotHeldError(not_held_message());
      lost_already = it->second.lost();
      field = it->second.field;
    }
    if (lost_already) {
      forget();
      return false;
    }
    const clock::time_point sent = clock::now();
    detail::TokenCheck result;
    {
      auto connection = backend_.borrow();
      result = detail::field_check(connection->eval(scripts::hash_field_extend, {key_},
                                                    {field, detail::Decimal(lease_ttl.count())}));
    }
    if (result != detail::TokenCheck::done) {
      forget();
      return false;
    }
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) return false;
    it->second.expires = sent + lease_ttl;
    if (it->second.lease) {
      it->second.lease->set_expires(it->second.expires);
      backend_.watchdog().extended(*it->second.lease, lease_ttl, sent);
    }
    return true;
  }

  /// Whether the calling thread holds the lock through this object, as far
  /// as it knows locally (a held lock can still be lost()).
  bool owns_lock() const noexcept {
    std::lock_guard guard(state_mutex_);
    return holds_.count(std::this_thread::get_id()) != 0;
  }

  /// How many times the calling thread holds the lock through this object
  /// (0 when it does not).
  unsigned hold_count() const noexcept {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    return it == holds_.end() ? 0 : it->second.depth;
  }

  /// True once the watchdog found the calling thread's auto-renewed hold
  /// gone or let it run out; code working under the lock should stop.
  bool lost() const noexcept {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    return it != holds_.end() && it->second.lost();
  }

  /// Time left on the calling thread's lease by the steady clock, from when
  /// the first acquire or the last (auto-)renewal was sent; re-entry does
  /// not lengthen it. Zero when not held or lost.
  std::chrono::milliseconds validity() const noexcept {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) return std::chrono::milliseconds(0);
    return detail::time_left(it->second.lease, it->second.expires);
  }

  /// The fencing token of the calling thread's hold: the counter {key}:fence
  /// rises each time the lock is taken while free, and every nested hold of
  /// one owner shares its value. Throws NotHeldError when not held,
  /// InvalidArgument when fencing is off.
  long long fence() const {
    if (!options_.fencing()) throw InvalidArgument("fencing is off for " + key_);
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) throw NotHeldError(not_held_message());
    return it->second.fence;
  }

  /// Makes every acquire of this object that is waiting now give up:
  /// try_lock_for/until return false, lock() throws Error(cancelled).
  /// Callable from any thread; acquires that start later are unaffected.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) backend_.notifier().wake(channel_);
  }

  /// The calling thread's owner id, the hash field it holds the lock by:
  /// "<client id>:<thread number>".
  std::string owner_id() const { return detail::owner_id(backend_.id()); }

  /// The Redis key of the lock (prefix and name).
  const std::string& key() const noexcept { return key_; }
  /// The channel releases are announced on: redisson_lock__channel:{key}.
  const std::string& channel() const noexcept { return channel_; }
  const LockOptions& options() const noexcept { return options_; }

 private:
  using Holds = std::unordered_map<std::thread::id, detail::FieldHold>;

  detail::Outcome acquire(clock::time_point deadline, bool wait) {
    const std::uint64_t cancel_seen = cancellation_.generation();
    if (reenter()) return detail::Outcome::acquired;
    const std::string owner = detail::owner_id(backend_.id());
    return detail::acquire_loop(
        backend_, options_, policy_, key_, channel_, cancellation_, cancel_seen, deadline, wait,
        [&](clock::time_point sent, clock::time_point reply_deadline) {
          const std::optional<detail::Attempt> result = detail::attempt_or_undo(
              backend_, reply_deadline,
              [&](Connection& connection) { return send_acquire(connection, owner); },
              [&](Connection& connection) {
                if (!detail::ThreadFieldHolds::any(hold_id_)) {
                  static_cast<void>(send_release(connection, owner));
                }
              });
          if (result && result->acquired) adopt(owner, result->fence, sent);
          return result;
        });
  }

  // Counts one more hold if the calling thread already has the lock.
  bool reenter() {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) return false;
    if (it->second.lost()) {
      throw LockLostError(key_ +
                          " was lost while this thread held it; unlock it before locking again");
    }
    ++it->second.depth;
    return true;
  }

  detail::Attempt send_acquire(Connection& connection, const std::string& owner) const {
    detail::Attempt attempt;
    if (options_.fencing()) {
      const Reply reply =
          connection.eval(scripts::reentrant_acquire_fenced, {key_, fence_key_}, {ttl_, owner});
      if (reply.size() != 2) {
        throw ConnectionError(Errc::protocol_error, "bad fenced acquire reply");
      }
      attempt.acquired = reply[0].integer() == 1;
      (attempt.acquired ? attempt.fence : attempt.holder_pttl) = reply[1].integer();
      return attempt;
    }
    const Reply reply = connection.eval(scripts::reentrant_acquire, {key_}, {ttl_, owner});
    attempt.acquired = reply.is_nil();
    if (!attempt.acquired) attempt.holder_pttl = reply.integer();
    return attempt;
  }

  detail::TokenCheck send_release(Connection& connection, const std::string& owner) const {
    return detail::field_check(
        connection.eval(scripts::reentrant_release, {key_, channel_}, {owner, ttl_}));
  }

  void adopt(const std::string& owner, long long fence, clock::time_point sent) {
    const std::string* key = &key_;  // the object outlives its leases' registration
    detail::FieldHold hold;
    hold.depth = 1;
    hold.field = owner;
    hold.fence = fence;
    hold.expires = sent + options_.ttl();
    hold.lease = detail::watch_lease(
        backend_, options_, key_, owner, sent,
        [key](Connection& connection, const detail::LeaseState& lease, std::string_view ttl) {
          return connection.eval(scripts::hash_field_renew, {*key}, {lease.token, ttl}).integer() ==
                         1
                     ? detail::TokenCheck::done
                     : detail::TokenCheck::no_key;
        });
    {
      std::lock_guard guard(state_mutex_);
      holds_[std::this_thread::get_id()] = std::move(hold);
    }
    detail::ThreadFieldHolds::add(hold_id_);
  }

  // Drops the calling thread's hold at every depth (it is gone on the server).
  void forget() {
    std::shared_ptr<detail::LeaseState> lease;
    {
      std::lock_guard guard(state_mutex_);
      const auto it = holds_.find(std::this_thread::get_id());
      if (it == holds_.end()) return;
      lease = std::move(it->second.lease);
      holds_.erase(it);
    }
    detail::ThreadFieldHolds::remove(hold_id_);
    if (lease) backend_.watchdog().remove(*lease);
  }

  std::string not_held_message() const {
    return holds_.empty() ? key_ + " is not held"
                          : key_ + " is held by another thread; only the owner may unlock it";
  }

  void give_back_all() noexcept {
    Holds holds;
    {
      std::lock_guard guard(state_mutex_);
      holds.swap(holds_);
    }
    for (const auto& [thread, hold] : holds) {
      if (thread == std::this_thread::get_id()) detail::ThreadFieldHolds::remove(hold_id_);
      if (detail::stop_watching(backend_, hold)) continue;
      try {
        auto connection = backend_.borrow();
        static_cast<void>(send_release(*connection, hold.field));
      } catch (...) {
        // The lease expires by itself.
      }
    }
  }

  Backend& backend_;
  const LockOptions options_;
  const Policy policy_;
  const std::string key_;
  const std::string channel_;
  const std::string fence_key_;
  const detail::Decimal ttl_;
  const std::size_t hold_id_;

  // Each thread's hold as this object knows it; Redis, not this mutex,
  // decides who holds the lock.
  mutable std::mutex state_mutex_;
  Holds holds_;
  detail::Cancellation cancellation_;
};

/// The re-entrant lock for ordinary use.
using ReentrantMutex = BasicReentrantMutex<>;

}  // namespace distlock
