// Lock tokens: 128 bits from the operating system's random source, as 32
// lower-case hex characters.
//
// A token says "this acquisition", so it must never repeat: not across
// threads, processes, machines, nor in a forked child. That rules out any
// user-space generator (its state is copied by fork), so every token is a
// fresh getrandom(2) call, with /dev/urandom where the call is missing.
#pragma once

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distlock/error.hpp"

namespace distlock {

namespace detail {

inline void fill_from_urandom(unsigned char* out, std::size_t size) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(Errc::io_error, "cannot open /dev/urandom for lock tokens");
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, out + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error(Errc::io_error, "cannot read /dev/urandom for lock tokens");
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

/// Fills out with bytes from the OS random source. Throws Error on failure.
inline void os_random_bytes(unsigned char* out, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::getrandom(out + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOSYS) return fill_from_urandom(out + got, size - got);
    if (n < 0) throw Error(Errc::io_error, "getrandom failed while making a lock token");
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace detail

/// Number of random bytes in a token (128 bits).
inline constexpr std::size_t token_bytes = 16;

/// A fresh random token: 32 lower-case hex characters.
inline std::string make_token() {
  unsigned char bytes[token_bytes];
  detail::os_random_bytes(bytes, sizeof bytes);
  static constexpr char hex[] = "0123456789abcdef";
  std::string token(2 * token_bytes, '\0');
  for (std::size_t i = 0; i < token_bytes; ++i) {
    token[2 * i] = hex[bytes[i] >> 4];
    token[2 * i + 1] = hex[bytes[i] & 0x0f];
  }
  return token;
}

}  // namespace distlock
