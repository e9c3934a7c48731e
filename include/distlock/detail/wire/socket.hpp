// Socket: the byte stream under a Connection, plain TCP, a unix socket, or
// TLS over TCP (OpenSSL, detail/wire/tls.hpp). Connection formats what it
// writes and hands what it reads to hiredis's reader; this only moves bytes.
//
// Why our own socket rather than hiredis's: Debian's hiredis (0.14) has no
// TLS, and hiredis 1.x's TLS takes its context's blocking reads, which the
// subscriber (poll() on fd(), then read what is there) cannot use. Owning
// the socket also makes 0.14 and 1.x the same to us: only the reader is
// theirs.
//
// Once connected, a socket blocks, its timeouts kept by the kernel
// (SO_RCVTIMEO, SO_SNDTIMEO): one system call a read, TLS or not, as a raw
// client's. The few calls that must not wait (a subscriber reading what
// poll() saw, the check of an idle connection, a write that must not block)
// take it out of blocking mode for their length where TLS needs that: a
// readable TLS socket may hold only a record with no data in it (a session
// ticket), which a blocking read would wait past. Connecting (and the
// handshake) is non-blocking, bounded by the connect timeout.
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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/connection_options.hpp"
#include "distlock/detail/wire/tls.hpp"
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
  /// at all with `wait` false: then 0 bytes is "nothing yet"). Over TLS it
  /// reads until OpenSSL holds no decrypted byte back, where poll() would
  /// not see it.
  std::size_t read(char* buffer, std::size_t size, bool wait, IoStatus& status);
  /// Writes all of `data` within the timeout.
  IoStatus write_all(std::string_view data);
  /// Writes what fits now without waiting: the bytes written, or -1. For
  /// the noexcept paths (an undo behind a late command).
  long send_now(std::string_view data) noexcept;
  /// For an event loop: writes what the socket takes now, without waiting,
  /// and returns the bytes written; a failure is left in `status`. Over TLS
  /// a record is written whole or not yet (then called again with the same
  /// bytes in front, which may have moved and grown).
  std::size_t write_now(std::string_view data, IoStatus& status);
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
  // Blocking (the usual) or not.
  void set_blocking(bool on) const noexcept;
  // For a call that must not wait: out of blocking mode, where TLS needs it.
  struct NoWait {
    const Socket& socket;
    explicit NoWait(const Socket& s) : socket(s) {
      if (socket.ssl_) socket.set_blocking(false);
    }
    ~NoWait() {
      if (socket.ssl_) socket.set_blocking(true);
    }
  };
  std::size_t read_tls(char* buffer, std::size_t size, bool wait, IoStatus& status);
  // What a TLS failure says, with the likely cause where it is known.
  std::string tls_failure(const char* otherwise) const;
  void close() noexcept;

  int fd_ = -1;
  SslPtr ssl_;
};

inline Socket::Socket(const ConnectionOptions& options, clock::time_point deadline) {
  try {
    if (options.unix_socket.empty()) {
      connect_tcp(options, deadline);
    } else {
      connect_unix(options.unix_socket, deadline);
    }
    if (options.tls.enabled) ssl_ = start_tls(fd_, options, deadline);
    set_blocking(true);
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
}

inline void Socket::set_timeout(std::chrono::milliseconds timeout) {
  const timeval tv = to_timeval(timeout);
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    throw ConnectionError(Errc::io_error, std::string("set timeout: ") + std::strerror(errno));
  }
}

inline void Socket::set_blocking(bool on) const noexcept {
  const int flags = ::fcntl(fd_, F_GETFL);
  ::fcntl(fd_, F_SETFL, on ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

inline std::size_t Socket::read(char* buffer, std::size_t size, bool wait, IoStatus& status) {
  if (ssl_) return read_tls(buffer, size, wait, status);
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

inline std::size_t Socket::read_tls(char* buffer, std::size_t size, bool wait, IoStatus& status) {
  std::optional<NoWait> no_wait;
  if (!wait) no_wait.emplace(*this);
  std::size_t got = 0;
  while (got < size) {
    ERR_clear_error();
    errno = 0;
    const int n = SSL_read(ssl_.get(), buffer + got,
                           static_cast<int>(std::min<std::size_t>(size - got, 1 << 30)));
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      if (SSL_has_pending(ssl_.get()) == 0) break;
      continue;
    }
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl_.get(), n);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      // Nothing (more) yet; or, blocking, the socket's timeout ran out.
      if (got == 0 && wait) status = {IoStatus::timed_out, {}};
    } else if (error == SSL_ERROR_ZERO_RETURN ||
               (error == SSL_ERROR_SYSCALL && saved_errno == 0 && ERR_peek_error() == 0)) {
      status = {IoStatus::closed, tls_failure("Server closed the connection")};
    } else if (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      status = {IoStatus::failed, tls_failure(std::strerror(saved_errno))};
    } else {
      status = {IoStatus::failed, "TLS: " + tls_failure("read failed")};
    }
    break;
  }
  return got;
}

inline IoStatus Socket::write_all(std::string_view data) {
  while (!data.empty()) {
    // Only for TLS: OpenSSL's error queue is made per thread on first use,
    // and a plain write has no business making one (a SentinelClient's
    // watch thread, still asking when the process exits, left it behind).
    if (ssl_) ERR_clear_error();
    errno = 0;
    // write(2), as hiredis writes (OpenSSL's too): SIGPIPE is handled as
    // it always was (ClientOptions::ignore_sigpipe).
    const long n = ssl_ ? SSL_write(ssl_.get(), data.data(),
                                    static_cast<int>(std::min<std::size_t>(data.size(), 1 << 30)))
                        : ::write(fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    const int saved_errno = errno;
    if (!ssl_) {
      if (saved_errno == EINTR) continue;
      if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) return {IoStatus::timed_out, {}};
      return {IoStatus::failed, std::strerror(saved_errno)};
    }
    const int error = SSL_get_error(ssl_.get(), static_cast<int>(n));
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      return {IoStatus::timed_out, {}};
    }
    if (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      return {IoStatus::failed, tls_failure(std::strerror(saved_errno == 0 ? EPIPE : saved_errno))};
    }
    return {IoStatus::failed, "TLS: " + tls_failure("write failed")};
  }
  return {};
}

inline std::size_t Socket::write_now(std::string_view data, IoStatus& status) {
  const NoWait no_wait(*this);
  std::size_t written = 0;
  while (written < data.size()) {
    const std::string_view rest = data.substr(written);
    if (ssl_) ERR_clear_error();
    errno = 0;
    const long n = ssl_ ? SSL_write(ssl_.get(), rest.data(),
                                    static_cast<int>(std::min<std::size_t>(rest.size(), 1 << 30)))
                        : ::send(fd_, rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    const int saved_errno = errno;
    if (!ssl_) {
      if (saved_errno == EINTR) continue;
      if (saved_errno != EAGAIN && saved_errno != EWOULDBLOCK) {
        status = {IoStatus::failed, std::strerror(saved_errno)};
      }
      break;
    }
    const int error = SSL_get_error(ssl_.get(), static_cast<int>(n));
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) break;
    status = error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0
                 ? IoStatus{IoStatus::failed,
                            tls_failure(std::strerror(saved_errno == 0 ? EPIPE : saved_errno))}
                 : IoStatus{IoStatus::failed, "TLS: " + tls_failure("write failed")};
    break;
  }
  return written;
}

inline std::string Socket::tls_failure(const char* otherwise) const {
  std::string text = take_ssl_error(otherwise);
  if (server_asked_for_certificate(ssl_.get())) {
    text +=
        " (the server asks for a client certificate and none was given: set cert_file and "
        "key_file)";
  }
  return text;
}

inline long Socket::send_now(std::string_view data) noexcept {
  if (!ssl_) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return static_cast<long>(n);
  }
  // A record is written whole or not at all as far as the caller can
  // tell; one cut short leaves the connection to be dropped (the server
  // runs no command cut short by a close).
  const NoWait no_wait(*this);
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
  const NoWait no_wait(*this);
  while (SSL_read(ssl_.get(), sink, sizeof sink) > 0) {
  }
  ERR_clear_error();
}

inline bool Socket::sent_unasked() noexcept {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) == 0) return false;
  if (!ssl_) return true;
  // Readable: a reply nobody asked for, a close, or only TLS's own records.
  const NoWait no_wait(*this);
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
