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
// woken to look again, since releases may have been missed meanwhile. A
// connection past max_connection_age is not lost but replaced: the new one
// is subscribed before the old one goes, and nobody is woken for it.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/wake.hpp"
#include "distlock/detail/runtime/event_fd.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"

namespace distlock {

namespace detail {
struct NotifierProbe;  // what tests read of a Notifier (detail/runtime/notifier_probe.hpp)
}  // namespace detail

/// The release notifications of one Redis endpoint. Thread-safe.
class Notifier {
  friend struct detail::NotifierProbe;
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
      if (notifier_ == nullptr) return;
      detail::MutexLock lock(notifier_->mutex_);
      --notifier_->waiters_;
      // No wake-up for the thread: it unsubscribes lingering channels on its
      // own timer, and a waiter's return is not delayed by it.
      if (--channel_->waiters == 0) channel_->abandoned = clock::now();
    }

    /// Counts the wake-ups of this channel (messages, reconnects, wake()).
    std::uint64_t generation() const {
      detail::MutexLock lock(notifier_->mutex_);
      return channel_->generation;
    }

    /// Sleeps until generation() differs from `seen` or `until` passes.
    /// Returns true if woken by a wake-up.
    bool wait(std::uint64_t seen, clock::time_point until) {
      detail::MutexLock lock(notifier_->mutex_);
      return lock.wait_until(channel_->changed, until,
                             [&] { return channel_->generation != seen; });
    }

    /// True while the server has confirmed this channel's subscription on a
    /// live connection: only then can a release be relied on to wake us. A
    /// lost connection unconfirms every channel, and a new one confirms
    /// them again.
    bool active() const {
      detail::MutexLock lock(notifier_->mutex_);
      return channel_->confirmed;
    }

    /// For a waiter that is not a thread (detail/base/wake.hpp): `wake`
    /// fires at the next change of this channel (a confirmation, a move, a
    /// reconnect, wake()), or at a release when its turn comes; once,
    /// unless disarmed first. Whoever arms it checks afterwards whether
    /// what it waits for came meanwhile.
    void arm(detail::Wake& wake) {
      detail::MutexLock lock(notifier_->mutex_);
      channel_->armed.arm(wake);
    }
    /// Arms `wake` for a sleep, unless, since generation `seen`, a change
    /// every waiter looks at came, or a release nobody was armed for: false
    /// then, and the caller attempts at once. A wake that is not exclusive
    /// (a wait on any of several locks) looks again after any change, as a
    /// thread's wait() does, and leaves a missed release to a waiter in turn.
    bool sleep_on(detail::Wake& wake, std::uint64_t seen) {
      detail::MutexLock lock(notifier_->mutex_);
      if (channel_->generation != seen &&
          (!wake.exclusive || channel_->looked_again > seen || channel_->armed.claim_missed())) {
        return false;
      }
      channel_->armed.arm(wake);
      return true;
    }
    void disarm(detail::Wake& wake) {
      detail::MutexLock lock(notifier_->mutex_);
      channel_->armed.disarm(wake);
    }
    /// Whether `wake` was woken by a release with the baton (see
    /// detail/base/wake.hpp), which its waiter now uses for an attempt.
    bool take_baton(detail::Wake& wake) {
      detail::MutexLock lock(notifier_->mutex_);
      return channel_->armed.take_baton(wake);
    }

    /// Sharded only: the node dropped the subscription because the
    /// channel's slot is served elsewhere now; subscribe again there.
    bool moved() const {
      detail::MutexLock lock(notifier_->mutex_);
      return channel_->moved;
    }

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

 private:
  struct Channel {
    std::size_t waiters = 0;
    std::uint64_t generation = 0;
    bool confirmed = false;         // the server said "subscribe" on the current connection
    bool sent = false;              // SUBSCRIBE written on the current connection
    bool moved = false;             // sharded: the node dropped it (slot served elsewhere)
    clock::time_point abandoned{};  // when waiters last dropped to zero
    std::condition_variable changed;
    detail::WakeList armed;          // event-loop waiters, told with `changed`, in turn
    std::uint64_t looked_again = 0;  // the generation of the last change for every waiter
  };

  /// How long a channel nobody waits on stays subscribed.
  static constexpr std::chrono::milliseconds linger{50};

  void run();
  bool connect_once();
  // Replacing a connection past max_connection_age (notifier_thread.hpp).
  void replace_if_due();
  bool replace_aged();
  bool subscribe_fresh(Connection& fresh, const std::vector<std::string>& names,
                       std::unordered_map<std::string, bool>& confirmed, clock::time_point until);
  bool read_to_barrier(clock::time_point until);
  int until_replacement(int timeout_ms) const;
  int sync_subscriptions();
  void handle(const Reply& reply);
  void drop_connection();
  void mark_moved(Channel& channel) DISTLOCK_REQUIRES(mutex_);
  enum class Change { confirmed, released, look_again };
  void announce(Channel& channel, Change change) DISTLOCK_REQUIRES(mutex_);
  static int poll_timeout(clock::time_point until);

  ConnectionOptions options_ DISTLOCK_GUARDED_BY(mutex_);
  const std::size_t max_waiters_;
  const detail::SharedEventHook events_;  // told of reconnects
  const int wake_fd_;
  const bool sharded_;

  mutable detail::Mutex mutex_;
  // Channel objects are guarded by mutex_ too.
  std::unordered_map<std::string, std::unique_ptr<Channel>> channels_ DISTLOCK_GUARDED_BY(mutex_);
  std::size_t waiters_ DISTLOCK_GUARDED_BY(mutex_) = 0;
  bool stopping_ DISTLOCK_GUARDED_BY(mutex_) = false;
  bool retarget_ DISTLOCK_GUARDED_BY(mutex_) = false;  // retarget(): drop the connection
  std::uint64_t connects_ DISTLOCK_GUARDED_BY(mutex_) = 0;
  std::uint64_t messages_ DISTLOCK_GUARDED_BY(mutex_) = 0;

  // Made, read, written and dropped by the notifier thread only.
  std::unique_ptr<Connection> connection_;
  // The notifier thread's: after a replacement that failed, the next try
  // waits until replace_after_, and the pause doubles.
  clock::time_point replace_after_{};
  std::chrono::milliseconds replace_pause_{10};
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
  detail::signal_eventfd(wake_fd_);
  thread_.join();
  ::close(wake_fd_);
}

inline void Notifier::mark_moved(Channel& channel) {
  // Left "sent", so this connection does not ask again; a reconnect does.
  channel.moved = true;
  channel.confirmed = false;
  ++channel.generation;
  announce(channel, Change::look_again);
}

// Every waiter of a channel that changed looks again: the threads asleep
// on it and the event-loop waiters armed on it; for a release message, the
// event-loop waiters next in turn only (detail/base/wake.hpp). A wake-up
// that no release message brought (a reconnect, a move, wake()) is one
// for every waiter: those not armed now see it as they go to sleep.
inline void Notifier::announce(Channel& channel, Change change) {
  channel.changed.notify_all();
  switch (change) {
    case Change::released: channel.armed.fire_next(); return;
    case Change::look_again: channel.looked_again = channel.generation; break;
    case Change::confirmed: break;
  }
  channel.armed.fire_all();
}

inline void Notifier::wake(const std::string& channel) {
  detail::MutexLock lock(mutex_);
  if (const auto it = channels_.find(channel); it != channels_.end()) {
    ++it->second->generation;
    announce(*it->second, Change::look_again);
  }
}

inline void Notifier::retarget(ConnectionOptions options) {
  {
    detail::MutexLock lock(mutex_);
    options_ = std::move(options);
    retarget_ = true;
  }
  detail::signal_eventfd(wake_fd_);
}

}  // namespace distlock

// The waiters' side: subscribing, waiting, leaving.
#include "distlock/detail/runtime/notifier_waiters.hpp"  // IWYU pragma: export
// The notifier thread's side: its loop, the connection and the messages.
#include "distlock/detail/runtime/notifier_thread.hpp"  // IWYU pragma: export
