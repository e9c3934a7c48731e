// Tests for async_run_locked (distlock/asio.hpp) over a real io_context and
// server: a task that ends in time is told so and its hold given back; a
// lease deleted behind the holder, run past max_hold or, not renewed, run
// out cancels the task (its timer aborted) and reports it lost; a lock busy
// until the deadline, or a failed acquire, runs nothing; the caller's
// cancellation reaches the task.
#include <gtest/gtest.h>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/asio.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;

struct Ran {
  std::error_code ec;
  RunLocked outcome = RunLocked::busy;
};

class AsioRunLockedTest : public testing::AsioTest {
 protected:
  // async_run_locked() of a task that waits `wait` on a timer bound to the
  // task's cancellation slot, noting how the wait ended in `ended`.
  std::future<Ran> run(Mutex& mutex, std::chrono::milliseconds wait,
                       asio::cancellation_slot slot = {}) {
    return ran([&](auto token) {
      async_run_locked(
          mutex,
          [this, wait](auto done) {
            started_ = true;
            auto timer = std::make_shared<asio::steady_timer>(strand_, wait);
            const asio::cancellation_slot stop = asio::get_associated_cancellation_slot(done);
            timer->async_wait(asio::bind_cancellation_slot(
                stop, [this, timer, done = std::move(done)](std::error_code ec) mutable {
                  ended_ = ec;
                  std::move(done)();
                }));
          },
          asio::bind_cancellation_slot(slot, std::move(token)));
    });
  }
  // A task that ends inside its first call.
  auto at_once() {
    return [this](auto done) {
      started_ = true;
      std::move(done)();
    };
  }
  // Starts a run, `start(token)`, whose completion the future gives.
  template <class Start>
  std::future<Ran> ran(Start start) {
    auto result = std::make_shared<std::promise<Ran>>();
    std::future<Ran> outcome = result->get_future();
    start(asio::bind_executor(strand_, testing::Completion<std::error_code, RunLocked>(
                                           [result](std::error_code ec, RunLocked how) {
                                             result->set_value(Ran{ec, how});
                                           })));
    return outcome;
  }

  // The task and run_locked's completion share a strand: the slot that
  // cancels the task is signalled there.
  asio::strand<asio::io_context::executor_type> strand_ = asio::make_strand(io_);
  std::atomic<bool> started_{false};
  std::error_code ended_;  // written by the task's handler, read after completion
};

TEST_F(AsioRunLockedTest, ATaskThatEndsInTimeIsToldSoAndItsHoldGivenBack) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:in-time");
  const Ran ran = wait_for(run(mutex, 20ms));
  EXPECT_FALSE(ran.ec) << ran.ec.message();
  EXPECT_EQ(ran.outcome, RunLocked::held);
  EXPECT_FALSE(ended_) << ended_.message();  // the timer ran out by itself
  EXPECT_FALSE(key_exists(mutex.key()));
  EXPECT_FALSE(mutex.owns_lock());
}

// A task may end inside its first call: its hold is given back, and the
// run told held.
TEST_F(AsioRunLockedTest, ATaskThatEndsAtOnceIsGivenBackItsHold) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:at-once");
  const Ran ran = wait_for(
      this->ran([&](auto token) { async_run_locked(mutex, at_once(), std::move(token)); }));
  EXPECT_FALSE(ran.ec) << ran.ec.message();
  EXPECT_EQ(ran.outcome, RunLocked::held);
  EXPECT_TRUE(started_.load());
  EXPECT_FALSE(key_exists(mutex.key()));
}

// The Watchdog finds the key gone at its next renewal (a third of the
// ttl): the task's timer is cancelled long before its 60 s.
TEST_F(AsioRunLockedTest, ALeaseDeletedBehindTheHolderCancelsTheTask) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:deleted", LockOptions().ttl(900ms).auto_renew(true));
  std::future<Ran> pending = run(mutex, 60s);
  ASSERT_TRUE(eventually([&] { return started_.load() && key_exists(mutex.key()); }));
  server().command({"DEL", mutex.key()});
  const Ran ran = wait_for(std::move(pending));
  EXPECT_EQ(ran.outcome, RunLocked::lost);
  EXPECT_EQ(ended_, asio::error::operation_aborted);
  EXPECT_FALSE(key_exists(mutex.key()));
}

TEST_F(AsioRunLockedTest, MaxHoldReachedCancelsTheTask) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:max-hold", LockOptions().ttl(300ms).auto_renew(true).max_hold(600ms));
  const Ran ran = wait_for(run(mutex, 60s));
  EXPECT_EQ(ran.outcome, RunLocked::lost);
  EXPECT_EQ(ended_, asio::error::operation_aborted);
  // Lost, it is not released (not ours to delete): the server lets it go
  // at its own count of the lease's end, a little after ours.
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
}

// A lease of its own ttl, not renewed, is never reported lost: it runs
// out, and that stops the task too.
TEST_F(AsioRunLockedTest, ALeaseNotRenewedStopsTheTaskAtItsEnd) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:fixed", LockOptions().ttl(300ms));
  const Ran ran = wait_for(run(mutex, 60s));
  EXPECT_EQ(ran.outcome, RunLocked::lost);
  EXPECT_EQ(ended_, asio::error::operation_aborted);
}

// Busy until its deadline: the task never runs.
TEST_F(AsioRunLockedTest, ALockBusyUntilTheDeadlineRunsNothing) {
  Client client(client_options(server()));
  Mutex holder(client, "run:busy", LockOptions().ttl(30s));
  Mutex mutex(client, "run:busy");
  ASSERT_TRUE(holder.try_lock());
  const Ran ran = wait_for(this->ran(
      [&](auto token) { async_run_locked_for(mutex, 100ms, at_once(), std::move(token)); }));
  EXPECT_FALSE(ran.ec) << ran.ec.message();
  EXPECT_EQ(ran.outcome, RunLocked::busy);
  EXPECT_FALSE(started_.load());
  EXPECT_EQ(server().command({"GET", holder.key()}), holder.token());
}

TEST_F(AsioRunLockedTest, AFailedAcquireRunsNothing) {
  ClientOptions options = client_options(server());
  server().kill();
  Client client(options);
  Mutex mutex(client, "run:nobody");
  const Ran ran = wait_for(run(mutex, 10ms));
  EXPECT_EQ(ran.ec, Errc::connect_failed) << ran.ec.message();
  EXPECT_EQ(ran.outcome, RunLocked::busy);
  EXPECT_FALSE(started_.load());
}

// Cancelled by its caller while the task runs: the task's timer is
// aborted, and the lease was still held when it ended.
TEST_F(AsioRunLockedTest, TheCallersCancellationReachesTheTask) {
  Client client(client_options(server()));
  Mutex mutex(client, "run:cancelled");
  asio::cancellation_signal cancel;
  std::future<Ran> pending = run(mutex, 60s, cancel.slot());
  ASSERT_TRUE(eventually([&] { return started_.load(); }));
  asio::post(strand_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Ran ran = wait_for(std::move(pending));
  EXPECT_FALSE(ran.ec) << ran.ec.message();
  EXPECT_EQ(ran.outcome, RunLocked::held);
  EXPECT_EQ(ended_, asio::error::operation_aborted);
  EXPECT_FALSE(key_exists(mutex.key()));
}

}  // namespace
}  // namespace distlock
