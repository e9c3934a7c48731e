// A hostile server: a proxy on a free loopback port, in front of a real
// redis-server, that answers one chosen command with what a real server
// never would.
//
// Defines distlock::testing::HostileServer. Every connection it accepts is
// forwarded to the target server, command by command and reply by reply: it
// parses the client's RESP arrays to learn which command each reply answers,
// and the server's replies to learn where each ends. A test scripts how the
// replies to one verb (SET, EVALSHA, PTTL...) are mangled; everything else
// passes as the real server answered it, so the connect handshake, the
// scripts and the keys are real, and a test can ask the server itself
// whether a key was left behind. The mangling (Act):
//   - replace: the reply is dropped and `bytes` sent instead (wrong types,
//     a 2^62 bulk length, an error where a number belongs, garbage);
//   - drip: the real reply, one byte at a time, `gap` apart;
//   - close_mid_reply: the first half of the real reply, then both sides
//     are closed;
//   - push_first: a RESP3 push frame, then the real reply;
//   - silence: the reply is dropped; the connection stays open.
// A connection that subscribes (SUBSCRIBE and kin) is passed through from
// then on: its messages answer no command. hits() counts mangled replies,
// so a test can check its script really ran. Two threads per connection
// with blocking sockets: a test makes a handful of connections, and the
// destructor ends every one by shutting its sockets down. Depends only on
// POSIX, not on GoogleTest or distlock.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/loopback_socket.hpp"

namespace distlock::testing {

namespace resp {

// The size of the CRLF-ended line starting at `at` (without the CRLF), or
// npos while its end has not arrived.
inline std::size_t line_end(std::string_view buffer, std::size_t at) {
  return buffer.find("\r\n", at);
}

/// The size of the RESP2/RESP3 frame that starts `buffer` at `at`, or 0
/// while it is incomplete. Throws std::runtime_error on bytes that are not
/// RESP (the target is a real server: that would be a bug of the harness).
inline std::size_t frame_size(std::string_view buffer, std::size_t at = 0) {
  if (at >= buffer.size()) return 0;
  const std::size_t end = line_end(buffer, at);
  if (end == std::string_view::npos) return 0;
  const char type = buffer[at];
  const long long count = std::atoll(std::string(buffer.substr(at + 1, end - at - 1)).c_str());
  std::size_t next = end + 2;
  switch (type) {
    case '+':
    case '-':
    case ':':
    case '_':
    case ',':
    case '#':
    case '(': return next - at;
    case '$':
    case '!':
    case '=':
      if (count < 0) return next - at;
      next += static_cast<std::size_t>(count) + 2;
      return next <= buffer.size() ? next - at : 0;
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      const long long elements = type == '%' || type == '|' ? 2 * count : count;
      for (long long i = 0; i < elements; ++i) {
        const std::size_t size = frame_size(buffer, next);
        if (size == 0) return 0;
        next += size;
      }
      return next - at;
    }
    default: throw std::runtime_error("HostileServer: not RESP: " + std::string(1, type));
  }
}

/// The bulk strings of a complete command frame (an array of bulks).
inline std::vector<std::string> command_argv(std::string_view frame) {
  std::vector<std::string> argv;
  std::size_t at = frame.find("\r\n") + 2;
  while (at < frame.size() && frame[at] == '$') {
    const std::size_t end = line_end(frame, at);
    const auto size = static_cast<std::size_t>(
        std::atoll(std::string(frame.substr(at + 1, end - at - 1)).c_str()));
    argv.emplace_back(frame.substr(end + 2, size));
    at = end + 2 + size + 2;
  }
  return argv;
}

inline std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace resp

class HostileServer {
 public:
  enum class Act { replace, drip, close_mid_reply, push_first, silence };

  /// How the replies to one verb are mangled. With `arg` set, only commands
  /// one of whose arguments contains it (a key, a script's sha) match.
  struct Script {
    std::string verb;
    Act act = Act::replace;
    std::string bytes;  // for replace
    std::string arg;
    std::chrono::milliseconds gap{1};  // for drip
  };

  /// The push frame push_first sends: what a RESP3 server sends a client
  /// that subscribed with HELLO 3, here to one that never asked.
  static constexpr std::string_view push_frame =
      ">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$7\r\npayload\r\n";

  /// Listens on 127.0.0.1 at a free port; forwards to host:port.
  HostileServer(std::string host, int port) : target_host_(std::move(host)), target_port_(port) {
    listen_fd_ = loopback::listen_on(port_, "HostileServer");
    // Blocking from here: accept() is woken by shutdown() at the end.
    ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL, 0) & ~O_NONBLOCK);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~HostileServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    std::vector<std::shared_ptr<Link>> links;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      links = links_;
    }
    for (auto& link : links) link->shut();
    for (auto& link : links) {
      link->upstream.join();
      link->downstream.join();
      ::close(link->client_fd);
      ::close(link->server_fd);
    }
  }

  HostileServer(const HostileServer&) = delete;
  HostileServer& operator=(const HostileServer&) = delete;

  int port() const { return port_; }
  std::string host() const { return "127.0.0.1"; }

  /// Mangles every later reply to script.verb as it says (one script at a
  /// time; a new one replaces it).
  void script(Script script) {
    script.verb = resp::upper(script.verb);
    std::lock_guard<std::mutex> guard(mutex_);
    script_ = std::move(script);
  }
  /// Every reply passes unchanged again.
  void clear() { script(Script{}); }

  /// Replies mangled so far.
  std::size_t hits() const { return hits_.load(); }
  std::size_t accepted() const { return accepted_.load(); }

 private:
  struct Link {
    int client_fd = -1;
    int server_fd = -1;
    std::thread upstream;
    std::thread downstream;
    std::mutex mutex;
    std::deque<std::vector<std::string>> commands;  // sent, their replies not yet seen
    bool subscribed = false;
    void shut() {
      ::shutdown(client_fd, SHUT_RDWR);
      ::shutdown(server_fd, SHUT_RDWR);
    }
  };

  static bool write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

  // Reads more of fd into buffer; false at the end of the stream.
  static bool read_more(int fd, std::string& buffer) {
    char chunk[16 * 1024];
    const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) return false;
    buffer.append(chunk, static_cast<std::size_t>(got));
    return true;
  }

  void accept_loop() {
    while (!stopping_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;  // shut down (stopping_), or a transient error
      int server = -1;
      if (loopback::start_connect(target_host_, target_port_, server) ==
          loopback::Connect::failed) {
        loopback::close_socket(server, false);
        ::close(client);
        continue;
      }
      // Blocking again once connected: each side has a thread of its own.
      pollfd ready{server, POLLOUT, 0};
      ::poll(&ready, 1, 5000);
      ::fcntl(server, F_SETFL, ::fcntl(server, F_GETFL, 0) & ~O_NONBLOCK);
      loopback::set_no_delay(client);
      auto link = std::make_shared<Link>();
      link->client_fd = client;
      link->server_fd = server;
      ++accepted_;
      std::lock_guard<std::mutex> guard(mutex_);
      if (stopping_) {
        ::close(client);
        ::close(server);
        continue;
      }
      link->upstream = std::thread([this, link] { forward_commands(*link); });
      link->downstream = std::thread([this, link] { forward_replies(*link); });
      links_.push_back(std::move(link));
    }
  }

  // Client to server: each command is noted before it is sent on, so its
  // reply always finds it.
  void forward_commands(Link& link) {
    std::string buffer;
    while (read_more(link.client_fd, buffer)) {
      std::size_t size = 0;
      while ((size = resp::frame_size(buffer)) > 0) {
        const std::string_view frame(buffer.data(), size);
        std::vector<std::string> argv = resp::command_argv(frame);
        {
          std::lock_guard<std::mutex> guard(link.mutex);
          if (!argv.empty()) {
            const std::string verb = resp::upper(argv[0]);
            if (verb == "SUBSCRIBE" || verb == "SSUBSCRIBE" || verb == "PSUBSCRIBE") {
              link.subscribed = true;
            }
          }
          link.commands.push_back(std::move(argv));
        }
        if (!write_all(link.server_fd, frame)) return link.shut();
        buffer.erase(0, size);
      }
    }
    link.shut();
  }

  bool matches(const std::vector<std::string>& argv, Script& script) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (script_.verb.empty() || argv.empty() || resp::upper(argv[0]) != script_.verb) return false;
    if (!script_.arg.empty() &&
        std::none_of(argv.begin() + 1, argv.end(), [&](const std::string& arg) {
          return arg.find(script_.arg) != std::string::npos;
        })) {
      return false;
    }
    script = script_;
    return true;
  }

  // Server to client: each reply as it is, or mangled by the script.
  void forward_replies(Link& link) {
    std::string buffer;
    while (read_more(link.server_fd, buffer)) {
      std::size_t size = 0;
      while ((size = resp::frame_size(buffer)) > 0) {
        const std::string reply = buffer.substr(0, size);
        buffer.erase(0, size);
        std::vector<std::string> argv;
        {
          std::lock_guard<std::mutex> guard(link.mutex);
          if (!link.subscribed && !link.commands.empty()) {
            argv = std::move(link.commands.front());
            link.commands.pop_front();
          }
        }
        Script script;
        if (!matches(argv, script)) {
          if (!write_all(link.client_fd, reply)) return link.shut();
          continue;
        }
        ++hits_;
        if (!mangle(link, script, reply)) return link.shut();
      }
    }
    link.shut();
  }

  // False when the link is to end.
  static bool mangle(Link& link, const Script& script, const std::string& reply) {
    switch (script.act) {
      case Act::replace: return write_all(link.client_fd, script.bytes);
      case Act::drip:
        for (const char byte : reply) {
          // The gap is the hostility itself (a reply trickling in), not a
          // wait for anything.
          std::this_thread::sleep_for(script.gap);
          if (!write_all(link.client_fd, std::string_view(&byte, 1))) return false;
        }
        return true;
      case Act::close_mid_reply:
        write_all(link.client_fd, std::string_view(reply).substr(0, reply.size() / 2));
        return false;
      case Act::push_first:
        return write_all(link.client_fd, push_frame) && write_all(link.client_fd, reply);
      case Act::silence: return true;
    }
    return true;
  }

  const std::string target_host_;
  const int target_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> hits_{0};
  std::atomic<std::size_t> accepted_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  Script script_;
  std::vector<std::shared_ptr<Link>> links_;
};

}  // namespace distlock::testing
