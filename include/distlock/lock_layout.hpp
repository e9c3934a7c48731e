// Which keys are locks: the one rule, by a key's layout, that inspect(),
// is_locked(), force_unlock() (whose script applies it on the server, in
// the same step as its delete) and the `distlock` tool share.
//
// A lock is
// - a string with an expiry: the lease of Mutex, SimpleMutex, a Redlock
//   master, and of the peers that write the same SET NX PX (redis-py,
//   node-redlock, redsync). A cache entry with a TTL looks the same and
//   counts as a lease: its value cannot tell them apart;
// - a hash with an expiry in Redisson's layout: owner fields
//   "<id>:<thread>" (a write hold's "<id>:<thread>:write") whose values are
//   positive hold counts, at least one of them, and for a read-write lock a
//   field "mode" that is "read" or "write" (ReentrantMutex and RLock,
//   SharedMutex and RReadWriteLock).
// Anything else is not: a key that never expires (every lock's layout sets
// the key and its expiry in one step, so this is application data or a
// peer's bug), a hash with other fields, a list, a set...
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "distlock/reply.hpp"

namespace distlock {

/// Which kind of lock holds a name, as its key's layout shows.
enum class LockKind {
  none,       ///< nothing there: the lock is free
  lease,      ///< a string with an expiry: Mutex, SimpleMutex, one master of a
              ///< Redlock, or another client's SET NX PX lock (redis-py, node-redlock)
  reentrant,  ///< a hash of owner counts: ReentrantMutex (or Redisson's RLock)
  read,       ///< a hash in read mode: SharedMutex read-held
  write,      ///< a hash in write mode: SharedMutex write-held
  other,      ///< a key that is no lock (see the top of lock_layout.hpp)
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

/// A key's layout, as classify_lock() reads it.
struct LockLayout {
  /// The kind of lock the layout shows; other when it is no lock.
  LockKind kind = LockKind::none;
  /// Owners holding it: 1 for a lease, the owner fields of a hash.
  std::size_t holders = 0;
  /// What the key holds, in words: "a string with an expiry", "a hash
  /// without expiry", "a list"; empty when there is no key.
  std::string holds;
};

namespace detail {

/// Why a key is no lock, as force_unlock's script also answers it: "type"
/// (no lock keeps one), "expiry" (none), "mode" (neither read nor write),
/// "field" (`field` is no owner with a hold count), "owners" (none).
inline std::string not_a_lock(std::string_view type, std::string_view why,
                              std::string_view field = {}) {
  std::string holds = type == "list" ? "a list" : "a " + std::string(type);
  if (why == "expiry") return holds + " without expiry";
  if (why == "mode") return holds + " whose 'mode' is neither read nor write";
  if (why == "field") {
    return holds + " whose field '" + std::string(field) + "' is no owner with a hold count";
  }
  if (why == "owners") return holds + " with no owner field";
  return holds;
}

/// Whether `count` is a positive decimal count with no sign or leading 0.
inline bool is_hold_count(std::string_view count) noexcept {
  if (count.empty() || count.size() > 18 || count[0] == '0') return false;
  for (const char c : count) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace detail

/// The layout of a key whose TYPE is `type` and PTTL `pttl`; `fields` is
/// HGETALL's answer for a hash (read only when `type` is "hash"). The
/// rule at the top of this file, which scripts::force_unlock applies too.
inline LockLayout classify_lock(std::string_view type, long long pttl, ReplyView fields) {
  LockLayout layout;
  if (type == "none") return layout;
  layout.kind = LockKind::other;
  if (type != "string" && type != "hash") {
    layout.holds = detail::not_a_lock(type, "type");
    return layout;
  }
  if (pttl < 0) {
    layout.holds = detail::not_a_lock(type, "expiry");
    return layout;
  }
  if (type == "string") {
    layout.kind = LockKind::lease;
    layout.holders = 1;
    layout.holds = "a string with an expiry";
    return layout;
  }
  LockKind kind = LockKind::reentrant;
  std::size_t owners = 0;
  for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
    const std::string_view field = fields[i].str();
    const std::string_view value = fields[i + 1].str();
    if (field == "mode") {
      if (value != "read" && value != "write") {
        layout.holds = detail::not_a_lock(type, "mode");
        return layout;
      }
      kind = value == "read" ? LockKind::read : LockKind::write;
    } else if (field.find(':') == std::string_view::npos || !detail::is_hold_count(value)) {
      layout.holds = detail::not_a_lock(type, "field", field);
      return layout;
    } else {
      ++owners;
    }
  }
  if (owners == 0) {
    layout.holds = detail::not_a_lock(type, "owners");
    return layout;
  }
  layout.kind = kind;
  layout.holders = owners;
  layout.holds = kind == LockKind::reentrant ? "a hash lock" : "a read-write lock hash";
  return layout;
}

}  // namespace distlock
