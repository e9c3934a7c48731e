// SingleServer: what every lock type on one Redis server gives the
// Lifecycle alike (Mutex, SimpleMutex, ReentrantMutex, SharedMutex): its
// Client, its key and release channel, the fork check, the waiting steps
// (the holder's PTTL, the subscription, the wake-up), the Watchdog, and
// the replica acknowledgement its grants and extends wait for. Each lock's
// Protocol adds only its own wire steps. The backend is kept as the site of
// the lock's key (detail/backend/site.hpp); on a cluster the lock's keys are
// checked to share its slot.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distlock/backend.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

class SingleServer {
 public:
  SingleServer(const Backend& backend, const std::string& key, std::string channel,
               const LockOptions& options)
      : SingleServer(backend.site_for(key), key, std::move(channel), options) {}
  /// On the site of `key` (Backend::site_for).
  SingleServer(SitePtr site, std::string key, std::string channel, const LockOptions& options)
      : site_(std::move(site)),
        key_(std::move(key)),
        channel_(std::move(channel)),
        ttl_(options.ttl().count()),
        replicas_(options.replicas() == 0 ? nullptr
                                          : std::make_shared<ReplicaCheck>(
                                                options.replicas(), options.replica_timeout())),
        auto_renew_(options.auto_renew()) {
    // A cluster runs a script only if all its keys share a slot.
    site_->check_keys("lock '" + key_ + "'", {key_, channel_, companion_key(key_, "fence")});
  }

  void check_process() const { site_->check_process(); }
  bool forked() const noexcept { return site_->forked(); }

  std::optional<HolderLease> read_holder(SteadyClock::time_point deadline) {
    return detail::read_holder(*site_, key_, deadline);
  }
  /// The subscription to the channel that announces releases to the
  /// waiter `id` (every waiter's: the lock's channel).
  std::optional<Notifier::Subscription> subscribe(const std::string& /*id*/,
                                                  SteadyClock::time_point deadline) {
    return site_->subscribe(channel_, deadline);
  }
  /// Whether the waiter `id` now waits for another channel than the one it
  /// subscribed to: never, with the lock's one channel.
  bool listens_elsewhere(const std::string& /*id*/) const noexcept { return false; }
  /// Wakes every waiter of this lock (cancel_waits()).
  void wake() { site_->wake(channel_); }
  /// The acquire of `id` ended without the lock; `answering` when Redis
  /// was answering it. Nothing to do for a lock that keeps no queue.
  template <class Kind>
  void left(Kind, const std::string& /*id*/, SteadyClock::time_point /*deadline*/,
            bool /*answering*/) noexcept {}
  Watchdog& watchdog() { return site_->watchdog(); }
  const SharedEventHook& events() const noexcept { return site_->events(); }

  /// This lock's Renewer of type R, given the replica acknowledgement when
  /// R can confirm renewals with it. One that cannot (SimpleMutex's) is
  /// refused with replicas and auto-renewal together: its renewals would
  /// lengthen leases no replica had confirmed.
  template <class R>
  std::shared_ptr<Renewer> make_renewer() const {
    if constexpr (std::is_constructible_v<R, SitePtr, std::shared_ptr<ReplicaCheck>>) {
      return std::make_shared<R>(site_, replicas_);
    } else {
      if (replicas_ && auto_renew_) {
        throw InvalidArgument(key_ +
                              ": this lock type's renewals cannot wait for replicas; with "
                              "LockOptions::replicas give it a ttl without auto_renew");
      }
      return std::make_shared<R>(site_);
    }
  }

  const std::string& key() const noexcept { return key_; }
  const std::string& channel() const noexcept { return channel_; }
  const SitePtr& site() const noexcept { return site_; }
  /// With LockOptions::replicas, what confirms a grant by WAIT; else null.
  ReplicaCheck* replica_check() const noexcept { return replicas_.get(); }

 protected:
  /// A token-checked step (release, extend) by the deadline rules of a call
  /// without a deadline.
  template <class Send>
  TokenCheck checked(Send&& send) {
    return on_site(*site_, no_deadline, std::forward<Send>(send));
  }

  /// An extend by checked(): with replica acknowledgement, WAIT goes out
  /// behind it in the same write, and one that took effect throws
  /// NotReplicatedError if too few replicas acknowledged it.
  template <class Send>
  TokenCheck extended(Send&& send) {
    return on_site(*site_, no_deadline, [&](Connection& connection) {
      if (!replicas_) return send(connection);
      const std::chrono::milliseconds command_timeout = site_->options().command_timeout;
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

  const SitePtr site_;
  const std::string key_;
  const std::string channel_;
  const Decimal ttl_;
  /// LockOptions::replicas; null without.
  const std::shared_ptr<ReplicaCheck> replicas_;
  const bool auto_renew_;
};

}  // namespace distlock::detail
