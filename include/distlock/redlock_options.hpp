// What a Redlock reports and how it is configured: the per-master results
// of a step (NodeStatus, NodeOutcome, RedlockAttempt), NoQuorumError, the
// drift allowance, and RedlockOptions (LockOptions plus the node timeout).
// The lock itself is in redlock.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/detail/base/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {

/// What one master answered to one step of a Redlock.
enum class NodeStatus {
  ok,           ///< acquire: granted; extend: extended; release: deleted
  other_owner,  ///< another token holds the key (acquire refused, or ours ran out and was taken)
  no_key,       ///< extend or release: our key was gone (it expired, or never landed)
  timed_out,    ///< no reply (or no connection: connect, TLS handshake) within the per-node
                ///< timeout; a command sent may yet be applied
  failed,       ///< no connection, a broken connection, or an error reply
};

inline const char* to_string(NodeStatus status) noexcept {
  switch (status) {
    case NodeStatus::ok: return "ok";
    case NodeStatus::other_owner: return "other_owner";
    case NodeStatus::no_key: return "no_key";
    case NodeStatus::timed_out: return "timed_out";
    case NodeStatus::failed: return "failed";
  }
  return "unknown";
}

/// One master's part in a step.
struct NodeOutcome {
  /// What the master answered.
  NodeStatus status = NodeStatus::failed;
  /// For timed_out and failed: what went wrong, in distlock's category
  /// (connect_failed, io_error, timed_out, server_error, ...).
  std::error_code error;
  /// For timed_out and failed: the error's text, starting with the master's
  /// endpoint, or for a cluster "cluster <seeds> node <host:port>" (never a
  /// token or a password).
  std::string message;
};

/// The steps a Redlock takes on its masters.
enum class RedlockStep { acquire, extend, release };

inline const char* to_string(RedlockStep step) noexcept {
  switch (step) {
    case RedlockStep::acquire: return "acquire";
    case RedlockStep::extend: return "extend";
    case RedlockStep::release: return "release";
  }
  return "unknown";
}

/// What every master said to one acquire attempt, extend or release.
struct RedlockAttempt {
  /// Which step this was.
  RedlockStep step = RedlockStep::acquire;
  /// One per master, in the order the masters were given to the lock.
  std::vector<NodeOutcome> nodes;
  /// Masters needed: N/2 + 1.
  std::size_t quorum = 0;
  /// The steady clock when the step began (t0).
  std::chrono::steady_clock::time_point started{};
  /// From t0 to the last reply (or the per-node timeout).
  std::chrono::nanoseconds elapsed{0};
  /// Acquire and extend: lease - elapsed - drift, negative when the step
  /// took longer than the lease allows. Zero for release.
  std::chrono::nanoseconds validity{0};
  /// Acquire: the lock is held. Extend: the lease was extended. Release: a
  /// quorum deleted our key.
  bool succeeded = false;

  /// How many masters answered with `status`.
  std::size_t count(NodeStatus status) const noexcept {
    return static_cast<std::size_t>(std::count_if(
        nodes.begin(), nodes.end(), [status](const NodeOutcome& n) { return n.status == status; }));
  }
  /// Masters that answered ok.
  std::size_t ok() const noexcept { return count(NodeStatus::ok); }
  /// Masters that gave a definite answer: ok, other_owner or no_key.
  std::size_t answered() const noexcept { return ok() + refused(); }
  /// Masters that answered that our token is not there: other_owner or no_key.
  std::size_t refused() const noexcept {
    return count(NodeStatus::other_owner) + count(NodeStatus::no_key);
  }
};

/// Too few masters gave a definite answer for a Redlock step to be decided:
/// a majority was down, stopped, or answered with errors, or (extend, and
/// the watchdog's renewals) the silent masters could still make either
/// side a quorum. attempt() holds what each master said.
class NoQuorumError : public Error {
 public:
  /// Errc::no_quorum; `attempt` is what each master said to the step.
  NoQuorumError(const std::string& what, RedlockAttempt attempt)
      : Error(Errc::no_quorum, what),
        attempt_(std::make_shared<const RedlockAttempt>(std::move(attempt))) {}
  /// What each master said to the step that could not be decided.
  const RedlockAttempt& attempt() const noexcept { return *attempt_; }

 private:
  // Shared, so that copying the exception cannot throw.
  std::shared_ptr<const RedlockAttempt> attempt_;
};

/// The safety margin Redlock subtracts for clock drift between machines:
/// ttl * 0.01 + 2 ms.
inline std::chrono::nanoseconds redlock_drift(std::chrono::milliseconds ttl) noexcept {
  return std::chrono::nanoseconds(ttl) / 100 + std::chrono::milliseconds(2);
}

/// LockOptions, plus how long a Redlock waits for each master.
class RedlockOptions : public LockOptions {
 public:
  RedlockOptions() = default;
  /// Takes every LockOptions setting; the node timeout stays automatic.
  RedlockOptions(LockOptions options) : LockOptions(std::move(options)) {}

  // LockOptions' setters, returning RedlockOptions so a chain can go on.
  /// Whether acquisitions yield fencing tokens; a Redlock refuses true.
  using LockOptions::fencing;
  /// Prepended to every lock name; empty unless set.
  using LockOptions::key_prefix;
  /// The lease; 30 s unless set.
  using LockOptions::ttl;
  /// As LockOptions::ttl(lease).
  template <class Rep, class Period>
  RedlockOptions& ttl(std::chrono::duration<Rep, Period> lease) {
    LockOptions::ttl(lease);
    return *this;
  }
  /// As LockOptions::fencing(on); a Redlock refuses true when made.
  RedlockOptions& fencing(bool on) noexcept {
    LockOptions::fencing(on);
    return *this;
  }
  /// As LockOptions::key_prefix(prefix).
  RedlockOptions& key_prefix(std::string prefix) {
    LockOptions::key_prefix(std::move(prefix));
    return *this;
  }

  // Renewal is opt-in for a Redlock (see the top of redlock.hpp); wake-ups do
  // not apply. Redeclared, not inherited, because the inherited setters
  // would return LockOptions and quietly drop the node timeout from the chain.
  /// LockOptions' answer: as set, or else true while no ttl is set. A
  /// Redlock renews only when auto_renew(true) was set, whatever this says.
  using LockOptions::auto_renew;
  /// The cap on a renewed hold; zero when unset (no cap).
  using LockOptions::max_hold;
  /// The least a hold is kept after its acquire; zero when unset.
  using LockOptions::min_hold;
  /// The lost-lease callback; empty when unset.
  using LockOptions::on_lost;
  /// The value LockOptions carried in, true by default; a Redlock does not
  /// use it (its waiters retry at the policy's pace), so its setter is
  /// deleted here.
  using LockOptions::wake_on_release;
  /// As LockOptions::auto_renew(on): a Redlock renews only when this is
  /// set to true.
  RedlockOptions& auto_renew(bool on) noexcept {
    LockOptions::auto_renew(on);
    return *this;
  }
  /// As LockOptions::max_hold(cap); a Redlock refuses it without
  /// auto_renew(true).
  template <class Rep, class Period>
  RedlockOptions& max_hold(std::chrono::duration<Rep, Period> cap) {
    LockOptions::max_hold(cap);
    return *this;
  }
  /// As LockOptions::min_hold(least): kept on every master.
  template <class Rep, class Period>
  RedlockOptions& min_hold(std::chrono::duration<Rep, Period> least) {
    LockOptions::min_hold(least);
    return *this;
  }
  /// As LockOptions::on_lost(callback); a Redlock refuses it without
  /// auto_renew(true).
  RedlockOptions& on_lost(LostCallback callback) {
    LockOptions::on_lost(std::move(callback));
    return *this;
  }
  RedlockOptions& wake_on_release(bool) = delete;

  /// The longest a step waits for any one master; the masters share one
  /// deadline, so a step takes at most about this long. Unset (zero),
  /// it is min(command_timeout of the masters, max(1 ms, ttl / 10)): short
  /// enough that a dead master costs a small part of the lease. A longer
  /// one lets a slow master eat the validity: past the TTL, every attempt
  /// that waits for it fails. An acquire with a deadline never waits past
  /// the deadline, whatever this says. Must be in [1 ms, max_ttl].
  template <class Rep, class Period>
  RedlockOptions& node_timeout(std::chrono::duration<Rep, Period> timeout) {
    node_timeout_ = detail::checked_milliseconds(timeout, max_ttl, "Redlock node timeout");
    return *this;
  }
  /// The per-node timeout as set; zero when unset (chosen by the Redlock).
  std::chrono::milliseconds node_timeout() const noexcept { return node_timeout_; }

 private:
  std::chrono::milliseconds node_timeout_{0};
};

}  // namespace distlock
