// SentinelWatch: the thread of a SentinelClient that listens for the
// Sentinels' +switch-master announcements (detail/backend/sentinel_master.hpp).
//
// It subscribes at one Sentinel (moving to the next while it cannot reach
// one) and calls look() after each announcement and each resubscription
// (an announcement may have been missed meanwhile). look() is how the
// SentinelMaster asks again where the master is; it holds the master only
// while it looks, so the master's last handle may go at any time: a
// destructor that runs elsewhere finds the thread waiting and joins it at
// once, and one that runs on the thread (inside look()) detaches it, and
// the thread ends after look() returns. What the thread uses is shared
// with it, never owned by the SentinelWatch alone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/error.hpp"
#include "distlock/sentinel_options.hpp"

namespace distlock::detail {

class SentinelWatch {
 public:
  static constexpr const char* channel = "+switch-master";

  /// Starts the thread; `look` returns false once there is nothing left
  /// to look for (the thread then ends).
  SentinelWatch(const SentinelOptions& options, std::function<bool()> look)
      : state_(std::make_shared<State>()) {
    state_->options = options;
    state_->look = std::move(look);
    state_->notifier =
        std::make_unique<Notifier>(options.sentinel_connection(options.sentinels.front()), 1);
    thread_ = std::thread([state = state_] { run(*state); });
  }

  ~SentinelWatch() {
    {
      std::lock_guard<std::mutex> guard(state_->mutex);
      state_->stopping = true;
    }
    state_->notifier->wake(channel);
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();  // inside look(): the thread ends after it
    } else {
      thread_.join();
    }
  }

  SentinelWatch(const SentinelWatch&) = delete;
  SentinelWatch& operator=(const SentinelWatch&) = delete;

 private:
  struct State {
    std::mutex mutex;
    bool stopping = false;
    SentinelOptions options;
    std::function<bool()> look;
    std::unique_ptr<Notifier> notifier;
    bool stopped() {
      std::lock_guard<std::mutex> guard(mutex);
      return stopping;
    }
  };

  static void run(State& state) {
    Notifier& notifier = *state.notifier;
    const SentinelOptions& options = state.options;
    std::size_t at = 0;  // the Sentinel subscribed at
    std::optional<Notifier::Subscription> subscription;
    try {
      subscription.emplace(notifier.subscribe(channel, SteadyClock::now()));
    } catch (const Error&) {
      return;  // the bound of one waiter cannot be reached; nothing else throws
    }
    std::uint64_t seen = subscription->generation();
    while (!state.stopped()) {
      // An announcement, a resubscription (one may have been missed) or,
      // every few seconds, a look at whether the Sentinel is still there.
      const bool woken = subscription->wait(seen, SteadyClock::now() + std::chrono::seconds(2));
      if (state.stopped()) return;
      if (woken) {
        seen = subscription->generation();
        if (!state.look()) return;
      } else if (!subscription->active() && options.sentinels.size() > 1) {
        at = (at + 1) % options.sentinels.size();
        notifier.retarget(options.sentinel_connection(options.sentinels[at]));
      }
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace distlock::detail
