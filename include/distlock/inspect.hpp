// Looking at a lock by its name without holding it: inspect() and
// is_locked() say whether it is held, by which kind of lock and for how
// long; force_unlock() is the administrator's way out of a lock whose
// holder is gone for good (a crashed process with a long lease).
//
// Only locks are treated as locks (lock_layout.hpp): a key without expiry
// or of another layout is reported as kind other, and is_locked() and
// force_unlock() refuse it (NotALockError), deleting nothing.
//
// They read or change what is in Redis at the moment: by the time the
// answer arrives the lock may have changed hands. Use them for dashboards,
// runbooks and tests, never to decide whether to take a lock (that is
// try_lock()).
//
//   if (auto status = distlock::inspect(redis, "jobs:nightly"); status.held) {
//     std::cout << to_string(status.kind) << " for " << status.ttl->count() << " ms\n";
//   }
//   distlock::force_unlock(redis, "jobs:nightly");   // administrative
//
// Each takes any backend a lock takes (Client, ClusterClient,
// SentinelClient): the step goes where a lock of that name would, following
// a cluster's redirects or a Sentinel's master.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/client.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/field_hold.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_layout.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"

namespace distlock {

/// What inspect() found.
struct LockStatus {
  bool held = false;  ///< a lock holds the name (kind is neither none nor other)
  /// Which kind of lock the key's layout shows: none when nothing is there,
  /// other when it is no lock.
  LockKind kind = LockKind::none;
  /// The key's lease left; nullopt when the key has no expiry (then it is
  /// no lock: kind other) or nothing is there.
  std::optional<std::chrono::milliseconds> ttl;
  /// Owners holding it: 1 for a lease, the owner fields of a hash (the
  /// readers of a read-held SharedMutex), 0 when free or no lock.
  std::size_t holders = 0;
  /// What the key holds, in words ("a hash lock", "a string without
  /// expiry"); empty when there is no key.
  std::string holds;
};

/// The state of the lock `name` (with options' key_prefix) on `backend`'s
/// server, in one round trip (one MULTI/EXEC of reads; no script, so any
/// user allowed TYPE, PTTL and HGETALL may call it). A key that is no lock
/// (lock_layout.hpp: no expiry, a hash of other fields, a list...) is kind
/// other, not held, with `holds` saying what is there. For a Redlock, ask
/// each master.
DISTLOCK_DECL LockStatus inspect(const Backend& backend, std::string_view name,
                                 const LockOptions& options = {});

/// Whether a lock holds `name` now. A key that is no lock is neither held
/// nor free: NotALockError, naming the key and what it holds.
DISTLOCK_DECL bool is_locked(const Backend& backend, std::string_view name,
                             const LockOptions& options = {});

/// Administrative: removes the lock `name` (with options' key_prefix)
/// whatever holds it, in one atomic step that also checks it is a lock
/// (lock_layout.hpp): a lease's string key, or a ReentrantMutex's or
/// SharedMutex's hash with every reader's timeout key. Announces the
/// release on every lock type's channel (and to a FairMutex's front
/// waiter on its own), so waiters of any kind look again at once. The fencing counter is kept: the
/// next holder's fence is still higher than every earlier one. A key that is no lock (no expiry, a
/// hash of other fields, another type) is left alone: NotALockError, naming the key and what it
/// holds ("key 'user:42' is a string without expiry, not a lock; not deleted"). Returns whether a
/// lock was there.
///
/// The holder is not told until it next touches Redis: its renewal finds
/// the lease gone (lost(), on_lost), its release() answers expired, and
/// meanwhile it may still be working under the lock it thinks it holds.
/// Break a lock only when its holder is known dead or stuck; for a Redlock,
/// on each master. Needs EVALSHA/EVAL (the step is one script).
DISTLOCK_DECL bool force_unlock(const Backend& backend, std::string_view name,
                                const LockOptions& options = {});

#if DISTLOCK_DEFINES_BODIES

namespace detail {

/// The key's TYPE and its layout, in one round trip of reads.
struct KeyFound {
  std::string type;
  long long pttl = -2;
  LockLayout layout;
};

/// Where a lock on `key` lives reads the transaction. On a cluster a MOVED
/// is answered to the first queued read, which route() follows; after an
/// ASK, the ASKING sent before MULTI lasts the whole transaction.
inline KeyFound read_layout(const Backend& backend, const std::string& key) {
  return on_site(*backend.site_for(key), no_deadline, [&](Connection& connection) {
    connection.append("MULTI");
    connection.append("TYPE", key);
    connection.append("PTTL", key);
    connection.append("HGETALL", key);  // WRONGTYPE for a key that is no hash: not read then
    connection.append("EXEC");
    for (int queued = 0; queued < 4; ++queued) connection.read_reply().throw_if_error();
    const Reply& answers = connection.read_reply().throw_if_error();
    if (answers.size() != 3) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
    KeyFound found;
    found.type = std::string(answers[0].str());
    found.pttl = answers[1].integer();
    found.layout = classify_lock(found.type, found.pttl, answers[2]);
    return found;
  });
}

}  // namespace detail

DISTLOCK_DECL LockStatus inspect(const Backend& backend, std::string_view name,
                                 const LockOptions& options) {
  detail::KeyFound found = detail::read_layout(backend, detail::lock_key(options, name));
  LockStatus status;
  status.kind = found.layout.kind;
  status.held = status.kind != LockKind::none && status.kind != LockKind::other;
  if (found.pttl >= 0) status.ttl = std::chrono::milliseconds(found.pttl);
  status.holders = found.layout.holders;
  status.holds = std::move(found.layout.holds);
  return status;
}

DISTLOCK_DECL bool is_locked(const Backend& backend, std::string_view name,
                             const LockOptions& options) {
  const std::string key = detail::lock_key(options, name);
  const detail::KeyFound found = detail::read_layout(backend, key);
  if (found.layout.kind == LockKind::other) {
    throw NotALockError(key, found.type, found.layout.holds, "neither held nor free");
  }
  return found.layout.kind != LockKind::none;
}

DISTLOCK_DECL bool force_unlock(const Backend& backend, std::string_view name,
                                const LockOptions& options) {
  const std::string key = detail::lock_key(options, name);
  const std::string lease_channel = detail::companion_key(key, "released");
  const std::string reentrant_channel = detail::redisson_prefixed("redisson_lock__channel", key);
  const std::string shared_channel = detail::redisson_prefixed("redisson_rwlock", key);
  const std::string stem = detail::redisson_tagged(key);
  const std::string fair_queue = detail::redisson_prefixed("redisson_lock_queue", key);
  const Reply reply =
      detail::on_site(*backend.site_for(key), detail::no_deadline, [&](Connection& connection) {
        return connection.eval(
            scripts::force_unlock,
            {key, lease_channel, reentrant_channel, shared_channel, stem, fair_queue}, {});
      });
  if (reply.size() == 3) {
    const std::string type(reply[0].str());
    throw NotALockError(key, type, detail::not_a_lock(type, reply[1].str(), reply[2].str()),
                        "not deleted");
  }
  return reply.integer() == 1;
}

#endif

}  // namespace distlock
