// distlock/asio_hold.hpp: AsyncHold, the hold an async acquire completes
// with (distlock/asio.hpp includes it), and the start of that acquire. A
// hold releases without blocking: its release is written on the link the
// hold was acquired on, or handed to the backend's connector thread where
// that would wait, so a coroutine may drop a hold anywhere.
#pragma once

// <cstddef> before Asio's headers: see distlock/asio.hpp.
#include <cstddef>

#include <asio/async_result.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/acquire_op.hpp"
#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/asio/release_op.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lease.hpp"

namespace distlock {

/// A hold an async acquire took: like std::unique_lock, movable (across
/// co_await too) and releasing on destruction, but without blocking (the
/// release goes out on the link the hold was acquired on; see unlock()).
/// Empty when the lock was busy. It keeps the lock's state alive, so it may
/// outlive the lock object, and its context. `side` is the lock's
/// exclusive side, or a SharedMutex's read side (AsyncSharedHold).
template <class Lock, detail::Side side>
class AsyncHold {
  using Life = detail::LifeOf<Lock>;

 public:
  AsyncHold() noexcept = default;
  /// Takes `other`'s hold, leaving `other` empty.
  AsyncHold(AsyncHold&& other) noexcept
      : life_(std::move(other.life_)), id_(std::move(other.id_)), link_(std::move(other.link_)) {}
  /// Gives this hold back first, as unlock() does, then takes `other`'s,
  /// leaving `other` empty.
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
    return life_ != nullptr && !id_.empty() && life_->owns(kind, id_);
  }
  /// As owns_lock().
  explicit operator bool() const noexcept { return owns_lock(); }
  /// The Watchdog reported the lease lost (see Mutex::lost()).
  bool lost() const noexcept { return life_ != nullptr && life_->lost(kind, id_); }
  /// What is left of the lease as last confirmed; zero when not held.
  std::chrono::milliseconds validity() const noexcept {
    return life_ != nullptr ? life_->validity(kind, id_) : std::chrono::milliseconds(0);
  }
  /// The fencing token of this hold (LockOptions::fencing); NotHeldError
  /// once it is given back.
  long long fence() const {
    if (!owns_lock()) throw NotHeldError("this async hold is empty or was given back");
    return life_->fence(kind, id_);
  }
  /// Replicas that acknowledged this hold's grant (LockOptions::replicas);
  /// nullopt when none were asked for, or once the hold is given back.
  std::optional<int> replicas_acknowledged() const {
    return life_ != nullptr ? life_->replicas(kind, id_) : std::nullopt;
  }
  /// The hold's token; empty when empty.
  const std::string& id() const noexcept { return id_; }

  /// Gives the hold back without waiting: its release written on the link
  /// it was acquired on, or, where that would wait (a renewal in flight, a
  /// minimum hold, a context gone; every SimpleMutex's and Redlock's
  /// release), sent by the backend's connector thread, the context kept
  /// running until it is answered; a failure told to the Client's event
  /// hook. Empty afterwards.
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
      detail::release_on_link(life, kind, id, link, [life](std::error_code ec, Release) {
        if (!ec) return;
        detail::emit_unlock_failed(life->protocol().events(), life->protocol().key(), ec.message());
      });
    } catch (...) {  // no memory for it: the lease runs out instead
    }
  }

 private:
  friend struct detail::AsyncAccess;
  static constexpr typename Life::Kind kind = detail::LifeTraits<Life>::template kind<side>();

  AsyncHold(std::shared_ptr<Life> life, std::string id,
            const std::shared_ptr<detail::AsioLink>& link) noexcept
      : life_(std::move(life)), id_(std::move(id)), link_(link) {}

  std::shared_ptr<Life> life_;
  std::string id_;
  // The link it was acquired on, for the release; held weakly, as a hold
  // may outlive its context.
  std::weak_ptr<detail::AsioLink> link_;
};

/// A hold of a SharedMutex's read side, as an async read acquire takes it.
template <class Lock>
using AsyncSharedHold = AsyncHold<Lock, detail::Side::shared>;

namespace detail {
// The operation an async acquire of `Lock` runs: an AcquireOp, but for a
// Redlock (a RedlockOp: detail/asio/redlock_op.hpp).
template <class Lock, Side side, class Handler>
struct AcquireOpOf {
  using type = AcquireOp<Lock, side, Handler>;
};

// Starts the acquire's operation. It carries the deadline itself: an
// initiation with no state, handed on by reference, draws a false "maybe
// uninitialized" from g++ 12.
template <class Lock, Side side>
struct InitiateAcquire {
  SteadyClock::time_point deadline;
  bool wait;
  template <class Handler>
  void operator()(Handler handler, std::shared_ptr<LifeOf<Lock>> life) const {
    using Op = typename AcquireOpOf<Lock, side, Handler>::type;
    std::make_shared<Op>(std::move(life), std::move(handler), deadline, wait)->start();
  }
};
// An acquire of `side` on `source`, a lock or a Semaphore (see HeldLock).
template <Side side = Side::exclusive, class Source, class Token>
auto start_acquire(Source& source, SteadyClock::time_point deadline, bool wait, Token&& token) {
  using Lock = HeldLockOf<Source>;
  return asio::async_initiate<Token, void(std::error_code, AsyncHold<Lock, side>)>(
      InitiateAcquire<Lock, side>{deadline, wait}, token, AsyncAccess::life_of(source));
}

}  // namespace detail

}  // namespace distlock
