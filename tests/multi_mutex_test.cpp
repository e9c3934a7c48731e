// Tests for multi_mutex.hpp against real redis-servers: every name stored
// as a Mutex key under one token, all or none (nothing half taken, nothing
// of another's touched), one round trip for a free lock, a waiter that
// follows the name refusing it, no deadlock among overlapping name sets,
// exclusion across processes, a lease that loses one name giving back the
// rest, extend, keys of other types, deadlines, cancel_waits and bad input.
#include "distlock/multi_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/mutex.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace multi_mutex_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;

class MultiMutexTest : public testing::RedisClientTest {
 protected:
  template <class... Keys>
  long long exists(const Keys&... keys) {
    return client().command("EXISTS", keys...).integer();
  }
  // Subscribers to a name's release channel, as the server counts them.
  long long listeners(const std::string& name) {
    return client().command("PUBSUB", "NUMSUB", "{" + name + "}:released")[1].integer();
  }
};

TEST_F(MultiMutexTest, StoresEveryNameAsAMutexKeyUnderOneToken) {
  MultiMutex both(client(), {"stock:w2", "stock:w1"}, LockOptions{}.ttl(10s));
  ASSERT_TRUE(both.try_lock());
  EXPECT_EQ(both.token().size(), 32u);
  EXPECT_EQ(both.key(), "stock:w1+stock:w2");
  EXPECT_EQ(both.keys(), (std::vector<std::string>{"stock:w1", "stock:w2"}));
  for (const char* name : {"stock:w1", "stock:w2"}) {
    EXPECT_EQ(get(name), both.token()) << name;
    const long long pttl = client().command("PTTL", name).integer();
    EXPECT_GT(pttl, 9000) << name;
    EXPECT_LE(pttl, 10000) << name;
  }
  EXPECT_EQ(both.release(), Release::released);
  EXPECT_EQ(exists("stock:w1", "stock:w2"), 0);
}

TEST_F(MultiMutexTest, AllOrNoneAgainstAMutexOnOneName) {
  Mutex one(client(), "b");
  ASSERT_TRUE(one.try_lock());
  MultiMutex all(client(), {"a", "b", "c"});
  EXPECT_FALSE(all.try_lock());
  EXPECT_EQ(exists("a", "c"), 0);  // nothing half taken
  EXPECT_EQ(get("b"), one.token());
  one.unlock();
  ASSERT_TRUE(all.try_lock());
  EXPECT_FALSE(one.try_lock());  // and a Mutex waits for the MultiMutex
  all.unlock();
  EXPECT_TRUE(one.try_lock());
}

TEST_F(MultiMutexTest, KeyPrefixAndRepeatedNames) {
  MultiMutex lock(client(), {"x", "y", "x"}, LockOptions{}.key_prefix("locks:"));
  EXPECT_EQ(lock.keys(), (std::vector<std::string>{"locks:x", "locks:y"}));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(get("locks:x"), lock.token());
  EXPECT_EQ(get("locks:y"), lock.token());
}

TEST_F(MultiMutexTest, AFreeLockCostsOneRoundTrip) {
  MultiMutex lock(client(), {"a", "b", "c"});
  lock.lock();  // loads the script
  lock.unlock();
  client().command("CONFIG", "RESETSTAT");
  lock.lock();
  const testing::CommandCalls calls = testing::command_calls(client());
  // One EVALSHA; the rest are its own calls (EXISTS, then a SET per name).
  EXPECT_EQ(calls.of("evalsha"), 1) << calls.text;
  EXPECT_EQ(calls.total_except("config|resetstat"), 1 + 1 + 3) << calls.text;
}

// Only release announcements wake the waiter in time (the holders' leases
// outlast its deadline, its policy polls hourly): refused by "a", then by
// "b", it must listen on b's channel once b is the name in its way.
TEST_F(MultiMutexTest, AWaiterFollowsTheNameThatRefusedIt) {
  Mutex a(client(), "a", LockOptions{}.ttl(60s));
  Mutex b(client(), "b", LockOptions{}.ttl(60s));
  ASSERT_TRUE(a.try_lock());
  MultiMutex both(client(), {"a", "b"}, LockOptions{}.ttl(60s), testing::an_hour);
  std::future<bool> waited = std::async(std::launch::async, [&] { return both.try_lock_for(20s); });
  ASSERT_TRUE(eventually([&] { return listeners("a") == 1; }));
  ASSERT_TRUE(b.try_lock());
  a.unlock();
  ASSERT_TRUE(eventually([&] { return listeners("b") == 1; }));
  b.unlock();
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(get("a"), both.token());
  EXPECT_EQ(get("b"), both.token());
}

// Overlapping name sets, each taken by its own object on its own thread,
// with a plain Mutex on one name too: every name's counter counts exactly
// its holders' increments (no two holders at once), and nobody deadlocks.
TEST_F(MultiMutexTest, OverlappingSetsExcludeEachOtherWithoutDeadlock) {
  const std::vector<std::vector<std::string>> sets = {{"a", "b"}, {"b", "a"},      {"b", "c"},
                                                      {"c", "a"}, {"a", "b", "c"}, {"b"}};
  constexpr int rounds = 15;
  std::map<std::string, int> expected;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (const std::vector<std::string>& names : sets) {
    for (const std::string& name : names) expected["n:" + name] += rounds;
    threads.emplace_back([&, names] {
      try {
        Client own(client_options(server()));
        MultiMutex lock(own, names, LockOptions{}.ttl(10s));
        Mutex single(own, names[0], LockOptions{}.ttl(10s));
        for (int i = 0; i < rounds; ++i) {
          if (names.size() == 1) {
            std::lock_guard guard(single);
            testing::unsafe_increment(own, "n:" + names[0]);
          } else {
            std::lock_guard guard(lock);
            for (const std::string& name : names) testing::unsafe_increment(own, "n:" + name);
          }
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, 0);
  for (const auto& [counter, count] : expected) EXPECT_EQ(get(counter), std::to_string(count));
  EXPECT_EQ(exists("a", "b", "c"), 0);
}

TEST_F(MultiMutexTest, ExcludesAcrossProcesses) {
  const ConnectionOptions where = client_options(server());
  const int failed = testing::run_in_children(4, [&] {
    Client own(where);
    MultiMutex lock(own, {"p", "q"}, LockOptions{}.ttl(10s));
    for (int i = 0; i < 10; ++i) {
      std::lock_guard guard(lock);
      testing::unsafe_increment(own, "count:p");
      testing::unsafe_increment(own, "count:q");
    }
  });
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(get("count:p"), "40");
  EXPECT_EQ(get("count:q"), "40");
}

// A lease that lost one name is lost whole, and the watchdog gives back
// the other at once rather than let it stand for its lease.
TEST_F(MultiMutexTest, ALeaseThatLosesANameGivesBackTheRest) {
  std::atomic<int> told{0};
  MultiMutex lock(
      client(), {"a", "b"},
      LockOptions{}.ttl(1s).auto_renew(true).on_lost([&](const LeaseInfo&) { ++told; }));
  ASSERT_TRUE(lock.try_lock());
  client().command("DEL", "a");
  ASSERT_TRUE(eventually([&] { return lock.lost(); }));
  EXPECT_EQ(exists("b"), 0);
  EXPECT_TRUE(eventually([&] { return told == 1; }));
  EXPECT_EQ(lock.release(), Release::lost);
}

TEST_F(MultiMutexTest, ExtendSetsEveryNameOrGivesBackTheRemains) {
  MultiMutex lock(client(), {"a", "b"}, LockOptions{}.ttl(5s));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.extend(20s));
  for (const char* name : {"a", "b"}) EXPECT_GT(client().command("PTTL", name).integer(), 15000);
  client().command("SET", "a", "someone-else", "PX", "60000");
  EXPECT_FALSE(lock.extend(20s));
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(get("a"), "someone-else");  // another's, untouched
  EXPECT_EQ(exists("b"), 0);            // ours, given back
}

// Data that is not a lock is neither waited for in vain nor deleted.
TEST_F(MultiMutexTest, KeysOfOtherKindsAreReportedAndLeftAlone) {
  client().command("HSET", "b", "field", "value");
  MultiMutex hash(client(), {"a", "b"});
  EXPECT_THROW(static_cast<void>(hash.try_lock_for(2s)), WrongTypeError);
  client().command("SET", "c", "data");
  MultiMutex endless(client(), {"a", "c"});
  EXPECT_THROW(static_cast<void>(endless.try_lock_for(2s)), NotALockError);
  EXPECT_EQ(exists("a"), 0);
  EXPECT_EQ(client().command("HGET", "b", "field").str(), "value");
  EXPECT_EQ(get("c"), "data");

  // A name overwritten by other data while held: the release keeps it.
  MultiMutex held(client(), {"d", "e"});
  ASSERT_TRUE(held.try_lock());
  client().command("SET", "e", "data");
  EXPECT_EQ(held.release(), Release::not_owner);
  EXPECT_EQ(exists("d"), 0);
  EXPECT_EQ(get("e"), "data");
}

TEST_F(MultiMutexTest, ATimedWaitReturnsByItsDeadlineAndLeavesNothing) {
  Mutex holder(client(), "b", LockOptions{}.ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  MultiMutex lock(client(), {"a", "b"});
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(lock.try_lock_for(300ms));
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(exists("a"), 0);
}

TEST_F(MultiMutexTest, CancelWaitsEndsAWait) {
  Mutex holder(client(), "b", LockOptions{}.ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  MultiMutex lock(client(), {"a", "b"}, LockOptions{}, testing::an_hour);
  std::future<bool> waited = std::async(std::launch::async, [&] { return lock.try_lock_for(60s); });
  ASSERT_TRUE(eventually([&] { return listeners("b") == 1; }));
  lock.cancel_waits();
  EXPECT_EQ(waited.wait_for(20s), std::future_status::ready);
  EXPECT_FALSE(waited.get());
  EXPECT_EQ(exists("a"), 0);
}

TEST_F(MultiMutexTest, BadInputIsRefusedBeforeAnyServerIsAsked) {
  EXPECT_THROW(MultiMutex(client(), {}), InvalidArgument);
  EXPECT_THROW(MultiMutex(client(), {"a", ""}), InvalidArgument);
  EXPECT_THROW(MultiMutex(client(), std::vector<std::string>(MultiMutex::max_names + 1, "n")),
               InvalidArgument);
  EXPECT_THROW(MultiMutex(client(), {"a", "b"}, LockOptions{}.fencing(true)), InvalidArgument);
  EXPECT_THROW(MultiMutex(client(), {"a", "b"}, LockOptions{}.replicas(1, 1s)), InvalidArgument);
  EXPECT_THROW(MultiMutex(client(), {"a"}, LockOptions{}.ttl(5s).max_hold(10s)), InvalidArgument);
}

}  // namespace multi_mutex_test
}  // namespace distlock
