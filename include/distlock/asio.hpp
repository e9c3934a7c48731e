// distlock/asio.hpp: async locks for Asio services (standalone Asio 1.22 or
// later; CMake target distlock::asio). Nothing else of distlock includes it.
//
//   auto [ec, hold] = co_await distlock::async_try_lock(jobs, asio::as_tuple(asio::use_awaitable));
//   if (hold) { ... }      // released, without blocking, when `hold` goes
//
// An async call takes any completion token (a callback, asio::use_future,
// asio::use_awaitable) and completes on the handler's associated executor
// (a coroutine's own; bind a callback's with asio::bind_executor). Its
// steps are pipelined on one connection per backend and execution context
// (detail/asio/link_service.hpp), run by that context's threads; the
// backend's connector thread connects and gives holds back. The acquire
// steps are the blocking calls' own (detail/lifecycle/acquire_steps.hpp),
// so an async try_lock answers as try_lock() does.
//
// So far: async_try_lock, async_try_lock_for/_until and async_lock for
// Mutex (and a Semaphore's PermitLock), async_acquire and its timed forms
// for Semaphore and RateLimiter, async_run_locked over a Mutex or a
// Semaphore, on a Client (one endpoint),
// without LockOptions::replicas; other lock types and backends do not
// compile or complete with Errc::invalid_argument. An async hold belongs
// to no thread:
// a thread of the same object that locks waits for it, as for a hold of
// another thread, and any thread's unlock() gives it back.
#pragma once

// A standard header before Asio's: Asio's configuration reads libstdc++'s
// macros (aligned_alloc's among them) as it finds them, and a file that
// included none before Asio would allocate handler memory one way and
// free it, in code inlined from another file, the other (ASan's
// alloc-dealloc-mismatch, seen with this header first in a file).
#include <cstddef>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/acquire_op.hpp"
#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/asio/rate_op.hpp"
#include "distlock/detail/asio/release_op.hpp"
#include "distlock/detail/asio/run_locked_op.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lease.hpp"
#include "distlock/mutex.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/semaphore.hpp"

namespace distlock {

/// A hold an async acquire took: like std::unique_lock, movable (across
/// co_await too) and releasing on destruction, but without blocking (the
/// release goes out on the link the hold was acquired on; see unlock()).
/// Empty when the lock was busy. It keeps the lock's state alive, so it may
/// outlive the lock object, and its context.
template <class Lock>
class AsyncHold {
  using Life = detail::LifeOf<Lock>;

 public:
  AsyncHold() noexcept = default;
  AsyncHold(AsyncHold&& other) noexcept
      : life_(std::move(other.life_)), id_(std::move(other.id_)), link_(std::move(other.link_)) {}
  AsyncHold& operator=(AsyncHold&& other) noexcept {
    if (this != &other) {
      unlock();
      life_ = std::move(other.life_);
      id_ = std::move(other.id_);
      link_ = std::move(other.link_);
    }
    return *this;
  }
  ~AsyncHold() { unlock(); }

  /// Whether this hold is still the lock object's (no unlock() of it, from
  /// here or any thread, since).
  bool owns_lock() const noexcept {
    return life_ != nullptr && !id_.empty() && life_->id(kind) == id_;
  }
  explicit operator bool() const noexcept { return owns_lock(); }
  /// The Watchdog reported the lease lost (see Mutex::lost()).
  bool lost() const noexcept { return owns_lock() && life_->lost(kind); }
  /// What is left of the lease as last confirmed; zero when not held.
  std::chrono::milliseconds validity() const noexcept {
    return owns_lock() ? life_->validity(kind) : std::chrono::milliseconds(0);
  }
  /// The fencing token of this hold (LockOptions::fencing); NotHeldError
  /// once it is given back.
  long long fence() const {
    if (!owns_lock()) throw NotHeldError("this async hold is empty or was given back");
    return life_->fence(kind);
  }
  /// The hold's token; empty when empty.
  const std::string& id() const noexcept { return id_; }

  /// Gives the hold back without waiting: its release written on the link
  /// it was acquired on, or, where that would wait (a renewal in flight, a
  /// minimum hold, a context gone), sent by the backend's connector thread;
  /// a failure told to the Client's event hook. Empty afterwards.
  void unlock() noexcept {
    std::shared_ptr<detail::AsioLink> link = std::exchange(link_, {}).lock();
    if (!owns_lock()) {  // given back already (by any thread): nothing to send
      life_.reset();
      id_.clear();
      return;
    }
    std::shared_ptr<Life> life = std::move(life_);
    const std::string id = std::move(id_);
    if (life->protocol().forked()) return;  // the parent's hold: the child sends nothing
    try {
      detail::release_on_link(life, id, link, [life](std::error_code ec, Release) {
        if (!ec) return;
        detail::emit_unlock_failed(life->protocol().events(), life->protocol().key(), ec.message());
      });
    } catch (...) {  // no memory for it: the lease runs out instead
    }
  }

 private:
  friend struct detail::AsyncAccess;
  static constexpr typename Life::Kind kind = detail::LifeTraits<Life>::exclusive;

  AsyncHold(std::shared_ptr<Life> life, std::string id,
            const std::shared_ptr<detail::AsioLink>& link) noexcept
      : life_(std::move(life)), id_(std::move(id)), link_(link) {}

  std::shared_ptr<Life> life_;
  std::string id_;
  // The link it was acquired on, for the release; held weakly, as a hold
  // may outlive its context.
  std::weak_ptr<detail::AsioLink> link_;
};

namespace detail {
// Starts an AcquireOp. It carries the deadline itself: an initiation with
// no state, handed on by reference, draws a false "maybe uninitialized"
// from g++ 12.
template <class Lock>
struct InitiateAcquire {
  SteadyClock::time_point deadline;
  bool wait;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LifeOf<Lock>> life) const {
    std::make_shared<AcquireOp<Lock, Handler>>(std::move(life), std::move(handler), deadline, wait)
        ->start();
  }
};
// An acquire on `source`, a lock or a Semaphore (see HeldLock).
template <class Source, class Token>
auto start_acquire(Source& source, SteadyClock::time_point deadline, bool wait, Token&& token) {
  using Lock = HeldLockOf<Source>;
  return asio::async_initiate<Token, void(std::error_code, AsyncHold<Lock>)>(
      InitiateAcquire<Lock>{deadline, wait}, token, AsyncAccess::life_of(source));
}

// Starts a RunLockedOp, whose acquire waits until `deadline`.
template <class Source, class Task, class Token>
auto run_locked(Source& source, SteadyClock::time_point deadline, Task task, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, RunLocked)>(
      [&source, deadline](auto handler, Task work) {
        using Op = RunLockedOp<HeldLockOf<Source>, Task, decltype(handler)>;
        std::make_shared<Op>(std::move(work), std::move(handler))->start([&](auto done) {
          start_acquire(source, deadline, /*wait=*/true, std::move(done));
        });
      },
      token, std::move(task));
}
}  // namespace detail

/// try_lock() without blocking: completes with (error_code, AsyncHold),
/// the hold empty when the lock is busy; an outage (no reply within the
/// command timeout, a broken connection) is an error code, as try_lock()
/// throws it. Terminal cancellation (an Asio cancellation slot) completes
/// with asio::error::operation_aborted and undoes an attempt in flight
/// behind it on the same connection, so no key is left behind.
template <class Lock, class Token>
auto async_try_lock(Lock& lock, Token&& token) {
  return detail::start_acquire(lock, detail::SteadyClock::now(), /*wait=*/false,
                               std::forward<Token>(token));
}

/// try_lock_for() without blocking: attempts until acquired or `timeout`
/// has passed, waiting between attempts as the blocking call does (for the
/// release announcement, the holder's lease, the policy's pause) but with
/// no thread parked: a waiter is a timer and a registration. Completes by
/// the deadline with the hold, an empty hold (busy all along), or an error
/// code: Errc::timed_out when Redis did not answer lately (an outage, not a
/// busy lock), Errc::cancelled after cancel_waits(), as try_lock_for(ec)
/// sets them; asio::error::operation_aborted on terminal cancellation.
template <class Lock, class Rep, class Period, class Token>
auto async_try_lock_for(Lock& lock, const std::chrono::duration<Rep, Period>& timeout,
                        Token&& token) {
  return detail::start_acquire(lock, detail::deadline_after(timeout), /*wait=*/true,
                               std::forward<Token>(token));
}

/// As async_try_lock_for, until `deadline` of any clock.
template <class Lock, class Clock, class Duration, class Token>
auto async_try_lock_until(Lock& lock, const std::chrono::time_point<Clock, Duration>& deadline,
                          Token&& token) {
  return detail::start_acquire(lock, detail::to_steady_deadline(deadline), /*wait=*/true,
                               std::forward<Token>(token));
}

/// lock() without blocking: waits as async_try_lock_for does, with no
/// deadline, so it completes with a hold or an error code (an outage is
/// one step's command timeout, Errc::cancelled after cancel_waits(),
/// asio::error::operation_aborted on terminal cancellation).
template <class Lock, class Token>
auto async_lock(Lock& lock, Token&& token) {
  return detail::start_acquire(lock, detail::no_deadline, /*wait=*/true,
                               std::forward<Token>(token));
}

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

/// release() without blocking: completes with (error_code, Release), as
/// release() answers or throws; the hold is empty from the call on.
/// Not cancellable: a release once asked for is sent.
template <class Lock, class Token>
auto async_release(AsyncHold<Lock>& hold, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, Release)>(
      [](auto handler, detail::HoldParts<Lock> parts) {
        detail::release_async(std::move(parts.first), std::move(parts.second), std::move(handler));
      },
      token, detail::AsyncAccess::take(hold));
}

/// Runs `task` under the lock, and tells whether it finished in time:
/// acquires as async_lock does, then calls `task(done)`, where `done` is a
/// completion handler (any arguments) to call, or to hand to an async
/// operation, when the task ends. `done` carries a cancellation slot that
/// fires (terminal) when the lease is reported lost (renewal refused, the
/// key gone, LockOptions::max_hold reached) or, not renewed, runs out; the
/// task's operations that honour it are aborted. Completes with
/// (error_code, RunLocked): whether the lease was still held when the task
/// ended; the hold is given back either way. An error code is the
/// acquire's (the task did not run) or the release's. Terminal
/// cancellation reaches the acquire, then the task. The task must run on
/// the handler's executor (a strand, where several threads run it): the
/// slot is signalled there.
///
///   co_await async_run_locked(report, [&](auto done) {
///     asio::co_spawn(executor, run_report(), std::move(done));
///   }, asio::use_awaitable);
template <class Lock, class Task, class Token>  // or a Semaphore: under one of its permits
auto async_run_locked(Lock& lock, Task task, Token&& token) {
  return detail::run_locked(lock, detail::no_deadline, std::move(task), std::forward<Token>(token));
}

/// As async_run_locked, waiting at most `timeout` for the lock: busy all
/// along, the task does not run and the call completes with
/// RunLocked::busy (an outage is an error code, as for async_try_lock_for).
template <class Lock, class Rep, class Period, class Task, class Token>
auto async_run_locked_for(Lock& lock, const std::chrono::duration<Rep, Period>& timeout, Task task,
                          Token&& token) {
  return detail::run_locked(lock, detail::deadline_after(timeout), std::move(task),
                            std::forward<Token>(token));
}

}  // namespace distlock
