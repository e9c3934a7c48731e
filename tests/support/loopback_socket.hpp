// The non-blocking loopback TCP steps FaultProxy is made of: listen on a
// port of 127.0.0.1, start a connect without waiting for it, learn how it
// ended, close as a clean end of stream or as a reset. Each throws or
// answers plainly; none blocks, so one thread can serve many connections.
// Depends only on POSIX.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace distlock::testing::loopback {

inline std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

inline void set_non_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

inline void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/// A non-blocking socket listening on 127.0.0.1:`port` (0: a free port,
/// written back to `port`). Throws std::runtime_error naming `who`.
inline int listen_on(int& port, const std::string& who) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(errno_text(who + ": socket"));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string message = errno_text(who + ": bind/listen");
    ::close(fd);
    throw std::runtime_error(message);
  }
  port = ntohs(address.sin_port);
  return fd;
}

enum class Connect { done, in_progress, failed };

/// Starts a non-blocking connect to host:port (an IPv4 address) on a new
/// socket, stored in `fd` (-1 if none could be made). Never waits: a
/// stopped server whose accept backlog is full leaves a connect hanging for
/// minutes.
inline Connect start_connect(const std::string& host, int port, int& fd) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Connect::failed;
  set_no_delay(fd);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    return Connect::done;
  }
  return errno == EINPROGRESS ? Connect::in_progress : Connect::failed;
}

/// How a connect that was in progress on `fd` stands now.
inline Connect connect_state(int fd) {
  pollfd ready{fd, POLLOUT, 0};
  if (::poll(&ready, 1, 0) <= 0) return Connect::in_progress;
  int error = 0;
  socklen_t length = sizeof(error);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
  return error == 0 ? Connect::done : Connect::failed;
}

/// Closes `fd` (and sets it to -1); with `reset`, as an RST (SO_LINGER 0),
/// so the peer reads ECONNRESET rather than a clean end of stream.
inline void close_socket(int& fd, bool reset) {
  if (fd < 0) return;
  if (reset) {
    linger hard{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  }
  ::close(fd);
  fd = -1;
}

}  // namespace distlock::testing::loopback
