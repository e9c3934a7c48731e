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
// overlapping readers keeps a writer waiting. Unlike Redisson's, one hold
// of an owner never shortens another's lease: an owner's read holds are
// interchangeable in Redis, so a read release drops the shortest of its
// leases, not the newest.
//
//   distlock::SharedMutex catalog{redis, "catalog"};
//   { std::shared_lock read{catalog}; render(); }
//   { std::unique_lock write{catalog}; rebuild(); }
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/lifecycle/field_hold.hpp"
#include "distlock/detail/lifecycle/holder_lease.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"

namespace distlock {

namespace detail {

enum class SharedKind { read, write };

// SharedMutex's Protocol: Redisson's RReadWriteLock scripts over the
// hash-field core, and the upgrade rule.
class SharedProtocol : public HashFieldCore<SharedKind> {
  using Core = HashFieldCore<SharedKind>;

 public:
  using Kind = SharedKind;
  static constexpr Kind exclusive = Kind::write;
  static constexpr Kind shared = Kind::read;
  // Read first: a write release then finds no readers left and frees the
  // lock with one announcement.
  static constexpr bool given_back_first(Kind kind) noexcept { return kind == Kind::read; }
  // A minimum hold keeps the write side only. A read hold keeps no reader
  // out, and the hash's lease is the longest of the readers' own, which
  // read_extend only ever lengthens: kept, it could outlast the minimum.
  static constexpr bool holds_at_least(Kind kind) noexcept { return kind == Kind::write; }

  SharedProtocol(const Backend& backend, std::string key, const LockOptions& options)
      : Core(backend, key, redisson_prefixed("redisson_rwlock", key), no_fencing(options)),
        timeout_stem_(redisson_tagged(this->key_)),
        write_renewer_(make_renewer<FieldRenewer>()),
        read_renewer_(make_renewer<ReadRenewer>()) {}

  std::string id_for(Kind kind) const {
    return kind == Kind::read ? this->owner() : this->owner() + ":write";
  }
  std::string async_id_for(Kind kind) const {
    return kind == Kind::read ? this->async_owner() : this->async_owner() + ":write";
  }

  // Taking the write lock while holding only the read lock can never
  // succeed: our own read hold keeps the writer out.
  template <class DepthOf>
  void before_first(Kind kind, DepthOf&& depth_of) const {
    if (kind == Kind::write && depth_of(Kind::read) > 0) throw upgrade_refused();
  }

  std::optional<Attempt> attempt(Kind kind, const std::string& field,
                                 SteadyClock::time_point deadline, bool /*waits*/) {
    return with_release(kind, field, [&](const Script& undo, Args undo_keys, Args undo_args) {
      return this->attempt_field(
          deadline,
          [&](Connection& connection) {
            return acquire_answer(kind, acquire_on(kind, connection, field));
          },
          [&](UndoWriter& write) { write.script(undo, undo_keys, undo_args); });
    });
  }

  TokenCheck release(Kind kind, const std::string& field) {
    return this->released(field, [&](Connection& connection) {
      return field_check(release_on(kind, connection, field));
    });
  }

  TokenCheck extend(Kind kind, const std::string& field, std::chrono::milliseconds ttl) {
    const Decimal lease(ttl.count());
    return this->extended([&](Connection& connection) {
      if (kind == Kind::read) {
        return field_check(connection.eval(scripts::read_extend, {this->key_, timeout_stem(field)},
                                           {field, lease}));
      }
      return field_check(connection.eval(scripts::hash_field_extend, {this->key_}, {field, lease}));
    });
  }

  std::shared_ptr<LeaseState> watched(Kind kind, const std::string& field,
                                      SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    if (kind == Kind::write) {
      return std::make_shared<LeaseState>(this->key_, field, options.ttl(), sent, options.on_lost(),
                                          write_renewer_);
    }
    return std::make_shared<LeaseState>(this->key_, field, options.ttl(), sent, options.on_lost(),
                                        read_renewer_, timeout_stem(field));
  }

  static std::string describe(Kind kind) { return kind == Kind::read ? "read lock" : "write lock"; }

  // The steps on a link (distlock/asio.hpp), for an async owner: its field
  // is the attempt's alone, so an undo written behind it takes no other
  // hold, and it holds no read lock a write attempt could be refused for.
  Link::Ticket send_attempt(Kind kind, Link& link, const std::string& field,
                            Link::Sink sink) const {
    return with_acquire(kind, field, [&](const Script& script, Args keys, Args args) {
      return link.send_script(script, keys, args, std::move(sink));
    });
  }
  // The scripts fail with WRONGTYPE on a key of another type: a
  // ServerError, as the blocking path's (which names the type found).
  Attempt attempt_answer(Kind kind, const Reply& reply) const {
    Attempt attempt = acquire_answer(kind, reply);
    if (!attempt.acquired) check_expires(this->key_, "hash", attempt.holder);
    return attempt;
  }
  void send_undo(Kind kind, Link& link, const std::string& field) const {
    with_release(kind, field, [&](const Script& script, Args keys, Args args) {
      link.undo_eval(script, keys, args);
    });
  }
  Link::Ticket send_release(Kind kind, Link& link, const std::string& field,
                            Link::Sink sink) const {
    return with_release(kind, field, [&](const Script& script, Args keys, Args args) {
      return link.send_script(script, keys, args, std::move(sink));
    });
  }
  static TokenCheck release_answer(Kind, const Reply& reply) { return field_check(reply); }
  // The undo on a connection of its own, answered (the connector's).
  void undo_on(Kind kind, Connection& connection, const std::string& field) const {
    static_cast<void>(release_on(kind, connection, field));
  }
  // read_holder() on a link: the replies to PTTL and TYPE of the key.
  HolderLease holder_answer(const Reply& pttl, const Reply& type) const {
    return holder_of_type(this->key_, pttl, type, "hash");
  }

 private:
  static const LockOptions& no_fencing(const LockOptions& options) {
    if (options.fencing()) {
      throw InvalidArgument("SharedMutex gives no fencing tokens: readers hold it together");
    }
    return options;
  }

  std::system_error upgrade_refused() const {
    return std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                             this->key_ +
                                 ": this thread holds the read lock; taking the write lock "
                                 "too would wait for itself (unlock_shared() first)");
  }

  // The acquire script of `kind` for `field`, with its keys and arguments,
  // handed to `use`.
  template <class Use>
  auto with_acquire(Kind kind, const std::string& field, Use&& use) const
      -> std::invoke_result_t<Use, const Script&, Args, Args> {
    if (kind == Kind::read) {
      const std::string stem = timeout_stem(field);
      return use(scripts::read_acquire, Args{this->key_, stem},
                 Args{this->ttl_, field, field + ":write"});
    }
    const std::string owner = owner_of(field);
    return use(scripts::write_acquire, Args{this->key_}, Args{this->ttl_, field, owner});
  }
  Reply acquire_on(Kind kind, Connection& connection, const std::string& field) const {
    return with_acquire(kind, field, [&](const Script& script, Args keys, Args args) {
      return connection.eval(script, keys, args);
    });
  }
  // Granted: nil; refused: the holder's PTTL; to a write attempt, a
  // string: the field's owner holds the read lock (an upgrade, refused).
  Attempt acquire_answer(Kind kind, const Reply& reply) const {
    if (kind == Kind::write && reply.is_string()) throw upgrade_refused();
    return granted_on_nil(reply, "shared acquire");
  }

  // The release script of a hold of `kind`, with its keys and arguments,
  // handed to `use`: a read hold drops its shortest lease key; a write
  // hold's field names its owner, whose read leases it keeps.
  template <class Use>
  auto with_release(Kind kind, const std::string& field, Use&& use) const
      -> std::invoke_result_t<Use, const Script&, Args, Args> {
    if (kind == Kind::read) {
      const std::string stem = timeout_stem(field);
      return use(scripts::read_release, Args{this->key_, this->channel_, stem, timeout_stem_},
                 Args{field});
    }
    const std::string owner = owner_of(field);
    const std::string stem = timeout_stem(owner);
    return use(scripts::write_release, Args{this->key_, this->channel_, stem}, Args{field, owner});
  }
  Reply release_on(Kind kind, Connection& connection, const std::string& field) const {
    return with_release(kind, field, [&](const Script& script, Args keys, Args args) {
      return connection.eval(script, keys, args);
    });
  }

  // The owner of a write field "<owner>:write" (the hold's, not the calling
  // thread's: a destructor gives back every thread's holds).
  static std::string owner_of(const std::string& write_field) {
    return write_field.substr(0, write_field.size() - std::string_view(":write").size());
  }

  // "{key}:<owner>:rwlock_timeout": hold n of the owner has its lease in
  // "<stem>:n".
  std::string timeout_stem(const std::string& owner) const {
    return timeout_stem_ + ':' + owner + ":rwlock_timeout";
  }

  const std::string timeout_stem_;  // "{key}", or the key if it has a '{'
  std::shared_ptr<Renewer> write_renewer_;
  std::shared_ptr<Renewer> read_renewer_;
};

}  // namespace detail

/// A read-write lease lock in Redisson's RReadWriteLock layout on any
/// Backend, waiting by any AcquirePolicy. Meets Lockable, TimedLockable and
/// SharedTimedLockable, so std::unique_lock and std::shared_lock work.
/// Threads may share one object, as they would a std::shared_mutex. The
/// exclusive (write) side is detail::ExclusiveLock's; lock() and try_lock*()
/// refuse an upgrade (the calling thread holds only the read lock, here or
/// through another object on the same Client) with
/// std::system_error(resource_deadlock_would_occur). Every LockOptions
/// applies to both kinds of hold except fencing, which it refuses.
class SharedMutex : public detail::ExclusiveLock<detail::SharedProtocol> {
  using Base = detail::ExclusiveLock<detail::SharedProtocol>;
  using Kind = detail::SharedKind;

 public:
  /// The clock the waits keep their deadlines on; a deadline given on
  /// another clock is converted to it.
  using clock = std::chrono::steady_clock;

  /// Validates name and options (InvalidArgument, also for fencing, which
  /// a lock with many holders cannot give); contacts no server.
  DISTLOCK_DECL SharedMutex(const Backend& backend, std::string_view name, LockOptions options = {},
                            AcquirePolicy policy = {});

  /// Blocks until the calling thread holds a read lock: no other owner
  /// holds the write lock. A thread that holds a read lock already counts
  /// one more with no round trip; a thread that holds the write lock gets a
  /// read lock too (then unlock() downgrades). Throws as lock().
  void lock_shared() { lock_as(Kind::read, "lock_shared()"); }

  /// One attempt (none when the calling thread already holds a read lock);
  /// false if another owner holds the write lock.
  [[nodiscard]] bool try_lock_shared() { return try_as(Kind::read); }

  /// As try_lock_for, for a read lock.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return until_as(Kind::read, detail::deadline_after(timeout), "try_lock_shared_for");
  }

  /// As try_lock_until, for a read lock.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_shared_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return until_as(Kind::read, detail::to_steady_deadline(deadline), "try_lock_shared_until");
  }

  /// The read side's std::error_code forms, as try_lock(ec) and its kin.
  [[nodiscard]] bool try_lock_shared(std::error_code& ec) { return try_as(Kind::read, ec); }
  /// As try_lock_shared_for(timeout), with errors in `ec` instead of thrown.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout,
                                         std::error_code& ec) {
    return until_as(Kind::read, detail::deadline_after(timeout), ec);
  }
  /// As try_lock_shared_until(deadline), with errors in `ec` instead of
  /// thrown.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& deadline,
                                           std::error_code& ec) {
    return until_as(Kind::read, detail::to_steady_deadline(deadline), ec);
  }

  /// Gives back one of the calling thread's read holds (the last reader to
  /// leave frees the lock for writers); does nothing if it holds none.
  /// Never throws.
  void unlock_shared() noexcept { unlock_as(Kind::read); }

  /// unlock_shared(), saying what happened: released, expired (a lease of
  /// this owner's read holds had run out), not_owner, or lost. Throws
  /// NotHeldError if the calling thread holds no read lock.
  Release release_shared() { return release_as(Kind::read); }

  /// As extend(), for the calling thread's read hold.
  template <class Rep, class Period>
  [[nodiscard]] bool extend_shared(const std::chrono::duration<Rep, Period>& ttl) {
    return extend_as(Kind::read, detail::checked_milliseconds(ttl, max_ttl, "extend ttl"));
  }

  /// Whether the calling thread holds a read lock through this object.
  bool owns_lock_shared() const noexcept { return this->life_->owns(Kind::read); }
  /// The calling thread's write holds through this object.
  unsigned hold_count() const noexcept { return this->life_->depth(Kind::write); }
  /// The calling thread's read holds through this object.
  unsigned shared_hold_count() const noexcept { return this->life_->depth(Kind::read); }
  /// Time left on the calling thread's read hold; zero when none or lost.
  std::chrono::milliseconds validity_shared() const noexcept {
    return this->life_->validity(Kind::read);
  }
  /// replicas_acknowledged() of the calling thread's read hold.
  std::optional<int> replicas_acknowledged_shared() const {
    return this->life_->replicas(Kind::read);
  }

  /// True once the watchdog found one of the calling thread's auto-renewed
  /// holds (read or write) gone or let it run out.
  bool lost() const noexcept {
    return this->life_->lost(Kind::read) || this->life_->lost(Kind::write);
  }

  /// The calling thread's owner id: its read field, and with ":write" its
  /// write field. Fixed while the thread holds the lock; a new number after
  /// an undo or release whose reply never came (see detail/lifecycle/field_hold.hpp).
  std::string owner_id() const { return this->life_->protocol().owner(); }
  /// The channel releases are announced on: redisson_rwlock:{key}.
  const std::string& channel() const noexcept { return this->life_->protocol().channel(); }
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(SharedProtocol)
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL SharedMutex::SharedMutex(const Backend& backend, std::string_view name,
                                       LockOptions options, AcquirePolicy policy)
    : Base(detail::SharedProtocol(backend, detail::lock_key(options, name), options), options,
           std::move(policy)) {}
#endif

}  // namespace distlock
