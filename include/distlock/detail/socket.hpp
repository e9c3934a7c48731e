// Socket: the byte stream under a Connection, plain TCP, a unix socket, or
// TLS over TCP (OpenSSL, detail/tls.hpp). Connection formats what it
// writes and hands what it reads to hiredis's reader; this only moves bytes.
//
// Why our own socket rather than hiredis's: Debian's hiredis (0.14) has no
// TLS, and hiredis 1.x's TLS takes its context's blocking reads, which the
// subscriber (poll() on fd(), then read what is there) cannot use. Owning
// the socket also makes 0.14 and 1.x the same to us: only the reader is
// theirs.
//
// A plain socket blocks, its timeouts kept by the kernel (SO_RCVTIMEO):
// the fastest path, one syscall a read. A TLS socket never blocks; reads
// and writes wait in poll() for what OpenSSL asks (readable or writable),
// because a readable socket may hold only a record that carries no data (a
// session ticket), and a blocking read there would wait for the next reply.
// Connecting (and the handshake) is non-blocking either way, bounded by
// the connect timeout.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/connection_options.hpp"
#include "distlock/detail/tls.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

/// How a read or a write ended.
struct IoStatus {
  enum Kind { ok, timed_out, closed, failed } kind = ok;
  std::string what;  ///< for closed and failed
};

class Socket {
 public:
  using clock = std::chrono::steady_clock;

  /// Connects to `options` (and does the TLS handshake where asked) by
  /// `deadline`. Throws ConnectionError or TimeoutError naming the step.
  Socket(const ConnectionOptions& options, clock::time_point deadline);
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const noexcept { return fd_; }
  bool tls() const noexcept { return ssl_ != nullptr; }

  /// The longest a read or a write may wait.
  void set_timeout(std::chrono::milliseconds timeout);

  /// Reads what is there, waiting up to the timeout for something (or not
  /// at all with `wait` false: then 0 bytes is "nothing yet"). More than one
  /// record's worth may be read: OpenSSL keeps none back.
  std::size_t read(char* buffer, std::size_t size, bool wait, IoStatus& status);
  /// Writes all of `data` within the timeout.
  IoStatus write_all(std::string_view data);
  /// Writes what fits now without waiting: the bytes written, or -1. For
  /// the noexcept paths (an undo behind a late command, an armed attempt).
  long send_now(std::string_view data) noexcept;
  /// Reads and drops what is there without waiting (before a close that
  /// would otherwise reset the connection).
  void drain() noexcept;
  /// True if the peer sent data (or closed) while nothing was asked: a TLS
  /// record with no data in it (a session ticket) is not counted.
  bool sent_unasked() noexcept;

 private:
  void connect_tcp(const ConnectionOptions& options, clock::time_point deadline);
  void connect_unix(const std::string& path, clock::time_point deadline);
  int connect_to(int family, const sockaddr* address, socklen_t length, clock::time_point deadline,
                 std::string& error);
  void handshake(const ConnectionOptions& options, clock::time_point deadline);
  // Waits for what OpenSSL asked (`ssl_error`), up to `timeout_ms` (-1 for
  // ever); false if it did not come.
  bool wait_for(int ssl_error, int timeout_ms) const noexcept;
  void close() noexcept;

  int fd_ = -1;
  SslPtr ssl_;
  std::chrono::milliseconds timeout_{1000};
};

inline int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

inline Socket::Socket(const ConnectionOptions& options, clock::time_point deadline) {
  try {
    if (options.unix_socket.empty()) {
      connect_tcp(options, deadline);
    } else {
      connect_unix(options.unix_socket, deadline);
    }
    if (options.tls.enabled) handshake(options, deadline);
  } catch (...) {
    close();
    throw;
  }
}

inline int Socket::connect_to(int family, const sockaddr* address, socklen_t length,
                              clock::time_point deadline, std::string& error) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int result = ::connect(fd, address, length);
  if (result != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready = 0;
    while ((ready = ::poll(&p, 1, remaining_ms(deadline))) < 0 && errno == EINTR) {
    }
    int so_error = 0;
    socklen_t so_length = sizeof so_error;
    if (ready == 0) {
      error = "timed out";
      so_error = ETIMEDOUT;
    } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_length) != 0) {
      so_error = errno;
    }
    if (so_error == 0) {
      result = 0;
    } else if (error.empty()) {
      error = std::strerror(so_error);
    }
  } else if (result != 0) {
    error = std::strerror(errno);
  }
  if (result != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline void Socket::connect_tcp(const ConnectionOptions& options, clock::time_point deadline) {
  // IPv4 first, IPv6 where a name has no IPv4 address, as hiredis does.
  addrinfo* found = nullptr;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(options.port);
  int rc = EAI_NONAME;
  for (const int family : {AF_INET, AF_INET6}) {
    hints.ai_family = family;
    rc = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found);
    if (rc == 0) break;
  }
  if (rc != 0) {
    throw ConnectionError(Errc::connect_failed,
                          options.endpoint() + ": connect: " + ::gai_strerror(rc));
  }
  std::string error;
  for (const addrinfo* at = found; at != nullptr && fd_ < 0; at = at->ai_next) {
    error.clear();
    fd_ = connect_to(at->ai_family, at->ai_addr, at->ai_addrlen, deadline, error);
    if (error == "timed out") break;
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) {
    if (error == "timed out") {
      throw TimeoutError(Errc::timed_out, options.endpoint() + ": connect: timed out after " +
                                              std::to_string(options.connect_timeout.count()) +
                                              " ms");
    }
    throw ConnectionError(Errc::connect_failed, options.endpoint() + ": connect: " + error);
  }
  // Small commands go out at once (a lock is one), and a dead peer is
  // found by the kernel even on a connection nobody reads.
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (options.keepalive) {
    const int idle = 15;
    ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#ifdef TCP_KEEPIDLE
    ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
#endif
  }
  if (!options.tls.enabled) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

inline void Socket::connect_unix(const std::string& path, clock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    throw InvalidArgument("unix socket path too long: " + path);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  std::string error;
  fd_ = connect_to(AF_UNIX, reinterpret_cast<const sockaddr*>(&address), sizeof address, deadline,
                   error);
  if (fd_ < 0) {
    if (error == "timed out") throw TimeoutError(Errc::timed_out, path + ": connect: timed out");
    throw ConnectionError(Errc::connect_failed, path + ": connect: " + error);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

inline void Socket::handshake(const ConnectionOptions& options, clock::time_point deadline) {
  SSL_CTX* context = ssl_context_for(options.tls);
  ssl_.reset(SSL_new(context));
  if (!ssl_ || SSL_set_fd(ssl_.get(), fd_) != 1) {
    throw ConnectionError(Errc::connect_failed,
                          options.endpoint() + ": TLS: " + take_ssl_error("no memory"));
  }
  name_the_peer(ssl_.get(), options.tls, options.host);
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int result = SSL_connect(ssl_.get());
    if (result == 1) return;
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl_.get(), result);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (wait_for(error, remaining_ms(deadline))) continue;
      // A plaintext Redis reads a ClientHello as an inline command, and
      // waits for the rest of it.
      throw TimeoutError(Errc::timed_out, options.endpoint() +
                                              ": TLS handshake: no answer within " +
                                              std::to_string(options.connect_timeout.count()) +
                                              " ms (a plaintext port? use redis://)");
    }
    throw ConnectionError(Errc::connect_failed,
                          options.endpoint() + ": TLS handshake: " +
                              handshake_failure(ssl_.get(), error, saved_errno));
  }
}

inline void Socket::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  if (ssl_) return;  // poll() keeps it
  const timeval tv = to_timeval(timeout);
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    throw ConnectionError(Errc::io_error, std::string("set timeout: ") + std::strerror(errno));
  }
}

inline bool Socket::wait_for(int ssl_error, int timeout_ms) const noexcept {
  pollfd p{fd_, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  int ready = 0;
  while ((ready = ::poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return ready > 0;
}

inline std::size_t Socket::read(char* buffer, std::size_t size, bool wait, IoStatus& status) {
  if (!ssl_) {
    for (;;) {
      const ssize_t n = wait ? ::read(fd_, buffer, size) : ::recv(fd_, buffer, size, MSG_DONTWAIT);
      if (n > 0) return static_cast<std::size_t>(n);
      if (n == 0) {
        status = {IoStatus::closed, "Server closed the connection"};
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (wait) status = {IoStatus::timed_out, {}};
      } else {
        status = {IoStatus::failed, std::strerror(errno)};
      }
      return 0;
    }
  }
  std::size_t got = 0;
  const auto deadline = clock::now() + timeout_;
  // Until the buffer is full or OpenSSL holds nothing more: a subscriber
  // polls the socket, and cannot see what OpenSSL kept back.
  while (got < size) {
    ERR_clear_error();
    errno = 0;
    const int n = SSL_read(ssl_.get(), buffer + got,
                           static_cast<int>(std::min<std::size_t>(size - got, 1 << 30)));
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      if (SSL_pending(ssl_.get()) == 0) break;
      continue;
    }
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl_.get(), n);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (got > 0 || !wait) break;
      if (wait_for(error, remaining_ms(deadline))) continue;
      status = {IoStatus::timed_out, {}};
    } else if (error == SSL_ERROR_ZERO_RETURN) {
      status = {IoStatus::closed, "Server closed the connection"};
    } else {
      if (error != SSL_ERROR_SYSCALL || ERR_peek_error() != 0) {
        status = {IoStatus::failed, "TLS: " + take_ssl_error("read failed")};
      } else if (saved_errno == 0) {
        status = {IoStatus::closed, "Server closed the connection"};
      } else {
        status = {IoStatus::failed, std::strerror(saved_errno)};
      }
    }
    break;
  }
  return got;
}

inline IoStatus Socket::write_all(std::string_view data) {
  if (!ssl_) {
    while (!data.empty()) {
      // write(2), as hiredis writes: SIGPIPE is handled as it always was
      // (ClientOptions::ignore_sigpipe).
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::timed_out, {}};
        return {IoStatus::failed, std::strerror(errno)};
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return {};
  }
  const auto deadline = clock::now() + timeout_;
  while (!data.empty()) {
    ERR_clear_error();
    errno = 0;
    const int n = SSL_write(ssl_.get(), data.data(),
                            static_cast<int>(std::min<std::size_t>(data.size(), 1 << 30)));
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl_.get(), n);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (wait_for(error, remaining_ms(deadline))) continue;
      return {IoStatus::timed_out, {}};
    }
    if (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      return {IoStatus::failed, std::strerror(saved_errno == 0 ? EPIPE : saved_errno)};
    }
    return {IoStatus::failed, "TLS: " + take_ssl_error("write failed")};
  }
  return {};
}

inline long Socket::send_now(std::string_view data) noexcept {
  if (!ssl_) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return static_cast<long>(n);
  }
  // A record is written whole or not at all as far as the caller can
  // tell; one cut short leaves the connection to be dropped (the server
  // runs no command cut short by a close).
  ERR_clear_error();
  const int n = SSL_write(ssl_.get(), data.data(), static_cast<int>(data.size()));
  if (n <= 0) ERR_clear_error();
  return n;
}

inline void Socket::drain() noexcept {
  char sink[4096];
  if (!ssl_) {
    while (::recv(fd_, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    return;
  }
  while (SSL_read(ssl_.get(), sink, sizeof sink) > 0) {
  }
  ERR_clear_error();
}

inline bool Socket::sent_unasked() noexcept {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) == 0) return false;
  if (!ssl_) return true;
  // Readable: a reply nobody asked for, a close, or only TLS's own records.
  char byte = 0;
  ERR_clear_error();
  const int n = SSL_peek(ssl_.get(), &byte, 1);
  if (n > 0) return true;
  const int error = SSL_get_error(ssl_.get(), n);
  ERR_clear_error();
  return error != SSL_ERROR_WANT_READ;
}

inline void Socket::close() noexcept {
  // No close_notify (SSL_shutdown): it is a write, and a write to a
  // server that went away raises SIGPIPE in a process that did not ignore
  // it. Redis takes a plain close as the end of the connection.
  ssl_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace distlock::detail
