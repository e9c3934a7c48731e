// Tests for the waiting async acquires of distlock/asio.hpp (async_lock,
// async_try_lock_for, async_try_lock_until) over a real io_context and real
// servers: woken by the release announcement, by the holder's expiry, by a
// local unlock and by cancel_waits(); the deadline rules of the blocking
// calls, a server stopped mid-wait told apart from a busy lock, terminal
// cancellation while asleep, and many waiters, async and blocking, taking
// turns on one name.
#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
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
using testing::Hold;
using testing::Tried;

class AsioWaitTest : public testing::AsioTest {
 protected:
  template <class Duration>
  std::future<Tried> start_lock_for(Mutex& mutex, Duration timeout,
                                    asio::cancellation_slot slot = {}) {
    return start([&](auto token) { async_try_lock_for(mutex, timeout, std::move(token)); }, slot);
  }

  long long subscribers(const Mutex& mutex) {
    return testing::AsioTest::subscribers(detail::companion_key(mutex.key(), "released"));
  }
  // An async waiter is asleep on the release channel, its subscription
  // confirmed.
  static bool asleep(Client& client, const Mutex& mutex) {
    return eventually([&] {
      return detail::NotifierProbe::armed(client.notifier(),
                                          detail::companion_key(mutex.key(), "released"));
    });
  }
  // The SET commands the server ran: a Mutex's attempts.
  long long set_calls() {
    const std::string stats = server().command({"INFO", "commandstats"});
    const std::string::size_type at = stats.find("cmdstat_set:calls=");
    return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 18));
  }
  // async_lock(mutex): on the grant `inside(hold)`, then the hold given
  // back. A failed grant or release counts in `errors`, each end in `ended`.
  void lock_then_release(Mutex& mutex, std::function<void(const Hold&)> inside,
                         std::atomic<int>& errors, std::atomic<int>& ended) {
    async_lock(
        mutex,
        asio::bind_executor(
            io_,
            testing::Completion<std::error_code, Hold>(
                [this, inside = std::move(inside), &errors, &ended](std::error_code ec, Hold hold) {
                  if (ec || !hold) {
                    ++errors;
                    ++ended;
                    return;
                  }
                  inside(hold);
                  auto kept = std::make_shared<Hold>(std::move(hold));
                  async_release(*kept,
                                asio::bind_executor(
                                    io_, testing::Completion<std::error_code, Release>(
                                             [kept, &errors, &ended](std::error_code e, Release r) {
                                               if (e || r != Release::released) {
                                                 ++errors;
                                               }
                                               ++ended;
                                             })));
                })));
  }
  // `waiters` async_lock()s of `lock_of(i)`, on "async:herd", each
  // released as it is granted, after waiting behind another holder: each
  // gets in once, alone, in a few attempts.
  void take_turns(Client& client, const std::function<Mutex&(int)>& lock_of, int waiters) {
    Mutex holder(client, "async:herd", LockOptions().ttl(30s));
    ASSERT_TRUE(holder.try_lock());
    std::atomic<int> ended{0};
    std::atomic<int> errors{0};
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    for (int i = 0; i < waiters; ++i) {
      lock_then_release(
          lock_of(i),
          [&](const Hold& hold) {
            if (++inside > 1) ++overlaps;
            if (server().command({"GET", "async:herd"}) != hold.id()) ++overlaps;
            --inside;
          },
          errors, ended);
    }
    // Every waiter has tried twice (before and after subscribing) and sleeps.
    ASSERT_TRUE(eventually([&] { return set_calls() >= 2 * waiters; }, 30s));
    holder.unlock();
    ASSERT_TRUE(eventually([&] { return ended.load() == waiters; }, 60s));
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_LT(set_calls(), 10 * waiters);
    EXPECT_FALSE(key_exists("async:herd"));
  }

  static bool pending(std::future<Tried>& result) {
    return result.wait_for(0s) == std::future_status::timeout;
  }
};

// A holder with a long lease: only the release announcement can wake the
// waiter in time (its own timer waits for the lease's end).
// A long command timeout: a confirmation of the subscription that did not
// wake the waiter would leave it waiting that long.
TEST_F(AsioWaitTest, LockWaitsForTheReleaseAndIsWokenByIt) {
  ClientOptions where = client_options(server());
  where.command_timeout = 60s;
  Client client(where);
  Mutex holder(client, "async:wait", LockOptions().ttl(60s));
  Mutex waiter(client, "async:wait");
  ASSERT_TRUE(holder.try_lock());

  std::future<Tried> result = start_lock(waiter);
  ASSERT_TRUE(asleep(client, waiter));
  EXPECT_TRUE(pending(result));
  const auto released = Clock::now();
  holder.unlock();
  Tried taken = wait_for(std::move(result));
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_LT(Clock::now() - released, 10s);  // far below the 60 s lease
  EXPECT_EQ(server().command({"GET", waiter.key()}), taken.hold.id());
  EXPECT_EQ(release(taken.hold).second, Release::released);
}

// Without the announcement (wake_on_release off) the waiter polls, bounded
// by the holder's lease: a holder that never releases is outlived.
TEST_F(AsioWaitTest, AnExpiredHolderHandsTheLockOnWithoutAnAnnouncement) {
  Client client(client_options(server()));
  Mutex holder(client, "async:expiry", LockOptions().ttl(300ms).auto_renew(false));
  Mutex waiter(client, "async:expiry", LockOptions().wake_on_release(false));
  ASSERT_TRUE(holder.try_lock());
  Tried taken = wait_for(start_lock_for(waiter, 5s));
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  EXPECT_TRUE(taken.hold);
  EXPECT_EQ(subscribers(waiter), 0);
}

// The rules of TimeoutRulesWhileHeld (mutex_test.cpp), asynchronously: a
// busy lock completes with an empty hold and no error, by the deadline.
TEST_F(AsioWaitTest, TimeoutRulesWhileHeld) {
  Client client(client_options(server()));
  Mutex holder(client, "async:rules", LockOptions().ttl(30s));
  Mutex waiter(client, "async:rules");
  ASSERT_TRUE(holder.try_lock());
  struct Case {
    const char* what;
    std::function<void(std::function<void(std::error_code, Hold)>)> call;
    std::chrono::milliseconds at_least, at_most;
  };
  using Done = std::function<void(std::error_code, Hold)>;
  const std::vector<Case> cases = {
      {"negative for", [&](Done done) { async_try_lock_for(waiter, -5s, std::move(done)); }, 0ms,
       150ms},
      {"zero for", [&](Done done) { async_try_lock_for(waiter, 0ms, std::move(done)); }, 0ms,
       150ms},
      {"finite for", [&](Done done) { async_try_lock_for(waiter, 200ms, std::move(done)); }, 190ms,
       400ms},
      {"past until",
       [&](Done done) { async_try_lock_until(waiter, Clock::now() - 1s, std::move(done)); }, 0ms,
       150ms},
      {"finite until",
       [&](Done done) { async_try_lock_until(waiter, Clock::now() + 200ms, std::move(done)); },
       190ms, 400ms},
      {"system clock until",
       [&](Done done) {
         async_try_lock_until(waiter, std::chrono::system_clock::now() + 200ms, std::move(done));
       },
       190ms, 400ms},
  };
  for (const Case& c : cases) {
    const auto begun = Clock::now();
    Tried tried = wait_for(start([&](auto token) { c.call(std::move(token)); }));
    const auto took = Clock::now() - begun;
    EXPECT_FALSE(tried.ec) << c.what << ": " << tried.ec.message();
    EXPECT_FALSE(tried.hold) << c.what;
    EXPECT_GE(took, c.at_least) << c.what;
    EXPECT_LE(took, c.at_most) << c.what;
  }
  EXPECT_EQ(server().command({"GET", holder.key()}), holder.token());
}

// A server stopped while the waiter sleeps: the call ends by its deadline
// with Errc::timed_out (Redis did not answer lately), not an empty hold.
TEST_F(AsioWaitTest, AServerStoppedMidWaitIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client client(where);
  Mutex holder(client, "async:outage", LockOptions().ttl(60s));
  Mutex waiter(client, "async:outage");
  ASSERT_TRUE(holder.try_lock());
  std::future<Tried> result = start_lock_for(waiter, 1500ms);
  ASSERT_TRUE(asleep(client, waiter));
  const auto begun = Clock::now();
  server().pause();
  const Tried tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_LT(Clock::now() - begun, 1500ms + 500ms);
  server().resume();
}

// Stopped before the call: the first attempt is cut at the deadline, as
// CallsAgainstAStoppedServerReturnByTheirDeadline (mutex_test.cpp) has it.
TEST_F(AsioWaitTest, AServerStoppedBeforeTheCallIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client client(where);
  Mutex warm(client, "async:warm");
  Mutex waiter(client, "async:stopped", LockOptions().ttl(60s));
  Tried warmed = try_lock(warm);  // the link is connected before the stop
  ASSERT_TRUE(warmed.hold) << warmed.ec.message();
  ASSERT_EQ(release(warmed.hold).second, Release::released);
  server().pause();
  const auto begun = Clock::now();
  const Tried tried = wait_for(start_lock_for(waiter, 100ms));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_LT(Clock::now() - begun, 100ms + 10ms + 390ms);
  server().resume();
  // The attempt cut short was undone behind itself once the server woke.
  EXPECT_TRUE(eventually([&] { return !key_exists(waiter.key()); }));
}

TEST_F(AsioWaitTest, CancelWaitsReachesAnAsyncWaiter) {
  Client client(client_options(server()));
  Mutex holder(client, "async:cancel-waits", LockOptions().ttl(60s));
  Mutex waiter(client, "async:cancel-waits");
  ASSERT_TRUE(holder.try_lock());
  std::future<Tried> result = start_lock(waiter);
  ASSERT_TRUE(asleep(client, waiter));
  waiter.cancel_waits();
  const Tried tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, Errc::cancelled) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
}

// Polling (no announcement), the waiter sleeps on the object's
// Cancellation: cancel_waits() reaches it there too.
TEST_F(AsioWaitTest, CancelWaitsReachesAPollingAsyncWaiter) {
  Client client(client_options(server()));
  Mutex holder(client, "async:cancel-poll", LockOptions().ttl(60s));
  Mutex waiter(client, "async:cancel-poll", LockOptions().wake_on_release(false),
               FixedInterval(60s));
  ASSERT_TRUE(holder.try_lock());
  std::future<Tried> result = start_lock(waiter);
  // Refused, it reads the holder's lease (PTTL, TYPE), then sleeps.
  ASSERT_TRUE(eventually([&] {
    return server().command({"INFO", "commandstats"}).find("cmdstat_type:") != std::string::npos;
  }));
  waiter.cancel_waits();
  const Tried tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, Errc::cancelled) << tried.ec.message();
}

TEST_F(AsioWaitTest, TerminalCancellationEndsASleepingWaiter) {
  Client client(client_options(server()));
  Mutex holder(client, "async:aborted", LockOptions().ttl(60s));
  Mutex waiter(client, "async:aborted");
  ASSERT_TRUE(holder.try_lock());
  asio::cancellation_signal cancel;
  std::future<Tried> result = start_lock(waiter, cancel.slot());
  ASSERT_TRUE(asleep(client, waiter));
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Tried tried = wait_for(std::move(result));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  EXPECT_EQ(server().command({"GET", holder.key()}), holder.token());
  // Its subscription went with it: the channel lingers, then goes.
  EXPECT_TRUE(eventually([&] { return subscribers(waiter) == 0; }));
}

// A thread of the same object holds it: the async waiter waits for that
// unlock (a local nudge), not for Redis, even with a lease that long.
TEST_F(AsioWaitTest, AnAsyncWaiterWaitsForAHolderOfItsOwnObject) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:own", LockOptions().ttl(60s), FixedInterval(60s));
  ASSERT_TRUE(mutex.try_lock());
  std::future<Tried> result = start_lock(mutex);
  ASSERT_TRUE(eventually([&] { return pending(result); }));
  std::this_thread::yield();
  mutex.unlock();
  Tried taken = wait_for(std::move(result));
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_TRUE(mutex.owns_lock());
  EXPECT_EQ(release(taken.hold).second, Release::released);
}

// Many async waiters and blocking threads on one name: each gets in, one at
// a time, and nothing is left behind.
TEST_F(AsioWaitTest, AsyncAndBlockingWaitersOnOneNameTakeTurns) {
  Client client(client_options(server()));
  constexpr int async_waiters = 200;
  constexpr int threads = 4;
  constexpr int rounds_per_thread = 10;
  std::vector<std::unique_ptr<Mutex>> mutexes;
  for (int i = 0; i < async_waiters; ++i) {
    mutexes.push_back(std::make_unique<Mutex>(client, "async:turns", LockOptions().ttl(30s)));
  }
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> acquired{0};
  std::atomic<int> errors{0};
  std::atomic<int> ended{0};
  // From the grant until its release is asked for, the key holds this
  // hold's token and no other holder is inside.
  auto enter = [&](const std::string& id) {
    if (++inside > 1) ++overlaps;
    if (server().command({"GET", "async:turns"}) != id) ++overlaps;
    --inside;
  };
  for (int i = 0; i < async_waiters; ++i) {
    lock_then_release(
        *mutexes[static_cast<std::size_t>(i)],
        [&](const Hold& hold) {
          ++acquired;
          enter(hold.id());
        },
        errors, ended);
  }
  std::vector<std::thread> blocking;
  for (int t = 0; t < threads; ++t) {
    blocking.emplace_back([&] {
      Mutex mutex(client, "async:turns", LockOptions().ttl(30s));
      for (int r = 0; r < rounds_per_thread; ++r) {
        mutex.lock();
        ++acquired;
        enter(mutex.token());
        mutex.unlock();
      }
    });
  }
  for (std::thread& thread : blocking) thread.join();
  ASSERT_TRUE(eventually([&] { return ended.load() == async_waiters; }, 60s));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(acquired.load(), async_waiters + threads * rounds_per_thread);
  EXPECT_FALSE(key_exists("async:turns"));
}

// A release wakes the next waiter in turn, not all of them: a thousand
// waiters taking turns make a few attempts each, not a thousand (all
// woken by every release, they would make half a million).
TEST_F(AsioWaitTest, AThousandWaitersOnOneNameTakeTurnsWithoutAHerd) {
  Client client(client_options(server()));
  std::vector<std::unique_ptr<Mutex>> mutexes;
  for (int i = 0; i < 1000; ++i) {
    mutexes.push_back(std::make_unique<Mutex>(client, "async:herd", LockOptions().ttl(30s)));
  }
  take_turns(
      client, [&](int i) -> Mutex& { return *mutexes[static_cast<std::size_t>(i)]; }, 1000);
}

// The same from one lock object (a service whose coroutines share it): an
// unlock of the object wakes its next waiter in turn too.
TEST_F(AsioWaitTest, AThousandWaitersOnOneLockObjectTakeTurnsWithoutAHerd) {
  Client client(client_options(server()));
  Mutex shared(client, "async:herd", LockOptions().ttl(30s));
  take_turns(
      client, [&](int) -> Mutex& { return shared; }, 1000);
}

// 10,000 waiters over 1,000 names, ten on each, behind a holder of each:
// once the holders let go, every waiter gets in, alone on its name, in a
// few attempts, and nothing is left behind.
TEST_F(AsioWaitTest, TenThousandWaitersOverAThousandNamesEachGetInAlone) {
  Client client(client_options(server()));
  constexpr int names = 1000;
  constexpr int waiters = 10 * names;
  const auto name = [](int n) { return "async:many:" + std::to_string(n); };
  std::vector<std::unique_ptr<Mutex>> holders;
  for (int n = 0; n < names; ++n) {
    holders.push_back(std::make_unique<Mutex>(client, name(n), LockOptions().ttl(60s)));
    ASSERT_TRUE(holders.back()->try_lock());
  }
  std::vector<std::unique_ptr<Mutex>> mutexes;
  std::atomic<int> ended{0};
  std::atomic<int> errors{0};
  std::atomic<int> overlaps{0};
  for (int i = 0; i < waiters; ++i) {
    mutexes.push_back(std::make_unique<Mutex>(client, name(i % names), LockOptions().ttl(30s)));
    Mutex& mutex = *mutexes.back();
    lock_then_release(
        mutex,
        [&](const Hold& hold) {
          if (server().command({"GET", mutex.key()}) != hold.id()) ++overlaps;
        },
        errors, ended);
  }
  // Every waiter has tried twice (before and after subscribing) and sleeps.
  ASSERT_TRUE(eventually([&] { return set_calls() >= names + 2 * waiters; }, 60s));
  for (std::unique_ptr<Mutex>& holder : holders) holder->unlock();
  ASSERT_TRUE(eventually([&] { return ended.load() == waiters; }, 120s));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_LT(set_calls(), names + 10 * waiters);
  EXPECT_EQ(server().command({"DBSIZE"}), "0");
}

}  // namespace
}  // namespace distlock
