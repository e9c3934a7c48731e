// LockOptions: how a lock object behaves (lease length, renewal and the
// shortest and longest hold, fencing, key prefix, waking on release, the
// lost-lease callback, replica acknowledgement), and the
// documented limits on lock names and leases.
//
// Options are a plain value, set by chained calls:
//   distlock::LockOptions{}.ttl(5s).fencing(true)
// Every setter validates at once, so a bad value throws InvalidArgument where
// it is written rather than on the first lock().
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/detail/base/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"

namespace distlock {

/// Longest lock name, prefix included. Redis allows far longer keys; a name
/// this long is almost surely a bug, and every command carries it.
inline constexpr std::size_t max_name_size = 1024;

/// Longest lease. Redis accepts PX values so large the key never expires
/// (PX 9223372036854775 is taken), which would make a lock permanent.
inline constexpr std::chrono::milliseconds max_ttl = std::chrono::hours(24 * 365);

/// How a lock object behaves.
class LockOptions {
 public:
  /// The lease: how long the lock stays held if its holder vanishes.
  /// Must be in [1 ms, max_ttl]; default 30 s.
  template <class Rep, class Period>
  LockOptions& ttl(std::chrono::duration<Rep, Period> lease) {
    ttl_ = detail::checked_milliseconds(lease, max_ttl, "lock ttl");
    ttl_set_ = true;
    return *this;
  }
  /// The lease; 30 s unless set.
  std::chrono::milliseconds ttl() const noexcept { return ttl_; }

  /// Whether the client's Watchdog renews the lease (about every ttl/3)
  /// while it is held. Unless set, it does exactly when no ttl was given: a
  /// lock taken with the default 30 s lease lives as long as its holder, a
  /// lock given an explicit lease keeps that lease.
  LockOptions& auto_renew(bool on) noexcept {
    auto_renew_ = on ? 1 : 0;
    return *this;
  }
  /// Whether the lease is renewed: as set, or else exactly when no ttl was
  /// set.
  bool auto_renew() const noexcept { return auto_renew_ < 0 ? !ttl_set_ : auto_renew_ == 1; }

  /// With auto-renewal: stop renewing once the lock has been held this long,
  /// and let the lease run out (it is then reported lost). Unset: no cap.
  /// A lock whose lease is not renewed (a ttl given without
  /// auto_renew(true)) refuses it when built: it would cap nothing.
  template <class Rep, class Period>
  LockOptions& max_hold(std::chrono::duration<Rep, Period> cap) {
    const std::chrono::milliseconds checked =
        detail::checked_milliseconds(cap, max_ttl, "max_hold");
    check_hold_bounds(min_hold_, checked);
    max_hold_ = checked;
    return *this;
  }
  /// The cap on a renewed hold; zero when unset (no cap).
  std::chrono::milliseconds max_hold() const noexcept { return max_hold_; }

  /// The shortest hold: an unlock() or release() of an exclusive hold
  /// before `least` has passed since its grant leaves the lock held until
  /// then (a token-checked change of the lease's expiry to the end of the
  /// minimum hold; nothing is deleted, no release is announced), and
  /// release() answers Release::kept. A job that two machines start a
  /// moment apart (cron) then runs once: the late one finds it held. Later
  /// unlocks release as usual. A lease shorter than `least` is lengthened
  /// by that unlock, one longer is shortened to it. Mutex, SimpleMutex,
  /// ReentrantMutex (its last unlock), SharedMutex's write side and Redlock
  /// (on every master); a SharedMutex read hold is released at once (it
  /// keeps no reader out), and a Semaphore refuses the option. In [1 ms,
  /// max_ttl], and no longer than max_hold. Unset: no minimum.
  template <class Rep, class Period>
  LockOptions& min_hold(std::chrono::duration<Rep, Period> least) {
    const std::chrono::milliseconds checked =
        detail::checked_milliseconds(least, max_ttl, "min_hold");
    check_hold_bounds(checked, max_hold_);
    min_hold_ = checked;
    return *this;
  }
  /// The shortest hold; zero when unset (no minimum).
  std::chrono::milliseconds min_hold() const noexcept { return min_hold_; }

  /// Called once, on the watchdog's thread, when a held lease is lost: a
  /// renewal, or the revalidation after a failover (any lease, fixed ttl
  /// too), found the token gone from the key; or a renewed lease ran out
  /// unrenewed (a lease of fixed ttl that runs out is not "lost"). Runs
  /// with no distlock lock held; exceptions from it are dropped. The lock's
  /// lost() turns true first, then this runs: a thread that sees lost()
  /// may find the callback not yet run, never the other way round.
  LockOptions& on_lost(LostCallback callback) {
    on_lost_ = std::move(callback);
    return *this;
  }
  /// The lost-lease callback; empty when unset.
  const LostCallback& on_lost() const noexcept { return on_lost_; }

  /// Whether a waiting acquirer is woken by the release notification (on by
  /// default). Off, it only polls at its policy's pace.
  LockOptions& wake_on_release(bool on) noexcept {
    wake_on_release_ = on;
    return *this;
  }
  /// Whether waiters are woken by release notifications; true unless set
  /// off.
  bool wake_on_release() const noexcept { return wake_on_release_; }

  /// When on, every acquisition also yields a fencing token: a number that
  /// rises with each acquisition of the name. Hand it to the storage you
  /// protect and have the storage refuse writes with a lower one; that stops
  /// a holder who was paused past its lease (GC, swap, VM migration) from
  /// overwriting its successor's work. The lock alone cannot stop that.
  LockOptions& fencing(bool on) noexcept {
    fencing_ = on;
    return *this;
  }
  /// Whether acquisitions yield fencing tokens; false unless set.
  bool fencing() const noexcept { return fencing_; }

  /// Replica acknowledgement: every grant (acquire, with its fence), extend
  /// and watchdog renewal is followed by WAIT `count` `timeout` on the same
  /// connection, and counts only once `count` replicas have it. A grant
  /// fewer acknowledge is given back (the usual token-checked release) and
  /// the acquire throws NotReplicatedError, from try_lock() too: it is not
  /// a lost race. When the caller's deadline, not `timeout`, cut WAIT
  /// short, try_lock_for/until return false instead. An extend fewer
  /// acknowledge throws NotReplicatedError and leaves the hold as it was; a
  /// renewal fewer acknowledge does not lengthen the lease's validity. The
  /// first acquire of each lock object reads INFO replication and throws
  /// NotReplicatedError if fewer than `count` replicas are connected.
  /// WAIT is not consensus: see docs/replicas.md.
  /// Single-server locks only (Mutex, SimpleMutex, ReentrantMutex,
  /// SharedMutex); a Redlock and a Semaphore refuse it. `count` in
  /// [1, max_replicas], `timeout` in [1 ms, max_ttl].
  template <class Rep, class Period>
  LockOptions& replicas(int count, std::chrono::duration<Rep, Period> timeout) {
    if (count < 1 || count > max_replicas) {
      throw InvalidArgument("replicas count must be in [1, " + std::to_string(max_replicas) +
                            "], not " + std::to_string(count));
    }
    replica_timeout_ = detail::checked_milliseconds(timeout, max_ttl, "replica timeout");
    replicas_ = count;
    return *this;
  }
  /// As replicas(count, timeout) with count a majority of the replicas the
  /// master has connected (INFO replication's connected_slaves / 2 + 1),
  /// read at a lock object's first acquire and again after an attempt was
  /// not replicated. A master with no connected replica is an error
  /// (NotReplicatedError), not a majority of none.
  template <class Rep, class Period>
  LockOptions& replicas_majority(std::chrono::duration<Rep, Period> timeout) {
    replica_timeout_ = detail::checked_milliseconds(timeout, max_ttl, "replica timeout");
    replicas_ = majority;
    return *this;
  }
  /// Replicas asked for: 0 for none (the default), majority for the
  /// majority form.
  int replicas() const noexcept { return replicas_; }
  /// WAIT's timeout; zero when no replicas are asked for.
  std::chrono::milliseconds replica_timeout() const noexcept { return replica_timeout_; }
  /// The most replicas replicas() may ask for.
  static constexpr int max_replicas = 1000;
  /// replicas() of replicas_majority().
  static constexpr int majority = -1;

  /// Prepended to the name to form the key (e.g. "locks:").
  LockOptions& key_prefix(std::string prefix) {
    key_prefix_ = std::move(prefix);
    return *this;
  }
  /// Prepended to every lock name; empty unless set.
  const std::string& key_prefix() const noexcept { return key_prefix_; }

 private:
  // A lock held at least longer than it may be held at most cannot be.
  static void check_hold_bounds(std::chrono::milliseconds least, std::chrono::milliseconds most) {
    if (least.count() > 0 && most.count() > 0 && least > most) {
      throw InvalidArgument("min_hold (" + std::to_string(least.count()) +
                            " ms) must not exceed max_hold (" + std::to_string(most.count()) +
                            " ms)");
    }
  }

  std::chrono::milliseconds ttl_{std::chrono::seconds(30)};
  bool ttl_set_ = false;
  int auto_renew_ = -1;  // -1: follow ttl_set_
  std::chrono::milliseconds max_hold_{0};
  std::chrono::milliseconds min_hold_{0};
  LostCallback on_lost_;
  bool wake_on_release_ = true;
  bool fencing_ = false;
  std::string key_prefix_;
  int replicas_ = 0;
  std::chrono::milliseconds replica_timeout_{0};
};

namespace detail {

/// The key for a lock name, after checking the name.
inline std::string lock_key(const LockOptions& options, std::string_view name) {
  if (name.empty()) throw InvalidArgument("lock name must not be empty");
  std::string key = options.key_prefix() + std::string(name);
  if (key.size() > max_name_size) {
    throw InvalidArgument("lock name (with prefix) is " + std::to_string(key.size()) +
                          " bytes; the limit is " + std::to_string(max_name_size));
  }
  return key;
}

/// Refuses, for the lock `what` (its key), options that cannot work
/// together whatever the lock type. max_hold caps renewal; on a lease that
/// is not renewed it would cap nothing, and the holder would count on a
/// limit that is not there.
inline void check_combination(const LockOptions& options, const std::string& what) {
  if (options.max_hold().count() > 0 && !options.auto_renew()) {
    throw InvalidArgument(what + ": max_hold caps auto-renewal, and this lease is not renewed (" +
                          "a ttl given without auto_renew(true)): add auto_renew(true), or " +
                          "drop max_hold");
  }
}

/// A key or channel that shares key's hash slot: "key:suffix" when key has a
/// hash tag of its own, "{key}:suffix" otherwise. Redis Cluster hashes only
/// the first non-empty {...} of a key.
inline std::string companion_key(std::string_view key, std::string_view suffix) {
  const auto open = key.find('{');
  const bool tagged = open != std::string_view::npos &&
                      key.find('}', open + 1) != std::string_view::npos &&
                      key.find('}', open + 1) > open + 1;
  std::string out;
  out.reserve(key.size() + suffix.size() + 3);
  if (!tagged) out += '{';
  out += key;
  if (!tagged) out += '}';
  out += ':';
  out += suffix;
  return out;
}

}  // namespace detail
}  // namespace distlock
