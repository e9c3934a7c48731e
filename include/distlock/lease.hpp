// What a lock holds and what happens to it: Release (the outcome of giving a
// lease back) and LeaseInfo (what the holder is told when a lease is lost).
// The record a held lease shares with the Watchdog is
// detail/base/lease_state.hpp.
#pragma once

#include <functional>
#include <string>

namespace distlock {

/// What release() found.
enum class Release {
  released,   ///< our token was there and is gone now
  expired,    ///< the lease had run out: no key (someone may have held it since)
  not_owner,  ///< another token holds the lock now: ours ran out and was taken
  lost,       ///< the lease was already reported lost; nothing was sent or deleted
  kept,       ///< our token was there and stays until LockOptions::min_hold has passed
              ///< since the grant; its lease now ends then, unrenewed
};

inline const char* to_string(Release r) noexcept {
  switch (r) {
    case Release::released: return "released";
    case Release::expired: return "expired";
    case Release::not_owner: return "not_owner";
    case Release::lost: return "lost";
    case Release::kept: return "kept";
  }
  return "unknown";
}

/// Why a held lease was lost.
enum class LostReason {
  taken,    ///< a renewal found the key gone or holding another token
  expired,  ///< the lease ran out without a successful renewal (server
            ///< unreachable or paused, or the renewal cap was reached)
};

/// What a lost-lease callback is told.
struct LeaseInfo {
  std::string key;    ///< the lock's Redis key
  std::string token;  ///< the token of the lost lease
  /// Why it was lost.
  LostReason reason = LostReason::taken;
  /// The lock's key, as `key`.
  const std::string& name() const noexcept { return key; }
};

/// Called (on the watchdog's thread, with no distlock lock held) when a
/// lease is lost. Exceptions it throws are caught and dropped.
using LostCallback = std::function<void(const LeaseInfo&)>;

struct LockEvent;  // events.hpp

}  // namespace distlock
