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
// So far: async_try_lock for Mutex on a Client (one endpoint), without
// LockOptions::replicas; other lock types and backends do not compile or
// complete with Errc::invalid_argument. An async hold belongs to no thread:
// a thread of the same object that locks waits for it, as for a hold of
// another thread, and any thread's unlock() gives it back.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/release_op.hpp"
#include "distlock/detail/asio/try_lock_op.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/mutex.hpp"

namespace distlock {

/// A hold an async acquire took: like std::unique_lock, movable (across
/// co_await too) and releasing on destruction, but sent without blocking
/// (the backend's connector thread gives it back). Empty when the lock was
/// busy. It keeps the lock's state alive, so it may outlive the lock object.
template <class Lock>
class AsyncHold {
  using Life = detail::LifeOf<Lock>;

 public:
  AsyncHold() noexcept = default;
  AsyncHold(AsyncHold&& other) noexcept
      : life_(std::move(other.life_)), id_(std::move(other.id_)) {}
  AsyncHold& operator=(AsyncHold&& other) noexcept {
    if (this != &other) {
      unlock();
      life_ = std::move(other.life_);
      id_ = std::move(other.id_);
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

  /// Gives the hold back without waiting: a release sent by the backend's
  /// connector thread (or a token-checked extend to the end of a minimum
  /// hold), its failure told to the Client's event hook. Empty afterwards.
  void unlock() noexcept {
    if (!owns_lock()) {  // given back already (by any thread): nothing to send
      life_.reset();
      id_.clear();
      return;
    }
    std::shared_ptr<Life> life = std::move(life_);
    std::string id = std::move(id_);
    try {
      life->protocol().site()->connector().post([life, id] { life->unlock_hold(kind, id); });
    } catch (...) {  // no memory for the job: the lease runs out instead
    }
  }

 private:
  friend struct detail::AsyncAccess;
  static constexpr typename Life::Kind kind = detail::LifeTraits<Life>::exclusive;

  AsyncHold(std::shared_ptr<Life> life, std::string id) noexcept
      : life_(std::move(life)), id_(std::move(id)) {}

  std::shared_ptr<Life> life_;
  std::string id_;
};

/// try_lock() without blocking: completes with (error_code, AsyncHold),
/// the hold empty when the lock is busy; an outage (no reply within the
/// command timeout, a broken connection) is an error code, as try_lock()
/// throws it. Terminal cancellation (an Asio cancellation slot) completes
/// with asio::error::operation_aborted and undoes an attempt in flight
/// behind it on the same connection, so no key is left behind.
template <class Lock, class Token>
auto async_try_lock(Lock& lock, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, AsyncHold<Lock>)>(
      [](auto handler, std::shared_ptr<detail::LifeOf<Lock>> life) {
        using Op = detail::TryLockOp<Lock, decltype(handler)>;
        std::make_shared<Op>(std::move(life), std::move(handler))->start();
      },
      token, detail::AsyncAccess::life_of(lock));
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

}  // namespace distlock
