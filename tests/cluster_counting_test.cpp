// Tests for Semaphore, RateLimiter and StripedMutex over a ClusterClient
// (semaphore.hpp, rate_limiter.hpp and striped_mutex.hpp on
// cluster_client.hpp): names on each master, hash tags, a slot that moves
// between two acquires, and waiters woken where the slot is now. Each suite
// shares one 3-master cluster.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/mutex.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/cluster_suite.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RedisCluster;
using testing::RedisServer;

// ---------------------------------------------------------------------------

class ClusterSemaphores : public testing::ClusterSuite {};

TEST_F(ClusterSemaphores, PermitsOnEachMaster) {
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string name = name_on(master, "permits");
    Semaphore semaphore(client(), name, 2, LockOptions{}.ttl(10s));
    auto first = semaphore.try_acquire();
    auto second = semaphore.try_acquire();
    ASSERT_TRUE(first && second) << "master " << master;
    EXPECT_FALSE(semaphore.try_acquire()) << "master " << master;
    EXPECT_EQ(at(master, {"ZCARD", name}), "2") << "master " << master;
    EXPECT_EQ(semaphore.held(), 2u) << "master " << master;
    EXPECT_EQ(semaphore.available(), 0u) << "master " << master;
    // The count adopted by the first acquire, in the set's slot.
    EXPECT_EQ(at(master, {"GET", "{" + name + "}:permits"}), "2") << "master " << master;
    EXPECT_EQ(first.release(), Release::released) << "master " << master;
    EXPECT_EQ(semaphore.available(), 1u) << "master " << master;
    EXPECT_EQ(second.release(), Release::released) << "master " << master;
    EXPECT_EQ(at(master, {"ZCARD", name}), "0") << "master " << master;
    EXPECT_EQ(at(master, {"EXISTS", "{" + name + "}:permits"}), "0") << "master " << master;
  }
}

TEST_F(ClusterSemaphores, HashTaggedNamesShareTheirSlotAndResize) {
  const std::string tag = name_on(2, "{tagged", "}") + "}";
  Semaphore reads(client(), tag + ":reads", 1, LockOptions{}.ttl(10s));
  Semaphore writes(client(), tag + ":writes", 1, LockOptions{}.ttl(10s));
  auto read = reads.try_acquire();
  auto write = writes.try_acquire();
  ASSERT_TRUE(read && write);
  reads.resize(3);
  EXPECT_EQ(reads.permits(), 3u);
  EXPECT_EQ(at(2, {"GET", reads.key() + ":permits"}), "3");
  EXPECT_EQ(reads.available(), 2u);
  EXPECT_EQ(writes.available(), 0u);
  EXPECT_EQ(at(2, {"ZCARD", writes.key()}), "1");
  at(2, {"DEL", reads.key() + ":permits"});
}

TEST_F(ClusterSemaphores, ASlotMoveBetweenTwoAcquires) {
  const std::string name = name_on(0, "permits-moved");
  Semaphore semaphore(client(), name, 2, LockOptions{}.ttl(10s));
  auto first = semaphore.try_acquire();
  ASSERT_TRUE(first);
  cluster().move_slot(detail::key_slot(name), 1);
  auto second = semaphore.try_acquire();  // sent to master 0, MOVED to master 1
  ASSERT_TRUE(second);
  EXPECT_FALSE(semaphore.try_acquire());
  EXPECT_EQ(at(1, {"ZCARD", name}), "2");
  EXPECT_EQ(semaphore.held(), 2u);
  EXPECT_EQ(first.release(), Release::released);
  EXPECT_EQ(second.release(), Release::released);
  EXPECT_EQ(at(1, {"ZCARD", name}), "0");
}

TEST_F(ClusterSemaphores, TheWatchdogRenewsAPermitAtItsSlotsOwner) {
  // A lease long enough that no slow machine sees it run out; a round is
  // asked for, and the permit's expiry (its score) must move on.
  std::mutex mutex;
  int renewed = 0;
  ClusterOptions hooked = options();
  hooked.on_event = [&](const LockEvent& event) {
    if (event.type != LockEventType::renewed) return;
    const std::lock_guard<std::mutex> guard(mutex);
    ++renewed;
  };
  ClusterClient counted(hooked);
  const std::string name = name_on(1, "permits-renewed");
  Semaphore semaphore(counted, name, 1, LockOptions{}.ttl(30s).auto_renew(true));
  auto permit = semaphore.try_acquire();
  ASSERT_TRUE(permit);
  // Its expiry made 10 s sooner, so that the renewal shows.
  const long long sooner = std::stoll(at(1, {"ZSCORE", name, permit.id()})) - 10000;
  at(1, {"ZADD", name, "XX", std::to_string(sooner), permit.id()});
  counted.watchdog().renew_all_now();
  EXPECT_TRUE(eventually([&] {
    const std::lock_guard<std::mutex> guard(mutex);
    return renewed > 0;
  })) << "never renewed";
  EXPECT_GT(std::stoll(at(1, {"ZSCORE", name, permit.id()})), sooner + 5000);
  EXPECT_FALSE(permit.lost());
  EXPECT_EQ(permit.release(), Release::released);
}

TEST_F(ClusterSemaphores, CancelWaitsWakesAWaiterAtItsSlotsOwner) {
  // The waiter's own pause is 20 s: only the wake at the node where it
  // sleeps on its subscription can end its wait in time.
  const std::string name = name_on(1, "permits-cancelled");
  Semaphore semaphore(client(), name, 1, LockOptions{}.ttl(30s), FixedInterval(20s));
  auto held = semaphore.try_acquire();
  ASSERT_TRUE(held);
  std::atomic<bool> done{false};
  std::atomic<bool> got{true};
  std::thread waiter([&] {
    got = static_cast<bool>(semaphore.try_acquire_for(25s));
    done = true;
  });
  ASSERT_TRUE(subscribed_at(1, detail::companion_key(name, "released")));
  const auto cancelled = Clock::now();
  semaphore.cancel_waits();
  const bool woke = eventually([&] { return done.load(); });
  if (!woke) static_cast<void>(held.release());  // its wait then ends by the holder's release
  waiter.join();
  EXPECT_TRUE(woke) << "the waiter slept on";
  EXPECT_FALSE(got);
  EXPECT_LT(Clock::now() - cancelled, 5s);
}

// ---------------------------------------------------------------------------

class ClusterRateLimiters : public testing::ClusterSuite {};

TEST_F(ClusterRateLimiters, FixedWindowOnEachMaster) {
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string name = name_on(master, "visits");
    RateLimiter visits(client(), name, RateOptions{}.fixed_window(3, 10s));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(visits.try_acquire()) << "master " << master;
    const RateDecision refused = visits.try_acquire();
    EXPECT_FALSE(refused.allowed) << "master " << master;
    EXPECT_GT(refused.retry_after, 0ms) << "master " << master;
    EXPECT_EQ(at(master, {"GET", name}), "3") << "master " << master;
    visits.reset();
    EXPECT_EQ(at(master, {"EXISTS", name}), "0") << "master " << master;
  }
}

TEST_F(ClusterRateLimiters, SmoothOnAHashTaggedName) {
  const std::string tag = name_on(1, "{user", "}") + "}";
  RateLimiter calls(client(), tag + ":calls", RateOptions{}.smooth(2, 10s));
  EXPECT_TRUE(calls.try_acquire(2));
  EXPECT_FALSE(calls.try_acquire());
  EXPECT_EQ(at(1, {"EXISTS", calls.key()}), "1");
  calls.reset();
}

TEST_F(ClusterRateLimiters, ASlotMoveBetweenTwoAcquires) {
  const std::string name = name_on(2, "visits-moved");
  RateLimiter visits(client(), name, RateOptions{}.fixed_window(3, 10s));
  EXPECT_TRUE(visits.try_acquire(2));
  cluster().move_slot(detail::key_slot(name), 0);
  // The count moved with the slot: one unit is left, at master 0.
  const RateDecision last = visits.try_acquire();
  EXPECT_TRUE(last.allowed);
  EXPECT_EQ(last.remaining, 0u);
  EXPECT_FALSE(visits.try_acquire());
  EXPECT_EQ(at(0, {"GET", name}), "3");
  visits.reset();
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");
}

// ---------------------------------------------------------------------------

class ClusterStripes : public testing::ClusterSuite {};

TEST_F(ClusterStripes, StripesSpreadOverTheMasters) {
  StripedMutex segments(client(), "stock", 16, LockOptions{}.ttl(10s));
  std::set<std::size_t> masters;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    Mutex& stripe = segments.stripe(i);
    ASSERT_TRUE(stripe.try_lock()) << "stripe " << i;
    const std::size_t master = cluster().owner_of(detail::key_slot(stripe.key()));
    masters.insert(master);
    EXPECT_EQ(at(master, {"GET", stripe.key()}), stripe.token()) << "stripe " << i;
  }
  EXPECT_EQ(masters.size(), cluster().masters());
  EXPECT_FALSE(segments.try_lock_any());
  for (std::size_t i = 0; i < segments.size(); ++i) segments.stripe(i).unlock();
  auto taken = segments.try_lock_any_for(2s);
  ASSERT_TRUE(taken);
  // Given back first: try_lock_any_for picks a stripe at random, one time in 16 the
  // very stripe "item:42" maps to, which this thread may not take twice.
  taken.guard.unlock();
  EXPECT_EQ(segments.lock("item:42"), segments.stripe_of("item:42"));
  segments.unlock("item:42");
}

TEST_F(ClusterStripes, AHashTaggedNamePutsEveryStripeInItsSlot) {
  const std::string name = name_on(2, "{sale", "}") + "}";
  StripedMutex segments(client(), name, 4, LockOptions{}.ttl(10s));
  for (std::size_t i = 0; i < segments.size(); ++i) {
    ASSERT_TRUE(segments.stripe(i).try_lock());
  }
  EXPECT_EQ(at(2, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(detail::key_slot(name))}), "4");
  for (std::size_t i = 0; i < segments.size(); ++i) segments.stripe(i).unlock();
}

TEST_F(ClusterStripes, ASlotMoveBetweenTwoAcquires) {
  const std::string name = name_on(1, "segments-moved", ":0");
  StripedMutex segments(client(), name, 1, LockOptions{}.ttl(10s));
  const std::string key = segments.stripe(0).key();
  ASSERT_TRUE(segments.try_lock_any());
  cluster().move_slot(detail::key_slot(key), 2);
  EXPECT_EQ(segments.stripe(0).release(), Release::released);  // MOVED to master 2
  EXPECT_TRUE(segments.try_lock_any());
  EXPECT_EQ(at(2, {"GET", key}), segments.stripe(0).token());
  segments.stripe(0).unlock();
  EXPECT_EQ(at(2, {"EXISTS", key}), "0");
}

TEST_F(ClusterStripes, AWaiterSubscribesWhereItsStripeIsAndAgainWhereItMoved) {
  // One stripe, on master 1 (master 0 serves slot 0). The holder has an
  // object and a client of its own, as another process would.
  const std::string name = name_on(1, "segments-waited", ":0");
  ClusterClient other(options());
  StripedMutex holder(other, name, 1, LockOptions{}.ttl(30s));
  StripedMutex waiting(client(), name, 1, LockOptions{}.ttl(30s));
  const std::string key = holder.stripe(0).key();
  const std::string channel = detail::companion_key(key, "released");
  ASSERT_TRUE(holder.try_lock_any());
  std::atomic<bool> done{false};
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto taken = waiting.try_lock_any_for(20s);
    got = static_cast<bool>(taken);
    if (taken) taken.guard.release();  // kept held: unlocked below
    done = true;
  });
  const bool first = subscribed_at(1, channel);
  EXPECT_TRUE(first) << "the waiter did not subscribe at its stripe's master";
  long long subscribed = calls_at(1, "ssubscribe");
  if (first) {
    cluster().move_slot(detail::key_slot(key), 2);
    EXPECT_TRUE(subscribed_at(2, channel)) << "the waiter did not subscribe again where it moved";
    // Once there, it stays: no subscribing again and again at master 1.
    subscribed = calls_at(1, "ssubscribe") - subscribed;
    EXPECT_LE(subscribed, 2);
  }
  EXPECT_FALSE(done);
  holder.stripe(0).unlock();  // MOVED to master 2, announced there
  EXPECT_TRUE(eventually([&] { return done.load(); })) << "the waiter slept on";
  waiter.join();
  EXPECT_TRUE(got);
  waiting.stripe(0).unlock();
  EXPECT_EQ(at(2, {"EXISTS", key}), "0");
}

}  // namespace
}  // namespace distlock
