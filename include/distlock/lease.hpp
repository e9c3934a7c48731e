// What a lock holds and what happens when it lets go: Release, the outcome of
// giving a lease back.
#pragma once

namespace distlock {

/// What release() found on the server.
enum class Release {
  released,   ///< our token was there and is gone now
  expired,    ///< the lease had run out: no key (someone may have held it since)
  not_owner,  ///< another token holds the lock now: ours ran out and was taken
};

inline const char* to_string(Release r) noexcept {
  switch (r) {
    case Release::released: return "released";
    case Release::expired: return "expired";
    case Release::not_owner: return "not_owner";
  }
  return "unknown";
}

}  // namespace distlock
