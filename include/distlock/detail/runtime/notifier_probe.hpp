// What tests read of a Notifier's workings: counts that say which path a
// wake-up took (messages read, reconnects, an armed attempt written on a
// release), which no user has reason to ask.
// Only tests include this header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "distlock/notifier.hpp"

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
  /// Armed attempts the notifier thread has written so far.
  static std::uint64_t attempts_sent(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.attempts_sent_;
  }
  /// Channels with an attempt armed now.
  static std::size_t armed_count(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return static_cast<std::size_t>(
        std::count_if(notifier.channels_.begin(), notifier.channels_.end(),
                      [](const auto& entry) { return entry.second->armed != nullptr; }));
  }
  /// Messages read so far.
  static std::uint64_t messages(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.messages_;
  }
};

}  // namespace distlock::detail
