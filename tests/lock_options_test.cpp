// Tests for lock_options.hpp and the checked time conversions behind it.
#include "distlock/lock_options.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/fixture.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(LockOptions, DefaultsAndChainedSetters) {
  const LockOptions defaults;
  EXPECT_EQ(defaults.ttl(), 30s);
  EXPECT_FALSE(defaults.fencing());
  const LockOptions o = LockOptions{}.ttl(5s).fencing(true).key_prefix("p:");
  EXPECT_EQ(o.ttl(), 5000ms);
  EXPECT_TRUE(o.fencing());
  EXPECT_EQ(o.key_prefix(), "p:");
}

TEST(LockOptions, TtlMustBeAWholeMillisecondWithinTheCap) {
  EXPECT_EQ(LockOptions{}.ttl(std::chrono::duration<double>(1.5)).ttl(), 1500ms);
  EXPECT_EQ(LockOptions{}.ttl(1ms).ttl(), 1ms);
  EXPECT_THROW(LockOptions{}.ttl(999us), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::minutes::max()), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::nanoseconds::min()), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::duration<double>(INFINITY)), InvalidArgument);
}

TEST(LockOptions, KeysAndCompanionKeysShareAHashSlot) {
  EXPECT_EQ(detail::companion_key("jobs:nightly", "fence"), "{jobs:nightly}:fence");
  EXPECT_EQ(detail::companion_key("{tenant7}:jobs", "fence"), "{tenant7}:jobs:fence");
  EXPECT_EQ(detail::companion_key("odd{}key", "fence"), "{odd{}key}:fence");
  EXPECT_EQ(detail::lock_key(LockOptions{}.key_prefix("locks:"), "a"), "locks:a");
  EXPECT_THROW(detail::lock_key(LockOptions{}, ""), InvalidArgument);
}

using LockOptionCombinations = testing::RedisClientTest;

// Each lock type that takes LockOptions, built on options.
std::vector<std::pair<std::string, std::function<void(const LockOptions&)>>> lock_makers(
    Client& client) {
  return {
      {"Mutex", [&](const LockOptions& o) { Mutex lock(client, "k", o); }},
      {"SimpleMutex", [&](const LockOptions& o) { SimpleMutex lock(client, "k", o); }},
      {"ReentrantMutex", [&](const LockOptions& o) { ReentrantMutex lock(client, "k", o); }},
      {"SharedMutex", [&](const LockOptions& o) { SharedMutex lock(client, "k", o); }},
      {"Semaphore", [&](const LockOptions& o) { Semaphore lock(client, "k", 2, o); }},
      {"StripedMutex", [&](const LockOptions& o) { StripedMutex lock(client, "k", 4, o); }},
      {"Redlock", [&](const LockOptions& o) { Redlock lock({client}, "k", o); }},
  };
}

// max_hold caps renewal: on a lease that is not renewed (a ttl given
// without auto_renew(true)) it would cap nothing, so every lock type refuses
// it when built, as Redlock always has.
TEST_F(LockOptionCombinations, MaxHoldWithoutRenewalIsRefusedByEveryLockType) {
  const LockOptions fixed_longer = LockOptions{}.ttl(5s).max_hold(10s);
  const LockOptions fixed_shorter = LockOptions{}.ttl(5s).max_hold(2s);
  const LockOptions renewal_off = LockOptions{}.auto_renew(false).max_hold(10s);
  for (const auto& [type, make] : lock_makers(client())) {
    for (const LockOptions& options : {fixed_longer, fixed_shorter, renewal_off}) {
      try {
        make(options);
        ADD_FAILURE() << type << ": accepted max_hold without auto-renewal";
      } catch (const InvalidArgument& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("max_hold"), std::string::npos) << type << ": " << message;
        EXPECT_NE(message.find("auto_renew(true)"), std::string::npos) << type << ": " << message;
      }
    }
    // With renewal, asked for or by default (no ttl given), it is a cap.
    EXPECT_NO_THROW(make(LockOptions{}.ttl(5s).auto_renew(true).max_hold(10s))) << type;
    if (type != "Redlock") {
      EXPECT_NO_THROW(make(LockOptions{}.max_hold(10s))) << type;
    }
  }
}

// A Semaphore's grants and renewals send no WAIT: replica acknowledgement
// asked of it would be dropped without a word, so it is refused.
TEST_F(LockOptionCombinations, ASemaphoreRefusesReplicaAcknowledgement) {
  for (const LockOptions& options :
       {LockOptions{}.replicas(1, 100ms), LockOptions{}.replicas_majority(100ms)}) {
    try {
      Semaphore semaphore(client(), "s", 2, options);
      ADD_FAILURE() << "accepted replicas";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("replicas"), std::string::npos) << error.what();
    }
  }
  EXPECT_NO_THROW(Mutex(client(), "m", LockOptions{}.replicas(1, 100ms)));
}

TEST_F(LockOptionCombinations, AMaxHoldOnARenewedLeaseStillCapsIt) {
  Mutex lock(client(), "capped", LockOptions{}.ttl(5s).auto_renew(true).max_hold(10s));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_NE(get("capped"), "(nil)");
  lock.unlock();
  EXPECT_EQ(get("capped"), "(nil)");
}

TEST(TimeConversions, DeadlinesSaturateInsteadOfOverflowing) {
  EXPECT_EQ(detail::deadline_after(std::chrono::hours::max()), Clock::time_point::max());
  EXPECT_EQ(detail::deadline_after(std::chrono::nanoseconds::max()), Clock::time_point::max());
  const auto before = Clock::now();
  const auto past = detail::deadline_after(-1h);  // "now": one attempt
  EXPECT_GE(past, before);
  EXPECT_LE(past, Clock::now());
  const auto soon = detail::deadline_after(100ms);
  EXPECT_GE(soon, before + 100ms);
  EXPECT_LE(soon, Clock::now() + 100ms);
}

TEST(TimeConversions, ForeignClockDeadlinesBecomeSteadyOnce) {
  const auto steady = detail::to_steady_deadline(std::chrono::system_clock::now() + 1s);
  EXPECT_GT(steady, Clock::now() + 900ms);
  EXPECT_LE(steady, Clock::now() + 1s);
  const auto long_ago = detail::to_steady_deadline(std::chrono::system_clock::time_point::min());
  EXPECT_LE(long_ago, Clock::now());
  const auto far = detail::to_steady_deadline(std::chrono::system_clock::time_point::max());
  EXPECT_GT(far, Clock::now() + std::chrono::hours(24 * 365 * 100));
  EXPECT_EQ(detail::to_steady_deadline(Clock::time_point::max()), Clock::time_point::max());
}

}  // namespace
}  // namespace distlock
