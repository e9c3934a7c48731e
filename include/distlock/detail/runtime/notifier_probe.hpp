// What tests read of a Notifier's workings: counts that say which path a
// wake-up took (messages read, reconnects), which no user has reason to
// ask.
// Only tests include this header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

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
  /// Messages read so far.
  static std::uint64_t messages(const Notifier& notifier) {
    MutexLock lock(notifier.mutex_);
    return notifier.messages_;
  }
};

}  // namespace distlock::detail
