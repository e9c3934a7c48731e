// Busy or unanswered: an acquire that ends at its deadline without the
// lock says which (Outcome, in acquire.hpp). Busy means Redis answered a
// step of the call in its last `probe` (two of the call's slowest round
// trips and last_step, and never less than probe_floor) and the lock was
// held; unanswered, that it did not (an outage, a stopped or partitioned
// server). So that a healthy server always has answered in that window, a
// waiter whose sleep would run to the deadline makes its last attempt
// `probe` before it: one round trip more, on waits that end without the
// lock only. The floor is for the client's own delays: on a loaded host
// (or under a sanitizer) a healthy answer can wait several milliseconds
// for a thread to read it, and that must not read as an outage; an outage
// that begins within the floor before the deadline reads as busy instead,
// and the next call tells it.
#pragma once

#include <algorithm>
#include <chrono>

#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"

namespace distlock::detail {

/// The time a last attempt after waiting may take past the deadline: a
/// round trip to a few servers, and no more.
inline constexpr std::chrono::milliseconds last_step{5};

/// The shortest silence before a deadline read as an outage.
inline constexpr std::chrono::milliseconds probe_floor{25};

/// What one acquire heard from Redis: when it last answered a step, and
/// the slowest round trip of an attempt the waiter sent itself.
class Heard {
 public:
  using clock = SteadyClock;

  /// A step the waiter sent at `sent` answered now; its round trip counts
  /// toward the probe window.
  void answered(clock::time_point sent) {
    answer();
    slowest_ = std::max(slowest_, at_ - sent);
  }
  /// Redis answered now, by a reply the waiter did not time (a release
  /// message, another thread's step).
  void answer() { at_ = clock::now(); }

  /// How a call the deadline ended without the lock comes out: busy if
  /// Redis answered within the probe window before `deadline`.
  Outcome outcome_at(clock::time_point deadline) const {
    return at_ != clock::time_point{} && at_ + probe() >= deadline ? Outcome::timed_out
                                                                   : Outcome::unanswered;
  }

  /// `until`, or the start of the probe window if the sleep would run into
  /// it before Redis has answered there.
  clock::time_point probe_by(clock::time_point until, clock::time_point deadline) const {
    if (deadline == no_deadline || deadline - clock::time_point{} <= probe()) return until;
    const clock::time_point window = deadline - probe();
    if (until <= window || at_ >= window || clock::now() >= window) return until;
    return window;
  }

 private:
  clock::duration probe() const {
    return std::max<clock::duration>(probe_floor, last_step + 2 * slowest_);
  }

  clock::time_point at_{};
  clock::duration slowest_{0};
};

}  // namespace distlock::detail
