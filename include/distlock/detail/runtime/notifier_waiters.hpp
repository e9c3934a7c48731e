// The waiters' side of Notifier (detail/runtime/notifier.hpp): subscribe() counts a waiter
// on its channel and returns once the server confirmed the subscription, so
// a release after the waiter's next attempt cannot slip by. It alone may
// wait, never past the caller's deadline nor the command timeout; the
// Subscription's reads, sleep and leaving (detail/runtime/notifier.hpp) take the
// notifier's mutex for a few fields. Included at the end of detail/runtime/notifier.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/error.hpp"

namespace distlock {

inline Notifier::Subscription Notifier::subscribe(const std::string& channel,
                                                  clock::time_point deadline) {
  detail::MutexLock lock(mutex_);
  if (waiters_ >= max_waiters_) {
    throw Error(Errc::too_many_waiters,
                "more than " + std::to_string(max_waiters_) + " waiters on " + options_.endpoint());
  }
  auto& slot = channels_[channel];
  if (!slot) slot = std::make_unique<Channel>();
  Channel& entry = *slot;
  ++entry.waiters;
  ++waiters_;
  Subscription subscription(this, &entry);
  // A new channel: the thread subscribes it.
  if (!entry.sent) {
    lock.unlock();
    detail::signal_eventfd(wake_fd_);
    lock.lock();
  }
  // Never wait on a subscriber connection that cannot be made: without a
  // confirmation the waiter falls back to its timer.
  const clock::time_point give_up = std::min(deadline, clock::now() + options_.command_timeout);
  lock.wait_until(entry.changed, give_up, [&]() DISTLOCK_REQUIRES(mutex_) {
    return entry.confirmed || entry.moved || stopping_;
  });
  return subscription;
}

}  // namespace distlock
