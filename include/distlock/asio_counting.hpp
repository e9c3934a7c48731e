// distlock/asio_counting.hpp: the async calls of the counting primitives
// (distlock/asio.hpp includes it): a Semaphore's permits, held as
// AsyncPermit, and a RateLimiter's admissions, whose waits sleep each
// refusal's retry_after on a timer rather than a thread.
#pragma once

// <cstddef> before Asio's headers: see distlock/asio.hpp.
#include <cstddef>

#include <asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <system_error>
#include <utility>

#include "distlock/asio_hold.hpp"
#include "distlock/detail/asio/rate_op.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/semaphore.hpp"

namespace distlock {

/// A Semaphore's permit, taken by an async acquire: an AsyncHold of a
/// permit lock of its own (so several may be held through one Semaphore).
using AsyncPermit = AsyncHold<PermitLock>;

/// try_acquire() without blocking: completes with (error_code,
/// AsyncPermit), the permit empty when every permit is taken; an error code
/// as async_try_lock has them, and Errc::invalid_argument, at once, when
/// the name's count is not this object's (see Semaphore::acquire()).
template <class Token>
auto async_try_acquire(Semaphore& semaphore, Token&& token) {
  return detail::start_acquire(semaphore, detail::SteadyClock::now(), /*wait=*/false,
                               std::forward<Token>(token));
}

/// try_acquire_for() without blocking: waits as async_try_lock_for does
/// (woken in turn by a release, all at once by Semaphore::resize(); no
/// thread parked); completes by the deadline with a permit, an empty one
/// (every permit taken all along), or an error code; cancel_waits() of the
/// Semaphore reaches it.
template <class Rep, class Period, class Token>
auto async_try_acquire_for(Semaphore& semaphore, const std::chrono::duration<Rep, Period>& timeout,
                           Token&& token) {
  return detail::start_acquire(semaphore, detail::deadline_after(timeout), /*wait=*/true,
                               std::forward<Token>(token));
}

/// As async_try_acquire_for, until `deadline` of any clock.
template <class Clock, class Duration, class Token>
auto async_try_acquire_until(Semaphore& semaphore,
                             const std::chrono::time_point<Clock, Duration>& deadline,
                             Token&& token) {
  return detail::start_acquire(semaphore, detail::to_steady_deadline(deadline), /*wait=*/true,
                               std::forward<Token>(token));
}

/// acquire() without blocking: waits as async_try_acquire_for does, with
/// no deadline (an outage is one step's command timeout).
template <class Token>
auto async_acquire(Semaphore& semaphore, Token&& token) {
  return detail::start_acquire(semaphore, detail::no_deadline, /*wait=*/true,
                               std::forward<Token>(token));
}

namespace detail {
// The operation takes a copy of the limiter (sharing its cancel_waits()),
// made at the call, as a lock's state is taken: a deferred start may
// outlive the limiter.
struct InitiateRate {
  std::uint64_t cost;
  SteadyClock::time_point until;
  bool acquire;
  template <class Handler>
  void operator()(Handler handler, RateLimiter limiter) const {
    std::make_shared<RateOp<Handler>>(std::move(limiter), cost, until, acquire, std::move(handler))
        ->start();
  }
};
template <class Token>
auto start_rate(RateLimiter& limiter, std::uint64_t cost, SteadyClock::time_point until,
                bool acquire, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, RateDecision)>(
      InitiateRate{cost, until, acquire}, token, RateLimiter(limiter));
}
}  // namespace detail

/// RateLimiter::try_acquire(cost) without blocking: completes with
/// (error_code, RateDecision); an error code where the blocking call
/// throws (an outage, Errc::invalid_argument for a cost of 0 or over
/// burst()). Terminal cancellation completes with
/// asio::error::operation_aborted; an attempt in flight may have been
/// counted, as one cut by a deadline may.
template <class Token>
auto async_try_acquire(RateLimiter& limiter, std::uint64_t cost, Token&& token) {
  return detail::start_rate(limiter, cost, detail::SteadyClock::now(), /*acquire=*/false,
                            std::forward<Token>(token));
}
template <class Token>
auto async_try_acquire(RateLimiter& limiter, Token&& token) {
  return async_try_acquire(limiter, 1, std::forward<Token>(token));
}

/// RateLimiter::try_acquire_for(timeout, cost) without blocking: sleeps
/// each refusal's retry_after on a timer, and completes with the admitting
/// decision, or by the deadline with the last refusal and no error (at
/// once when the next chance comes after it; after cancel_waits() too).
template <class Rep, class Period, class Token>
auto async_try_acquire_for(RateLimiter& limiter, const std::chrono::duration<Rep, Period>& timeout,
                           std::uint64_t cost, Token&& token) {
  return detail::start_rate(limiter, cost, detail::deadline_after(timeout), /*acquire=*/false,
                            std::forward<Token>(token));
}
template <class Rep, class Period, class Token>
auto async_try_acquire_for(RateLimiter& limiter, const std::chrono::duration<Rep, Period>& timeout,
                           Token&& token) {
  return async_try_acquire_for(limiter, timeout, 1, std::forward<Token>(token));
}

/// As async_try_acquire_for, until `deadline` of any clock.
template <class Clock, class Duration, class Token>
auto async_try_acquire_until(RateLimiter& limiter,
                             const std::chrono::time_point<Clock, Duration>& deadline,
                             std::uint64_t cost, Token&& token) {
  return detail::start_rate(limiter, cost, detail::to_steady_deadline(deadline),
                            /*acquire=*/false, std::forward<Token>(token));
}
template <class Clock, class Duration, class Token>
auto async_try_acquire_until(RateLimiter& limiter,
                             const std::chrono::time_point<Clock, Duration>& deadline,
                             Token&& token) {
  return async_try_acquire_until(limiter, deadline, 1, std::forward<Token>(token));
}

/// RateLimiter::acquire(cost) without blocking: waits until admitted;
/// cancel_waits() ends it with Errc::cancelled.
template <class Token>
auto async_acquire(RateLimiter& limiter, std::uint64_t cost, Token&& token) {
  return detail::start_rate(limiter, cost, detail::no_deadline, /*acquire=*/true,
                            std::forward<Token>(token));
}
template <class Token>
auto async_acquire(RateLimiter& limiter, Token&& token) {
  return async_acquire(limiter, 1, std::forward<Token>(token));
}

}  // namespace distlock
