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
// same field, as a nested Redisson lock() does. Unlike Redisson, a nested
// hold never shortens the lease: its ttl, extend and release only ever
// lengthen what the hash already has.)
//
//   distlock::ReentrantMutex tree{redis, "menu-tree"};
//   void visit(Node& n) {
//     std::lock_guard guard(tree);       // one round trip at the top only
//     for (Node& child : n.children) visit(child);
//   }
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/lease_state.hpp"
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

namespace distlock {

namespace detail {

enum class ReentrantKind { exclusive };

// ReentrantMutex's Protocol: Redisson's RLock scripts over the hash-field core.
class ReentrantProtocol : public OwnerFieldCore<ReentrantKind> {
  using Core = OwnerFieldCore<ReentrantKind>;

 public:
  ReentrantProtocol(const Backend& backend, std::string key, const LockOptions& options)
      : Core(backend, key, redisson_prefixed("redisson_lock__channel", key), options) {}

  std::optional<Attempt> attempt(Kind, const std::string& owner, SteadyClock::time_point deadline,
                                 bool /*waits*/) {
    return this->attempt_field(
        deadline, [&](Connection& connection) { return send_acquire(connection, owner); },
        [&](UndoWriter& write) {
          write.script(scripts::reentrant_release, {this->key_, this->channel_}, {owner});
        });
  }

  TokenCheck release(Kind, const std::string& owner) {
    return this->released(owner, [&](Connection& connection) {
      return field_check(
          connection.eval(scripts::reentrant_release, {this->key_, this->channel_}, {owner}));
    });
  }

  // The steps on a link (distlock/asio.hpp), for an async owner: the
  // owner id is the attempt's alone, so its undo, written behind it, can
  // take no other hold.
  Link::Ticket send_attempt(Kind, Link& link, const std::string& owner, Link::Sink sink) const {
    if (fencing_) {
      return link.send_script(scripts::reentrant_acquire_fenced, {this->key_, fence_key_},
                              {this->ttl_, owner}, std::move(sink));
    }
    return link.send_script(scripts::reentrant_acquire, {this->key_}, {this->ttl_, owner},
                            std::move(sink));
  }
  // The scripts fail with WRONGTYPE on a key of another type: a
  // ServerError, as the blocking path's (which names the type found).
  Attempt attempt_answer(Kind, const Reply& reply) const {
    Attempt attempt = acquire_answer(reply);
    if (!attempt.acquired) check_expires(this->key_, "hash", attempt.holder);
    return attempt;
  }
  void send_undo(Kind, Link& link, const std::string& owner) const {
    link.undo_eval(scripts::reentrant_release, {this->key_, this->channel_}, {owner});
  }
  Link::Ticket send_release(Kind, Link& link, const std::string& owner, Link::Sink sink) const {
    return link.send_script(scripts::reentrant_release, {this->key_, this->channel_}, {owner},
                            std::move(sink));
  }
  static TokenCheck release_answer(Kind, const Reply& reply) { return field_check(reply); }
  // The undo on a connection of its own, answered (the connector's).
  void undo_on(Kind, Connection& connection, const std::string& owner) const {
    static_cast<void>(
        connection.eval(scripts::reentrant_release, {this->key_, this->channel_}, {owner}));
  }
  // read_holder() on a link: the replies to PTTL and TYPE of the key.
  HolderLease holder_answer(const Reply& pttl, const Reply& type) const {
    return holder_of_type(this->key_, pttl, type, "hash");
  }

 private:
  Attempt send_acquire(Connection& connection, const std::string& owner) const {
    if (fencing_) {
      return acquire_answer(connection.eval(scripts::reentrant_acquire_fenced,
                                            {this->key_, fence_key_}, {this->ttl_, owner}));
    }
    return acquire_answer(
        connection.eval(scripts::reentrant_acquire, {this->key_}, {this->ttl_, owner}));
  }
  Attempt acquire_answer(const Reply& reply) const {
    return Core::acquire_answer(reply, "reentrant acquire");
  }
};

}  // namespace detail

/// A re-entrant lease lock in Redisson's RLock layout on any Backend,
/// waiting by any AcquirePolicy. Meets Lockable and TimedLockable (see
/// detail::ExclusiveLock for each member's contract). Threads may share one
/// object, as they would a std::recursive_mutex: each thread's holds are
/// its own, lock() by the holding thread counts one more hold at once, and
/// only the owner may unlock (release() throws NotHeldError for a thread
/// that holds none, even while another does). lock() throws LockLostError
/// when the calling thread's hold was reported lost (unlock it first).
class ReentrantMutex : public detail::ExclusiveLock<detail::ReentrantProtocol> {
  using Base = detail::ExclusiveLock<detail::ReentrantProtocol>;

 public:
  /// Validates name and options (InvalidArgument); contacts no server.
  DISTLOCK_DECL ReentrantMutex(const Backend& backend, std::string_view name,
                               LockOptions options = {}, AcquirePolicy policy = {});

  /// How many times the calling thread holds the lock through this object
  /// (0 when it does not).
  unsigned hold_count() const noexcept { return this->life_->depth(Base::kind); }

  /// The calling thread's owner id, the hash field it holds the lock by:
  /// "<client id>:<thread number>". Fixed while the thread holds the lock;
  /// a new number after an undo or release whose reply never came (see
  /// detail/lifecycle/field_hold.hpp).
  std::string owner_id() const { return this->life_->protocol().owner(); }

  /// The channel releases are announced on: redisson_lock__channel:{key}.
  const std::string& channel() const noexcept { return this->life_->protocol().channel(); }
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(ReentrantProtocol)
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL ReentrantMutex::ReentrantMutex(const Backend& backend, std::string_view name,
                                             LockOptions options, AcquirePolicy policy)
    : Base(detail::ReentrantProtocol(backend, detail::lock_key(options, name), options), options,
           std::move(policy)) {}
#endif

}  // namespace distlock
