// Acquire policies: how long a waiter pauses between attempts to take a lock.
//
// A policy is a plain value, cheap to copy, with one question to answer:
// pause(attempt, unit) is the pause after failed attempt number `attempt`
// (1-based), given a uniform random number `unit` in [0, 1) for jitter. The
// lock clips every pause to the caller's deadline and to the holder's
// remaining lease, and a release notification ends it early, so a policy only
// sets the pace of retries when nothing else says "try now".
//
//   NoWait              retry at once: the pace is the round trip itself
//   FixedInterval       the same pause every time
//   ExponentialBackoff  full jitter: uniform in [0, min(cap, initial * 2^(n-1))]
//
// The first attempt never waits: lock() on a free lock costs one round trip.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "distlock/error.hpp"
#include "distlock/token.hpp"

namespace distlock {

/// Retries at once; each attempt is one round trip to the server.
struct NoWait {
  /// Zero, always: the next attempt goes out at once.
  std::chrono::nanoseconds pause(unsigned /*attempt*/, double /*unit*/) const noexcept {
    return std::chrono::nanoseconds(0);
  }
};

/// Pauses `interval` after every failed attempt (no jitter).
class FixedInterval {
 public:
  /// Throws InvalidArgument if `interval` is negative (zero: as NoWait).
  explicit FixedInterval(std::chrono::nanoseconds interval) : interval_(interval) {
    if (interval.count() < 0) throw InvalidArgument("FixedInterval must not be negative");
  }
  /// `interval`, whatever the attempt.
  std::chrono::nanoseconds pause(unsigned /*attempt*/, double /*unit*/) const noexcept {
    return interval_;
  }

 private:
  std::chrono::nanoseconds interval_;
};

/// Exponential backoff with full jitter: after failed attempt n, a pause
/// drawn uniformly from [0, min(cap, initial * 2^(n-1))]. Jitter keeps
/// waiters that failed together from retrying together. The default
/// (1 ms rising to 100 ms) keeps a waiter's cost to Redis small while the
/// release notification, not the backoff, decides how fast it gets in.
class ExponentialBackoff {
 public:
  ExponentialBackoff() = default;
  /// Throws InvalidArgument unless 0 < initial <= cap.
  ExponentialBackoff(std::chrono::nanoseconds initial, std::chrono::nanoseconds cap)
      : initial_(initial), cap_(cap) {
    if (initial.count() <= 0) throw InvalidArgument("backoff initial pause must be positive");
    if (cap < initial) throw InvalidArgument("backoff cap must not be below its initial pause");
  }

  /// The pause after failed attempt `attempt`: `unit` (clamped to [0, 1])
  /// times min(cap, initial * 2^(attempt-1)); attempt 0 counts as 1.
  std::chrono::nanoseconds pause(unsigned attempt, double unit) const noexcept {
    // Doubling stops once it passes the cap, so the shift cannot overflow.
    std::chrono::nanoseconds ceiling = initial_;
    for (unsigned i = 1; i < attempt && ceiling < cap_; ++i) ceiling *= 2;
    ceiling = std::min(ceiling, cap_);
    const double fraction = std::clamp(unit, 0.0, 1.0);
    return std::chrono::nanoseconds(
        static_cast<std::int64_t>(fraction * static_cast<double>(ceiling.count())));
  }

  /// The ceiling after the first failed attempt; 1 ms by default.
  std::chrono::nanoseconds initial() const noexcept { return initial_; }
  /// The most the ceiling grows to; 100 ms by default.
  std::chrono::nanoseconds cap() const noexcept { return cap_; }

 private:
  std::chrono::nanoseconds initial_ = std::chrono::milliseconds(1);
  std::chrono::nanoseconds cap_ = std::chrono::milliseconds(100);
};

/// The policy locks use unless told otherwise.
using DefaultPolicy = ExponentialBackoff;

/// Any policy as the value a lock keeps: one of the above (the default,
/// ExponentialBackoff{}) or a type of your own with the same pause().
class AcquirePolicy {
 public:
  AcquirePolicy() : AcquirePolicy(DefaultPolicy{}) {}
  /// Keeps a copy of `policy`, any type with a const pause(unsigned, double)
  /// whose result converts to std::chrono::nanoseconds.
  template <class Policy,
            class = std::enable_if_t<!std::is_same_v<std::decay_t<Policy>, AcquirePolicy>>,
            class = decltype(std::declval<const Policy&>().pause(1U, 0.0))>
  AcquirePolicy(Policy policy)  // NOLINT: any policy converts, as to std::function
      : pause_([policy = std::move(policy)](unsigned attempt, double unit) {
          return std::chrono::nanoseconds(policy.pause(attempt, unit));
        }) {}

  /// The kept policy's pause(attempt, unit); throws what that throws.
  std::chrono::nanoseconds pause(unsigned attempt, double unit) const {
    return pause_(attempt, unit);
  }

 private:
  std::function<std::chrono::nanoseconds(unsigned, double)> pause_;
};

namespace detail {

/// A uniform number in [0, 1) for jitter. Jitter needs no secrecy, only to
/// differ between waiters, so a per-thread splitmix64 seeded once from the
/// OS is enough (tokens never come from here).
inline double jitter_unit() noexcept {
  thread_local std::uint64_t state = [] {
    std::uint64_t seed = 0;
    try {
      os_random_bytes(reinterpret_cast<unsigned char*>(&seed), sizeof seed);
    } catch (...) {
      seed =
          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return seed;
  }();
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace detail
}  // namespace distlock
