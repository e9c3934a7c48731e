// Tests for acquire_policy.hpp: pure schedule arithmetic, no Redis.
#include "distlock/acquire_policy.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

namespace distlock {
namespace {

using namespace std::chrono_literals;

TEST(AcquirePolicy, NoWaitNeverPauses) {
  const NoWait policy;
  for (unsigned attempt = 1; attempt < 100; ++attempt) EXPECT_EQ(policy.pause(attempt, 0.99), 0ns);
}

TEST(AcquirePolicy, FixedIntervalIsFixed) {
  const FixedInterval policy(50ms);
  EXPECT_EQ(policy.pause(1, 0.0), 50ms);
  EXPECT_EQ(policy.pause(1000, 0.7), 50ms);
  EXPECT_THROW(FixedInterval(-1ms), InvalidArgument);
}

TEST(AcquirePolicy, BackoffCeilingDoublesUpToTheCap) {
  const ExponentialBackoff policy(1ms, 100ms);
  // With the random draw at (almost) 1 the pause is the ceiling itself.
  const double top = 1.0;
  EXPECT_EQ(policy.pause(1, top), 1ms);
  EXPECT_EQ(policy.pause(2, top), 2ms);
  EXPECT_EQ(policy.pause(3, top), 4ms);
  EXPECT_EQ(policy.pause(7, top), 64ms);
  EXPECT_EQ(policy.pause(8, top), 100ms);
  EXPECT_EQ(policy.pause(4'000'000'000u, top), 100ms);  // no overflow however many attempts
}

TEST(AcquirePolicy, BackoffUsesFullJitter) {
  const ExponentialBackoff policy(1ms, 100ms);
  EXPECT_EQ(policy.pause(5, 0.0), 0ns);
  EXPECT_EQ(policy.pause(5, 0.5), 8ms);
  EXPECT_EQ(policy.pause(5, 0.25), 4ms);
  EXPECT_EQ(policy.pause(5, 7.0), 16ms);  // out-of-range draws are clamped
  EXPECT_EQ(policy.pause(5, -1.0), 0ns);
}

TEST(AcquirePolicy, BackoffRejectsNonsense) {
  EXPECT_THROW(ExponentialBackoff(0ms, 10ms), InvalidArgument);
  EXPECT_THROW(ExponentialBackoff(10ms, 1ms), InvalidArgument);
  EXPECT_NO_THROW(ExponentialBackoff(10ms, 10ms));
}

TEST(AcquirePolicy, DefaultIsAShortBackoffNotFiftyMillisecondPolling) {
  const DefaultPolicy policy;
  EXPECT_EQ(policy.pause(1, 1.0), 1ms);
  EXPECT_LE(policy.pause(1000, 1.0), 100ms);
}

TEST(AcquirePolicy, JitterIsUniformInTheUnitInterval) {
  std::set<long> buckets;
  double sum = 0;
  constexpr int draws = 100000;
  for (int i = 0; i < draws; ++i) {
    const double u = detail::jitter_unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    buckets.insert(static_cast<long>(u * 10));
    sum += u;
  }
  EXPECT_EQ(buckets.size(), 10u);
  EXPECT_NEAR(sum / draws, 0.5, 0.01);
}

}  // namespace
}  // namespace distlock
