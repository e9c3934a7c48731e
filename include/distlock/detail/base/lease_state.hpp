// detail::LeaseState, the record a held lease shares with the Watchdog: the
// lock reads whether it was lost and when it runs out, the Watchdog writes
// them. And TokenCheck, what a token-checked release or extend found.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/lease.hpp"

namespace distlock {

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

class Renewer;

/// A held lease as the lock object and the Watchdog share it. The lock
/// reads `lost` and expires(); the Watchdog writes them. `ttl` and
/// `ttl_text` change only while no renewal of the lease is in flight (the
/// holder's extend holds renewals off first), under the Watchdog's mutex.
struct LeaseState {
  using clock = std::chrono::steady_clock;

  /// The part of a lease its holder does not count on (a Redlock's drift
  /// allowance), by the lease's ttl; null for none.
  using Margin = std::chrono::nanoseconds (*)(std::chrono::milliseconds) noexcept;

  LeaseState(std::string lease_key, std::string lease_token, std::chrono::milliseconds lease_ttl,
             clock::time_point sent, LostCallback callback, std::shared_ptr<Renewer> how,
             std::string aux_key = {}, Margin lease_margin = nullptr)
      : key(std::move(lease_key)),
        token(std::move(lease_token)),
        aux(std::move(aux_key)),
        renewer(std::move(how)),
        acquired(sent),
        on_lost(std::move(callback)),
        margin(lease_margin),
        ttl(lease_ttl),
        ttl_text(std::to_string(lease_ttl.count())),
        expires_ns(expiry_after(sent).time_since_epoch().count()) {}

  const std::string key;    ///< the lock's key
  const std::string token;  ///< the token, or the Redisson hash field
  const std::string aux;    ///< a second key a renewal needs (a read hold's timeout stem)
  const std::shared_ptr<Renewer> renewer;
  const clock::time_point acquired;
  const LostCallback on_lost;
  const Margin margin;

  std::chrono::milliseconds ttl;  ///< the lease a renewal asks for
  std::string ttl_text;           ///< ttl in ms, as sent

  /// The Client's event hook (events.hpp), set before the Watchdog has the
  /// lease; null when none is set.
  std::shared_ptr<const std::function<void(const LockEvent&)>> events;

  std::atomic<bool> lost{false};
  std::atomic<clock::rep> expires_ns;  // steady time the lease runs out, as we know it

  /// Runs `watcher` once the Watchdog has reported the lease lost: at once
  /// if it has, else on the Watchdog's thread, after `lost` is set. For an
  /// async holder that cancels its work then (distlock/asio.hpp).
  void watch_loss(std::function<void()> watcher) {
    {
      MutexLock guard(watch_mutex_);
      if (!lost.load(std::memory_order_acquire)) {
        loss_watchers_.push_back(std::move(watcher));
        return;
      }
    }
    watcher();
  }
  /// The Watchdog, once `lost` is set: runs the watchers, each once.
  void tell_loss() noexcept {
    std::vector<std::function<void()>> watchers;
    {
      MutexLock guard(watch_mutex_);
      watchers.swap(loss_watchers_);
    }
    for (std::function<void()>& watcher : watchers) {
      try {
        watcher();
      } catch (...) {  // a watcher must not take the Watchdog down
      }
    }
  }

  clock::time_point expires() const noexcept {
    return clock::time_point(clock::duration(expires_ns.load(std::memory_order_acquire)));
  }
  void set_expires(clock::time_point at) noexcept {
    expires_ns.store(at.time_since_epoch().count(), std::memory_order_release);
  }
  /// When a lease of `ttl` sent at `sent` runs out, as its holder counts.
  clock::time_point expiry_after(clock::time_point sent) const noexcept {
    const auto end = sent + ttl;
    return margin ? end - std::chrono::duration_cast<clock::duration>(margin(ttl)) : end;
  }

 private:
  Mutex watch_mutex_;
  std::vector<std::function<void()>> loss_watchers_ DISTLOCK_GUARDED_BY(watch_mutex_);
};

/// What one renewal found.
enum class Renewed {
  yes,      ///< still ours, lease restarted
  gone,     ///< the key or field is gone or another owner's: the lease is lost
  unknown,  ///< no answer (try again soon)
};

/// How one kind of lease on one backend is renewed, in batches. Leases
/// whose renewers have equal batch keys are handed to one renew() call
/// (on any one of those renewers), so a round over N leases of one kind on
/// one endpoint costs one round trip, not N.
class Renewer {
 public:
  using BatchKey = std::pair<const void*, const void*>;
  virtual ~Renewer() = default;
  /// (kind of lease, backend): equal for leases that can share a batch.
  virtual BatchKey batch_key() const noexcept = 0;
  /// Where the leases are held: the backend's identity (a Client's
  /// options, a cluster slot), for Watchdog::revalidate's callers to pick
  /// the leases held through a node that failed over.
  virtual const void* endpoint() const noexcept { return batch_key().second; }
  /// Renews every lease of `leases` to its ttl, through the lease's own
  /// backend, giving up at `deadline`; sets outcomes[i] for leases[i]
  /// (they arrive as unknown). Never throws.
  virtual void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
                     std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

}  // namespace detail

}  // namespace distlock
