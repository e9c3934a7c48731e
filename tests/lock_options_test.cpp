// Tests for lock_options.hpp and the checked time conversions behind it.
#include "distlock/lock_options.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

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
