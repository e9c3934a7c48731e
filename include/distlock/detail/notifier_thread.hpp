// The notifier thread's side of Notifier (notifier.hpp): its loop, the
// subscriber connection (made, lost, moved), the SUBSCRIBE and UNSUBSCRIBE
// it sends, and the replies and messages it reads; on a release message it
// also writes the armed attempt left on that channel
// (detail/armed_attempt.hpp). While the connection is lent to a lone waiter
// (detail/notifier_lent.hpp) the thread leaves it alone. Included at the
// end of notifier.hpp.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/notifier.hpp"

namespace distlock {

inline void Notifier::run() {
  auto retry_pause = std::chrono::milliseconds(10);
  for (;;) {
    bool moved = false;
    bool broken = false;
    bool lent = false;
    {
      detail::MutexLock lock(mutex_);
      if (stopping_) return;
      // Lent to a lone waiter (notifier_lent.hpp): not ours to touch.
      lent = lent_;
      busy_ = !lent;
      watching_ = !lent;
      if (lent) parked_.notify_all();
      if (!lent) {
        moved = std::exchange(retarget_, false);
        broken = std::exchange(lent_failed_, false);
      }
    }
    if (lent) {
      wait_unlent(clock::now() + linger);
      continue;
    }
    if ((moved || broken) && connection_) drop_connection();
    if (!connection_ && !connect_once()) {
      // Back off before reconnecting, but wake at once to stop.
      pollfd wake{wake_fd_, POLLIN, 0};
      ::poll(&wake, 1, static_cast<int>(retry_pause.count()));
      detail::drain_eventfd(wake_fd_);
      retry_pause = std::min(retry_pause * 2, std::chrono::milliseconds(1000));
      continue;
    }
    retry_pause = std::chrono::milliseconds(10);
    try {
      const int timeout_ms = sync_subscriptions();
      pollfd fds[2] = {{connection_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      {
        // Parked in poll(): a lone waiter may take the connection meanwhile.
        detail::MutexLock lock(mutex_);
        busy_ = false;
        parked_.notify_all();
      }
      const int ready = ::poll(fds, 2, timeout_ms);
      {
        detail::MutexLock lock(mutex_);
        if (lent_) continue;  // its messages are the waiter's to read now
        busy_ = true;
      }
      if (ready < 0) continue;
      if (fds[1].revents != 0) detail::drain_eventfd(wake_fd_);
      if (fds[0].revents != 0) {
        connection_->read_available();
        while (std::optional<Reply> reply = connection_->next_buffered_reply()) handle(*reply);
      }
    } catch (const Error&) {
      drop_connection();
    }
  }
}

inline bool Notifier::connect_once() {
  ConnectionOptions where;
  {
    detail::MutexLock lock(mutex_);
    where = options_;
  }
  try {
    connection_ = std::make_unique<Connection>(where);
  } catch (const Error&) {
    return false;
  }
  bool again = false;
  {
    detail::MutexLock lock(mutex_);
    up_ = true;
    again = ++connects_ > 1;
    // Releases may have gone unannounced while we were away: everyone looks again.
    for (auto& [name, channel] : channels_) {
      channel->sent = false;
      channel->confirmed = false;
      channel->moved = false;
      ++channel->generation;
      channel->changed.notify_all();
    }
  }
  if (again && events_) {
    const std::string endpoint = where.endpoint();
    detail::emit_about(events_, LockEventType::notifier_reconnected, endpoint);
  }
  return true;
}

// Sends SUBSCRIBE for new channels and UNSUBSCRIBE for channels abandoned
// longer than `linger`, which it then forgets. Returns the poll timeout (ms)
// until the next look, or -1 when there are no channels at all.
inline int Notifier::sync_subscriptions() {
  std::vector<std::string> subscribe;
  std::vector<std::string> unsubscribe;
  clock::time_point next_due = clock::time_point::max();
  {
    detail::MutexLock lock(mutex_);
    const clock::time_point now = clock::now();
    // leave() does not wake this thread, so while any channel is known the
    // thread looks again at least every `linger`.
    if (!channels_.empty()) next_due = now + linger;
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& channel = *it->second;
      if (channel.waiters > 0) {
        if (!channel.sent) subscribe.push_back(it->first);
        channel.sent = true;
      } else if (now - channel.abandoned < linger) {
        next_due = std::min(next_due, channel.abandoned + linger);
      } else {
        // Nobody holds a Subscription to it, so nothing points at it.
        if (channel.sent) unsubscribe.push_back(it->first);
        it = channels_.erase(it);
        continue;
      }
      ++it;
    }
  }
  auto send = [&](std::string_view verb, const std::vector<std::string>& names) {
    if (names.empty()) return;
    std::vector<std::string_view> argv{verb};
    argv.insert(argv.end(), names.begin(), names.end());
    connection_->append_argv(argv);
  };
  send(sharded_ ? "SSUBSCRIBE" : "SUBSCRIBE", subscribe);
  send(sharded_ ? "SUNSUBSCRIBE" : "UNSUBSCRIBE", unsubscribe);
  if (!subscribe.empty() || !unsubscribe.empty()) connection_->flush();
  if (next_due == clock::time_point::max()) return -1;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_due - clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(wait.count(), 0));
}

inline void Notifier::handle(const Reply& reply) {
  if (sharded_ && reply.is_error()) {
    // SSUBSCRIBE refused (MOVED: the slot is served elsewhere, or
    // CROSSSLOT): the channels still waiting for their confirmation.
    detail::MutexLock lock(mutex_);
    for (auto& [name, channel] : channels_) {
      if (channel->sent && !channel->confirmed && !channel->moved) mark_moved(*channel);
    }
    return;
  }
  if (!reply.is_array() || reply.size() < 3) return;
  const std::string_view kind = reply[0].str();
  const std::string name(reply[1].str());
  detail::MutexLock lock(mutex_);
  const auto it = channels_.find(name);
  if (it == channels_.end()) return;
  Channel& channel = *it->second;
  if (kind == "message" || kind == "smessage") {
    ++messages_;
    ++channel.generation;
    if (detail::ArmedAttempt* armed = std::exchange(channel.armed, nullptr)) {
      armed->fire(channel.generation);
      if (armed->state == detail::ArmedAttempt::State::sent) ++attempts_sent_;
    }
  } else if (kind == "subscribe" || kind == "ssubscribe") {
    channel.confirmed = true;
  } else if (kind == "sunsubscribe" && channel.confirmed) {
    // Unasked (ours are only for channels already forgotten): the slot left.
    mark_moved(channel);
    return;
  } else {
    return;  // "unsubscribe" of an abandoned name that came back before the reply
  }
  channel.changed.notify_all();
}

inline void Notifier::drop_connection() {
  connection_.reset();
  detail::MutexLock lock(mutex_);
  up_ = false;
  for (auto& [name, channel] : channels_) {
    channel->sent = false;
    channel->confirmed = false;
  }
}

}  // namespace distlock
