// distlock/asio_striped.hpp: a StripedMutex's waits for whichever stripe
// is free, without blocking (distlock/asio.hpp includes it). A key's own
// stripe is a Mutex: async_lock(segments.of(key), token) and its kin take
// it.
//
//   auto taken = co_await distlock::async_try_lock_any_for(segments, 2s, asio::use_awaitable);
//   if (taken) sell_from(taken.stripe);  // released, without blocking, when `taken` goes
#pragma once

// <cstddef> before Asio's headers: see distlock/asio.hpp.
#include <cstddef>

#include <asio/async_result.hpp>

#include <chrono>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/asio_hold.hpp"
#include "distlock/detail/asio/stripe_op.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/mutex.hpp"
#include "distlock/striped_mutex.hpp"

namespace distlock {

/// A stripe taken by an async wait on any stripe: which one, and its hold
/// (empty, and `stripe` meaningless, when none was taken).
struct AsyncStripe {
  /// The stripe's index; meaningless when none was taken.
  std::size_t stripe = 0;
  /// The stripe's hold; empty when none was taken.
  AsyncHold<Mutex> hold;
  /// Whether a stripe was taken: hold.owns_lock().
  explicit operator bool() const noexcept { return hold.owns_lock(); }
};

namespace detail {
// The operation shares the object's stripes (an object that goes first
// leaves them to it) and takes its own copy of the list.
struct InitiateAnyStripe {
  SteadyClock::time_point until;
  bool wait;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<Stripes> stripes,
                  std::vector<std::size_t> among) const {
    std::make_shared<AnyStripeOp<AsyncStripe, Handler>>(std::move(stripes), std::move(among), until,
                                                        wait, std::move(handler))
        ->start();
  }
};
template <class Token>
auto start_any_stripe(StripedMutex& segments, std::vector<std::size_t> among,
                      SteadyClock::time_point until, bool wait, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, AsyncStripe)>(
      InitiateAnyStripe{until, wait}, token, AsyncAccess::stripes_of(segments), std::move(among));
}
}  // namespace detail

/// StripedMutex::try_lock_any() without blocking: one pass, an async
/// try_lock at a time, over the stripes (or those listed in `among`):
/// first the one the object took last, then the others from a random
/// start. Completes with (error_code, AsyncStripe), empty when every
/// stripe was busy; an outage is an error code, as try_lock() throws it,
/// and a stripe past size() is Errc::invalid_argument. Terminal
/// cancellation completes with asio::error::operation_aborted and undoes
/// the attempt in flight.
template <class Token>
auto async_try_lock_any(StripedMutex& segments, Token&& token) {
  return detail::start_any_stripe(segments, detail::all_stripes(segments.size()),
                                  detail::SteadyClock::now(),
                                  /*wait=*/false, std::forward<Token>(token));
}
template <class Token>
auto async_try_lock_any(StripedMutex& segments, std::vector<std::size_t> among, Token&& token) {
  return detail::start_any_stripe(segments, std::move(among), detail::SteadyClock::now(),
                                  /*wait=*/false, std::forward<Token>(token));
}

/// StripedMutex::try_lock_any_for() without blocking: passes until a
/// stripe is taken or `timeout` has passed, and between them, with no
/// thread parked, a wait for a release of one stripe chosen at random or a
/// pause from 1 ms growing to 50 ms. Completes by the deadline plus one
/// pass: with a stripe, an empty AsyncStripe (busy all along), an error
/// code as async_try_lock_any has them, or Errc::cancelled after the
/// object's cancel_waits().
template <class Rep, class Period, class Token>
auto async_try_lock_any_for(StripedMutex& segments,
                            const std::chrono::duration<Rep, Period>& timeout, Token&& token) {
  return detail::start_any_stripe(segments, detail::all_stripes(segments.size()),
                                  detail::deadline_after(timeout),
                                  /*wait=*/true, std::forward<Token>(token));
}
template <class Rep, class Period, class Token>
auto async_try_lock_any_for(StripedMutex& segments,
                            const std::chrono::duration<Rep, Period>& timeout,
                            std::vector<std::size_t> among, Token&& token) {
  return detail::start_any_stripe(segments, std::move(among), detail::deadline_after(timeout),
                                  /*wait=*/true, std::forward<Token>(token));
}

/// As async_try_lock_any_for, until `deadline` of any clock.
template <class Clock, class Duration, class Token>
auto async_try_lock_any_until(StripedMutex& segments,
                              const std::chrono::time_point<Clock, Duration>& deadline,
                              Token&& token) {
  return detail::start_any_stripe(segments, detail::all_stripes(segments.size()),
                                  detail::to_steady_deadline(deadline),
                                  /*wait=*/true, std::forward<Token>(token));
}
template <class Clock, class Duration, class Token>
auto async_try_lock_any_until(StripedMutex& segments,
                              const std::chrono::time_point<Clock, Duration>& deadline,
                              std::vector<std::size_t> among, Token&& token) {
  return detail::start_any_stripe(segments, std::move(among), detail::to_steady_deadline(deadline),
                                  /*wait=*/true, std::forward<Token>(token));
}

/// Waits as async_try_lock_any_for does, with no deadline: completes with
/// a stripe or an error code (an outage, Errc::cancelled after
/// cancel_waits(), asio::error::operation_aborted on terminal
/// cancellation).
template <class Token>
auto async_lock_any(StripedMutex& segments, Token&& token) {
  return detail::start_any_stripe(segments, detail::all_stripes(segments.size()),
                                  detail::no_deadline, /*wait=*/true, std::forward<Token>(token));
}
template <class Token>
auto async_lock_any(StripedMutex& segments, std::vector<std::size_t> among, Token&& token) {
  return detail::start_any_stripe(segments, std::move(among), detail::no_deadline,
                                  /*wait=*/true, std::forward<Token>(token));
}

}  // namespace distlock
