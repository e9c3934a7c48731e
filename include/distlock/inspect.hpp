// Looking at a lock by its name without holding it: inspect() and
// is_locked() say whether it is held, by which kind of lock and for how
// long; force_unlock() is the administrator's way out of a lock whose
// holder is gone for good (a key set without expiry, a crashed process
// with a long lease).
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
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/client.hpp"
#include "distlock/detail/field_hold.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"
#include "distlock/scripts.hpp"

namespace distlock {

/// Which kind of lock holds a name, as its key's layout shows.
enum class LockKind {
  none,       ///< nothing there: the lock is free
  lease,      ///< a string with a token: Mutex, SimpleMutex, one master of a
              ///< Redlock, or another client's SET NX lock (redis-py, node-redlock)
  reentrant,  ///< a hash of owner counts: ReentrantMutex (or Redisson's RLock)
  read,       ///< a hash in read mode: SharedMutex read-held
  write,      ///< a hash in write mode: SharedMutex write-held
  other,      ///< a key of another type: not a lock (a lock on it fails with WrongTypeError)
};

inline const char* to_string(LockKind kind) noexcept {
  switch (kind) {
    case LockKind::none: return "none";
    case LockKind::lease: return "lease";
    case LockKind::reentrant: return "reentrant";
    case LockKind::read: return "read";
    case LockKind::write: return "write";
    case LockKind::other: return "other";
  }
  return "unknown";
}

/// What inspect() found.
struct LockStatus {
  bool held = false;  ///< a lock holds the name (kind is neither none nor other)
  LockKind kind = LockKind::none;
  /// The holder's lease left; nullopt when the key has no expiry (a holder
  /// that never lets go by itself: see force_unlock) or nothing is there.
  std::optional<std::chrono::milliseconds> ttl;
  /// Owners holding it: 1 for a lease, the owner fields of a hash (the
  /// readers of a read-held SharedMutex), 0 when free.
  std::size_t holders = 0;
};

/// The state of the lock `name` (with options' key_prefix) on `client`'s
/// server, in one round trip (one MULTI/EXEC of reads; no script, so any
/// user allowed TYPE, PTTL, HGET and HLEN may call it). For a Redlock, ask
/// each master.
inline LockStatus inspect(Client& client, std::string_view name, const LockOptions& options = {}) {
  const std::string key = detail::lock_key(options, name);
  auto connection = client.borrow();
  connection->append("MULTI");
  connection->append("TYPE", key);
  connection->append("PTTL", key);
  connection->append("HGET", key, "mode");
  connection->append("HLEN", key);
  connection->append("EXEC");
  for (int queued = 0; queued < 5; ++queued) connection->read_reply().throw_if_error();
  const Reply& answers = connection->read_reply().throw_if_error();
  if (answers.size() != 4) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
  LockStatus status;
  const std::string_view type = answers[0].str();
  const long long pttl = answers[1].integer();
  if (type == "none") return status;
  if (pttl >= 0) status.ttl = std::chrono::milliseconds(pttl);
  if (type == "string") {
    status.kind = LockKind::lease;
    status.holders = 1;
  } else if (type == "hash") {
    const std::string_view mode = answers[2].is_string() ? answers[2].str() : std::string_view();
    status.kind = mode == "read"    ? LockKind::read
                  : mode == "write" ? LockKind::write
                                    : LockKind::reentrant;
    const auto fields = static_cast<std::size_t>(answers[3].integer());
    status.holders = mode.empty() ? fields : fields - 1;
  } else {
    status.kind = LockKind::other;
    return status;
  }
  status.held = true;
  return status;
}

/// Whether a lock holds `name` now (inspect().held).
inline bool is_locked(Client& client, std::string_view name, const LockOptions& options = {}) {
  return inspect(client, name, options).held;
}

/// Administrative: removes the lock `name` (with options' key_prefix)
/// whatever holds it, in one atomic step: a lease's string key, or a
/// ReentrantMutex's or SharedMutex's hash with every reader's timeout key.
/// Announces the release on every lock type's channel, so waiters of any
/// kind look again at once. The fencing counter is kept: the next holder's
/// fence is still higher than every earlier one. A key of another type (not
/// a lock) is left alone: WrongTypeError. Returns whether a lock was there.
///
/// The holder is not told until it next touches Redis: its renewal finds
/// the lease gone (lost(), on_lost), its release() answers expired, and
/// meanwhile it may still be working under the lock it thinks it holds.
/// Break a lock only when its holder is known dead or stuck; for a Redlock,
/// on each master. Needs EVALSHA/EVAL (the step is one script).
inline bool force_unlock(Client& client, std::string_view name, const LockOptions& options = {}) {
  const std::string key = detail::lock_key(options, name);
  const std::string lease_channel = detail::companion_key(key, "released");
  const std::string reentrant_channel = detail::redisson_prefixed("redisson_lock__channel", key);
  const std::string shared_channel = detail::redisson_prefixed("redisson_rwlock", key);
  const std::string stem = detail::redisson_tagged(key);
  const Reply reply = client.eval(
      scripts::force_unlock, {key, lease_channel, reentrant_channel, shared_channel, stem}, {});
  if (reply.is_string()) throw WrongTypeError(key, std::string(reply.str()), "string or hash");
  return reply.integer() == 1;
}

}  // namespace distlock
