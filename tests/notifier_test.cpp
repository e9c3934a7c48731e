// Tests for detail/runtime/notifier.hpp: waiters woken by release announcements, against
// real redis-servers. Waiters here use a policy that would sleep for an hour
// between attempts, so only a notification (or the holder's lease running
// out) can let them in within the test's bounds.
#include "distlock/detail/runtime/notifier.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/detail/runtime/notifier_probe.hpp"
#include "distlock/mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/fault_proxy.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::an_hour;
using testing::command_calls;

class NotifierTest : public testing::RedisClientTest {
 protected:
  long long pubsub_channels() {
    return static_cast<long long>(client().command("PUBSUB", "CHANNELS").size());
  }
  // Waits (boundedly) until a waiter has subscribed to a channel.
  void wait_for_a_subscriber() {
    const auto deadline = Clock::now() + 5s;
    while (pubsub_channels() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_GT(pubsub_channels(), 0) << "the waiter never subscribed";
  }
  // Waits (boundedly) for the notifier to drop its subscriptions.
  bool eventually_no_channels() {
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (pubsub_channels() == 0 && detail::NotifierProbe::channel_count(client().notifier()) == 0)
        return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

TEST_F(NotifierTest, ReleaseWakesAWaiterThatWouldOtherwiseSleep) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  // Let the waiter fail once and subscribe before the release.
  wait_for_a_subscriber();
  ASSERT_EQ(pubsub_channels(), 1);
  const auto released = Clock::now();
  holder.unlock();
  ASSERT_TRUE(waiting.get());
  EXPECT_LT(Clock::now() - released, 5s);  // far below the hour and the 30 s lease
  EXPECT_TRUE(eventually_no_channels());
}

TEST_F(NotifierTest, NoMissedWakeUpUnderTightReleaseWaitInterleaving) {
  Mutex a(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex b(client(), "k", LockOptions{}.ttl(30s), an_hour);
  for (int round = 0; round < 100; ++round) {
    ASSERT_TRUE(a.try_lock()) << round;
    auto waiting = std::async(std::launch::async, [&] { return b.try_lock_for(10s); });
    // Release at varying points of the waiter's attempt/subscribe/sleep cycle.
    std::this_thread::sleep_for(std::chrono::microseconds(round * 37 % 500));
    a.unlock();
    ASSERT_TRUE(waiting.get()) << "waiter missed the release in round " << round;
    b.unlock();
  }
  EXPECT_TRUE(eventually_no_channels());
}

TEST_F(NotifierTest, HandoffStillWorksWhenTheSubscriberConnectionIsKilled) {
  Mutex holder(client(), "k", LockOptions{}.ttl(1500ms), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  wait_for_a_subscriber();
  client().command("CLIENT", "KILL", "TYPE", "pubsub");
  holder.unlock();  // the announcement may be lost with the connection
  const auto released = Clock::now();
  ASSERT_TRUE(waiting.get());
  // Lost or not, the waiter is bounded by the holder's remaining lease.
  EXPECT_LT(Clock::now() - released, 1500ms + 500ms);
  const auto reconnected_by = Clock::now() + 5s;
  while (detail::NotifierProbe::connects(client().notifier()) < 2 &&
         Clock::now() < reconnected_by) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(detail::NotifierProbe::connects(client().notifier()), 2u);
}

// The same, round after round: the notifier thread drops and remakes its
// connection under a lone waiter's sleep (ThreadSanitizer watches).
TEST_F(NotifierTest, ALoneWaiterRidesOutItsSubscriberKilledRoundAfterRound) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(holder.try_lock()) << round;
    auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
    wait_for_a_subscriber();
    client().command("CLIENT", "KILL", "TYPE", "pubsub");
    holder.unlock();  // the announcement may be lost with the connection
    ASSERT_TRUE(waiting.get()) << round;
    waiter.unlock();
  }
}

TEST_F(NotifierTest, WaitersKeepWorkingWhileTheSubscriberIsDown) {
  // Kill the subscriber repeatedly while holders hand the lock around.
  std::atomic<bool> stop{false};
  std::thread killer([&] {
    Client admin(testing::client_options(server()));
    while (!stop) {
      admin.command("CLIENT", "KILL", "TYPE", "pubsub");
      std::this_thread::sleep_for(20ms);
    }
  });
  std::atomic<int> entered{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      Mutex lock(client(), "k", LockOptions{}.ttl(300ms));
      for (int i = 0; i < 10; ++i) {
        if (lock.try_lock_for(10s)) {
          ++entered;
          std::this_thread::sleep_for(2ms);
          lock.unlock();
        }
      }
    });
  }
  for (auto& worker : workers) worker.join();
  stop = true;
  killer.join();
  EXPECT_EQ(entered, 30);
}

TEST_F(NotifierTest, ManyWaitersLeaveNoSubscriptionsOrKeysBehind) {
  constexpr int waiters = 50;
  Mutex holder(client(), "k", LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  std::vector<std::future<bool>> waiting;
  std::atomic<int> done{0};
  for (int i = 0; i < waiters; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] {
      Mutex lock(client(), "k", LockOptions{}.ttl(30s));
      const bool got = lock.try_lock_for(20s);
      ++done;
      return got;
    }));
  }
  std::this_thread::sleep_for(100ms);
  holder.unlock();
  for (auto& w : waiting) EXPECT_TRUE(w.get());  // each released on scope exit
  EXPECT_TRUE(eventually_no_channels());
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(NotifierTest, ThousandsOfHoldersAndWaitersLeaveNothingBehind) {
  constexpr int locks = 1000;
  std::vector<std::unique_ptr<Mutex>> holders;
  for (int i = 0; i < locks; ++i) {
    holders.push_back(std::make_unique<Mutex>(client(), "many:" + std::to_string(i)));
    ASSERT_TRUE(holders.back()->try_lock());  // renewed by the watchdog
  }
  // One waiter per lock: each fails, subscribes, waits briefly and gives up
  // (busy; or, with 1000 leases renewed meanwhile, a step unanswered in
  // the 2 ms: timed_out).
  for (int i = 0; i < locks; ++i) {
    Mutex waiter(client(), "many:" + std::to_string(i));
    std::error_code ec;
    ASSERT_FALSE(waiter.try_lock_for(2ms, ec));
    ASSERT_TRUE(!ec || ec == Errc::timed_out) << ec.message();
  }
  holders.clear();
  EXPECT_TRUE(eventually_no_channels());
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
  EXPECT_EQ(client().watchdog().size(), 0u);
}

TEST_F(NotifierTest, WaiterBoundFailsAcquiresAtOnceWithAClearError) {
  ClientOptions options = testing::client_options(server());
  options.max_waiters = 2;
  Client bounded(options);
  Mutex holder(bounded, "k", LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  std::vector<std::future<bool>> waiting;
  std::vector<std::unique_ptr<Mutex>> locks;
  for (int i = 0; i < 2; ++i) {
    locks.push_back(std::make_unique<Mutex>(bounded, "k", LockOptions{}.ttl(30s)));
    Mutex* lock = locks.back().get();
    waiting.push_back(std::async(std::launch::async, [lock] {
      const bool got = lock->try_lock_for(20s);
      if (got) lock->unlock();
      return got;
    }));
  }
  const auto both_waiting_by = Clock::now() + 5s;
  while (client().command("PUBSUB", "NUMSUB", "{k}:released")[1].integer() == 0 &&
         Clock::now() < both_waiting_by) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);
  Mutex third(bounded, "k");
  const auto start = Clock::now();
  try {
    static_cast<void>(third.try_lock_for(10s));
    ADD_FAILURE() << "third waiter was admitted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), Errc::too_many_waiters);
  }
  EXPECT_LT(Clock::now() - start, 1s);
  holder.unlock();
  for (auto& w : waiting) EXPECT_TRUE(w.get());
}

TEST_F(NotifierTest, AWaiterCanBeCancelledFromAnotherThread) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  client().command("CONFIG", "RESETSTAT");
  auto timed = std::async(std::launch::async, [&] { return waiter.try_lock_for(20s); });
  auto blocking = std::async(std::launch::async, [&] {
    try {
      waiter.lock();
      return false;
    } catch (const Error& error) {
      return error.code() == Errc::cancelled;
    }
  });
  // Each waiter reads the holder's PTTL just before it goes to sleep.
  ASSERT_TRUE(testing::eventually([&] { return command_calls(client()).of("pttl") >= 2; }))
      << "the waiters never went to sleep";
  const auto start = Clock::now();
  waiter.cancel_waits();
  EXPECT_FALSE(timed.get());
  EXPECT_TRUE(blocking.get());
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_TRUE(holder.owns_lock());
  ASSERT_TRUE(holder.extend(30s));  // the holder is untouched
}

TEST_F(NotifierTest, CancellingAPollingWaiterWorksToo) {
  Mutex waiter(client(), "k", LockOptions{}.wake_on_release(false), an_hour);
  Mutex holder(client(), "k");
  ASSERT_TRUE(holder.try_lock());
  client().command("CONFIG", "RESETSTAT");
  auto timed = std::async(std::launch::async, [&] { return waiter.try_lock_for(20s); });
  // The waiter reads the holder's PTTL just before it goes to sleep.
  ASSERT_TRUE(testing::eventually([&] { return command_calls(client()).of("pttl") >= 1; }))
      << "the waiter never went to sleep";
  waiter.cancel_waits();
  EXPECT_FALSE(timed.get());
}

TEST_F(NotifierTest, WithoutWakeOnReleaseWaitersPollAtThePolicysPace) {
  Mutex waiter(client(), "k", LockOptions{}.wake_on_release(false), FixedInterval(20ms));
  Mutex holder(client(), "k", LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  std::this_thread::sleep_for(100ms);
  holder.unlock();
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(pubsub_channels(), 0);  // never subscribed
}

TEST_F(NotifierTest, SimpleMutexReleasesAreAnnouncedToo) {
  SimpleMutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  SimpleMutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  wait_for_a_subscriber();
  holder.unlock();
  EXPECT_TRUE(waiting.get());
}

// ---- a sleeping waiter's attempt after the release ----------------------------

TEST_F(NotifierTest, ASleepingWaiterTakesTheLockTheReleaseAnnounces) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  wait_for_a_subscriber();
  holder.unlock();
  ASSERT_TRUE(waiting.get());
  EXPECT_EQ(get("k"), waiter.token());
  EXPECT_GT(client().command("PTTL", "k").integer(), 25000);
  EXPECT_TRUE(waiter.extend(30s));
  waiter.unlock();
  EXPECT_EQ(get("k"), "(nil)");
}

// cancel_waits() and a release at once: the waiter either holds the lock
// (its attempt was on the wire first) or gave up holding nothing.
TEST_F(NotifierTest, CancelWaitsRacingAReleaseLeavesNoLockBehind) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  int taken = 0;
  for (int round = 0; round < 30; ++round) {
    ASSERT_TRUE(holder.try_lock());
    auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
    wait_for_a_subscriber();
    if (round % 2 == 0) {
      std::thread releasing([&] { holder.unlock(); });
      waiter.cancel_waits();
      releasing.join();
    } else {
      holder.unlock();
      waiter.cancel_waits();
    }
    if (waiting.get()) {
      ++taken;
      EXPECT_EQ(get("k"), waiter.token());
      waiter.unlock();
    }
    EXPECT_EQ(get("k"), "(nil)") << "round " << round;
  }
  std::cout << taken << " of 30 rounds took the lock\n";
}

// The release is announced late and the attempt it wakes is answered later
// still (server-to-client latency): the waiter's deadline ends the read, the
// attempt (granted on the server) is undone, and the call throws.
TEST_F(NotifierTest, AnAttemptAfterTheReleaseAnsweredPastTheDeadlineIsUndone) {
  testing::FaultProxy proxy(server().host(), server().port());
  ClientOptions through = testing::client_options(server());
  through.host = proxy.host();
  through.port = proxy.port();
  through.command_timeout = 5000ms;
  Client waiting_client(through);
  Mutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  Mutex waiter(waiting_client, "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  client().command("CONFIG", "RESETSTAT");
  const auto deadline = Clock::now() + 4s;
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_until(deadline); });
  wait_for_a_subscriber();
  // Refused twice, before and after subscribing, and the holder's lease read:
  // the waiter sleeps, and only the release can wake it.
  const ClientOptions direct = testing::client_options(server());
  ASSERT_TRUE(testing::server_ran(direct, "set", 2));
  ASSERT_TRUE(testing::server_ran(direct, "pttl", 1));
  // Its replies are through the proxy before the latency is set: a round
  // trip through it, sent after the server wrote them, comes back behind
  // them. (One of them slowed would be a round trip of the waiter's as slow
  // as the latency, and Redis's answers within two of those before the
  // deadline make it a busy lock's false, as detail/lifecycle/heard.hpp says.)
  Connection(through).command("PING");
  // The latency is cut to what is left of the wait, however slow the setup
  // was: the release message lands at 70% of it, the attempt's answer at 140%.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  ASSERT_GT(left, 2s) << "the waiter took too long to subscribe";
  proxy.set_latency(testing::FaultProxy::Direction::to_client, left * 7 / 10);
  proxy.sync();
  holder.unlock();
  // Its answer late, the attempt is unanswered by the deadline: an outage's
  // TimeoutError, not a busy lock's false.
  EXPECT_THROW(waiting.get(), TimeoutError);
  EXPECT_LT(Clock::now(), deadline + 1000ms);
  proxy.heal();
  const auto until = Clock::now() + 5s;
  while (get("k") != "(nil)" && Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(get("k"), "(nil)") << "the granted attempt was never undone";
}

// ---- one waiter of a Notifier, on its own thread ----------------------------

// A waiter of `notifier` on `channel`, sleeping in its own thread for up to
// 20 s; it notes whether it was woken and the generation it then saw.
struct LoneWait {
  LoneWait(Notifier& notifier, const std::string& channel)
      : subscription(notifier.subscribe(channel, Clock::now() + 5s)),
        seen(subscription.generation()),
        result(std::async(std::launch::async, [this] {
          const bool woken = subscription.wait(seen, Clock::now() + 20s);
          return std::make_pair(woken, subscription.generation());
        })) {}
  Notifier::Subscription subscription;
  std::uint64_t seen;
  std::future<std::pair<bool, std::uint64_t>> result;
};

TEST_F(NotifierTest, WaitersOfANewChannelAndOfTheSameOneJoinASleepingWaiter) {
  Notifier& notifier = client().notifier();
  LoneWait first(notifier, "a");
  // A new channel, subscribed while the first waiter sleeps.
  LoneWait second(notifier, "b");
  EXPECT_TRUE(second.subscription.active()) << "never subscribed";
  // And the same channel: a third waiter of "a".
  LoneWait third(notifier, "a");
  EXPECT_TRUE(third.subscription.active());
  client().command("PUBLISH", "b", "released");
  EXPECT_TRUE(second.result.get().first);
  client().command("PUBLISH", "a", "released");
  EXPECT_TRUE(first.result.get().first);
  EXPECT_TRUE(third.result.get().first);
}

// A wait beside the turn (a wait on any stripe, which may take another
// lock) looks again after a release since its look, as a thread does, but
// leaves a release nobody was armed for to the waiter whose turn it is.
TEST_F(NotifierTest, AWaitBesideTheTurnLeavesAMissedReleaseToTheWaiterInTurn) {
  struct Counted final : detail::Wake {
    void fire() noexcept override { ++fired; }
    int fired = 0;
  };
  Notifier& notifier = client().notifier();
  const std::string channel = "missed:released";
  Notifier::Subscription beside_sub = notifier.subscribe(channel, Clock::now() + 5s);
  Notifier::Subscription own_sub = notifier.subscribe(channel, Clock::now() + 5s);
  ASSERT_TRUE(own_sub.active());
  const std::uint64_t seen = own_sub.generation();
  client().command("PUBLISH", channel, "0");  // with nobody armed: missed
  const auto deadline = Clock::now() + 5s;
  while (own_sub.generation() == seen && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_NE(own_sub.generation(), seen);
  Counted beside;
  beside.exclusive = false;
  Counted own;
  EXPECT_FALSE(beside_sub.sleep_on(beside, seen));  // it looks again
  EXPECT_FALSE(own_sub.sleep_on(own, seen));        // and the release is still this one's
  beside_sub.disarm(beside);
  own_sub.disarm(own);
}

TEST_F(NotifierTest, AMessageOfAnotherChannelDoesNotWakeTheLoneWaiter) {
  Notifier& notifier = client().notifier();
  // "b" stays subscribed a while (the linger) after its last waiter leaves.
  // A machine that stalls past the linger before the message is published
  // loses "b" first: then the setup is made again, until "b" is there.
  std::optional<LoneWait> waiter;
  std::uint64_t messages = 0;
  for (int round = 1; round <= 20; ++round) {
    notifier.subscribe("b", Clock::now() + 5s);
    waiter.emplace(notifier, "a");
    messages = detail::NotifierProbe::messages(notifier);
    if (client().command("PUBLISH", "b", "released").integer() == 1) break;
    notifier.wake("a");
    static_cast<void>(waiter->result.get());
    waiter.reset();
  }
  ASSERT_TRUE(waiter) << "\"b\" was unsubscribed before the waiter slept, 20 times";
  ASSERT_TRUE(
      testing::eventually([&] { return detail::NotifierProbe::messages(notifier) > messages; }));
  client().command("PUBLISH", "a", "released");
  const auto [woken, generation] = waiter->result.get();
  EXPECT_TRUE(woken);
  EXPECT_EQ(generation, waiter->seen + 1) << "woken before its own release";
}

TEST_F(NotifierTest, TheSubscriberConnectionDroppingWakesALoneWaiter) {
  Notifier& notifier = client().notifier();
  LoneWait waiter(notifier, "a");
  client().command("CLIENT", "KILL", "TYPE", "pubsub");
  // Releases may be lost with the connection: the reconnect wakes it.
  EXPECT_TRUE(waiter.result.get().first);
  EXPECT_GE(detail::NotifierProbe::connects(notifier), 2u);
  // And the connection made again serves the next lone waiter.
  LoneWait next(notifier, "a");
  ASSERT_TRUE(next.subscription.active());
  client().command("PUBLISH", "a", "released");
  EXPECT_TRUE(next.result.get().first);
}

TEST_F(NotifierTest, WakeReachesALoneWaiter) {
  Notifier& notifier = client().notifier();
  LoneWait waiter(notifier, "a");
  const auto start = Clock::now();
  notifier.wake("a");
  EXPECT_TRUE(waiter.result.get().first);
  EXPECT_LT(Clock::now() - start, 10s);  // not at the end of its 20 s sleep
}

// Past max_connection_age the subscriber connection is replaced while a
// lone waiter sleeps. The holder's lease is long and the waiter's policy sleeps
// an hour, so only the release's announcement, heard on the connection made
// after the replacements, can let it in before its deadline.
TEST_F(NotifierTest, AWaiterIsWokenByAReleaseAfterItsSubscriberWasReplaced) {
  ClientOptions options = testing::client_options(server());
  options.max_connection_age = 300ms;
  Client aging(options);
  Mutex holder(aging, "k", LockOptions{}.ttl(60s), an_hour);
  Mutex waiter(aging, "k", LockOptions{}.ttl(60s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_lock_for(30s); });
  Notifier& notifier = aging.notifier();
  ASSERT_TRUE(testing::eventually([&] {
    return detail::NotifierProbe::channel_count(notifier) == 1;
  })) << "the waiter never subscribed";
  const std::uint64_t connects = detail::NotifierProbe::connects(notifier);
  ASSERT_TRUE(testing::eventually([&] {
    return detail::NotifierProbe::connects(notifier) >= connects + 2;
  })) << "the subscriber was not replaced";
  // The old connections are gone: one subscriber connection is left.
  const auto subscribers = [&] {
    const std::string list(client().command("CLIENT", "LIST", "TYPE", "pubsub").str());
    return std::count(list.begin(), list.end(), '\n');
  };
  EXPECT_TRUE(testing::eventually([&] { return subscribers() == 1; })) << subscribers();
  const auto released = Clock::now();
  holder.unlock();
  ASSERT_TRUE(waiting.get()) << "the release went unheard";
  EXPECT_LT(Clock::now() - released, 15s);  // far below the lease and the hour
  EXPECT_EQ(get("k"), waiter.token());
  waiter.unlock();
}

// The same with many waiters of many channels, each woken by its own
// release while the subscriber is replaced every 50 ms. A waiter that
// missed its release would get in at its deadline only (its last attempt).
TEST_F(NotifierTest, ReplacingTheSubscriberLosesNoReleaseOfManyChannels) {
  ClientOptions options = testing::client_options(server());
  options.max_connection_age = 50ms;
  Client aging(options);
  constexpr std::size_t channels = 8;
  std::vector<std::unique_ptr<Mutex>> holders;
  std::vector<std::unique_ptr<Mutex>> waiters;
  std::vector<std::future<Clock::time_point>> got_in;  // max(): never
  for (std::size_t i = 0; i < channels; ++i) {
    const std::string key = "k" + std::to_string(i);
    holders.push_back(std::make_unique<Mutex>(aging, key, LockOptions{}.ttl(60s), an_hour));
    waiters.push_back(std::make_unique<Mutex>(aging, key, LockOptions{}.ttl(60s), an_hour));
    ASSERT_TRUE(holders.back()->try_lock());
    Mutex& mine = *waiters.back();
    got_in.push_back(std::async(std::launch::async, [&mine] {
      return mine.try_lock_for(30s) ? Clock::now() : Clock::time_point::max();
    }));
  }
  ASSERT_TRUE(
      testing::eventually([&] { return pubsub_channels() == static_cast<long long>(channels); }));
  Notifier& notifier = aging.notifier();
  std::vector<Clock::time_point> released;
  for (std::size_t i = 0; i < channels; ++i) {
    // Released one by one, each after the subscriber was replaced again.
    const std::uint64_t connects = detail::NotifierProbe::connects(notifier);
    ASSERT_TRUE(testing::eventually([&] {
      return detail::NotifierProbe::connects(notifier) > connects;
    })) << i;
    released.push_back(Clock::now());
    holders[i]->unlock();
  }
  for (std::size_t i = 0; i < channels; ++i) {
    const Clock::time_point in = got_in[i].get();
    EXPECT_LT(in - released[i], 15s) << "release " << i << " went unheard";
    if (in != Clock::time_point::max()) waiters[i]->unlock();
  }
}

}  // namespace
}  // namespace distlock
