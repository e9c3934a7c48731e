// Checked conversions between caller-supplied durations and the steady
// clock: TTLs to whole milliseconds (rejecting what would wrap), timeouts and
// foreign-clock deadlines to steady_clock deadlines (saturating, never
// overflowing); a step's reply timeout and a new connection's timeouts
// cut to a deadline.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <type_traits>

#include "distlock/connection_options.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

using SteadyClock = std::chrono::steady_clock;

/// No deadline: the step may take one command timeout.
inline constexpr SteadyClock::time_point no_deadline = SteadyClock::time_point::max();

/// d in whole milliseconds, if it lies in [1 ms, max]; otherwise throws
/// InvalidArgument naming what. Computed in double so that a huge count of
/// hours cannot wrap on the way to milliseconds.
template <class Rep, class Period>
std::chrono::milliseconds checked_milliseconds(std::chrono::duration<Rep, Period> d,
                                               std::chrono::milliseconds max, const char* what) {
  const double ms = std::chrono::duration<double, std::milli>(d).count();
  if (!(ms >= 1.0)) throw InvalidArgument(std::string(what) + " must be at least 1 ms");
  if (ms > static_cast<double>(max.count())) {
    throw InvalidArgument(std::string(what) + " must not exceed " + std::to_string(max.count()) +
                          " ms");
  }
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

/// now + timeout on the steady clock, saturated at time_point::max(). A
/// negative timeout gives now (the caller then makes one attempt).
template <class Rep, class Period>
SteadyClock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) {
  const SteadyClock::time_point now = SteadyClock::now();
  const double wanted = std::chrono::duration<double, std::nano>(timeout).count();
  if (!(wanted > 0)) return now;
  const double room =
      std::chrono::duration<double, std::nano>(SteadyClock::time_point::max() - now).count();
  if (wanted >= room) return SteadyClock::time_point::max();
  return now + std::chrono::duration_cast<SteadyClock::duration>(
                   std::chrono::duration<double, std::nano>(wanted));
}

/// A deadline on any clock, translated to the steady clock once.
template <class Clock, class Duration>
SteadyClock::time_point to_steady_deadline(std::chrono::time_point<Clock, Duration> deadline) {
  if constexpr (std::is_same_v<Clock, SteadyClock>) {
    return std::chrono::time_point_cast<SteadyClock::duration>(deadline);
  } else {
    // In double: a far deadline minus now would overflow the clock's rep.
    using Nanos = std::chrono::duration<double, std::nano>;
    return deadline_after(Nanos(deadline.time_since_epoch()) -
                          Nanos(Clock::now().time_since_epoch()));
  }
}

/// `options` for a connection of its own that may take no longer than
/// `deadline` to connect (and authenticate), nor to answer.
inline ConnectionOptions cut_to(ConnectionOptions options, SteadyClock::time_point deadline) {
  if (deadline == no_deadline) return options;
  const auto left =
      std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()),
               std::chrono::milliseconds(1));
  options.connect_timeout = std::min(options.connect_timeout, left);
  options.command_timeout = std::min(options.command_timeout, left);
  return options;
}

/// The reply timeout for a step: the command timeout, cut to the time left
/// before `deadline` (at least 1 ms, the finest a socket timeout goes).
inline std::chrono::milliseconds reply_timeout(std::chrono::milliseconds command_timeout,
                                               SteadyClock::time_point deadline) {
  if (deadline == no_deadline) return command_timeout;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return std::clamp(left, std::chrono::milliseconds(1), command_timeout);
}

/// Whether a TimeoutError seen now is the caller's own deadline running
/// out (the step was cut to it) rather than Redis missing a command timeout.
inline bool deadline_reached(SteadyClock::time_point deadline) {
  return deadline != no_deadline && SteadyClock::now() + std::chrono::milliseconds(2) >= deadline;
}

}  // namespace distlock::detail
