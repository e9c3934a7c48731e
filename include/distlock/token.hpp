// Lock tokens: 128 bits from the operating system's random source, as 32
// lower-case hex characters.
//
// A token says "this acquisition", so it must never repeat: not across
// threads, processes, machines, nor in a forked child. That rules out any
// user-space generator (its state is copied by fork): every token's bytes
// come from getrandom(2), or /dev/urandom where the call is missing.
//
// A system call costs about as much as the rest of a lock's client-side work,
// so each thread reads 256 random bytes at a time and hands out 16 of them
// per token; bytes are never handed out twice. A fork() handler marks every
// buffer stale in the child, so a child never hands out bytes its parent
// also holds. (A process cloned without fork(), e.g. by a raw clone(2) or a
// VM snapshot, is outside what this can see.)
#pragma once

#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
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

/// Bumped in every forked child, so buffers filled before the fork are
/// known to be shared with the parent.
inline std::atomic<unsigned> fork_generation{0};

inline void note_fork_in_child() noexcept {
  fork_generation.fetch_add(1, std::memory_order_relaxed);
}

/// The process a handle shared by threads was made in (a ClusterClient's
/// nodes, a SentinelClient's master): its pools and threads belong to that
/// process, so in a forked child forked() is true and check() throws.
class ForkGuard {
 public:
  ForkGuard() noexcept : generation_(fork_generation.load(std::memory_order_relaxed)) {}
  bool forked() const noexcept {
    return fork_generation.load(std::memory_order_relaxed) != generation_;
  }
  /// Throws Error(forked), naming the handle's type, in a forked child.
  void check(const char* handle) const {
    if (!forked()) return;
    throw Error(Errc::forked, std::string("this ") + handle +
                                  " was made before fork(); make a new " + handle +
                                  " in the child");
  }

 private:
  const unsigned generation_;
};

/// OS random bytes, read in blocks and handed out once each.
class RandomBuffer {
 public:
  void take(unsigned char* out, std::size_t size) {
    static const bool registered = (::pthread_atfork(nullptr, nullptr, note_fork_in_child), true);
    static_cast<void>(registered);
    const unsigned generation = fork_generation.load(std::memory_order_relaxed);
    if (generation != generation_) {
      used_ = sizeof bytes_;
      generation_ = generation;
    }
    if (sizeof bytes_ - used_ < size) {
      os_random_bytes(bytes_, sizeof bytes_);
      used_ = 0;
    }
    for (std::size_t i = 0; i < size; ++i) {
      out[i] = bytes_[used_ + i];
      bytes_[used_ + i] = 0;
    }
    used_ += size;
  }

 private:
  unsigned char bytes_[256];
  std::size_t used_ = sizeof bytes_;
  unsigned generation_ = 0;
};

}  // namespace detail

/// Number of random bytes in a token (128 bits).
inline constexpr std::size_t token_bytes = 16;

/// A fresh random token: 32 lower-case hex characters.
inline std::string make_token() {
  thread_local detail::RandomBuffer random;
  unsigned char bytes[token_bytes];
  random.take(bytes, sizeof bytes);
  static constexpr char hex[] = "0123456789abcdef";
  std::string token(2 * token_bytes, '\0');
  for (std::size_t i = 0; i < token_bytes; ++i) {
    token[2 * i] = hex[bytes[i] >> 4];
    token[2 * i + 1] = hex[bytes[i] & 0x0f];
  }
  return token;
}

}  // namespace distlock
