// The notifier thread's side of Notifier (detail/runtime/notifier.hpp): its loop, the
// subscriber connection (made, lost, moved, replaced past its
// max_connection_age), the SUBSCRIBE and UNSUBSCRIBE
// it sends, and the replies and messages it reads: a release message wakes
// its channel's waiters. Included at the end of detail/runtime/notifier.hpp.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/detail/runtime/notifier.hpp"

namespace distlock {
namespace detail {

// Waits until `fd` is readable or `until` passes; true if readable.
inline bool wait_readable(int fd, std::chrono::steady_clock::time_point until) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd ready{fd, POLLIN, 0};
    const long long ms = std::clamp<long long>(left.count(), 0, 3600 * 1000);
    const int got = ::poll(&ready, 1, static_cast<int>(ms));
    if (got >= 0 || errno != EINTR) return got > 0;
  }
}

}  // namespace detail

inline void Notifier::run() {
  auto retry_pause = std::chrono::milliseconds(10);
  for (;;) {
    bool moved = false;
    {
      detail::MutexLock lock(mutex_);
      if (stopping_) return;
      moved = std::exchange(retarget_, false);
    }
    if (moved && connection_) drop_connection();
    if (!connection_ && !connect_once()) {
      // Back off before reconnecting, but wake at once to stop.
      pollfd wake{wake_fd_, POLLIN, 0};
      ::poll(&wake, 1, static_cast<int>(retry_pause.count()));
      detail::drain_eventfd(wake_fd_);
      retry_pause = std::min(retry_pause * 2, std::chrono::milliseconds(1000));
      continue;
    }
    retry_pause = std::chrono::milliseconds(10);
    replace_if_due();
    try {
      const int timeout_ms = until_replacement(sync_subscriptions());
      pollfd fds[2] = {{connection_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      const int ready = ::poll(fds, 2, timeout_ms);
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
    again = ++connects_ > 1;
    // Releases may have gone unannounced while we were away: everyone looks again.
    for (auto& [name, channel] : channels_) {
      channel->sent = false;
      channel->confirmed = false;
      channel->moved = false;
      ++channel->generation;
      announce(*channel, Change::look_again);
    }
  }
  if (again && events_) {
    const std::string endpoint = where.endpoint();
    detail::emit_about(events_, LockEventType::notifier_reconnected, endpoint);
  }
  return true;
}

// poll()'s timeout until `until`, rounded up; at most an hour at a time.
inline int Notifier::poll_timeout(clock::time_point until) {
  const clock::time_point now = clock::now();
  if (until <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      std::min<clock::duration>(until - now, std::chrono::hours(1)));
  return static_cast<int>(left.count());
}

inline void Notifier::replace_if_due() {
  if (!connection_ || !connection_->aged() || clock::now() < replace_after_) return;
  if (replace_aged()) {
    replace_pause_ = std::chrono::milliseconds(10);
    return;
  }
  // The old connection still serves; a provider or server that fails now
  // is asked again later, not in a loop.
  replace_after_ = clock::now() + replace_pause_;
  replace_pause_ = std::min(replace_pause_ * 2, std::chrono::milliseconds(1000));
}

// `timeout_ms` (poll()'s; -1 for none), cut to when the connection is due
// for replacement, so that an idle one is replaced on time too.
inline int Notifier::until_replacement(int timeout_ms) const {
  if (!connection_ || connection_->options().max_connection_age.count() == 0) return timeout_ms;
  const clock::time_point due = std::max(connection_->aged_at(), replace_after_);
  const int due_ms = poll_timeout(due);
  return timeout_ms < 0 ? due_ms : std::min(timeout_ms, due_ms);
}

// Replaces the subscriber connection past max_connection_age without
// losing a release: the fresh connection subscribes to every channel the
// old one has, and the server confirms them all, before the old one goes;
// what the old one was sent before that is read (and handled) up to the
// answer of a PING written behind it. Until the swap the old connection
// serves as before; nobody is woken for the swap. False, the old one kept,
// if the fresh one cannot be made or does not confirm in time. Should the
// old one break before its PING is answered, releases may have been
// missed: every waiter is woken to look again, as after a reconnect.
inline bool Notifier::replace_aged() {
  ConnectionOptions where;
  std::vector<std::string> names;
  {
    detail::MutexLock lock(mutex_);
    where = options_;
    for (const auto& [name, channel] : channels_) {
      if (channel->sent && !channel->moved) names.push_back(name);
    }
  }
  std::unique_ptr<Connection> fresh;
  std::unordered_map<std::string, bool> confirmed;
  try {
    fresh = std::make_unique<Connection>(where);
    if (!subscribe_fresh(*fresh, names, confirmed, clock::now() + where.command_timeout)) {
      return false;
    }
  } catch (const Error&) {
    return false;
  }
  const bool caught_up = read_to_barrier(clock::now() + where.command_timeout);
  connection_ = std::move(fresh);
  detail::MutexLock lock(mutex_);
  ++connects_;
  for (auto& [name, channel] : channels_) {
    if (!caught_up) {
      ++channel->generation;
      announce(*channel, Change::look_again);
    }
    if (channel->moved) continue;  // left "sent", as on the old one
    const auto answer = confirmed.find(name);
    channel->sent = answer != confirmed.end();
    channel->confirmed = channel->sent && answer->second;
    // A sharded node that refused the channel serves its slot no more.
    if (sharded_ && channel->sent && !answer->second) mark_moved(*channel);
  }
  return true;
}

// Subscribes `fresh` to `names`, one command each (a cluster node refuses a
// SSUBSCRIBE naming channels of several slots), and reads until each is
// answered or `until` passes; releases it already hears are handled.
// `confirmed[name]`: true if confirmed, false if refused.
inline bool Notifier::subscribe_fresh(Connection& fresh, const std::vector<std::string>& names,
                                      std::unordered_map<std::string, bool>& confirmed,
                                      clock::time_point until) {
  const std::string_view verb = sharded_ ? "SSUBSCRIBE" : "SUBSCRIBE";
  for (const std::string& name : names) fresh.append(verb, name);
  fresh.flush();
  std::size_t answered = 0;
  for (;;) {
    while (std::optional<Reply> reply = fresh.next_buffered_reply()) {
      // Answers come in the order asked; an error names no channel.
      if (reply->is_error() && answered < names.size()) {
        confirmed[names[answered++]] = false;
      } else if (reply->is_array() && reply->size() >= 3 &&
                 ((*reply)[0].str() == "subscribe" || (*reply)[0].str() == "ssubscribe")) {
        confirmed[std::string((*reply)[1].str())] = true;
        ++answered;
      } else {
        handle(*reply);
      }
    }
    if (answered >= names.size()) return true;
    if (!detail::wait_readable(fresh.fd(), until)) return false;
    fresh.read_available();
  }
}

// Reads the old connection up to the answer of a PING sent behind all it
// was sent: a release published before the fresh connection's
// subscriptions took is in what comes before it. False if it broke or did
// not answer by `until`.
inline bool Notifier::read_to_barrier(clock::time_point until) {
  try {
    connection_->append("PING");
    connection_->flush();
    for (;;) {
      while (std::optional<Reply> reply = connection_->next_buffered_reply()) {
        // "pong" in an array on a subscribed connection, +PONG on one that is not.
        const bool pong = reply->is_array() && reply->size() >= 1
                              ? (*reply)[0].str() == "pong"
                              : reply->type() == ReplyType::status && reply->str() == "PONG";
        if (pong) return true;
        handle(*reply);
      }
      if (!detail::wait_readable(connection_->fd(), until)) return false;
      connection_->read_available();
    }
  } catch (const Error&) {
    return false;
  }
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
    // "0" frees one place, for the waiters next in turn; any other message
    // is for every waiter, as Redisson reads "1" (a write lock left to
    // readers, a Semaphore resized: many may fit now).
    announce(channel, reply[2].str() == "0" ? Change::released : Change::look_again);
    return;
  }
  if (kind == "subscribe" || kind == "ssubscribe") {
    channel.confirmed = true;
  } else if (kind == "sunsubscribe" && channel.confirmed) {
    // Unasked (ours are only for channels already forgotten): the slot left.
    mark_moved(channel);
    return;
  } else {
    return;  // "unsubscribe" of an abandoned name that came back before the reply
  }
  announce(channel, Change::confirmed);
}

inline void Notifier::drop_connection() {
  connection_.reset();
  detail::MutexLock lock(mutex_);
  for (auto& [name, channel] : channels_) {
    channel->sent = false;
    channel->confirmed = false;
  }
}

}  // namespace distlock
