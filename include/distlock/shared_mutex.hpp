// distlock::SharedMutex: a read-write lock, stored as Redisson's
// RReadWriteLock stores it.
//
// One hash at the lock's key: field "mode" is "read" or "write"; a reader's
// field "<client id>:<thread number>" counts its read holds; a writer's
// field "<client id>:<thread number>:write" counts its write holds. Each
// read hold n of an owner also has a key of its own,
// "{<key>}:<owner>:rwlock_timeout:<n>", carrying that hold's lease, and the
// hash lives as long as the longest live one: a reader that crashed keeps
// writers out only until its own lease ends. A write hold's lease is the
// hash's PTTL. Releases are published on "redisson_rwlock:{<key>}": "0" when
// the last reader leaves, "1" when a writer does (every waiter looks again).
// A Java service on Redisson's RReadWriteLock and a C++ service on distlock
// share one lock by name.
//
// Readers share; a writer excludes readers and other writers. Both kinds
// are re-entrant per thread, counted locally: only a thread's first hold of
// a kind and its last release touch Redis. A thread holding the write lock
// may take the read lock too and then unlock the write lock: a downgrade,
// with no moment at which the data is unlocked. The reverse, taking the
// write lock while holding only the read lock, can never succeed (our own
// read hold keeps the writer out; Redisson waits forever here), so lock()
// and try_lock*() refuse it at once with
// std::system_error(std::errc::resource_deadlock_would_occur).
//
// Like Redisson's, the lock does not favour writers: a steady stream of
// overlapping readers keeps a writer waiting.
//
//   distlock::SharedMutex catalog{redis, "catalog"};
//   { std::shared_lock read{catalog}; render(); }
//   { std::unique_lock write{catalog}; rebuild(); }
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
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

/// A read-write lease lock in Redisson's RReadWriteLock layout over any
/// Backend (a Client) and AcquirePolicy. Meets Lockable, TimedLockable and
/// SharedTimedLockable, so std::unique_lock and std::shared_lock work.
/// Threads may share one object, as they would a std::shared_mutex. Every
/// LockOptions applies to both kinds of hold except fencing, which it
/// refuses.
template <class Backend = Client, class Policy = DefaultPolicy>
class BasicSharedMutex {
 public:
  using clock = std::chrono::steady_clock;

  /// Validates name and options (InvalidArgument, also for fencing, which
  /// a lock with many holders cannot give); contacts no server.
  BasicSharedMutex(Backend& backend, std::string_view name, LockOptions options = {},
                   Policy policy = {})
      : backend_(backend),
        options_(checked(std::move(options))),
        policy_(std::move(policy)),
        key_(detail::lock_key(options_, name)),
        channel_(detail::redisson_prefixed("redisson_rwlock", key_)),
        timeout_stem_(detail::redisson_tagged(key_)),
        ttl_(options_.ttl().count()),
        read_id_(detail::ThreadFieldHolds::id(backend.id(), key_, "read")),
        write_id_(detail::ThreadFieldHolds::id(backend.id(), key_, "write")) {}

  /// Gives back every hold this object still has, of any thread.
  ~BasicSharedMutex() { give_back_all(); }

  BasicSharedMutex(const BasicSharedMutex&) = delete;
  BasicSharedMutex& operator=(const BasicSharedMutex&) = delete;

  // Exclusive (write) side.

  /// Blocks until the calling thread holds the write lock: no other owner
  /// holds it in either mode. A thread that holds it already counts one
  /// more hold, with no round trip. Throws
  /// std::system_error(resource_deadlock_would_occur) if the calling thread
  /// holds only the read lock (an upgrade), here or through another object
  /// on the same Client; otherwise throws as ReentrantMutex::lock().
  void lock() { wait_for(Kind::write); }

  /// One attempt (none when the calling thread already holds the write
  /// lock); false if another owner holds the lock. Refuses an upgrade as
  /// lock() does.
  [[nodiscard]] bool try_lock() {
    return acquire(Kind::write, clock::now(), /*wait=*/false) == detail::Outcome::acquired;
  }

  /// Attempts until the write lock is held or `timeout` has passed; zero or
  /// negative: one attempt. False when the time ran out or cancel_waits()
  /// was called.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(Kind::write, detail::deadline_after(timeout), /*wait=*/true) ==
           detail::Outcome::acquired;
  }

  /// Attempts until the write lock is held or `deadline` (of any clock) has
  /// passed; a deadline already past makes exactly one attempt.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(Kind::write, detail::to_steady_deadline(deadline), /*wait=*/true) ==
           detail::Outcome::acquired;
  }

  /// Gives back one of the calling thread's write holds (the last one goes
  /// to Redis and wakes every waiter); does nothing if it holds none.
  /// Never throws.
  void unlock() noexcept {
    try {
      if (owns_lock()) static_cast<void>(release());
    } catch (...) {
      // The lease expires by itself; unlock() runs in destructors and must not throw.
    }
  }

  /// unlock(), saying what happened, as ReentrantMutex::release() does.
  /// Throws NotHeldError if the calling thread holds no write lock.
  Release release() { return give_back(Kind::write); }

  // Shared (read) side.

  /// Blocks until the calling thread holds a read lock: no other owner
  /// holds the write lock. A thread that holds a read lock already, counts
  /// one more with no round trip; a thread that holds the write lock gets
  /// a read lock too (then unlock() downgrades). Throws as lock().
  void lock_shared() { wait_for(Kind::read); }

  /// One attempt (none when the calling thread already holds a read lock);
  /// false if another owner holds the write lock.
  [[nodiscard]] bool try_lock_shared() {
    return acquire(Kind::read, clock::now(), /*wait=*/false) == detail::Outcome::acquired;
  }

  /// As try_lock_for, for a read lock.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(Kind::read, detail::deadline_after(timeout), /*wait=*/true) ==
           detail::Outcome::acquired;
  }

  /// As try_lock_until, for a read lock.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_shared_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(Kind::read, detail::to_steady_deadline(deadline), /*wait=*/true) ==
           detail::Outcome::acquired;
  }

  /// Gives back one of the calling thread's read holds (the last reader to
  /// leave frees the lock for writers); does nothing if it holds none.
  /// Never throws.
  void unlock_shared() noexcept {
    try {
      if (owns_lock_shared()) static_cast<void>(release_shared());
    } catch (...) {
      // As in unlock().
    }
  }

  /// unlock_shared(), saying what happened: released, expired (this hold's
  /// own lease had run out), not_owner, or lost. Throws NotHeldError if the
  /// calling thread holds no read lock.
  Release release_shared() { return give_back(Kind::read); }

  // State of the calling thread.

  /// Whether the calling thread holds the write lock through this object.
  bool owns_lock() const noexcept { return hold_count() > 0; }
  /// Whether the calling thread holds a read lock through this object.
  bool owns_lock_shared() const noexcept { return shared_hold_count() > 0; }
  /// The calling thread's write holds through this object.
  unsigned hold_count() const noexcept { return depth(Kind::write); }
  /// The calling thread's read holds through this object.
  unsigned shared_hold_count() const noexcept { return depth(Kind::read); }

  /// True once the watchdog found one of the calling thread's auto-renewed
  /// holds (read or write) gone or let it run out.
  bool lost() const noexcept {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    return it != holds_.end() && (it->second.read.lost() || it->second.write.lost());
  }

  /// Makes every acquire of this object, read or write, that is waiting now
  /// give up. Callable from any thread.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) backend_.notifier().wake(channel_);
  }

  /// The calling thread's owner id: its read field, and with ":write" its
  /// write field.
  std::string owner_id() const { return detail::owner_id(backend_.id()); }

  /// The Redis key of the lock's hash (prefix and name).
  const std::string& key() const noexcept { return key_; }
  /// The channel releases are announced on: redisson_rwlock:{key}.
  const std::string& channel() const noexcept { return channel_; }
  const LockOptions& options() const noexcept { return options_; }

 private:
  enum class Kind { read, write };

  // One thread's holds through this object.
  struct ThreadHolds {
    detail::FieldHold read;
    detail::FieldHold write;
    detail::FieldHold& of(Kind kind) { return kind == Kind::read ? read : write; }
    const detail::FieldHold& of(Kind kind) const { return kind == Kind::read ? read : write; }
  };
  using Holds = std::unordered_map<std::thread::id, ThreadHolds>;

  static LockOptions checked(LockOptions options) {
    if (options.fencing()) {
      throw InvalidArgument("SharedMutex gives no fencing tokens: readers hold it together");
    }
    return options;
  }

  void wait_for(Kind kind) {
    if (acquire(kind, clock::time_point::max(), /*wait=*/true) == detail::Outcome::cancelled) {
      throw Error(Errc::cancelled, std::string(kind == Kind::read ? "lock_shared()" : "lock()") +
                                       " of " + key_ + " was cancelled");
    }
  }

  detail::Outcome acquire(Kind kind, clock::time_point deadline, bool wait) {
    const std::uint64_t cancel_seen = cancellation_.generation();
    if (reenter(kind)) return detail::Outcome::acquired;
    const std::string owner = detail::owner_id(backend_.id());
    const std::string field = kind == Kind::read ? owner : owner + ":write";
    return detail::acquire_loop(
        backend_, options_, policy_, key_, channel_, cancellation_, cancel_seen, deadline, wait,
        [&](clock::time_point sent, clock::time_point reply_deadline) {
          const std::optional<detail::Attempt> result = detail::attempt_or_undo(
              backend_, reply_deadline,
              [&](Connection& connection) { return send_acquire(connection, kind, owner); },
              [&](Connection& connection) {
                if (!detail::ThreadFieldHolds::any(id_of(kind))) {
                  static_cast<void>(send_release(connection, kind, field));
                }
              });
          if (result && result->acquired) adopt(kind, field, sent);
          return result;
        });
  }

  // Counts one more hold if the calling thread already has one of this
  // kind; refuses an upgrade.
  bool reenter(Kind kind) {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end()) return false;
    detail::FieldHold& hold = it->second.of(kind);
    if (hold.depth == 0) {
      if (kind == Kind::write && it->second.read.depth > 0) throw upgrade_refused();
      return false;
    }
    if (hold.lost()) {
      throw LockLostError(key_ +
                          " was lost while this thread held it; unlock it before locking again");
    }
    ++hold.depth;
    return true;
  }

  std::system_error upgrade_refused() const {
    return std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                             key_ +
                                 ": this thread holds the read lock; taking the write lock "
                                 "too would wait for itself (unlock_shared() first)");
  }

  detail::Attempt send_acquire(Connection& connection, Kind kind, const std::string& owner) const {
    detail::Attempt attempt;
    if (kind == Kind::read) {
      const std::string stem = timeout_stem(owner);
      const Reply reply =
          connection.eval(scripts::read_acquire, {key_, stem}, {ttl_, owner, owner + ":write"});
      attempt.acquired = reply.is_nil();
      if (!attempt.acquired) attempt.holder_pttl = reply.integer();
      return attempt;
    }
    const Reply reply =
        connection.eval(scripts::write_acquire, {key_}, {ttl_, owner + ":write", owner});
    if (reply.is_string()) throw upgrade_refused();  // through another object of this thread
    attempt.acquired = reply.is_nil();
    if (!attempt.acquired) attempt.holder_pttl = reply.integer();
    return attempt;
  }

  detail::TokenCheck send_release(Connection& connection, Kind kind,
                                  const std::string& field) const {
    if (kind == Kind::read) {
      const std::string stem = timeout_stem(field);
      return detail::field_check(
          connection.eval(scripts::read_release, {key_, channel_, stem, timeout_stem_}, {field}));
    }
    return detail::field_check(connection.eval(scripts::write_release, {key_, channel_}, {field}));
  }

  // "{key}:<owner>:rwlock_timeout": hold n of the owner has its lease in
  // "<stem>:n".
  std::string timeout_stem(const std::string& owner) const {
    return timeout_stem_ + ':' + owner + ":rwlock_timeout";
  }

  Watchdog::RenewAlone renewer(Kind kind, const std::string& field) const {
    const std::string* key = &key_;  // the object outlives its leases' registration
    if (kind == Kind::write) {
      return [key](Connection& connection, const detail::LeaseState& lease, std::string_view ttl) {
        return renewed(connection.eval(scripts::hash_field_renew, {*key}, {lease.token, ttl}));
      };
    }
    return [key, stem = timeout_stem(field)](
               Connection& connection, const detail::LeaseState& lease, std::string_view ttl) {
      return renewed(connection.eval(scripts::read_renew, {*key, stem}, {lease.token, ttl}));
    };
  }

  static detail::TokenCheck renewed(const Reply& reply) {
    return reply.integer() == 1 ? detail::TokenCheck::done : detail::TokenCheck::no_key;
  }

  void adopt(Kind kind, const std::string& field, clock::time_point sent) {
    detail::FieldHold hold;
    hold.depth = 1;
    hold.field = field;
    hold.expires = sent + options_.ttl();
    hold.lease = detail::watch_lease(backend_, options_, key_, field, sent, renewer(kind, field));
    {
      std::lock_guard guard(state_mutex_);
      holds_[std::this_thread::get_id()].of(kind) = std::move(hold);
    }
    detail::ThreadFieldHolds::add(id_of(kind));
  }

  Release give_back(Kind kind) {
    std::unique_lock guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    if (it == holds_.end() || it->second.of(kind).depth == 0) {
      throw NotHeldError(key_ + (kind == Kind::read ? ": this thread holds no read lock"
                                                    : ": this thread holds no write lock"));
    }
    detail::FieldHold& hold = it->second.of(kind);
    if (hold.depth > 1) {
      --hold.depth;
      return hold.lost() ? Release::lost : Release::released;
    }
    const detail::FieldHold last = std::exchange(hold, detail::FieldHold{});
    if (it->second.read.depth == 0 && it->second.write.depth == 0) holds_.erase(it);
    guard.unlock();
    detail::ThreadFieldHolds::remove(id_of(kind));
    if (detail::stop_watching(backend_, last)) return Release::lost;
    auto connection = backend_.borrow();
    return detail::to_release(send_release(*connection, kind, last.field));
  }

  unsigned depth(Kind kind) const noexcept {
    std::lock_guard guard(state_mutex_);
    const auto it = holds_.find(std::this_thread::get_id());
    return it == holds_.end() ? 0 : it->second.of(kind).depth;
  }

  std::size_t id_of(Kind kind) const noexcept { return kind == Kind::read ? read_id_ : write_id_; }

  void give_back_all() noexcept {
    Holds holds;
    {
      std::lock_guard guard(state_mutex_);
      holds.swap(holds_);
    }
    for (const auto& [thread, both] : holds) {
      // Read first: a write release then finds no readers left and frees the
      // lock with one announcement.
      for (const Kind kind : {Kind::read, Kind::write}) {
        const detail::FieldHold& hold = both.of(kind);
        if (hold.depth == 0) continue;
        if (thread == std::this_thread::get_id()) detail::ThreadFieldHolds::remove(id_of(kind));
        if (detail::stop_watching(backend_, hold)) continue;
        try {
          auto connection = backend_.borrow();
          static_cast<void>(send_release(*connection, kind, hold.field));
        } catch (...) {
          // The lease expires by itself.
        }
      }
    }
  }

  Backend& backend_;
  const LockOptions options_;
  const Policy policy_;
  const std::string key_;
  const std::string channel_;
  const std::string timeout_stem_;  // "{key}", or the key if it has a '{'
  const detail::Decimal ttl_;
  const std::size_t read_id_;
  const std::size_t write_id_;

  // Each thread's holds as this object knows them; Redis, not this mutex,
  // decides who holds the lock.
  mutable std::mutex state_mutex_;
  Holds holds_;
  detail::Cancellation cancellation_;
};

/// The read-write lock for ordinary use.
using SharedMutex = BasicSharedMutex<>;

}  // namespace distlock
