// What tests read of a Notifier's workings: counts that say which path a
// wake-up took (messages read, reconnects), which no user has reason to
// ask.
// Only tests include this header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distlock/detail/runtime/notifier.hpp"

namespace distlock::detail {

struct NotifierProbe {
  /// Channels with at least one waiter.
  static std::size_t channel_count(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.channels_.size();
  }
  /// Subscriber connections made so far (the first, plus reconnects).
  static std::uint64_t connects(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.connects_;
  }
  /// Whether a waiter that is not a thread is armed on `channel` while the
  /// server confirms it: an async waiter asleep until a release.
  static bool armed(const Notifier& notifier, const std::string& channel) {
    MutexLock lock(notifier.mutex_);
    const auto it = notifier.channels_.find(channel);
    return it != notifier.channels_.end() && it->second->confirmed && !it->second->armed.empty();
  }
  /// How many waiters that are not threads are armed on `channel`, once
  /// the server confirmed it (0 before).
  static std::size_t armed_count(const Notifier& notifier, const std::string& channel) {
    MutexLock lock(notifier.mutex_);
    const auto it = notifier.channels_.find(channel);
    if (it == notifier.channels_.end() || !it->second->confirmed) return 0;
    return it->second->armed.size();
  }
  /// Messages read so far.
  static std::uint64_t messages(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.messages_;
  }
};

}  // namespace distlock::detail
