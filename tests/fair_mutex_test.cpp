// Tests for fair_mutex.hpp against real redis-servers: Redisson's RFairLock
// layout, grants in arrival order (threads and processes), a waiter that
// stops asking (SIGKILL) or gives up (deadline, cancel_waits) leaving the
// queue, a late waiter served when it asks at the front, places kept
// through holds longer than the waiter timeout, try_lock never jumping the
// queue, a Redisson-style peer in the same line,
// re-entry, fencing and bad arguments.
#include "distlock/fair_mutex.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distlock/detail/wire/fair_scripts.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace fair_mutex_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;

class FairMutexTest : public testing::RedisClientTest {
 protected:
  static constexpr const char* queue = "redisson_lock_queue:{turns}";
  static constexpr const char* deadlines = "redisson_lock_timeout:{turns}";
  static constexpr const char* channel = "redisson_lock__channel:{turns}";

  // `lock` waits (20 s at most) on a thread of its own, which lets go of
  // it at once; `id` gets that thread's owner id. True if it got it.
  static std::future<bool> wait_in_turn(FairMutex& lock, std::promise<std::string>* id = nullptr) {
    return std::async(std::launch::async, [&lock, id] {
      if (id != nullptr) id->set_value(lock.owner_id());
      const bool got = lock.try_lock_for(20s);
      if (got) lock.unlock();
      return got;
    });
  }

  long long queued() { return client().command("LLEN", queue).integer(); }
  std::vector<std::string> queue_now() {
    std::vector<std::string> ids;
    const Reply all = client().command("LRANGE", queue, "0", "-1");
    for (std::size_t i = 0; i < all.size(); ++i) ids.emplace_back(all[i].str());
    return ids;
  }
  long long server_ms() {
    const Reply time = client().command("TIME");
    return std::stoll(std::string(time[0].str())) * 1000 +
           std::stoll(std::string(time[1].str())) / 1000;
  }

  // A peer (a Java service, say) holds the lock as Redisson would: the hash
  // with its owner field and a lease.
  void peer_holds(const std::string& owner, std::chrono::milliseconds lease = 60s) {
    client().command("HSET", "turns", owner, "1");
    client().command("PEXPIRE", "turns", std::to_string(lease.count()));
  }
  // ... and lets it go by the fair release: the front waiter is told.
  void peer_releases(const std::string& owner) {
    const Reply answer = client().command("EVAL", std::string(scripts::fair_release.source), "3",
                                          "turns", queue, deadlines, owner, channel);
    ASSERT_EQ(answer.integer(), 1);
  }
};

TEST_F(FairMutexTest, StoresRedissonsRFairLockLayout) {
  FairMutex holder(client(), "turns", LockOptions{}.ttl(10s));
  EXPECT_EQ(holder.queue_key(), queue);
  EXPECT_EQ(holder.deadlines_key(), deadlines);
  ASSERT_TRUE(holder.try_lock());
  const std::string owner = holder.owner_id();
  EXPECT_EQ(client().command("TYPE", "turns").str(), "hash");
  EXPECT_EQ(client().command("HGET", "turns", owner).str(), "1");

  Client other(client_options(server()));
  FairMutex waiter(other, "turns", LockOptions{}.ttl(10s), {}, 3s);
  std::promise<std::string> waiter_id;
  std::future<bool> waited = wait_in_turn(waiter, &waiter_id);
  const std::string id = waiter_id.get_future().get();
  ASSERT_TRUE(eventually([&] { return queued() == 1; }));
  EXPECT_EQ(queue_now(), std::vector<std::string>{id});
  // Its deadline, by the server's clock: a waiter timeout for the first place.
  const long long due = std::stoll(std::string(client().command("ZSCORE", deadlines, id).str()));
  const long long now = server_ms();
  EXPECT_GT(due, now);
  EXPECT_LE(due, now + 3000);

  testing::RawSubscriber told(client_options(server()), std::string(channel) + ":" + id);
  holder.unlock();
  EXPECT_EQ(told.next(), "0");  // the release told the front waiter, on its own channel
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(client().command("EXISTS", "turns", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, GrantsInArrivalOrderAmongThreads) {
  constexpr int waiters = 5;
  peer_holds("peer:1");
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<FairMutex>> locks;
  for (int i = 0; i < waiters; ++i) {
    clients.push_back(std::make_unique<Client>(client_options(server())));
    locks.push_back(std::make_unique<FairMutex>(*clients.back(), "turns"));
  }
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      std::lock_guard guard(*locks[static_cast<std::size_t>(i)]);
      const std::lock_guard record(order_mutex);
      order.push_back(i);
    });
    // The next one arrives once this one has its place.
    ASSERT_TRUE(eventually([&] { return queued() == i + 1; }));
  }
  peer_releases("peer:1");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(client().command("EXISTS", "turns", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, GrantsInArrivalOrderAmongProcesses) {
  // Children first: this process starts no thread before they are forked.
  constexpr int children = 4;
  peer_holds("peer:1");
  const ClientOptions where = client_options(server());
  std::vector<pid_t> pids;
  for (int i = 0; i < children; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int status = 1;
      try {
        Client own(where);
        // Arrive after the child before this one has its place.
        const auto until = Clock::now() + 20s;
        while (own.command("LLEN", queue).integer() < i && Clock::now() < until) {
          std::this_thread::sleep_for(1ms);
        }
        FairMutex lock(own, "turns");
        std::lock_guard guard(lock);
        own.command("RPUSH", "order", std::to_string(i));
        status = 0;
      } catch (...) {
      }
      ::_exit(status);
    }
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  const bool all_queued = eventually([&] { return queued() == children; }, 20s);
  peer_releases("peer:1");
  for (const pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  ASSERT_TRUE(all_queued);
  const Reply order = client().command("LRANGE", "order", "0", "-1");
  ASSERT_EQ(order.size(), static_cast<std::size_t>(children));
  for (int i = 0; i < children; ++i) {
    EXPECT_EQ(order[static_cast<std::size_t>(i)].str(), std::to_string(i));
  }
}

TEST_F(FairMutexTest, AWaiterKilledAtTheFrontStopsBlockingTheQueueWithinItsWaiterTimeout) {
  peer_holds("peer:1");
  const ClientOptions where = client_options(server());
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      Client own(where);
      FairMutex lock(own, "turns", {}, {}, 1s);
      lock.lock();  // queued at the front until killed
    } catch (...) {
    }
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  ASSERT_TRUE(eventually([&] { return queued() == 1; }));
  const std::string dead = queue_now().front();
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);

  FairMutex next(client(), "turns", {}, {}, 1s);
  std::future<bool> waited = wait_in_turn(next);
  ASSERT_TRUE(eventually([&] { return queued() == 2; }));
  EXPECT_EQ(queue_now().front(), dead);
  peer_releases("peer:1");  // the dead waiter is told, and never answers
  const auto released = Clock::now();
  EXPECT_TRUE(waited.get());
  // Dropped once its deadline passed (a second after its last ask), so the
  // next one got the lock well within the waiter timeout and a poll.
  EXPECT_LT(Clock::now() - released, 10s);
  EXPECT_EQ(client().command("EXISTS", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, AWaiterWhoseDeadlinePassesLeavesTheQueue) {
  peer_holds("peer:1");
  FairMutex waiter(client(), "turns");
  EXPECT_FALSE(waiter.try_lock_for(300ms));
  // Left by its last attempt, in its round trip: not by its (ten-second)
  // waiter timeout, nor by one more round trip after its deadline.
  EXPECT_EQ(client().command("EXISTS", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, CancelWaitsEndsTheWaitAndLeavesTheQueue) {
  client().command("SCRIPT", "LOAD", std::string(scripts::fair_acquire.source));
  peer_holds("peer:1");
  FairMutex waiter(client(), "turns");
  std::future<std::error_code> waited = std::async(std::launch::async, [&] {
    try {
      waiter.lock();
    } catch (const Error& error) {
      return error.code();
    }
    return std::error_code();
  });
  // Its second attempt follows its subscription, and a wake-up after it
  // is sent is not missed: then it sleeps, on its own channel.
  ASSERT_TRUE(eventually([&] { return testing::command_calls(client()).of("evalsha") >= 2; }));
  ASSERT_EQ(queued(), 1);
  waiter.cancel_waits();
  ASSERT_EQ(waited.wait_for(10s), std::future_status::ready);  // woken, not by a poll
  EXPECT_EQ(waited.get(), make_error_code(Errc::cancelled));
  EXPECT_EQ(client().command("EXISTS", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, WaitersKeepTheirPlacesThroughAHoldLongerThanTheWaiterTimeout) {
  peer_holds("peer:1");
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<FairMutex>> locks;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(client_options(server())));
    locks.push_back(std::make_unique<FairMutex>(*clients.back(), "turns", LockOptions{},
                                                AcquirePolicy{}, 300ms));
  }
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      std::lock_guard guard(*locks[static_cast<std::size_t>(i)]);
      const std::lock_guard record(order_mutex);
      order.push_back(i);
    });
    ASSERT_TRUE(eventually([&] { return queued() == i + 1; }));
  }
  const std::vector<std::string> arrived = queue_now();
  std::this_thread::sleep_for(1500ms);  // five waiter timeouts: they must keep asking
  EXPECT_EQ(queue_now(), arrived);
  peer_releases("peer:1");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST_F(FairMutexTest, TryLockTakesAFreeLockOnlyWhenNobodyWaits) {
  // A peer waits, its place good for a minute by the server's clock.
  client().command("RPUSH", queue, "peer:2");
  client().command("ZADD", deadlines, std::to_string(server_ms() + 60000), "peer:2");
  FairMutex lock(client(), "turns");
  EXPECT_FALSE(lock.try_lock());                               // free, but it is the peer's turn
  EXPECT_EQ(queue_now(), std::vector<std::string>{"peer:2"});  // and no place taken
  EXPECT_EQ(client().command("EXISTS", "turns").integer(), 0);
  // The peer gives up (Redisson's acquireFailed): now nobody waits.
  client().command("EVAL", std::string(scripts::fair_leave.source), "3", "turns", queue, deadlines,
                   "peer:2", "300000", channel);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST_F(FairMutexTest, ARedissonPeerWaitsInTheSameLine) {
  FairMutex holder(client(), "turns");
  ASSERT_TRUE(holder.try_lock());
  // A Java waiter arrives first, its deadline set by Redisson's rule (the
  // lease left plus its wait time, on its own clock).
  const long long lease = client().command("PTTL", "turns").integer();
  client().command("RPUSH", queue, "java:7");
  client().command("ZADD", deadlines, std::to_string(server_ms() + lease + 300000), "java:7");
  // The C++ waiter keeps the Java side's waiter timeout: a Java grant moves
  // every deadline up by that much.
  Client other(client_options(server()));
  FairMutex cpp(other, "turns", {}, {}, FairMutex::redisson_waiter_timeout);
  std::promise<std::string> cpp_id;
  std::future<bool> waited = wait_in_turn(cpp, &cpp_id);
  const std::string cpp_channel = std::string(channel) + ":" + cpp_id.get_future().get();
  ASSERT_TRUE(eventually([&] { return queued() == 2; }));
  testing::RawSubscriber java_told(client_options(server()), std::string(channel) + ":java:7");
  testing::RawSubscriber cpp_told(client_options(server()), cpp_channel);
  holder.unlock();
  EXPECT_EQ(java_told.next(), "0");  // the Java waiter's turn, on its channel
  EXPECT_EQ(waited.wait_for(300ms), std::future_status::timeout);  // not the C++ one's
  // The Java waiter takes the lock (its grant moves the line up) and lets it go.
  const Reply granted =
      client().command("EVAL", std::string(scripts::fair_acquire.source), "3", "turns", queue,
                       deadlines, "30000", "java:7", "300000", "1");
  ASSERT_TRUE(granted.is_nil()) << "the Java waiter was not granted";
  EXPECT_EQ(queue_now().size(), 1u);
  peer_releases("java:7");
  EXPECT_EQ(cpp_told.next(), "0");  // still in line: its turn, told
  EXPECT_TRUE(waited.get());
}

// A waiter that asks is alive: at the front, its deadline passed (it was
// slow to ask), it is served, not dropped behind those after it; anyone
// else's script drops it. The grant moves the others up one place.
TEST_F(FairMutexTest, AWaiterAtTheFrontPastItsDeadlineIsServedWhenItAsks) {
  const auto ask = [&](const std::string& owner) {
    return client().command("EVAL", std::string(scripts::fair_acquire.source), "3", "turns", queue,
                            deadlines, "30000", owner, "10000", "1");
  };
  const long long now = server_ms();
  client().command("RPUSH", queue, "late:1", "next:2", "last:3");
  client().command("ZADD", deadlines, std::to_string(now - 1000), "late:1",
                   std::to_string(now + 20000), "next:2", std::to_string(now + 30000), "last:3");
  ASSERT_TRUE(ask("late:1").is_nil()) << "the late front waiter was not served";
  EXPECT_EQ(client().command("HGET", "turns", "late:1").str(), "1");
  EXPECT_EQ(queue_now(), (std::vector<std::string>{"next:2", "last:3"}));
  EXPECT_EQ(client().command("ZSCORE", deadlines, "next:2").str(), std::to_string(now + 10000));
  EXPECT_EQ(client().command("ZSCORE", deadlines, "last:3").str(), std::to_string(now + 20000));
  client().command("DEL", "turns");
  // Now next:2 is late at the front; last:3 asking drops it and is served.
  client().command("ZADD", deadlines, std::to_string(now - 1000), "next:2");
  ASSERT_TRUE(ask("last:3").is_nil()) << "the late waiter was not dropped";
  EXPECT_TRUE(queue_now().empty());
  EXPECT_EQ(client().command("ZCARD", deadlines).integer(), 0);
}

TEST_F(FairMutexTest, ReentersWithoutTheQueue) {
  FairMutex lock(client(), "turns");
  lock.lock();
  lock.lock();
  EXPECT_EQ(lock.hold_count(), 2u);
  EXPECT_EQ(client().command("HGET", "turns", lock.owner_id()).str(), "1");  // counted here
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "turns").integer(), 1);
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "turns", queue, deadlines).integer(), 0);
}

TEST_F(FairMutexTest, FencesRiseWithEachGrant) {
  FairMutex lock(client(), "turns", LockOptions{}.fencing(true));
  lock.lock();
  const long long first = lock.fence();
  lock.unlock();
  lock.lock();
  EXPECT_GT(lock.fence(), first);
  lock.unlock();
}

TEST_F(FairMutexTest, RefusesAWaiterTimeoutOutOfRange) {
  EXPECT_THROW(FairMutex(client(), "turns", {}, {}, 10ms), InvalidArgument);
  EXPECT_THROW(FairMutex(client(), "turns", {}, {}, std::chrono::hours(25)), InvalidArgument);
}

}  // namespace fair_mutex_test
}  // namespace distlock
