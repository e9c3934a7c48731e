// SingleServer: what every lock type on one Redis server gives the
// Lifecycle alike (Mutex, SimpleMutex, ReentrantMutex, SharedMutex): its
// Client, its key and release channel, the fork check, the waiting steps
// (the holder's PTTL, the subscription, the wake-up), the Watchdog, and
// the replica acknowledgement its grants and extends wait for. Each lock's
// Protocol adds only its own wire steps. On a Backend that routes by slot
// (ClusterClient) the copy kept is bound to the key's slot, and the lock's
// keys are checked to share it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// Whether `Backend` has notifiers at several nodes, so that waking the
/// waiters of a channel means waking it at each (ClusterClient).
template <class Backend, class = void>
inline constexpr bool wakes_everywhere = false;
template <class Backend>
inline constexpr bool wakes_everywhere<
    Backend, std::void_t<decltype(std::declval<Backend&>().wake_waiters(std::string()))>> = true;

/// Subscribes to `channel` (a release channel of a lock on the key
/// `backend` is bound to) where that lock's waiters listen: the Backend's
/// Notifier, or on a cluster the one at the node that owns the slot now.
template <class Backend>
Notifier::Subscription subscribe_to_releases(Backend& backend, const std::string& channel,
                                             SteadyClock::time_point deadline) {
  if constexpr (is_cluster<Backend>) {
    return backend.subscribe(channel, deadline);
  } else {
    return backend.notifier().subscribe(channel, deadline);
  }
}

/// Wakes every waiter of `channel`, on every notifier they may sleep on (a
/// cluster has one per node, and a slot that moved leaves waiters at both).
template <class Backend>
void wake_waiters_of(Backend& backend, const std::string& channel) {
  if constexpr (wakes_everywhere<Backend>) {
    backend.wake_waiters(channel);
  } else {
    backend.notifier().wake(channel);
  }
}

template <class Backend>
class SingleServer {
 public:
  SingleServer(Backend backend, std::string key, std::string channel, const LockOptions& options)
      : backend_(for_lock_key(std::move(backend), key)),
        key_(std::move(key)),
        channel_(std::move(channel)),
        ttl_(options.ttl().count()),
        replicas_(options.replicas() == 0 ? nullptr
                                          : std::make_shared<ReplicaCheck>(
                                                options.replicas(), options.replica_timeout())),
        auto_renew_(options.auto_renew()) {
    if constexpr (routes_by_slot<Backend>) {
      // A cluster runs a script only if all its keys share a slot.
      Backend::check_keys("lock '" + key_ + "'", {key_, channel_, companion_key(key_, "fence")});
    }
  }

  void check_process() const { backend_.check_process(); }
  bool forked() const noexcept { return backend_.forked(); }

  std::optional<long long> holder_pttl(SteadyClock::time_point deadline) {
    return read_pttl(backend_, key_, deadline);
  }
  std::optional<Notifier::Subscription> subscribe(SteadyClock::time_point deadline) {
    return subscribe_to_releases(backend_, channel_, deadline);
  }
  void wake() { wake_waiters_of(backend_, channel_); }
  Watchdog& watchdog() { return backend_.watchdog(); }
  const SharedEventHook& events() const noexcept { return backend_.events(); }
  static constexpr std::chrono::nanoseconds margin(std::chrono::milliseconds) noexcept {
    return std::chrono::nanoseconds(0);
  }

  /// This lock's Renewer of type R, given the replica acknowledgement when
  /// R can confirm renewals with it. One that cannot (SimpleMutex's) is
  /// refused with replicas and auto-renewal together: its renewals would
  /// lengthen leases no replica had confirmed.
  template <class R>
  std::shared_ptr<Renewer> make_renewer() const {
    if constexpr (std::is_constructible_v<R, Backend, std::shared_ptr<ReplicaCheck>>) {
      return std::make_shared<R>(backend_, replicas_);
    } else {
      if (replicas_ && auto_renew_) {
        throw InvalidArgument(key_ +
                              ": this lock type's renewals cannot wait for replicas; with "
                              "LockOptions::replicas give it a ttl without auto_renew");
      }
      return std::make_shared<R>(backend_);
    }
  }

  const std::string& key() const noexcept { return key_; }
  const std::string& channel() const noexcept { return channel_; }

 protected:
  /// A token-checked step (release, extend) by the deadline rules of a call
  /// without a deadline.
  template <class Send>
  TokenCheck checked(Send&& send) {
    return send_checked(backend_, no_deadline, std::forward<Send>(send));
  }

  /// An extend by checked(): with replica acknowledgement, WAIT goes out
  /// behind it in the same write, and one that took effect throws
  /// NotReplicatedError if too few replicas acknowledged it.
  template <class Send>
  TokenCheck extended(Send&& send) {
    return send_checked(backend_, no_deadline, [&](Connection& connection) {
      if (!replicas_) return send(connection);
      const std::chrono::milliseconds command_timeout = backend_.options().command_timeout;
      const int count = replicas_->needed(connection, key_);
      const TrailGuard guard(connection);
      replicas_->trail_wait(connection, count, no_deadline, command_timeout);
      const TokenCheck check = send(connection);
      if (check == TokenCheck::done) {
        bool cut = false;
        const int acknowledged =
            replicas_->acknowledged(connection, count, no_deadline, command_timeout, cut);
        replicas_->require(acknowledged, count, key_, "extend");
      } else {
        ReplicaCheck::skip(connection);
      }
      return check;
    });
  }

  Backend backend_;
  const std::string key_;
  const std::string channel_;
  const Decimal ttl_;
  /// LockOptions::replicas; null without.
  const std::shared_ptr<ReplicaCheck> replicas_;
  const bool auto_renew_;
};

}  // namespace distlock::detail
