// An eventfd used as a wake-up between threads: one side signals it, the
// side that poll()s on it drains it before it looks at what changed. Both
// are best effort by design: a signal that finds the counter full (2^64 - 2
// unread) still leaves the fd readable, and a drain that finds nothing has
// nothing to do.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace distlock::detail {

/// Makes `fd` readable, waking whoever poll()s on it.
inline void signal_eventfd(int fd) noexcept {
  const std::uint64_t one = 1;
  static_cast<void>(::write(fd, &one, sizeof one));
}

/// Reads `fd` back to unreadable (non-blocking: never waits).
inline void drain_eventfd(int fd) noexcept {
  std::uint64_t drained = 0;
  static_cast<void>(::read(fd, &drained, sizeof drained));
}

}  // namespace distlock::detail
