// What a lock holds and what happens to it: Release (the outcome of giving a
// lease back), LeaseInfo (what the holder is told when a lease is lost), and
// detail::LeaseState, the record a held lease shares with the Watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

namespace distlock {

/// What release() found.
enum class Release {
  released,   ///< our token was there and is gone now
  expired,    ///< the lease had run out: no key (someone may have held it since)
  not_owner,  ///< another token holds the lock now: ours ran out and was taken
  lost,       ///< the lease was already reported lost; nothing was sent or deleted
};

inline const char* to_string(Release r) noexcept {
  switch (r) {
    case Release::released: return "released";
    case Release::expired: return "expired";
    case Release::not_owner: return "not_owner";
    case Release::lost: return "lost";
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
  LostReason reason;
  const std::string& name() const noexcept { return key; }
};

/// Called (on the watchdog's thread, with no distlock lock held) when a
/// lease is lost. Exceptions it throws are caught and dropped.
using LostCallback = std::function<void(const LeaseInfo&)>;

namespace detail {

/// What the server said to a token-checked release or extend.
enum class TokenCheck { done, no_key, other_token };

inline Release to_release(TokenCheck check) noexcept {
  switch (check) {
    case TokenCheck::done: return Release::released;
    case TokenCheck::no_key: return Release::expired;
    case TokenCheck::other_token: return Release::not_owner;
  }
  return Release::not_owner;
}

/// A held lease as the lock object and the Watchdog share it. The lock
/// reads `lost` and `expires_ns`; the Watchdog writes them.
struct LeaseState {
  using clock = std::chrono::steady_clock;

  LeaseState(std::string lease_key, std::string lease_token, std::chrono::milliseconds lease_ttl,
             clock::time_point sent, LostCallback callback)
      : key(std::move(lease_key)),
        token(std::move(lease_token)),
        ttl(lease_ttl),
        acquired(sent),
        on_lost(std::move(callback)),
        expires_ns((sent + lease_ttl).time_since_epoch().count()) {}

  const std::string key;
  const std::string token;
  std::chrono::milliseconds ttl;  // guarded by the Watchdog's mutex once registered
  const clock::time_point acquired;
  const LostCallback on_lost;

  std::atomic<bool> lost{false};
  std::atomic<clock::rep> expires_ns;  // steady time the lease runs out, as we know it

  clock::time_point expires() const noexcept {
    return clock::time_point(clock::duration(expires_ns.load(std::memory_order_acquire)));
  }
  void set_expires(clock::time_point at) noexcept {
    expires_ns.store(at.time_since_epoch().count(), std::memory_order_release);
  }
};

}  // namespace detail
}  // namespace distlock
