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
// A master that is down, stopped past the per-node timeout, or answering
// with an error counts as a "no", and last_attempt() says which and why.
// When fewer than a quorum of masters give any answer at all the step is
// undecidable: if the masters that failed outright (down, refusing, broken
// connection, error reply) leave no quorum able to answer, it throws
// NoQuorumError whatever the deadline; if the missing answers are masters
// slower than the node timeout (a late reply, or a connection, TLS
// handshake and all, not made in time), a call with a deadline tries again
// until it, then returns false, and try_lock() and lock() throw
// NoQuorumError.
//
// Release and extend run Mutex's token-checked scripts on every master;
// extend needs a majority again and recomputes the validity. A renewal or
// extend that a quorum confirms sets the key again (SET NX) on the masters
// that lost it, so a lease does not go on standing on the bare quorum,
// where one slow master more would cost it. The key holds
// exactly SET <key> <token> PX <ttl> on each master, as node-redlock and
// redsync store it.
//
// The commands go to all masters at once without a thread per master: one
// connection is borrowed from each master's Client, the command is written
// to all of them, and then the replies are awaited against one deadline
// (detail/redlock/fan_out.hpp). A step costs about the slowest master's round trip;
// a master that is down refuses the connection at once, and one that is
// stopped costs the per-node timeout once, however many there are.
// Getting the connections is the exception: a Client opens one
// synchronously, so a master whose host drops packets (rather than refusing
// them) costs its Client's connect_timeout, one such master after another,
// whenever a step needs a new connection to it; and a Client whose pool
// stays busy costs its pool_wait_timeout. Give the masters' Clients a
// connect_timeout no longer than the node timeout.
//
// What Redlock does not give:
// - No fencing token. Counters kept on independent masters do not form one
//   rising sequence, so LockOptions::fencing(true) is refused.
// - No renewal unless asked. A Redlock keeps its lease (the 30 s default
//   when no ttl is given) unless it is given auto_renew(true): then the
//   Watchdog of the first master's Client renews it about every ttl/3 with
//   an extend on every master, each through its own Client (a master that
//   is down costs its vote), which needs a quorum like extend() does. A
//   renewal that so many masters refuse (key gone or taken) that no quorum
//   can hold the key loses the lease; one that decides nothing (too few
//   yeses, and silent masters that could still make a quorum either way)
//   is tried again until the validity (ttl minus the drift allowance, from
//   the last quorum renewal) runs out, and then the lease is lost (extend()
//   throws NoQuorumError for such a step and keeps the lease); either way lost() turns true,
//   on_lost is called and release() answers Release::lost, sending nothing. max_hold and on_lost
//   need auto_renew(true). wake_on_release does not apply (a waiter retries
//   at its policy's pace; cancel_waits() ends its wait).
// - Safety rests on bounded clock drift and on masters that keep the keys
//   they acknowledged: a master restarted without persistence forgets its
//   locks, so keep a restarted master out for the longest TTL before it
//   rejoins, or run it with appendonly yes and appendfsync always.
// - Masters are told apart by endpoint (host:port, or socket path); two
//   names for one server ("localhost" and "127.0.0.1") are not detected.
//
// The masters may be ClusterClients of separate clusters, one vote per
// cluster (BasicRedlock<ClusterClient>): each copy is bound to the name's
// slot, so a step goes to the master that owns it in that cluster, and a
// MOVED costs that cluster's vote for the one step and is followed after
// it. Clusters are told apart by their seed lists. The masters of one
// cluster are never separate votes: they fail over together and a
// promoted replica may lack what its master granted. All masters are of
// one Backend type: Clients and ClusterClients do not mix.
// - A master that answers only after a successful attempt stopped waiting
//   for it may still set the key. The key holds our token, so release()
//   removes it if it has landed by then; if not, it runs out with its
//   lease. (A failed attempt queues its release right behind such a SET,
//   so there the late key is taken back as soon as it lands.)
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
  /// cannot honour: fencing(true); max_hold or on_lost without
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
