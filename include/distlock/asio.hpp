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
// so an async try_lock answers as try_lock() does. Here: the lock calls,
// async_release and async_run_locked; AsyncHold is in asio_hold.hpp, the
// Semaphore's and the RateLimiter's calls in asio_counting.hpp, the
// StripedMutex's waits for any stripe in asio_striped.hpp.
//
// Covered: async_try_lock, async_try_lock_for/_until and async_lock for
// Mutex, SimpleMutex, ReentrantMutex, SharedMutex, Redlock (and a
// Semaphore's PermitLock), the read side's async_lock_shared and its kin
// for SharedMutex, async_acquire and its timed forms for Semaphore and
// RateLimiter, async_lock_any and its kin for StripedMutex,
// async_run_locked over those locks or a Semaphore, on a Client, a
// SentinelClient or a ClusterClient (a Redlock's masters any of them),
// with or without LockOptions::replicas. An async hold belongs to no
// thread. Of a Mutex, a thread of the same object that locks waits for it,
// as for a hold of another thread, and any thread's unlock() gives it back
// (a SimpleMutex's release, a read and then a transaction on one
// connection, and a Redlock's, on every master, go through the first
// backend's connector thread). Of a ReentrantMutex, each async acquire
// is an owner of its own ("<client id>:a<n>" in the hash): it never
// re-enters (a second async acquire through the object waits like any
// other owner), it excludes every thread's holds, and only the AsyncHold
// gives it back. So is each of a SharedMutex, on either side.
#pragma once

// A standard header before Asio's: Asio's configuration reads libstdc++'s
// macros (aligned_alloc's among them) as it finds them, and a file that
// included none before Asio would allocate handler memory one way and
// free it, in code inlined from another file, the other (ASan's
// alloc-dealloc-mismatch, seen with this header first in a file).
#include <cstddef>

#include <asio/async_result.hpp>

#include <chrono>
#include <system_error>
#include <utility>

#include "distlock/asio_counting.hpp"
#include "distlock/asio_hold.hpp"
#include "distlock/asio_striped.hpp"
#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/redlock_op.hpp"
#include "distlock/detail/asio/release_op.hpp"
#include "distlock/detail/asio/run_locked_op.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/lease.hpp"
#include "distlock/mutex.hpp"

namespace distlock {

namespace detail {
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

/// async_try_lock, for a SharedMutex's read side: completes with
/// (error_code, AsyncSharedHold), the hold empty when a writer holds it.
template <class Lock, class Token>
auto async_try_lock_shared(Lock& lock, Token&& token) {
  return detail::start_acquire<detail::Side::shared>(lock, detail::SteadyClock::now(),
                                                     /*wait=*/false, std::forward<Token>(token));
}

/// async_try_lock_for, for a SharedMutex's read side.
template <class Lock, class Rep, class Period, class Token>
auto async_try_lock_shared_for(Lock& lock, const std::chrono::duration<Rep, Period>& timeout,
                               Token&& token) {
  return detail::start_acquire<detail::Side::shared>(lock, detail::deadline_after(timeout),
                                                     /*wait=*/true, std::forward<Token>(token));
}

/// async_try_lock_until, for a SharedMutex's read side.
template <class Lock, class Clock, class Duration, class Token>
auto async_try_lock_shared_until(Lock& lock,
                                 const std::chrono::time_point<Clock, Duration>& deadline,
                                 Token&& token) {
  return detail::start_acquire<detail::Side::shared>(lock, detail::to_steady_deadline(deadline),
                                                     /*wait=*/true, std::forward<Token>(token));
}

/// async_lock, for a SharedMutex's read side.
template <class Lock, class Token>
auto async_lock_shared(Lock& lock, Token&& token) {
  return detail::start_acquire<detail::Side::shared>(lock, detail::no_deadline, /*wait=*/true,
                                                     std::forward<Token>(token));
}

/// release() without blocking: completes with (error_code, Release), as
/// release() answers or throws; the hold is empty from the call on.
/// Not cancellable: a release once asked for is sent.
template <class Lock, detail::Side side, class Token>
auto async_release(AsyncHold<Lock, side>& hold, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, Release)>(
      [](auto handler, detail::HoldParts<Lock, side> parts) {
        constexpr auto kind = detail::LifeTraits<detail::LifeOf<Lock>>::template kind<side>();
        detail::release_async(std::move(parts.first), kind, std::move(parts.second),
                              std::move(handler));
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
