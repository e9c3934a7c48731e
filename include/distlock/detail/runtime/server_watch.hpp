// ServerWatch: notices, with no caller's help, that the server behind a
// backend went away and came back, so that the leases held there are
// revalidated within about a second of its return instead of at their next
// renewal (a third of a TTL later), or never, for a lease of fixed ttl.
//
// One thread per Runtime that asks for it (a Client's, a SentinelClient's),
// started with the Watchdog, so only by a process that has held a lease. It
// keeps one connection of its own to the server and waits on it with
// poll(), which costs the server nothing: a server process that ends closes
// it, and the wait returns at once. A connection can also die without a
// word (the server's host rebooted, a NAT or a proxy forgot it), so while
// any lease is held the thread sends one PING per probe_every on it, per
// server and not per lease; the write that meets a forgotten connection
// fails. A connection that broke is made again every retry_every while
// leases are held (at a slower pace when none are), and the first one made
// has every lease revalidated (Runtime::revalidate): kept where its key
// still holds its token, reported lost otherwise.
//
// The thread uses no lock of the caller's and never runs a user callback:
// revalidation only asks the Watchdog for a round. Stopping it waits for a
// PING or a connect in progress, so at most the command or connect timeout.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "distlock/connection_options.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/runtime/event_fd.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

class ServerWatch {
 public:
  using clock = std::chrono::steady_clock;
  /// How often a held lease's server is asked whether the connection still
  /// reaches it. Half of the one second in which a restart must be noticed.
  static constexpr std::chrono::milliseconds probe_every{500};
  /// How soon a broken connection is made again while leases are held.
  static constexpr std::chrono::milliseconds retry_every{100};
  /// The longest the thread waits without looking, when no lease is held.
  static constexpr std::chrono::milliseconds idle_look{1000};

  /// What the watch asks and tells the backend, from its own thread; none
  /// may block for long.
  struct Hooks {
    std::function<bool()> holding;     // whether any lease is held
    std::function<void()> broke;       // the connection broke: idle ones may be dead too
    std::function<void()> revalidate;  // have every lease re-read
  };

  /// Watches the server at `options`.
  ServerWatch(ConnectionOptions options, Hooks hooks)
      : options_(std::move(options)),
        hooks_(std::move(hooks)),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd_ < 0) throw ConnectionError(Errc::connect_failed, "eventfd failed");
    thread_ = std::thread([this] { run(); });
  }

  ~ServerWatch() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    signal_eventfd(wake_fd_);
    thread_.join();
    ::close(wake_fd_);
  }

  ServerWatch(const ServerWatch&) = delete;
  ServerWatch& operator=(const ServerWatch&) = delete;

  /// The backend follows a new master at `options`: watch that one from
  /// now on. The backend has the leases revalidated there itself.
  void retarget(ConnectionOptions options) {
    {
      MutexLock lock(mutex_);
      options_ = std::move(options);
      retargeted_ = true;
    }
    signal_eventfd(wake_fd_);
  }

 private:
  enum class Woken { stop, moved, readable, timeout };

  void run() {
    std::unique_ptr<Connection> connection;
    bool broke = false;   // the connection broke: revalidate on the next one
    bool pinging = true;  // the server lets us PING
    auto retry = retry_every;
    for (;;) {
      ConnectionOptions where;
      {
        MutexLock lock(mutex_);
        if (stopping_) return;
        if (std::exchange(retargeted_, false)) {
          connection.reset();
          broke = false;
        }
        where = options_;
      }
      if (!connection) {
        try {
          connection = std::make_unique<Connection>(where);
          retry = retry_every;
        } catch (...) {  // unreachable, refused, or a credentials provider that threw
          broke = true;
          // A server that stays away while nothing is held is tried less often.
          if (wait(-1, hooks_.holding() ? retry_every : retry) == Woken::stop) return;
          retry = std::min(retry * 2, idle_look);
          continue;
        }
        if (std::exchange(broke, false) && hooks_.holding()) hooks_.revalidate();
      }
      // Past max_connection_age: replaced like the pool's (fresh
      // credentials), by one to the same server, so nothing is revalidated.
      if (connection->aged()) {
        connection.reset();
        continue;
      }
      const bool holding = hooks_.holding();
      switch (wait(connection->fd(), holding ? probe_every : idle_look)) {
        case Woken::stop: return;
        case Woken::moved: continue;
        case Woken::readable:
          // Closed, or a reply nobody asked for; a TLS session ticket is
          // neither, and stale() reads it away.
          if (connection->stale()) broke = lost(connection);
          continue;
        case Woken::timeout:
          if (!holding || !pinging) continue;
          try {
            connection->command("PING").throw_if_error();
          } catch (const ServerError&) {
            // Refused (an ACL without +ping): the connection is fine, and
            // from now on only a close is noticed.
            pinging = false;
          } catch (...) {
            broke = lost(connection);
          }
          continue;
      }
    }
  }

  // Drops the watch's connection; the backend's idle ones went the same way
  // most likely (closed by the same restart, or as silent), and a
  // revalidation sent on one of them would wait out its timeout.
  bool lost(std::unique_ptr<Connection>& connection) {
    connection.reset();
    if (hooks_.broke) hooks_.broke();
    return true;
  }

  // Waits for `fd` (none if negative) to become readable, a wake-up, or `for_at_most`.
  Woken wait(int fd, std::chrono::milliseconds for_at_most) {
    const clock::time_point until = clock::now() + for_at_most;
    for (;;) {
      pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now());
      const int got =
          ::poll(fds, fd < 0 ? 1 : 2,
                 static_cast<int>(std::max<long long>(0, static_cast<long long>(left.count()))));
      if (got < 0 && errno == EINTR) continue;
      if (got > 0 && fds[0].revents != 0) {
        drain_eventfd(wake_fd_);
        MutexLock lock(mutex_);
        if (stopping_) return Woken::stop;
        if (retargeted_) return Woken::moved;
        continue;
      }
      if (got > 0) return Woken::readable;
      return Woken::timeout;
    }
  }

  Mutex mutex_;
  ConnectionOptions options_ DISTLOCK_GUARDED_BY(mutex_);
  bool retargeted_ DISTLOCK_GUARDED_BY(mutex_) = false;
  bool stopping_ DISTLOCK_GUARDED_BY(mutex_) = false;
  const Hooks hooks_;
  const int wake_fd_;
  std::thread thread_;
};

}  // namespace distlock::detail
