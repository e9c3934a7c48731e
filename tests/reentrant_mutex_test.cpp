// Tests for reentrant_mutex.hpp against real redis-servers: re-entry
// without round trips, exclusion of other owners, Redisson's RLock layout
// (checked with raw commands, and against Redisson's own scripts), waking,
// renewal and loss, fencing, and misuse.
#include "distlock/reentrant_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::an_hour;
using testing::client_options;
using testing::command_calls;

// Redisson's RLock tryLock and unlock scripts, as a Java service sends them.
// tryLock: KEYS[1] name; ARGV[1] lease ms, ARGV[2] owner.
// unlock: KEYS[1] name, KEYS[2] channel; ARGV[1] message, ARGV[2] lease ms, ARGV[3] owner.
constexpr const char* redisson_try_lock =
    "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) "
    "then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; end; return redis.call('pttl', KEYS[1]);";
constexpr const char* redisson_unlock =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; "
    "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;";

class ReentrantMutexTest : public testing::RedisClientTest {
 protected:
  // Waits (boundedly) until someone subscribes to `channel`.
  bool eventually_subscribed(const std::string& channel) {
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (client().command("PUBSUB", "NUMSUB", channel)[1].integer() > 0) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
};

TEST_F(ReentrantMutexTest, StoresRedissonsRLockLayout) {
  ReentrantMutex lock(client(), "wire", LockOptions{}.ttl(10s));
  EXPECT_EQ(lock.channel(), "redisson_lock__channel:{wire}");
  testing::RawSubscriber announcements(client_options(server()), "redisson_lock__channel:{wire}");
  ASSERT_TRUE(lock.try_lock());
  const std::string owner = lock.owner_id();
  EXPECT_EQ(owner.rfind(client().id() + ":", 0), 0u) << owner;
  EXPECT_EQ(client().command("TYPE", "wire").str(), "hash");
  const Reply all = client().command("HGETALL", "wire");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].str(), owner);
  EXPECT_EQ(all[1].str(), "1");
  const long long pttl = client().command("PTTL", "wire").integer();
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  ASSERT_TRUE(lock.try_lock());  // re-entry is counted locally
  EXPECT_EQ(client().command("HGET", "wire", owner).str(), "1");
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "wire").integer(), 1);
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "wire").integer(), 0);
  EXPECT_EQ(announcements.next(), "0");
}

TEST_F(ReentrantMutexTest, OwnerIdsDifferByThreadAndByClient) {
  ReentrantMutex lock(client(), "k");
  Client other(client_options(server()));
  ReentrantMutex elsewhere(other, "k");
  const std::string here = lock.owner_id();
  EXPECT_NE(elsewhere.owner_id(), here);
  EXPECT_EQ(lock.owner_id(), here);  // stable
  std::string from_thread;
  std::thread([&] { from_thread = lock.owner_id(); }).join();
  EXPECT_NE(from_thread, here);
  EXPECT_EQ(from_thread.substr(0, client().id().size() + 1), client().id() + ":");
}

TEST_F(ReentrantMutexTest, CompanionNamesKeepTheNamesHashTag) {
  ReentrantMutex tagged(client(), "{user:7}:tree", LockOptions{}.fencing(true));
  EXPECT_EQ(tagged.channel(), "redisson_lock__channel:{user:7}:tree");
  ASSERT_TRUE(tagged.try_lock());
  EXPECT_EQ(get("{user:7}:tree:fence"), std::to_string(tagged.fence()));
  // Redisson looks for any '{', not for a hash tag; a Java client names
  // the channel of "odd{name" without braces, so we must too.
  EXPECT_EQ(ReentrantMutex(client(), "odd{name").channel(), "redisson_lock__channel:odd{name");
  ReentrantMutex plain(client(), "tree", LockOptions{}.key_prefix("locks:").fencing(true));
  EXPECT_EQ(plain.channel(), "redisson_lock__channel:{locks:tree}");
  ASSERT_TRUE(plain.try_lock());
  EXPECT_EQ(get("{locks:tree}:fence"), std::to_string(plain.fence()));
}

TEST_F(ReentrantMutexTest, RecursionTenLevelsDeepCompletesAndLeavesNoKey) {
  ReentrantMutex tree(client(), "tree");
  unsigned deepest = 0;
  std::function<void(unsigned)> visit = [&](unsigned level) {
    std::lock_guard guard(tree);
    EXPECT_EQ(tree.hold_count(), level);
    if (level == 10) {
      deepest = level;
      EXPECT_EQ(client().command("HGET", "tree", tree.owner_id()).str(), "1");
      return;
    }
    visit(level + 1);
  };
  visit(1);
  EXPECT_EQ(deepest, 10u);
  EXPECT_FALSE(tree.owns_lock());
  EXPECT_EQ(tree.hold_count(), 0u);
  EXPECT_EQ(client().command("EXISTS", "tree").integer(), 0);
}

TEST_F(ReentrantMutexTest, HoldCountFollowsLockAndUnlockPairs) {
  ReentrantMutex lock(client(), "k");
  EXPECT_EQ(lock.hold_count(), 0u);
  lock.lock();
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.try_lock_for(1s));
  ASSERT_TRUE(lock.try_lock_until(Clock::now() - 1s));  // re-entry needs no time
  EXPECT_EQ(lock.hold_count(), 4u);
  lock.unlock();
  EXPECT_EQ(lock.hold_count(), 3u);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(lock.hold_count(), 2u);
  lock.lock();
  EXPECT_EQ(lock.hold_count(), 3u);
  for (unsigned left = 3; left > 1; --left) {
    lock.unlock();
    EXPECT_EQ(lock.hold_count(), left - 1);
    EXPECT_EQ(client().command("EXISTS", "k").integer(), 1);
  }
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(lock.hold_count(), 0u);
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
  EXPECT_THROW(lock.release(), NotHeldError);
}

TEST_F(ReentrantMutexTest, ReentryCostsNoRoundTrip) {
  ReentrantMutex lock(client(), "k");
  lock.lock();  // warm-up: the server caches both scripts
  lock.unlock();
  lock.lock();
  client().command("CONFIG", "RESETSTAT");
  for (int i = 0; i < 100; ++i) {
    lock.lock();
    ASSERT_TRUE(lock.try_lock());
    ASSERT_TRUE(lock.try_lock_for(1s));
    lock.unlock();
    lock.unlock();
    lock.unlock();
  }
  testing::CommandCalls calls = command_calls(client());
  EXPECT_EQ(calls.total_except("config|resetstat"), 0) << calls.text;
  EXPECT_EQ(lock.hold_count(), 1u);
  client().command("CONFIG", "RESETSTAT");
  lock.unlock();
  calls = command_calls(client());
  EXPECT_EQ(calls.of("evalsha"), 1) << calls.text;  // the last release (counted with its
  EXPECT_EQ(calls.of("eval"), 0) << calls.text;     // commands: hget, del, publish)
}

TEST_F(ReentrantMutexTest, AnotherThreadIsExcludedUntilTheLastRelease) {
  ReentrantMutex shared(client(), "k", LockOptions{}.ttl(30s));
  shared.lock();
  shared.lock();
  const auto other_gets_it = [&] {
    return std::async(std::launch::async, [&] {
      const bool got = shared.try_lock();
      if (got) shared.unlock();
      return got;
    });
  };
  EXPECT_FALSE(other_gets_it().get());
  shared.unlock();
  EXPECT_FALSE(other_gets_it().get());  // one hold is left
  auto waiting = std::async(std::launch::async, [&] {
    ReentrantMutex own(client(), "k", LockOptions{}.ttl(30s));
    return own.try_lock_for(10s);
  });
  std::this_thread::sleep_for(50ms);
  shared.unlock();
  EXPECT_TRUE(waiting.get());
}

TEST_F(ReentrantMutexTest, OnlyTheOwningThreadMayUnlock) {
  ReentrantMutex lock(client(), "k");
  lock.lock();
  std::thread([&] {
    EXPECT_FALSE(lock.owns_lock());
    EXPECT_EQ(lock.hold_count(), 0u);
    try {
      static_cast<void>(lock.release());
      ADD_FAILURE() << "a non-owner's release() was accepted";
    } catch (const NotHeldError& error) {
      EXPECT_NE(std::string(error.what()).find("another thread"), std::string::npos)
          << error.what();
    }
    lock.unlock();  // noexcept: does nothing for a non-owner
    EXPECT_THROW(static_cast<void>(lock.extend(5s)), NotHeldError);
  }).join();
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_EQ(lock.hold_count(), 1u);
  EXPECT_EQ(client().command("HEXISTS", "k", lock.owner_id()).integer(), 1);
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(ReentrantMutexTest, AnotherOwnersReleaseIsRefusedByTheServer) {
  // A release for an owner whose hold ran out and was taken by another:
  // the other owner's hash is left alone.
  ReentrantMutex first(client(), "k", LockOptions{}.ttl(50ms));
  Client other(client_options(server()));
  ReentrantMutex second(other, "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(first.try_lock());
  ASSERT_TRUE(second.try_lock_for(3s));
  EXPECT_EQ(first.release(), Release::not_owner);
  EXPECT_EQ(client().command("HEXISTS", "k", second.owner_id()).integer(), 1);
  EXPECT_FALSE(first.owns_lock());
}

TEST_F(ReentrantMutexTest, ReleaseAfterExpiryWithNoSuccessorSaysExpired) {
  ReentrantMutex lock(client(), "k", LockOptions{}.ttl(30ms));
  ASSERT_TRUE(lock.try_lock());
  while (client().command("EXISTS", "k").integer() == 1) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(lock.release(), Release::expired);
}

TEST_F(ReentrantMutexTest, ARedissonHolderAndWeExcludeAndWakeEachOther) {
  const std::string channel = "redisson_lock__channel:{shared}";
  const std::string java_owner = "6f1c6c8e-9f4e-4d36-9d52-0d6f3b8e2a11:1";
  // A Java service takes the lock with Redisson's script.
  EXPECT_TRUE(
      client().command("EVAL", redisson_try_lock, "1", "shared", "30000", java_owner).is_nil());
  ReentrantMutex ours(client(), "shared", LockOptions{}.ttl(30s), an_hour);
  EXPECT_FALSE(ours.try_lock());
  Clock::time_point released{};
  std::thread java([&] {
    ASSERT_TRUE(eventually_subscribed(channel));
    released = Clock::now();
    EXPECT_EQ(
        client()
            .command("EVAL", redisson_unlock, "2", "shared", channel, "0", "30000", java_owner)
            .integer(),
        1);
  });
  const bool got = ours.try_lock_for(20s);  // woken by Redisson's "0", not by its hourly policy
  const auto woken = Clock::now();
  java.join();
  ASSERT_TRUE(got);
  EXPECT_LT(woken - released, 5s);
  // Now Redisson's tryLock is refused with our remaining lease.
  const Reply refused =
      client().command("EVAL", redisson_try_lock, "1", "shared", "30000", java_owner);
  ASSERT_TRUE(refused.is_integer());
  EXPECT_GT(refused.integer(), 20000);
  // Redisson's unlock for another owner changes nothing.
  EXPECT_TRUE(
      client()
          .command("EVAL", redisson_unlock, "2", "shared", channel, "0", "30000", java_owner)
          .is_nil());
  ours.unlock();
  EXPECT_TRUE(
      client().command("EVAL", redisson_try_lock, "1", "shared", "30000", java_owner).is_nil());
}

TEST_F(ReentrantMutexTest, RedissonsUnlockReleasesAHoldOfOurs) {
  // Same layout both ways: Redisson's unlock, given our owner id, frees our
  // hold exactly as our release would.
  ReentrantMutex ours(client(), "k", LockOptions{}.ttl(30s));
  ASSERT_TRUE(ours.try_lock());
  testing::RawSubscriber announcements(client_options(server()), ours.channel());
  EXPECT_EQ(
      client()
          .command("EVAL", redisson_unlock, "2", "k", ours.channel(), "0", "30000", ours.owner_id())
          .integer(),
      1);
  EXPECT_EQ(announcements.next(), "0");
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(ReentrantMutexTest, ReleaseWakesAWaiterThatWouldOtherwiseSleep) {
  ReentrantMutex holder(client(), "k", LockOptions{}.ttl(30s), an_hour);
  holder.lock();
  holder.lock();
  auto waiting = std::async(std::launch::async, [&] {
    ReentrantMutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
    return waiter.try_lock_for(20s);
  });
  ASSERT_TRUE(eventually_subscribed(holder.channel()));
  holder.unlock();  // still held once: no announcement yet
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(waiting.wait_for(0s), std::future_status::timeout);
  const auto released = Clock::now();
  holder.unlock();
  ASSERT_TRUE(waiting.get());
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(ReentrantMutexTest, TimeoutRulesWhileHeld) {
  Client other(client_options(server()));
  ReentrantMutex holder(other, "k", LockOptions{}.ttl(30s));
  ReentrantMutex waiter(client(), "k");
  ASSERT_TRUE(holder.try_lock());
  struct Case {
    const char* what;
    std::function<bool()> call;
    std::chrono::milliseconds at_least, at_most;
  };
  const std::vector<Case> cases = {
      {"negative for", [&] { return waiter.try_lock_for(-5s); }, 0ms, 150ms},
      {"zero for", [&] { return waiter.try_lock_for(0ms); }, 0ms, 150ms},
      {"finite for", [&] { return waiter.try_lock_for(200ms); }, 190ms, 400ms},
      {"past until", [&] { return waiter.try_lock_until(Clock::now() - 1s); }, 0ms, 150ms},
      {"finite until", [&] { return waiter.try_lock_until(Clock::now() + 200ms); }, 190ms, 400ms},
      {"system clock until",
       [&] { return waiter.try_lock_until(std::chrono::system_clock::now() + 200ms); }, 190ms,
       400ms},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    EXPECT_FALSE(c.call()) << c.what;
    const auto took = Clock::now() - start;
    EXPECT_GE(took, c.at_least) << c.what;
    EXPECT_LE(took, c.at_most) << c.what;
  }
}

TEST_F(ReentrantMutexTest, TimeoutRulesWhenFree) {
  ReentrantMutex lock(client(), "k");
  ASSERT_TRUE(lock.try_lock_for(-1s));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_for(0ms));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_until(Clock::now() - 1h));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_for(std::chrono::hours::max()));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_until(Clock::time_point::max()));
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(ReentrantMutexTest, RejectsBadNamesAndLeases) {
  Client& c = client();
  EXPECT_THROW(ReentrantMutex(c, ""), InvalidArgument);
  EXPECT_THROW(ReentrantMutex(c, std::string(max_name_size + 1, 'x')), InvalidArgument);
  EXPECT_NO_THROW(ReentrantMutex(c, std::string(max_name_size, 'x')));
  EXPECT_THROW(
      ReentrantMutex(c, std::string(max_name_size - 2, 'x'), LockOptions{}.key_prefix("abc")),
      InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(0ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(-1s), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(max_ttl + 1ms), InvalidArgument);
  EXPECT_EQ(c.command("DBSIZE").integer(), 0);  // nothing was sent
}

TEST_F(ReentrantMutexTest, MisuseOfAnUnheldLockIsAClearError) {
  ReentrantMutex lock(client(), "k");
  EXPECT_THROW(lock.release(), NotHeldError);
  EXPECT_THROW(static_cast<void>(lock.extend(1s)), NotHeldError);
  EXPECT_NO_THROW(lock.unlock());
  EXPECT_EQ(lock.validity(), 0ms);
  EXPECT_FALSE(lock.lost());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_THROW(static_cast<void>(lock.extend(0ms)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(lock.extend(max_ttl + 1ms)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(lock.fence()), InvalidArgument);  // fencing is off
  EXPECT_EQ(lock.hold_count(), 1u);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(ReentrantMutexTest, ExtendLengthensTheLeaseAndFailsOnceItIsGone) {
  ReentrantMutex lock(client(), "k", LockOptions{}.ttl(1s));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.extend(20s));
  EXPECT_GT(client().command("PTTL", "k").integer(), 15000);
  EXPECT_GT(lock.validity(), 15s);
  client().command("DEL", "k");
  EXPECT_FALSE(lock.extend(20s));
  EXPECT_FALSE(lock.owns_lock());  // at every depth
  EXPECT_EQ(lock.hold_count(), 0u);
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(ReentrantMutexTest, ExcludesThreadsFromACriticalSection) {
  constexpr int threads = 4;
  constexpr int rounds = 20;
  ReentrantMutex shared(client(), "counter-lock", LockOptions{}.ttl(10s));
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        // Half share one object, half have their own; all re-enter.
        ReentrantMutex own(client(), "counter-lock", LockOptions{}.ttl(10s));
        ReentrantMutex& lock = t % 2 == 0 ? shared : own;
        for (int i = 0; i < rounds; ++i) {
          std::lock_guard outer(lock);
          std::lock_guard inner(lock);
          testing::unsafe_increment(client(), "counter");
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(get("counter"), std::to_string(threads * rounds));
  EXPECT_EQ(client().command("EXISTS", "counter-lock").integer(), 0);
}

TEST_F(ReentrantMutexTest, ExcludesProcessesFromACriticalSection) {
  constexpr int processes = 3;
  constexpr int rounds = 15;
  const ClientOptions where = client_options(server());
  const int failed_children = testing::run_in_children(processes, [&] {
    Client own(where);  // a child never touches its parent's connections
    ReentrantMutex lock(own, "counter-lock", LockOptions{}.ttl(10s));
    for (int i = 0; i < rounds; ++i) {
      std::lock_guard outer(lock);
      std::lock_guard inner(lock);
      testing::unsafe_increment(own, "counter");
    }
  });
  EXPECT_EQ(failed_children, 0);
  EXPECT_EQ(get("counter"), std::to_string(processes * rounds));
}

TEST_F(ReentrantMutexTest, FencesRiseAcrossHoldersAndNestedHoldsShareOne) {
  ReentrantMutex lock(client(), "fenced", LockOptions{}.fencing(true));
  ReentrantMutex same_thread(client(), "fenced", LockOptions{}.fencing(true));
  long long last = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(lock.try_lock());
    const long long fence = lock.fence();
    EXPECT_GT(fence, last);
    ASSERT_TRUE(lock.try_lock());
    EXPECT_EQ(lock.fence(), fence);
    // Another object of this thread is the same owner: its hold nests.
    ASSERT_TRUE(same_thread.try_lock());
    EXPECT_EQ(same_thread.fence(), fence);
    EXPECT_EQ(client().command("HGET", "fenced", lock.owner_id()).str(), "2");
    same_thread.unlock();
    lock.unlock();
    lock.unlock();
    EXPECT_EQ(client().command("EXISTS", "fenced").integer(), 0);
    last = fence;
  }
  std::thread([&] {
    ASSERT_TRUE(lock.try_lock());
    EXPECT_GT(lock.fence(), last);
    lock.unlock();
  }).join();
  EXPECT_THROW(static_cast<void>(lock.fence()), NotHeldError);
}

TEST_F(ReentrantMutexTest, FencedAcquireFailingOnWrongTypeLeavesNoHold) {
  client().command("HSET", "{k}:fence", "field", "value");
  ReentrantMutex lock(client(), "k", LockOptions{}.fencing(true));
  try {
    static_cast<void>(lock.try_lock());
    FAIL() << "acquire with a broken fence counter did not throw";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::wrongtype);
  }
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(ReentrantMutexTest, TheWatchdogRenewsTheHashAndReportsItsLoss) {
  std::mutex mutex;
  std::vector<LeaseInfo> lost;
  const LostCallback record = [&](const LeaseInfo& info) {
    std::lock_guard guard(mutex);
    lost.push_back(info);
  };
  ReentrantMutex lock(client(), "k", LockOptions{}.ttl(300ms).auto_renew(true).on_lost(record));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(client().watchdog().size(), 1u);  // one lease, whatever the depth
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(client().command("HEXISTS", "k", lock.owner_id()).integer(), 1);
  EXPECT_FALSE(lock.lost());
  client().command("DEL", "k");
  // The callback runs just after the lease is marked lost: wait for it.
  const auto reported = [&] {
    std::lock_guard guard(mutex);
    return !lost.empty();
  };
  const auto deadline = Clock::now() + 3s;
  while (!reported() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(lock.lost());
  {
    std::lock_guard guard(mutex);
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0].name(), "k");
    EXPECT_EQ(lost[0].token, lock.owner_id());
    EXPECT_EQ(lost[0].reason, LostReason::taken);
  }
  EXPECT_EQ(lock.validity(), 0ms);
  EXPECT_THROW(lock.lock(), LockLostError);  // never silently re-acquired
  EXPECT_EQ(lock.release(), Release::lost);
  EXPECT_EQ(lock.release(), Release::lost);
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(client().watchdog().size(), 0u);
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(ReentrantMutexTest, AnExplicitLeaseIsNotRenewedAndHandsTheLockOn) {
  ReentrantMutex first(client(), "k", LockOptions{}.ttl(100ms));
  ASSERT_TRUE(first.try_lock());
  const auto acquired = Clock::now();
  EXPECT_EQ(client().watchdog().size(), 0u);
  std::thread([&] {
    ReentrantMutex second(client(), "k");
    ASSERT_TRUE(second.try_lock_for(3s));
    EXPECT_GE(Clock::now() - acquired, 80ms);
  }).join();
}

TEST_F(ReentrantMutexTest, TimedOutAcquireLeavesNoHoldBehind) {
  // As MutexTest.TimedOutAcquireLeavesNoLockBehind: a stopped server applies
  // the acquire after the caller gave up, so only the undo removes it.
  ReentrantMutex lock(client(), "k");
  {
    ReentrantMutex warm(client(), "warm");  // the server caches the scripts
    std::lock_guard guard(warm);
  }
  client().command("CONFIG", "RESETSTAT");
  server().pause();
  // The reply missed the caller's deadline: an outage.
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(100ms)), TimeoutError);
  EXPECT_FALSE(lock.owns_lock());
  server().resume();
  ASSERT_TRUE(testing::server_ran(client_options(server()), "evalsha", 1))
      << "the acquire never landed";
  EXPECT_TRUE(
      testing::eventually([&] { return client().command("EXISTS", "k").integer() == 0; }, 2s))
      << "the timed-out acquire holds the lock for its whole lease";
}

TEST_F(ReentrantMutexTest, AWaiterCanBeCancelledFromAnotherThread) {
  Client other(client_options(server()));
  ReentrantMutex holder(other, "k", LockOptions{}.ttl(30s));
  ReentrantMutex waiter(client(), "k", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());  // also caches the script the waiters run
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
  // Each waiter attempts, subscribes and attempts again before it sleeps.
  ASSERT_TRUE(testing::eventually([&] { return command_calls(client()).of("evalsha") >= 4; }))
      << "the waiters never went to sleep";
  const auto start = Clock::now();
  waiter.cancel_waits();
  EXPECT_FALSE(timed.get());
  EXPECT_TRUE(blocking.get());
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_TRUE(holder.owns_lock());
}

TEST_F(ReentrantMutexTest, DestroyingAHeldLockGivesItBack) {
  {
    ReentrantMutex lock(client(), "k");
    lock.lock();
    lock.lock();
  }
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
  EXPECT_EQ(client().watchdog().size(), 0u);
}

TEST_F(ReentrantMutexTest, ANestedHoldNeverShortensTheOuterHoldsLease) {
  // Two lock objects of one thread on one name are one owner to Redis and
  // share one hash: the inner object's shorter lease, taken or given back,
  // must not become the outer hold's lease while the outer's record still
  // counts a long one.
  ReentrantMutex outer(client(), "k", LockOptions{}.ttl(60s).auto_renew(false));
  ReentrantMutex inner(client(), "k", LockOptions{}.ttl(1s).auto_renew(false));
  // The server's lease may never be shorter than the record claims; the
  // record is read first, so the time between the two reads is allowed for.
  const auto expect_server_keeps_outer_lease = [&](const char* when) {
    const auto read = Clock::now();
    const std::chrono::milliseconds claimed = outer.validity();
    const long long pttl = client().command("PTTL", "k").integer();
    const auto between = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - read);
    EXPECT_GE(pttl, (claimed - between - 50ms).count())
        << when << ": the outer hold's validity() says " << claimed.count() << " ms";
  };
  ASSERT_TRUE(outer.try_lock());
  expect_server_keeps_outer_lease("after the outer lock");
  ASSERT_TRUE(inner.try_lock());
  expect_server_keeps_outer_lease("after the inner lock");
  inner.unlock();
  expect_server_keeps_outer_lease("after the inner unlock");
  EXPECT_EQ(client().command("HGET", "k", outer.owner_id()).str(), "1");
  EXPECT_EQ(outer.release(), Release::released);
}

}  // namespace
}  // namespace distlock
