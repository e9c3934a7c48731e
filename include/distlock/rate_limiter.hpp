// distlock::RateLimiter: "at most so many per so long" on one Redis key,
// shared by every process that names it. Not a lock: nothing is held or
// given back; each call is one script that admits or refuses.
//
// Two algorithms, chosen in RateOptions:
// - fixed_window(limit, window): at most `limit` units per window. The
//   first admission of a window creates the counter with the window as its
//   expiry in the same step, and the window ends when the server expires
//   it. Simple and exact, but a burst at the end of one window and the
//   start of the next can admit up to 2 x limit within one window's time.
// - smooth(limit, period, burst): GCRA, a token bucket held as one
//   timestamp. Units come back at limit/period (one every period/limit,
//   rounded up to a whole microsecond); at most `burst` (default `limit`)
//   can be taken at once.
// Either way every time is judged by the server's clock (the fixed window
// by key expiry, GCRA by TIME inside its script); callers send no time, so
// their clocks may disagree without effect. The two algorithms keep
// different values at the key: use one per name.
//
//   distlock::RateLimiter visits{redis, "visits:user:7",
//                                distlock::RateOptions{}.fixed_window(3, 10s)};
//   if (auto d = visits.try_acquire(); !d.allowed) reply_429(d.retry_after);
//   if (visits.try_acquire_for(2s)) send_mail();   // waits for retry_after
//
// The waiting calls have the standard's counting vocabulary (as
// std::counting_semaphore): try_acquire_for(timeout[, cost]),
// try_acquire_until(deadline[, cost]) and acquire([cost]), each ended by
// cancel_waits().
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/client.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/counting_scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {

namespace detail {
template <class Handler>
class RateOp;
}  // namespace detail

/// Which algorithm and how much: set exactly one of fixed_window() and
/// smooth(). Setters validate at once (InvalidArgument).
class RateOptions {
 public:
  /// The algorithms; none until fixed_window() or smooth() is called.
  enum class Algorithm { none, fixed_window, smooth };

  /// At most `limit` (>= 1) units per `window` (1 ms to max_ttl).
  template <class Rep, class Period>
  RateOptions& fixed_window(std::uint64_t limit, std::chrono::duration<Rep, Period> window) {
    set(Algorithm::fixed_window, limit, window, limit);
    return *this;
  }

  /// `limit` (>= 1) units per `period` (1 ms to max_ttl), coming back
  /// smoothly; at most `burst` (>= 1; 0 means `limit`) at once.
  template <class Rep, class Period>
  RateOptions& smooth(std::uint64_t limit, std::chrono::duration<Rep, Period> period,
                      std::uint64_t burst = 0) {
    set(Algorithm::smooth, limit, period, burst == 0 ? limit : burst);
    return *this;
  }

  /// Prepended to the name to form the key (e.g. "rate:").
  RateOptions& key_prefix(std::string prefix) {
    key_prefix_ = std::move(prefix);
    return *this;
  }

  /// The algorithm chosen; none until one is.
  Algorithm algorithm() const noexcept { return algorithm_; }
  /// Units per window (or per smooth period); 0 until chosen.
  std::uint64_t limit() const noexcept { return limit_; }
  /// The fixed window, or the smooth period; zero until chosen.
  std::chrono::milliseconds window() const noexcept { return window_; }
  /// The most units one call may ask for: the limit, or the smooth burst.
  std::uint64_t burst() const noexcept { return burst_; }
  /// Smooth: the time one unit takes to come back, in whole microseconds.
  std::chrono::microseconds interval() const noexcept { return interval_; }
  /// Prepended to the name to form the key; empty unless set.
  const std::string& key_prefix() const noexcept { return key_prefix_; }

 private:
  // Bounds every count so that the scripts' arithmetic (Lua doubles) stays
  // exact: burst x interval stays under 2^53 microseconds.
  static constexpr std::uint64_t max_count = 1'000'000'000;

  template <class Rep, class Period>
  void set(Algorithm algorithm, std::uint64_t limit, std::chrono::duration<Rep, Period> span,
           std::uint64_t burst) {
    if (limit == 0) throw InvalidArgument("rate limit must be at least 1");
    if (limit > max_count || burst > max_count) {
      throw InvalidArgument("rate limit and burst must not exceed " + std::to_string(max_count));
    }
    const std::chrono::milliseconds ms = detail::checked_milliseconds(span, max_ttl, "rate window");
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(ms);
    const auto interval = std::chrono::microseconds(
        (us.count() + static_cast<long long>(limit) - 1) / static_cast<long long>(limit));
    if (algorithm == Algorithm::smooth &&
        static_cast<double>(burst) * static_cast<double>(interval.count()) >
            static_cast<double>(std::chrono::microseconds(max_ttl).count())) {
      throw InvalidArgument("rate burst times the interval must not exceed max_ttl");
    }
    algorithm_ = algorithm;
    limit_ = limit;
    window_ = ms;
    burst_ = burst;
    interval_ = interval;
  }

  Algorithm algorithm_ = Algorithm::none;
  std::uint64_t limit_ = 0;
  std::chrono::milliseconds window_{0};
  std::uint64_t burst_ = 0;
  std::chrono::microseconds interval_{0};
  std::string key_prefix_;
};

/// What one try_acquire() found.
struct RateDecision {
  /// Admitted, and counted; refused calls count nothing.
  bool allowed = false;
  /// When refused: the wait until the same call would be admitted, were
  /// nobody else to take units meanwhile. Zero when allowed.
  std::chrono::milliseconds retry_after{0};
  /// Units that could still be taken now (after this call's, if allowed).
  std::uint64_t remaining = 0;
  /// As `allowed`.
  explicit operator bool() const noexcept { return allowed; }
};

/// A rate limiter on any Backend. Thread-safe; cheap to make; keeps the
/// site of its key (detail/backend/site.hpp), so it may outlive its backend object.
class RateLimiter {
 public:
  /// The clock the waits keep their deadlines on; a try_acquire_until()
  /// deadline of another clock is converted to it.
  using clock = std::chrono::steady_clock;

  /// Validates name and options (InvalidArgument, also when no algorithm
  /// was chosen); contacts no server.
  DISTLOCK_DECL RateLimiter(const Backend& backend, std::string_view name, RateOptions options);
  DISTLOCK_DECL ~RateLimiter();
  /// Another limiter on the same key, sharing the cancellation:
  /// cancel_waits() on either ends the waits of both.
  RateLimiter(const RateLimiter&) = default;
  /// Takes `other`'s state; the moved-from limiter may only be destroyed.
  RateLimiter(RateLimiter&&) = default;

  /// One attempt to take `cost` units: admitted (and counted) or refused
  /// (nothing counted). Throws InvalidArgument for a cost of 0 or over
  /// burst(), and the connection errors if Redis cannot be asked (one
  /// command timeout at most).
  RateDecision try_acquire(std::uint64_t cost = 1) {
    check_cost(cost);
    return *attempt(cost, detail::no_deadline);
  }

  /// Attempts until `cost` units are admitted or `timeout` passes on the
  /// steady clock, sleeping for each refusal's retry_after. A zero or
  /// negative timeout is try_acquire(). Returns the last decision: refused
  /// at once, without sleeping, when the next chance would come after the
  /// deadline; refused (the last refusal) when cancel_waits() was called,
  /// or when the deadline cut a call to Redis short and Redis had answered
  /// lately, as a lock's wait tells busy (heard.hpp). Throws TimeoutError
  /// when Redis left the wait unanswered (an outage, not a refusal), and
  /// otherwise as try_acquire().
  template <class Rep, class Period>
  RateDecision try_acquire_for(const std::chrono::duration<Rep, Period>& timeout,
                               std::uint64_t cost = 1) {
    return wait(cost, detail::deadline_after(timeout)).decision;
  }

  /// As try_acquire_for, until `deadline` of any clock (a deadline already
  /// past is try_acquire()).
  template <class Clock, class Duration>
  RateDecision try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline,
                                 std::uint64_t cost = 1) {
    return wait(cost, detail::to_steady_deadline(deadline)).decision;
  }

  /// Attempts until `cost` units are admitted, however long that takes,
  /// sleeping for each refusal's retry_after, and returns the admitting
  /// decision. Throws Error(cancelled) after cancel_waits(), and otherwise
  /// as try_acquire().
  RateDecision acquire(std::uint64_t cost = 1) {
    Waited waited = wait(cost, detail::no_deadline);
    if (waited.cancelled) throw Error(Errc::cancelled, "acquire() of " + key_ + " was cancelled");
    return waited.decision;
  }

  /// Makes every wait through this object that is under way now give up at
  /// once, sleeping or at its next refusal: try_acquire_for/until return
  /// the last refused decision, acquire() throws Error(cancelled). A call
  /// to Redis in flight is not cut short. Callable from any thread; waits
  /// that start later are unaffected. A copy of the limiter shares it.
  void cancel_waits() { cancellation_.cancel(); }

  /// Forgets what was taken: the next call starts a fresh window (or a full
  /// bucket) for every caller of this name.
  void reset() {
    detail::on_site(*site_, detail::no_deadline,
                    [&](Connection& connection) { return connection.command("DEL", key_); });
  }

  /// The Redis key (prefix and name).
  const std::string& key() const noexcept { return key_; }
  /// The options it was made with.
  const RateOptions& options() const noexcept { return options_; }

 private:
  template <class Handler>
  friend class detail::RateOp;  // the async wait (distlock/asio.hpp)

  void check_cost(std::uint64_t cost) const {
    if (cost == 0) throw InvalidArgument("rate cost must be at least 1");
    if (cost > options_.burst()) {
      throw InvalidArgument("rate cost " + std::to_string(cost) + " exceeds the most " + key_ +
                            " ever admits at once (" + std::to_string(options_.burst()) + ")");
    }
  }

  struct Waited {
    RateDecision decision;
    bool cancelled = false;
  };

  // The waits of try_acquire_for/until and acquire(): attempts until
  // admitted, `until` or a cancel. The first attempt is a try_acquire()
  // when `until` has passed already (one attempt, as a zero timeout).
  Waited wait(std::uint64_t cost, clock::time_point until) {
    check_cost(cost);
    const std::uint64_t seen = cancellation_.generation();
    Waited waited;
    detail::Heard heard;
    for (bool first = true;; first = false) {
      const clock::time_point sent = clock::now();
      const std::optional<RateDecision> decision =
          attempt(cost, first && detail::deadline_reached(until) ? detail::no_deadline : until);
      if (!decision) {  // the deadline cut the call short
        if (heard.outcome_at(until) == detail::Outcome::unanswered) throw unanswered();
        return waited;  // the last refusal
      }
      heard.answered(sent);
      waited.decision = *decision;
      if (decision->allowed) return waited;
      const clock::time_point next = clock::now() + decision->retry_after;
      if (next > until) return waited;
      // Until retry_after has passed, or, where Redis has not answered
      // lately, early enough to hear from it before the deadline (an
      // attempt before retry_after is refused, and counts nothing).
      // Interruptible, and woken early by nothing else: a spurious wake-up
      // sleeps again rather than asking Redis before then.
      const clock::time_point wake = heard.probe_by(next, until);
      while (!cancellation_.since(seen) && clock::now() < wake) {
        cancellation_.sleep_until(seen, wake);
      }
      if (cancellation_.since(seen)) {
        waited.cancelled = true;
        return waited;
      }
    }
  }

  std::optional<RateDecision> attempt(std::uint64_t cost, clock::time_point deadline) {
    const detail::Decimal amount(static_cast<long long>(cost));
    try {
      // On a cluster, at the owner of the key's slot.
      return decision_of(detail::on_site(*site_, deadline, [&](Connection& connection) {
        return connection.eval(script(), {key_}, {first_, second_, amount});
      }));
    } catch (const TimeoutError&) {
      if (detail::deadline_reached(deadline)) return std::nullopt;
      throw;
    }
  }

  TimeoutError unanswered() const {
    return TimeoutError(Errc::timed_out, key_ +
                                             ": Redis did not answer before the deadline (an "
                                             "outage, not a refusal); the call cut short may "
                                             "have been counted");
  }

  const Script& script() const noexcept {
    return options_.algorithm() == RateOptions::Algorithm::smooth ? scripts::rate_gcra
                                                                  : scripts::rate_fixed_window;
  }
  // The script's answer: {admitted, retry_after ms, remaining}.
  static RateDecision decision_of(const Reply& reply) {
    reply.throw_if_error();
    if (reply.size() != 3) throw ConnectionError(Errc::protocol_error, "bad rate limiter reply");
    RateDecision decision;
    decision.allowed = reply[0].integer() == 1;
    decision.retry_after = std::chrono::milliseconds(reply[1].integer());
    decision.remaining = static_cast<std::uint64_t>(std::max(reply[2].integer(), 0LL));
    return decision;
  }

  const std::string key_;
  const detail::SitePtr site_;
  const RateOptions options_;
  // The script's first two arguments: limit and window (ms), or interval
  // (us) and burst.
  const detail::Decimal first_;
  const detail::Decimal second_;
  detail::Cancellation cancellation_;
};

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL RateLimiter::RateLimiter(const Backend& backend, std::string_view name,
                                       RateOptions options)
    : key_(detail::lock_key(LockOptions{}.key_prefix(options.key_prefix()), name)),
      site_(backend.site_for(key_)),
      options_(std::move(options)),
      first_(options_.algorithm() == RateOptions::Algorithm::smooth
                 ? static_cast<long long>(options_.interval().count())
                 : static_cast<long long>(options_.limit())),
      second_(options_.algorithm() == RateOptions::Algorithm::smooth
                  ? static_cast<long long>(options_.burst())
                  : options_.window().count()) {
  if (options_.algorithm() == RateOptions::Algorithm::none) {
    throw InvalidArgument("rate limiter " + key_ +
                          ": choose RateOptions::fixed_window() or smooth()");
  }
}

DISTLOCK_DECL RateLimiter::~RateLimiter() = default;
#endif

}  // namespace distlock
