// distlock::Redlock: one lock held by a majority of independent Redis
// masters, after the Redlock algorithm. Its options and per-master results
// are in redlock_options.hpp, its quorum steps in detail/redlock/redlock_protocol.hpp;
// waiting, deadlines and the lease record are the Lifecycle's, as for
// every lock type.
//
// One master replicates asynchronously, so a failover can lose a lock it
// granted a moment before. Redlock asks N masters that share nothing and
// holds the lock only while a majority of them hold its token. To acquire
// with lease TTL:
//
//   1. t0 = the steady clock.
//   2. SET <key> <token> NX PX <ttl> on every master at once, each with a
//      per-node timeout far shorter than the TTL.
//   3. elapsed = now - t0; drift = TTL * 0.01 + 2 ms (clocks on different
//      machines run at different rates); validity = TTL - elapsed - drift.
//   4. Held if at least N/2 + 1 masters granted it and validity > 0.
//      Otherwise the release script goes to every master the attempt
//      reached, and a caller willing to wait tries again after the policy's
//      randomised pause, so contenders who split the vote do not split it
//      again in step.
//
// A master that is down, stopped past the per-node timeout or answering
// with an error counts as a "no" (last_attempt() says which and why). When
// the masters that failed outright leave no quorum able to answer, the step
// throws NoQuorumError whatever the deadline; when the missing answers are
// only late, a call with a deadline tries again until it (try_lock() and
// lock() throw NoQuorumError). Release and extend run Mutex's token-checked
// scripts on every master; a renewal or extend that a quorum confirms sets
// the key again (SET NX) on the masters that lost it. The steps go to all
// masters at once, without a thread per master (detail/redlock/fan_out.hpp).
//
// What Redlock does not give:
// - No fencing token: counters on independent masters do not form one
//   rising sequence, so LockOptions::fencing(true) is refused.
// - No renewal unless asked (auto_renew(true)); a renewal that no quorum can
//   confirm is retried until the validity runs out, then the lease is lost.
//   wake_on_release does not apply: a waiter retries at its policy's pace.
// - Safety rests on bounded clock drift and on masters that keep the keys
//   they acknowledged: keep a master restarted without persistence out for
//   the longest TTL, or run it with appendonly yes and appendfsync always.
// - Masters are told apart by endpoint; two names for one server are not
//   detected. A master may be any backend: a ClusterClient is one vote for
//   its whole cluster (its masters fail over together), and a SentinelClient
//   one for its set.
// - An answer that comes after a successful attempt stopped waiting may
//   still set the key; release() removes it if it has landed, or it runs out
//   with its lease. A failed attempt's release is queued right behind it.
//
// Any number of masters is accepted; the quorum is N/2 + 1. N = 1 or 2
// tolerates no failed master, and an even N tolerates no more failures than
// N - 1 masters would, so 3 or 5 are the sensible choices.
//
//   std::vector<distlock::Client*> masters{&a, &b, &c, &d, &e};
//   distlock::Redlock billing{masters, "billing:run", distlock::LockOptions{}.ttl(10s)};
//   if (std::unique_lock lock{billing, 2s}) { ... }   // try_lock_for(2s)
#pragma once

#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/backend.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/redlock/redlock_protocol.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/redlock_options.hpp"

namespace distlock {

/// A lock held by a majority of independent masters, each a Backend (a
/// Client, or a ClusterClient per cluster, or a SentinelClient per group).
/// Meets Lockable and TimedLockable (see detail::ExclusiveLock for each
/// member's contract). Thread-safe as std::mutex is: threads may share one
/// object. Not copyable, not movable.
class Redlock : public detail::ExclusiveLock<detail::RedlockProtocol> {
  using Protocol = detail::RedlockProtocol;
  using Base = detail::ExclusiveLock<Protocol>;

 public:
  /// One Backend per master; the lock keeps the site of its key at each.
  /// Validates at once and contacts no server. Throws InvalidArgument for
  /// no masters, a null one, two on the same server, a bad name, a TTL no
  /// longer than its drift allowance (under 3 ms), or options a Redlock
  /// cannot honour: fencing(true); replicas(); max_hold or on_lost without
  /// auto_renew(true).
  DISTLOCK_DECL Redlock(const std::vector<const Backend*>& masters, std::string_view name,
                        RedlockOptions options = {}, AcquirePolicy policy = {});

  /// The same for a vector of one backend type: std::vector<Client*>.
  template <class Master, class = std::enable_if_t<std::is_base_of_v<Backend, Master>>>
  Redlock(const std::vector<Master*>& masters, std::string_view name, RedlockOptions options = {},
          AcquirePolicy policy = {})
      : Redlock(std::vector<const Backend*>(masters.begin(), masters.end()), name,
                std::move(options), std::move(policy)) {}

  /// The same, for masters given as references: Redlock lock({a, b, c}, "k").
  Redlock(std::initializer_list<std::reference_wrapper<const Backend>> masters,
          std::string_view name, RedlockOptions options = {}, AcquirePolicy policy = {})
      : Redlock(pointers(masters), name, std::move(options), std::move(policy)) {}

  /// As ExclusiveLock::extend, on a quorum: true if a quorum extended the
  /// lease and the new validity (ttl - elapsed - drift) is positive. False
  /// if a majority answered that the key is gone or taken, or the step
  /// outlasted the lease; what is left of it is then released. Throws
  /// NoQuorumError, keeping the lease as it was, when fewer than a quorum
  /// answered at all.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    return life_->extend(Base::kind, Protocol::checked_lease(ttl, "extend ttl"));
  }

  /// The token of the current lock; empty when not held.
  std::string token() const { return life_->id(Base::kind); }

  /// What the masters said to the latest acquire attempt, extend, renewal
  /// or release of this object (a default RedlockAttempt before the first).
  RedlockAttempt last_attempt() const { return life_->protocol().core().last_attempt(); }

  /// The options it was made with.
  const RedlockOptions& options() const noexcept { return life_->protocol().options(); }
  /// Masters needed: N/2 + 1.
  std::size_t quorum() const noexcept { return life_->protocol().core().quorum(); }
  /// The per-node timeout in force (RedlockOptions::node_timeout).
  std::chrono::milliseconds node_timeout() const noexcept {
    return life_->protocol().core().node_timeout();
  }

 private:
  // Renewal is opt-in for a Redlock: the Lifecycle is told exactly whether.
  static LockOptions renewal_as_asked(const RedlockOptions& options) {
    LockOptions plain = options;
    plain.auto_renew(Protocol::renews(options));
    return plain;
  }

  static std::vector<const Backend*> pointers(
      std::initializer_list<std::reference_wrapper<const Backend>> masters) {
    std::vector<const Backend*> out;
    out.reserve(masters.size());
    for (const Backend& master : masters) out.push_back(&master);
    return out;
  }
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(RedlockProtocol)
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL Redlock::Redlock(const std::vector<const Backend*>& masters, std::string_view name,
                               RedlockOptions options, AcquirePolicy policy)
    : Base(Protocol(masters, name, options), renewal_as_asked(options), std::move(policy)) {}
#endif

}  // namespace distlock
