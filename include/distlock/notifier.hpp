// Notifier: wakes lock waiters when a lock is released, instead of letting
// them poll.
//
// One per Client, started on first use: one dedicated subscriber connection
// and one thread that owns it. Releases publish on the lock's channel in the
// same script as the delete. A waiter subscribes (and waits for the server to
// confirm) before its next attempt, so a release that happens after that
// attempt failed cannot slip by unseen; it then sleeps until a message, its
// own timer or its deadline. Subscriptions are counted per channel; a channel
// whose last waiter left stays subscribed for `linger` (so a lock that is
// waited on again and again does not pay a SUBSCRIBE round trip each time)
// and is then unsubscribed.
//
// Sharded (for a Redis Cluster node, ClusterClient): SSUBSCRIBE and
// SUNSUBSCRIBE instead, and releases announced with SPUBLISH. When the
// channel's slot leaves the node (a slot move or a failover) the server
// drops the subscription (an unasked "sunsubscribe", or an error reply to
// SSUBSCRIBE at a node that does not own the slot): its waiters are woken
// and Subscription::moved() turns true, so they subscribe again where the
// slot is now.
//
// Pub/sub delivers at most once. A lost message (or a subscriber connection
// that dropped) only delays a waiter until its timer, which the lock never
// sets beyond the holder's remaining lease; after a reconnect every waiter is
// woken to look again, since releases may have been missed meanwhile.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/thread_annotations.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"

namespace distlock {

/// The release notifications of one Redis endpoint. Thread-safe.
class Notifier {
  struct Channel;

 public:
  using clock = std::chrono::steady_clock;

  /// A waiter's registered interest in one channel; unsubscribes (when it
  /// is the channel's last) on destruction.
  class Subscription {
   public:
    Subscription(Subscription&& other) noexcept
        : notifier_(std::exchange(other.notifier_, nullptr)), channel_(other.channel_) {}
    Subscription& operator=(Subscription&&) = delete;
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    ~Subscription() {
      if (notifier_ != nullptr) notifier_->leave(*channel_);
    }

    /// Counts the wake-ups of this channel (messages, reconnects, wake()).
    std::uint64_t generation() const { return notifier_->generation_of(*channel_); }

    /// Sleeps until generation() differs from `seen` or `until` passes.
    /// Returns true if woken by a wake-up.
    bool wait(std::uint64_t seen, clock::time_point until) {
      return notifier_->wait_on(*channel_, seen, until);
    }

    /// True while the server has confirmed this channel's subscription on a
    /// live connection: only then can a release be relied on to wake us.
    bool active() const { return notifier_->is_active(*channel_); }

    /// Sharded only: the node dropped the subscription because the
    /// channel's slot is served elsewhere now; subscribe again there.
    bool moved() const { return notifier_->is_moved(*channel_); }

   private:
    friend class Notifier;
    Subscription(Notifier* notifier, Channel* channel) noexcept
        : notifier_(notifier), channel_(channel) {}
    Notifier* notifier_;
    Channel* channel_;
  };

  /// Connects lazily from its own thread; `max_waiters` bounds the
  /// subscriptions held at once.
  Notifier(ConnectionOptions options, std::size_t max_waiters,
           detail::SharedEventHook events = nullptr, bool sharded = false);
  ~Notifier();

  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  /// Registers interest in `channel` and waits, until `deadline` or one
  /// command timeout at the latest, for the server to confirm the
  /// subscription. The Subscription is returned either way (check active()).
  /// Throws Error(too_many_waiters) past max_waiters.
  Subscription subscribe(const std::string& channel, clock::time_point deadline);

  /// Wakes every waiter of `channel` (as a message would).
  void wake(const std::string& channel);

  /// Moves the subscriber connection to another server (a backend that
  /// follows a failover, sentinel_client.hpp): the connection is dropped
  /// and made again there, every channel is subscribed again, and every
  /// waiter is woken to look again, as after any reconnect.
  void retarget(ConnectionOptions options);

  /// Channels with at least one waiter (for tests and diagnostics).
  std::size_t channel_count() const;
  /// Subscriber connections made so far (the first, plus reconnects).
  std::uint64_t connects() const;

 private:
  struct Channel {
    std::string name;
    std::size_t waiters = 0;
    std::uint64_t generation = 0;
    bool confirmed = false;         // the server said "subscribe" on the current connection
    bool sent = false;              // SUBSCRIBE written on the current connection
    bool moved = false;             // sharded: the node dropped it (slot served elsewhere)
    clock::time_point abandoned{};  // when waiters last dropped to zero
    std::condition_variable changed;
  };

  /// How long a channel nobody waits on stays subscribed.
  static constexpr std::chrono::milliseconds linger{50};

  void run();
  bool connect_once();
  int sync_subscriptions();
  void handle(const Reply& reply);
  void drop_connection();
  void leave(Channel& channel);
  std::uint64_t generation_of(Channel& channel);
  bool wait_on(Channel& channel, std::uint64_t seen, clock::time_point until);
  bool is_active(Channel& channel);
  bool is_moved(Channel& channel);
  void mark_moved(Channel& channel) DISTLOCK_REQUIRES(mutex_);
  void poke() noexcept;

  ConnectionOptions options_ DISTLOCK_GUARDED_BY(mutex_);
  const std::size_t max_waiters_;
  const detail::SharedEventHook events_;  // told of reconnects
  const int wake_fd_;
  const bool sharded_;

  mutable detail::Mutex mutex_;
  std::condition_variable connected_;
  // Channel objects are guarded by mutex_ too.
  std::unordered_map<std::string, std::unique_ptr<Channel>> channels_ DISTLOCK_GUARDED_BY(mutex_);
  std::size_t waiters_ DISTLOCK_GUARDED_BY(mutex_) = 0;
  bool up_ DISTLOCK_GUARDED_BY(mutex_) = false;
  bool stopping_ DISTLOCK_GUARDED_BY(mutex_) = false;
  bool retarget_ DISTLOCK_GUARDED_BY(mutex_) = false;  // retarget(): drop the connection
  std::uint64_t connects_ DISTLOCK_GUARDED_BY(mutex_) = 0;

  // Touched by the notifier thread only.
  std::unique_ptr<Connection> connection_;
  std::thread thread_;
};

inline Notifier::Notifier(ConnectionOptions options, std::size_t max_waiters,
                          detail::SharedEventHook events, bool sharded)
    : options_(std::move(options)),
      max_waiters_(max_waiters),
      events_(std::move(events)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      sharded_(sharded) {
  if (wake_fd_ < 0) throw Error(Errc::io_error, "eventfd failed for the notifier");
  thread_ = std::thread([this] { run(); });
}

inline Notifier::~Notifier() {
  {
    detail::MutexLock lock(mutex_);
    stopping_ = true;
  }
  poke();
  thread_.join();
  ::close(wake_fd_);
}

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

inline void Notifier::mark_moved(Channel& channel) {
  // Left "sent", so this connection does not ask again; a reconnect does.
  channel.moved = true;
  channel.confirmed = false;
  ++channel.generation;
  channel.changed.notify_all();
}

inline void Notifier::wake(const std::string& channel) {
  detail::MutexLock lock(mutex_);
  if (const auto it = channels_.find(channel); it != channels_.end()) {
    ++it->second->generation;
    it->second->changed.notify_all();
  }
}

inline void Notifier::retarget(ConnectionOptions options) {
  {
    detail::MutexLock lock(mutex_);
    options_ = std::move(options);
    retarget_ = true;
  }
  poke();
}

inline std::size_t Notifier::channel_count() const {
  detail::MutexLock lock(mutex_);
  return channels_.size();
}

inline std::uint64_t Notifier::connects() const {
  detail::MutexLock lock(mutex_);
  return connects_;
}

inline void Notifier::poke() noexcept {
  const std::uint64_t one = 1;
  static_cast<void>(::write(wake_fd_, &one, sizeof one));
}

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
      std::uint64_t drained;
      static_cast<void>(::read(wake_fd_, &drained, sizeof drained));
      retry_pause = std::min(retry_pause * 2, std::chrono::milliseconds(1000));
      continue;
    }
    retry_pause = std::chrono::milliseconds(10);
    try {
      const int timeout_ms = sync_subscriptions();
      pollfd fds[2] = {{connection_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (::poll(fds, 2, timeout_ms) < 0) continue;
      if (fds[1].revents != 0) {
        std::uint64_t drained;
        static_cast<void>(::read(wake_fd_, &drained, sizeof drained));
      }
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
    ++channel.generation;
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
