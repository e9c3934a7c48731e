// The waiters' side of Notifier (notifier.hpp): a waiter subscribes to a
// channel (counted per channel, and confirmed by the server before it
// returns, so a release after the waiter's next attempt cannot slip by),
// reads the channel's generation, sleeps on it, and leaves.
// Each takes the notifier's mutex for a few field updates; only subscribe()
// may wait, for the confirmation, and never past the caller's deadline nor
// the command timeout. Included at the end of notifier.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/error.hpp"
#include "distlock/notifier.hpp"

namespace distlock {

inline Notifier::Subscription Notifier::subscribe(const std::string& channel,
                                                  clock::time_point deadline) {
  detail::MutexLock lock(mutex_);
  if (waiters_ >= max_waiters_) {
    throw Error(Errc::too_many_waiters,
                "more than " + std::to_string(max_waiters_) + " waiters on " + options_.endpoint());
  }
  auto& slot = channels_[channel];
  if (!slot) {
    slot = std::make_unique<Channel>();
    slot->name = channel;
  }
  Channel& entry = *slot;
  ++entry.waiters;
  ++waiters_;
  Subscription subscription(this, &entry);
  // A new channel: the thread subscribes it.
  if (!entry.sent) {
    lock.unlock();
    poke();
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

inline void Notifier::leave(Channel& channel) {
  detail::MutexLock lock(mutex_);
  --waiters_;
  // No wake-up for the thread: it unsubscribes lingering channels on its own
  // timer, and a waiter's return is not delayed by it.
  if (--channel.waiters == 0) channel.abandoned = clock::now();
}

inline std::uint64_t Notifier::generation_of(Channel& channel) {
  detail::MutexLock lock(mutex_);
  return channel.generation;
}

inline bool Notifier::wait_on(Channel& channel, std::uint64_t seen, clock::time_point until) {
  detail::MutexLock lock(mutex_);
  return lock.wait_until(channel.changed, until, [&] { return channel.generation != seen; });
}

inline bool Notifier::is_active(Channel& channel) {
  detail::MutexLock lock(mutex_);
  return up_ && channel.confirmed;
}

inline bool Notifier::is_moved(Channel& channel) {
  detail::MutexLock lock(mutex_);
  return channel.moved;
}

}  // namespace distlock
