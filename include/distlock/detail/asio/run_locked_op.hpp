// RunLockedOp: async_run_locked() (distlock/asio.hpp). It acquires, then
// starts the task with a completion handler of its own, bound to a
// cancellation slot that the operation emits (terminal) on the task's
// executor when the Watchdog reports the lease lost (renewal refused, the
// key gone, max_hold reached) or the caller cancels run_locked. Once the
// task completes, the operation notes whether the lease was still held,
// gives it back and completes with (error_code, RunLocked).
//
// The loss is watched through the lease's record (LeaseState::watch_loss),
// on the Watchdog's thread, which only posts and holds the operation
// weakly; for a lease not renewed, by a timer at its end.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/lease.hpp"

namespace distlock {

/// What async_run_locked (distlock/asio.hpp) found when its task ended.
enum class RunLocked {
  held,  ///< the task ended while the lease was held
  lost,  ///< the lease was lost (or ran out) first: the task was told to stop
  busy,  ///< the lock stayed busy until the deadline: the task did not run
};

namespace detail {

template <class Lock, class Task, class Handler>
class RunLockedOp : public std::enable_shared_from_this<RunLockedOp<Lock, Task, Handler>> {
  using Hold = AsyncHold<Lock>;
  using Life = LifeOf<Lock>;

 public:
  RunLockedOp(Task task, Handler handler)
      : task_(std::move(task)),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)),
        expiry_(work_) {}

  /// `acquire(token)` starts the acquire (async_lock or a timed one).
  template <class Acquire>
  void start(Acquire acquire) {
    auto self = this->shared_from_this();
    // The caller's cancellation reaches the acquire, then the task.
    slot_ = asio::get_associated_cancellation_slot(handler_);
    if (slot_.is_connected()) {
      slot_.assign([weak = std::weak_ptr<RunLockedOp>(self)](asio::cancellation_type type) {
        if (std::shared_ptr<RunLockedOp> op = weak.lock()) op->cancel(type);
      });
    }
    acquire(asio::bind_cancellation_slot(
        acquiring_.slot(), asio::bind_executor(work_, [self](std::error_code ec, Hold hold) {
          self->acquired(ec, std::move(hold));
        })));
  }

 private:
  // On the handler's executor from here on, where the slots' signals are
  // emitted: a slot is not thread-safe, so the task's operations must run
  // there too (a strand, where several threads run the context).
  void cancel(asio::cancellation_type type) {
    if (running_) return stop_.emit(type);
    // Before the task: to the acquire, and, should its hold be on its way
    // already, noted for acquired().
    if ((type & asio::cancellation_type::terminal) != asio::cancellation_type::none) {
      cancelled_ = true;
    }
    acquiring_.emit(type);
  }

  void acquired(std::error_code ec, Hold hold) {
    if (ec || !hold) return complete(ec, RunLocked::busy);
    hold_ = std::move(hold);
    if (cancelled_) return give_back(asio::error::operation_aborted, RunLocked::busy);
    // Read before the task starts: it may end (and give the hold back)
    // inside its first call.
    auto [life, id] = AsyncAccess::parts(hold_);
    lease_ = life->lease_of(LifeTraits<Life>::exclusive, id);
    const bool renewed = life->options().auto_renew();
    running_ = true;
    auto self = this->shared_from_this();
    std::move(task_)(asio::bind_cancellation_slot(
        stop_.slot(), asio::bind_executor(work_, [self](auto&&...) { self->task_done(); })));
    if (!running_) return;
    // Watched once the task has started (its operations bound to the slot):
    // a loss already reported is posted now. The watcher may outlive the
    // context: it keeps no work of it, and posts only while it is there.
    if (!lease_) return lost();  // given back already, by another thread's unlock
    LinkService& service =
        asio::use_service<LinkService>(asio::query(work_, asio::execution::context));
    lease_->watch_loss(
        [weak = this->weak_from_this(), gate = service.gate(),
         post_to = asio::prefer(work_, asio::execution::outstanding_work.untracked)] {
          try {
            gate->run_if_open([&] {
              asio::post(post_to, [weak] {
                if (std::shared_ptr<RunLockedOp> op = weak.lock()) op->lost();
              });
            });
          } catch (...) {  // no memory to post it: the lease's end still stops the task
          }
        });
    if (!renewed) watch_expiry();
  }

  // A lease that is not renewed (a ttl of its own) is never reported lost:
  // it runs out. Its end, as last known, stops the task too.
  void watch_expiry() {
    expiry_.expires_at(lease_->expires());
    expiry_.async_wait(asio::bind_executor(work_, [self = this->shared_from_this()](auto) {
      if (!self->running_) return;
      if (self->lease_->lost || LeaseState::clock::now() >= self->lease_->expires()) {
        return self->lost();
      }
      self->watch_expiry();  // renewed or extended meanwhile
    }));
  }

  void lost() {
    if (running_) stop_.emit(asio::cancellation_type::terminal);
  }

  void task_done() {
    running_ = false;
    expiry_.cancel();
    give_back({}, hold_.owns_lock() && !hold_.lost() && hold_.validity().count() > 0
                      ? RunLocked::held
                      : RunLocked::lost);
  }

  // Releases the hold, then completes with `outcome` and `ec`, or the
  // release's error.
  void give_back(std::error_code ec, RunLocked outcome) {
    auto self = this->shared_from_this();
    async_release(hold_,
                  asio::bind_executor(work_, [self, ec, outcome](std::error_code failed, Release) {
                    self->complete(ec ? ec : failed, outcome);
                  }));
  }

  void complete(std::error_code ec, RunLocked held) {
    if (slot_.is_connected()) slot_.clear();
    asio::any_io_executor work = std::exchange(work_, asio::any_io_executor());
    asio::post(work, [handler = std::move(handler_), ec, held]() mutable {
      std::move(handler)(ec, held);
    });
  }

  Task task_;
  Handler handler_;
  asio::any_io_executor work_;
  asio::cancellation_slot slot_;         // the caller's
  asio::cancellation_signal acquiring_;  // to the acquire
  asio::cancellation_signal stop_;       // to the task
  Hold hold_;
  std::shared_ptr<LeaseState> lease_;
  asio::steady_timer expiry_;  // the lease's end, as last known
  bool running_ = false;
  bool cancelled_ = false;  // terminal cancellation before the task started
};

}  // namespace detail
}  // namespace distlock
