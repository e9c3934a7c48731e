// SingleServer: what every lock type on one Redis server gives the
// Lifecycle alike (Mutex, SimpleMutex, ReentrantMutex, SharedMutex): its
// Client, its key and release channel, the fork check, the waiting steps
// (the holder's PTTL, the subscription, the wake-up) and the Watchdog.
// Each lock's Protocol adds only its own wire steps. On a Backend that
// routes by slot (ClusterClient) the copy kept is bound to the key's slot,
// and the lock's keys are checked to share it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

template <class Backend>
class SingleServer {
 public:
  SingleServer(Backend backend, std::string key, std::string channel, const LockOptions& options)
      : backend_(for_lock_key(std::move(backend), key)),
        key_(std::move(key)),
        channel_(std::move(channel)),
        ttl_(options.ttl().count()) {
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
    return backend_.notifier().subscribe(channel_, deadline);
  }
  void wake() { backend_.notifier().wake(channel_); }
  Watchdog& watchdog() { return backend_.watchdog(); }
  static constexpr std::chrono::nanoseconds margin(std::chrono::milliseconds) noexcept {
    return std::chrono::nanoseconds(0);
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

  Backend backend_;
  const std::string key_;
  const std::string channel_;
  const Decimal ttl_;
};

}  // namespace distlock::detail
