// A userspace TCP fault proxy on loopback, for tests that put a network
// fault between clients and a redis-server without root or tc.
//
// Defines distlock::testing::FaultProxy. It listens on a free loopback port
// and forwards every connection it accepts to one target (host, port). One
// thread runs every connection with poll() over non-blocking sockets, so a
// fault never blocks the test that sets it. From the test, at any time:
//   - set_latency(direction, d): each chunk of bytes is forwarded d after it
//     was read;
//   - stall(direction) / release(direction): hold every byte going that way
//     (nothing is lost), then let them all through in order;
//   - hold_open(direction): stall only the connections accepted so far
//     (later ones pass freely: a new connection overtaking an old one),
//     until release(direction);
//   - blackhole(direction, true/false): read and drop every byte going that
//     way; a connection that lost bytes is reset when the blackhole is lifted
//     (its byte stream is broken, as a real peer would find after a timeout);
//   - reset_all(): reset (RST) every open connection;
//   - cut(Cut::refuse) / cut(Cut::drop) and restore(): a server gone away
//     (open connections reset, new ones refused with ECONNREFUSED) or a
//     silent partition (nothing passes either way, new connections are
//     accepted and hear nothing); restore() ends it, resetting connections
//     that lost bytes.
// As on a real network, an end that closes or resets its connection has what
// it sent before delivered first (latency and all); then the close or the
// reset is passed on.
// Counters (connections accepted, bytes forwarded each way) let a test see
// that traffic really went through the proxy. Depends only on POSIX, not on
// GoogleTest or distlock.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/loopback_socket.hpp"

namespace distlock::testing {

class FaultProxy {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Direction { to_server, to_client, both };
  enum class Cut { refuse, drop };

  /// Listens on 127.0.0.1 at a free port and starts forwarding to
  /// target_host:target_port (an IPv4 address) unless start_now is false
  /// (then start() does: a test that forks first starts the thread after).
  FaultProxy(std::string target_host, int target_port, bool start_now = true)
      : target_host_(std::move(target_host)), target_port_(target_port) {
    if (::pipe(wake_) != 0) throw std::runtime_error(loopback::errno_text("FaultProxy: pipe"));
    loopback::set_non_blocking(wake_[0]);
    loopback::set_non_blocking(wake_[1]);
    listen_fd_ = loopback::listen_on(port_, "FaultProxy");
    if (start_now) start();
  }

  ~FaultProxy() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stopping_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    for (auto& link : links_) close_link(*link, false);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  void start() {
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  const std::string& host() const { return host_; }
  int port() const { return port_; }

  void set_latency(Direction direction, std::chrono::milliseconds latency) {
    change([&](Faults& faults) {
      for (const int d : sides(direction)) faults.latency[d] = latency;
    });
  }
  void stall(Direction direction) {
    change([&](Faults& faults) {
      for (const int d : sides(direction)) faults.stalled[d] = true;
    });
  }
  void hold_open(Direction direction) {
    const std::size_t through = accepted_.load();
    change([&](Faults& faults) {
      for (const int d : sides(direction)) faults.held_through[d] = through;
    });
  }
  void release(Direction direction) {
    change([&](Faults& faults) {
      for (const int d : sides(direction)) {
        faults.stalled[d] = false;
        faults.held_through[d] = 0;
      }
    });
  }
  void blackhole(Direction direction, bool on) {
    change([&](Faults& faults) {
      for (const int d : sides(direction)) faults.blackholed[d] = on;
      if (!on) faults.reset_broken = true;
    });
  }
  void reset_all() {
    change([](Faults& faults) { faults.reset_requested = true; });
  }
  void cut(Cut how) {
    change([&](Faults& faults) {
      faults.cut = how == Cut::refuse ? CutState::refuse : CutState::drop;
      if (how == Cut::refuse) faults.reset_requested = true;
    });
  }
  void restore() {
    change([](Faults& faults) {
      faults.cut = CutState::none;
      faults.reset_broken = true;
    });
  }
  /// Ends every fault: no latency, nothing stalled, blackholed or cut.
  void heal() {
    change([](Faults& faults) {
      const bool reset =
          faults.cut != CutState::none || faults.blackholed[0] || faults.blackholed[1];
      faults = Faults{};
      faults.reset_broken = reset;
    });
  }

  /// Waits until the proxy thread has applied every change made before the
  /// call (a fault set by the test is in force when this returns).
  void sync() {
    if (!thread_.joinable()) return;  // not started: start() applies it
    std::unique_lock<std::mutex> guard(mutex_);
    const std::uint64_t wanted = generation_;
    applied_cv_.wait(guard, [&] { return applied_ >= wanted || stopping_; });
  }

  std::size_t accepted() const { return accepted_.load(); }
  std::size_t open_connections() const { return open_.load(); }
  std::uint64_t bytes_to_server() const { return forwarded_[0].load(); }
  std::uint64_t bytes_to_client() const { return forwarded_[1].load(); }

 private:
  enum class CutState { none, refuse, drop };

  struct Faults {
    std::chrono::milliseconds latency[2]{};
    bool stalled[2]{};
    std::size_t held_through[2]{};  // links numbered up to this one are stalled
    bool blackholed[2]{};
    CutState cut = CutState::none;
    bool reset_requested = false;
    bool reset_broken = false;
  };

  struct Chunk {
    std::string bytes;
    std::size_t sent = 0;
    Clock::time_point due;
  };

  // One accepted connection: fd[0] the client side, fd[1] the server side.
  // Direction 0 reads fd[0] and writes fd[1]; direction 1 the reverse.
  struct Link {
    int fd[2] = {-1, -1};
    std::size_t number = 0;  // 1 for the first connection accepted, and so on
    std::deque<Chunk> queue[2];
    bool read_closed[2] = {false, false};  // EOF or a reset seen on the reading side
    bool reset_seen[2] = {false, false};   // that end was a reset, passed on as one
    bool unwritable[2] = {false, false};   // direction d's destination is gone
    bool broken = false;                   // bytes were dropped
    bool connecting = false;               // the server side's connect is in progress
    bool dead = false;
  };

  static std::vector<int> sides(Direction direction) {
    switch (direction) {
      case Direction::to_server: return {0};
      case Direction::to_client: return {1};
      default: return {0, 1};
    }
  }

  template <class Change>
  void change(Change apply) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      apply(wanted_);
      ++generation_;
    }
    wake();
    sync();
  }

  void wake() {
    const char byte = 1;
    [[maybe_unused]] const ssize_t ignored = ::write(wake_[1], &byte, 1);
  }

  // Starts the connect to the target; the link is `connecting` until the
  // socket is writable, so the proxy thread goes on serving every other link.
  bool connect_upstream(Link& link) const {
    const loopback::Connect state = loopback::start_connect(target_host_, target_port_, link.fd[1]);
    link.connecting = state == loopback::Connect::in_progress;
    return state != loopback::Connect::failed;
  }

  // Whether a connect in progress has ended, and how: false once it failed.
  static bool finish_connect(Link& link) {
    const loopback::Connect state = loopback::connect_state(link.fd[1]);
    if (state == loopback::Connect::done) link.connecting = false;
    return state != loopback::Connect::failed;
  }

  // Closes both sides; with `reset`, as an RST (SO_LINGER 0), so the peer
  // reads ECONNRESET rather than a clean end of stream.
  void close_link(Link& link, bool reset) {
    if (link.dead) return;
    for (int& fd : link.fd) loopback::close_socket(fd, reset);
    link.dead = true;
    --open_;
  }

  void accept_all(const Faults& faults) {
    for (;;) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) return;
      loopback::set_no_delay(client);
      auto link = std::make_unique<Link>();
      link->fd[0] = client;
      link->number = ++accepted_;
      ++open_;
      if (!connect_upstream(*link)) {
        close_link(*link, true);  // the server is gone: the client sees a reset
        continue;
      }
      if (faults.cut == CutState::drop) link->broken = true;
      links_.push_back(std::move(link));
    }
  }

  // Reads what is there from direction d's source into its queue (or drops
  // it), noting an end of stream or a reset in read_closed[d].
  void read_side(Link& link, int d, const Faults& faults, Clock::time_point now) {
    char buffer[65536];
    for (;;) {
      const ssize_t got = ::read(link.fd[d], buffer, sizeof(buffer));
      if (got > 0) {
        if (faults.blackholed[d] || faults.cut == CutState::drop) {
          link.broken = true;
          continue;
        }
        Chunk chunk;
        chunk.bytes.assign(buffer, static_cast<std::size_t>(got));
        chunk.due = now + faults.latency[d];
        link.queue[d].push_back(std::move(chunk));
        continue;
      }
      if (got == 0) {
        link.read_closed[d] = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Reset by the peer. What it sent before still goes through, as TCP
      // delivers it, and the reset follows it (a client dropping a
      // connection that owes it replies resets it right behind a command).
      link.read_closed[d] = true;
      link.reset_seen[d] = true;
      return;
    }
  }

  static bool held(const Link& link, int d, const Faults& faults) {
    return faults.stalled[d] || link.number <= faults.held_through[d];
  }

  // Writes the queued chunks of direction d that are due. Returns false once
  // the link is to be closed.
  bool write_side(Link& link, int d, const Faults& faults, Clock::time_point now) {
    if (held(link, d, faults)) return true;
    auto& queue = link.queue[d];
    // Nobody reads this way any more: what comes is dropped, and the other
    // direction, which still delivers what it holds, ends the link.
    if (link.unwritable[d]) {
      queue.clear();
      return true;
    }
    while (!queue.empty() && queue.front().due <= now) {
      Chunk& chunk = queue.front();
      const ssize_t put = ::send(link.fd[1 - d], chunk.bytes.data() + chunk.sent,
                                 chunk.bytes.size() - chunk.sent, MSG_NOSIGNAL);
      if (put < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        link.unwritable[d] = true;
        queue.clear();
        return true;
      }
      chunk.sent += static_cast<std::size_t>(put);
      forwarded_[d] += static_cast<std::uint64_t>(put);
      if (chunk.sent == chunk.bytes.size()) queue.pop_front();
    }
    // The source closed (or reset) and all it sent is through: pass that on.
    if (queue.empty() && link.read_closed[d]) return false;
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      Faults faults;
      bool relisten = false;
      std::uint64_t seen = 0;  // the changes this round applies
      {
        std::lock_guard<std::mutex> guard(mutex_);
        if (stopping_) break;
        seen = generation_;
        faults = wanted_;
        wanted_.reset_requested = false;
        wanted_.reset_broken = false;
        relisten = faults.cut != CutState::refuse && listen_fd_ < 0;
      }
      if (faults.cut == CutState::refuse && listen_fd_ >= 0) {
        ::close(listen_fd_);  // new connections: ECONNREFUSED
        listen_fd_ = -1;
      }
      if (relisten) listen_fd_ = loopback::listen_on(port_, "FaultProxy");
      for (auto& link : links_) {
        if (faults.reset_requested || (faults.reset_broken && link->broken)) {
          close_link(*link, true);
        }
      }
      const Clock::time_point now = Clock::now();
      if (listen_fd_ >= 0) accept_all(faults);
      for (auto& link : links_) {
        if (link->connecting && !finish_connect(*link)) close_link(*link, true);
        if (link->dead) continue;
        if (link->connecting) {
          // Nothing to or from the server yet; a client that gave up ends it.
          read_side(*link, 0, faults, now);
          if (link->read_closed[0]) close_link(*link, true);
          continue;
        }
        for (int d = 0; d < 2 && !link->dead; ++d) {
          if (!link->read_closed[d]) read_side(*link, d, faults, now);
        }
        for (int d = 0; d < 2 && !link->dead; ++d) {
          if (!write_side(*link, d, faults, now)) close_link(*link, link->reset_seen[d]);
        }
      }
      links_.erase(std::remove_if(links_.begin(), links_.end(),
                                  [](const std::unique_ptr<Link>& link) { return link->dead; }),
                   links_.end());
      {
        std::lock_guard<std::mutex> guard(mutex_);
        applied_ = seen;
      }
      applied_cv_.notify_all();

      // Wait for bytes, a writable socket with bytes owed, a new
      // connection, a change from the test, or the next chunk falling due.
      fds.clear();
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      if (listen_fd_ >= 0) fds.push_back(pollfd{listen_fd_, POLLIN, 0});
      Clock::time_point next_due = Clock::time_point::max();
      for (auto& link : links_) {
        if (link->connecting) {
          fds.push_back(pollfd{link->fd[0], POLLIN, 0});
          fds.push_back(pollfd{link->fd[1], POLLOUT, 0});
          continue;
        }
        for (int d = 0; d < 2; ++d) {
          if (!link->read_closed[d]) fds.push_back(pollfd{link->fd[d], POLLIN, 0});
          if (held(*link, d, faults) || link->queue[d].empty()) continue;
          const Clock::time_point due = link->queue[d].front().due;
          if (due <= now) {
            fds.push_back(pollfd{link->fd[1 - d], POLLOUT, 0});
          } else {
            next_due = std::min(next_due, due);
          }
        }
      }
      int timeout = -1;
      if (next_due != Clock::time_point::max()) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(next_due - Clock::now()).count();
        timeout = static_cast<int>(std::max<long long>(0, left));
      }
      ::poll(fds.data(), fds.size(), timeout);
      char drain[256];
      while (::read(wake_[0], drain, sizeof(drain)) > 0) {
      }
    }
  }

  const std::string target_host_;
  const int target_port_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  int listen_fd_ = -1;  // the proxy thread's once started
  int wake_[2] = {-1, -1};
  std::vector<std::unique_ptr<Link>> links_;  // the proxy thread's

  std::mutex mutex_;
  std::condition_variable applied_cv_;
  Faults wanted_;                 // guarded by mutex_
  std::uint64_t generation_ = 0;  // guarded by mutex_
  std::uint64_t applied_ = 0;     // guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_

  std::atomic<std::size_t> accepted_{0};
  std::atomic<std::size_t> open_{0};
  std::atomic<std::uint64_t> forwarded_[2]{};

  std::thread thread_;
};

}  // namespace distlock::testing
