// Tests for a Semaphore's async acquires (distlock/asio.hpp:
// async_try_acquire, async_try_acquire_for/_until, async_acquire, and
// async_run_locked over a Semaphore) over a real io_context and a real
// server: async permits counted with blocking ones, waiters woken by a
// release and all of them by a resize, the deadline and outage rules, a
// count that disagrees, cancellation and cancel_waits() leaving no permit
// behind, a permit lost under a task.
#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;
using Got = testing::Got<AsyncPermit>;

class AsioSemaphoreTest : public testing::AsioTest {
 protected:
  std::future<Got> start_try(Semaphore& semaphore, asio::cancellation_slot slot = {}) {
    return start<AsyncPermit>([&](auto token) { async_try_acquire(semaphore, std::move(token)); },
                              slot);
  }
  std::future<Got> start_acquire(Semaphore& semaphore, asio::cancellation_slot slot = {}) {
    return start<AsyncPermit>([&](auto token) { async_acquire(semaphore, std::move(token)); },
                              slot);
  }
  template <class Duration>
  std::future<Got> start_for(Semaphore& semaphore, Duration timeout,
                             asio::cancellation_slot slot = {}) {
    return start<AsyncPermit>(
        [&](auto token) { async_try_acquire_for(semaphore, timeout, std::move(token)); }, slot);
  }

  // Live permits in the name's sorted set, anyone's.
  long long live(const Semaphore& semaphore) {
    return std::stoll(server().command({"ZCARD", semaphore.key()}));
  }
  bool member(const Semaphore& semaphore, const std::string& id) {
    return server().command({"ZSCORE", semaphore.key(), id}) != "(nil)";
  }
  // `waiters` async waiters are asleep on the release channel.
  static bool asleep(Client& client, const Semaphore& semaphore, std::size_t waiters = 1) {
    const std::string channel = detail::companion_key(semaphore.key(), "released");
    return eventually(
        [&] { return detail::NotifierProbe::armed_count(client.notifier(), channel) >= waiters; });
  }
  static bool pending(std::future<Got>& result) {
    return result.wait_for(0s) == std::future_status::timeout;
  }
};

TEST_F(AsioSemaphoreTest, AsyncPermitsAreCountedWithBlockingOnes) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:exports", 3, LockOptions().ttl(30s));
  Permit blocking = exports.try_acquire();
  ASSERT_TRUE(blocking);
  Got first = wait_for(start_try(exports));
  Got second = wait_for(start_try(exports));
  ASSERT_FALSE(first.ec) << first.ec.message();
  ASSERT_FALSE(second.ec) << second.ec.message();
  ASSERT_TRUE(first.hold);
  ASSERT_TRUE(second.hold);
  EXPECT_NE(first.hold.id(), second.hold.id());
  EXPECT_TRUE(member(exports, first.hold.id()));
  EXPECT_TRUE(member(exports, second.hold.id()));
  EXPECT_GT(first.hold.validity(), 20s);

  const Got full = wait_for(start_try(exports));  // all three taken: busy, no error
  EXPECT_FALSE(full.ec) << full.ec.message();
  EXPECT_FALSE(full.hold);
  EXPECT_FALSE(exports.try_acquire());
  EXPECT_EQ(live(exports), 3);

  EXPECT_EQ(release(first.hold).second, Release::released);
  EXPECT_FALSE(first.hold);
  EXPECT_EQ(live(exports), 2);
  Got again = wait_for(start_try(exports));
  ASSERT_TRUE(again.hold) << again.ec.message();
  second.hold.unlock();  // without waiting, as a guard going out of scope
  EXPECT_TRUE(eventually([&] { return !member(exports, second.hold.id()) && live(exports) == 2; }));
  EXPECT_EQ(blocking.release(), Release::released);
  EXPECT_EQ(release(again.hold).second, Release::released);
  EXPECT_EQ(live(exports), 0);
}

// A permit lock is a lock like any other to the async calls.
TEST_F(AsioSemaphoreTest, APermitLockTakesTheMutexCalls) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:permit-lock", 1);
  PermitLock one(exports);
  std::promise<std::pair<std::error_code, bool>> told;
  async_try_lock(
      one, asio::bind_executor(io_, testing::Completion<std::error_code, AsyncHold<PermitLock>>(
                                        [&](std::error_code ec, AsyncHold<PermitLock> h) {
                                          told.set_value({ec, h.owns_lock() && one.owns_lock()});
                                        })));
  const auto [ec, held] = wait_for(told.get_future());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(held);
  EXPECT_TRUE(eventually([&] { return live(exports) == 0; }));  // given back with the callback
}

// The holder's lease is long: only the release announcement can wake the
// waiter before the test's 10 s wait ends.
TEST_F(AsioSemaphoreTest, AWaiterIsWokenByARelease) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:woken", 1, LockOptions().ttl(60s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  std::future<Got> result = start_for(exports, 50s);
  ASSERT_TRUE(asleep(client, exports));
  EXPECT_TRUE(pending(result));
  EXPECT_EQ(holder.release(), Release::released);
  Got taken = wait_for(std::move(result));
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_TRUE(member(exports, taken.hold.id()));
  EXPECT_EQ(release(taken.hold).second, Release::released);
}

// A release frees one place and wakes one waiter in turn; a resize may
// free many, and every waiter looks again.
TEST_F(AsioSemaphoreTest, AResizeWakesEveryWaiter) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:resized", 1, LockOptions().ttl(60s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  std::vector<std::future<Got>> waiting;
  for (int i = 0; i < 3; ++i) waiting.push_back(start_acquire(exports));
  ASSERT_TRUE(asleep(client, exports, 3));
  exports.resize(4);
  // All three held at once: none gives one back, which would wake the
  // next in turn.
  std::vector<Got> taken;
  std::set<std::string> ids;
  for (std::future<Got>& result : waiting) {
    taken.push_back(wait_for(std::move(result)));
    ASSERT_FALSE(taken.back().ec) << taken.back().ec.message();
    ASSERT_TRUE(taken.back().hold);
    ids.insert(taken.back().hold.id());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(live(exports), 4);
}

TEST_F(AsioSemaphoreTest, BusyUntilTheDeadlineCompletesEmptyByIt) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:busy", 1, LockOptions().ttl(30s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  for (const auto timeout : {-1000ms, 0ms, 200ms}) {
    const auto begun = Clock::now();
    const Got tried = wait_for(start_for(exports, timeout));
    const auto took = Clock::now() - begun;
    EXPECT_FALSE(tried.ec) << timeout.count() << ": " << tried.ec.message();
    EXPECT_FALSE(tried.hold) << timeout.count();
    EXPECT_GE(took, std::max(timeout, 0ms) - 10ms) << timeout.count();
    EXPECT_LE(took, std::max(timeout, 0ms) + 400ms) << timeout.count();
  }
  const auto begun = Clock::now();
  std::promise<Got> told;
  async_try_acquire_until(
      exports, std::chrono::system_clock::now() + 200ms,
      asio::bind_executor(io_, testing::Completion<std::error_code, AsyncPermit>(
                                   [&](std::error_code ec, AsyncPermit permit) {
                                     told.set_value(Got{ec, std::move(permit)});
                                   })));
  const Got until = wait_for(told.get_future());
  EXPECT_FALSE(until.ec) << until.ec.message();
  EXPECT_FALSE(until.hold);
  EXPECT_GE(Clock::now() - begun, 190ms);
  EXPECT_EQ(live(exports), 1);
}

// A server stopped while the waiter sleeps: Errc::timed_out by the
// deadline (Redis did not answer lately), not an empty permit.
TEST_F(AsioSemaphoreTest, AServerStoppedMidWaitIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client client(where);
  Semaphore exports(client, "async:outage", 1, LockOptions().ttl(60s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  std::future<Got> result = start_for(exports, 1500ms);
  ASSERT_TRUE(asleep(client, exports));
  const auto begun = Clock::now();
  server().pause();
  const Got tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_LT(Clock::now() - begun, 1500ms + 500ms);
  server().resume();
}

// The name adopted a count of 2: an object made with 3 is refused at once,
// and takes nothing (waiting would not change the count).
TEST_F(AsioSemaphoreTest, ACountThatDisagreesIsRefusedAndTakesNothing) {
  Client client(client_options(server()));
  Semaphore two(client, "async:count", 2);
  Semaphore three(client, "async:count", 3);
  Permit held = two.try_acquire();
  ASSERT_TRUE(held);
  const auto begun = Clock::now();
  const Got refused = wait_for(start_for(three, 5s));
  EXPECT_EQ(refused.ec, Errc::invalid_argument) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  EXPECT_LT(Clock::now() - begun, 4s);
  EXPECT_EQ(live(two), 1);
}

TEST_F(AsioSemaphoreTest, CancelWaitsReachesAnAsyncWaiter) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:cancel-waits", 1, LockOptions().ttl(60s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  std::future<Got> result = start_acquire(exports);
  ASSERT_TRUE(asleep(client, exports));
  exports.cancel_waits();
  const Got tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, Errc::cancelled) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_EQ(live(exports), 1);
}

TEST_F(AsioSemaphoreTest, TerminalCancellationOfASleepingWaiterTakesNothing) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:aborted", 1, LockOptions().ttl(60s));
  Permit holder = exports.try_acquire();
  ASSERT_TRUE(holder);
  asio::cancellation_signal cancel;
  std::future<Got> result = start_acquire(exports, cancel.slot());
  ASSERT_TRUE(asleep(client, exports));
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Got tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  EXPECT_EQ(live(exports), 1);
  EXPECT_EQ(holder.release(), Release::released);
  EXPECT_EQ(live(exports), 0);
}

// async_run_locked over a Semaphore: the task runs under a permit, and a
// permit removed behind its holder cancels the task at the next renewal.
TEST_F(AsioSemaphoreTest, APermitLostUnderATaskCancelsIt) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:run", 2, LockOptions().ttl(30s).auto_renew(true));
  std::atomic<bool> started{false};
  std::promise<std::error_code> task_ended;
  std::promise<std::pair<std::error_code, RunLocked>> ran;
  // The task's operations run where the slot is signalled: a strand.
  const auto strand = asio::make_strand(io_);
  auto timer = std::make_shared<asio::steady_timer>(strand);
  async_run_locked(
      exports,
      [&, timer](auto done) {
        started = true;
        timer->expires_after(60s);
        timer->async_wait(
            asio::bind_cancellation_slot(asio::get_associated_cancellation_slot(done),
                                         [&, done = std::move(done)](std::error_code ec) mutable {
                                           task_ended.set_value(ec);
                                           std::move(done)();
                                         }));
      },
      asio::bind_executor(strand, testing::Completion<std::error_code, RunLocked>(
                                      [&](std::error_code ec, RunLocked outcome) {
                                        ran.set_value({ec, outcome});
                                      })));
  ASSERT_TRUE(eventually([&] { return started.load() && live(exports) == 1; }));
  const std::string permits = server().command({"ZRANGE", exports.key(), "0", "-1"});
  ASSERT_EQ(server().command({"ZREM", exports.key(), permits}), "1");
  client.watchdog().renew_all_now();
  EXPECT_EQ(wait_for(task_ended.get_future()), asio::error::operation_aborted);
  const auto [ec, outcome] = wait_for(ran.get_future());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(outcome, RunLocked::lost);
  EXPECT_EQ(live(exports), 0);
}

// Blocking threads and async waiters share two permits: never more than
// two inside at once, and each gets in.
TEST_F(AsioSemaphoreTest, AsyncAndBlockingHoldersNeverExceedTheCount) {
  Client client(client_options(server()));
  Semaphore exports(client, "async:shared", 2, LockOptions().ttl(30s));
  std::atomic<int> inside{0};
  std::atomic<int> overflows{0};
  std::atomic<int> ended{0};
  std::atomic<int> errors{0};
  const auto enter = [&] {
    if (++inside > 2) ++overflows;
  };
  constexpr int async_waiters = 40;
  for (int i = 0; i < async_waiters; ++i) {
    async_acquire(
        exports,
        asio::bind_executor(
            io_, testing::Completion<std::error_code, AsyncPermit>([&](std::error_code ec,
                                                                       AsyncPermit permit) {
              if (ec || !permit) {
                ++errors;
                ++ended;
                return;
              }
              enter();
              --inside;
              auto kept = std::make_shared<AsyncPermit>(std::move(permit));
              async_release(*kept,
                            asio::bind_executor(io_, [&, kept](std::error_code e, Release outcome) {
                              if (e || outcome != Release::released) ++errors;
                              ++ended;
                            }));
            })));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        Permit permit = exports.try_acquire_for(20s);
        if (!permit) {
          ++errors;
          continue;
        }
        enter();
        std::this_thread::yield();
        --inside;
        if (permit.release() != Release::released) ++errors;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(eventually([&] { return ended.load() == async_waiters; }, 30s));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(overflows.load(), 0);
  EXPECT_EQ(live(exports), 0);
}

// Through the fault proxy, replies held back: an attempt applied on the
// server whose answer never comes is undone, as a Mutex's is.
class AsioSemaphoreFaultTest : public testing::AsioFaultTest {
 protected:
  // async_try_acquire() with its replies held back, once its permit is
  // in the set.
  std::future<Got> attempt_unanswered(Semaphore& semaphore, asio::cancellation_slot slot) {
    return testing::AsioFaultTest::attempt_unanswered<AsyncPermit>(
        [&](auto token) { async_try_acquire(semaphore, std::move(token)); },
        [&] { return live(semaphore) == 1; }, slot);
  }
  long long live(const Semaphore& semaphore) {
    return std::stoll(server().command({"ZCARD", semaphore.key()}));
  }
};

TEST_F(AsioSemaphoreFaultTest, ACancelledAttemptIsUndoneBehindItself) {
  options_.command_timeout = 30s;  // the undo must not wait for the link to time out
  Client client(options_);
  Semaphore exports(client, "async:cancelled", 1, LockOptions().ttl(60s));
  asio::cancellation_signal cancel;
  std::future<Got> pending = attempt_unanswered(exports, cancel.slot());
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Got tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  // Replies still held: the undo went out behind the attempt, and ran.
  EXPECT_TRUE(eventually([&] { return live(exports) == 0; }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
}

TEST_F(AsioSemaphoreFaultTest, AConnectionResetUnderAnAttemptIsUndoneApart) {
  Client client(options_);
  Semaphore exports(client, "async:reset", 1, LockOptions().ttl(60s));
  std::future<Got> pending = attempt_unanswered(exports, {});
  proxy_->reset_all();
  proxy_->sync();
  proxy_->release(testing::FaultProxy::Direction::to_client);
  const Got tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, Errc::io_error) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  // Nothing written behind on a reset connection arrives: the connector
  // gave the permit back on a connection of its own.
  EXPECT_TRUE(eventually([&] { return live(exports) == 0; }));
}

}  // namespace
}  // namespace distlock
