// Tests for acquire_policy.hpp and for when a waiter tries again
// (detail::next_attempt_at, detail::HolderLease): pure schedule arithmetic,
// no Redis.
#include "distlock/acquire_policy.hpp"

#include <gtest/gtest.h>

#include "distlock/detail/lifecycle/acquire.hpp"

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

// PTTL's numbers become names: -2 (no key) released, -1 (no expiry) no end
// in sight, anything else the time the lease has left.
TEST(HolderLease, ReadsPttlsNumbers) {
  using detail::HolderLease;
  EXPECT_FALSE(HolderLease().known());
  EXPECT_TRUE(HolderLease::from_pttl(-2).released());
  EXPECT_TRUE(HolderLease::from_pttl(-1).is_endless());
  EXPECT_EQ(HolderLease::from_pttl(-1).left(), nullptr);
  const HolderLease expiring = HolderLease::from_pttl(1500);
  ASSERT_NE(expiring.left(), nullptr);
  EXPECT_EQ(*expiring.left(), 1500ms);
  EXPECT_FALSE(expiring.released() || expiring.is_endless());
  ASSERT_NE(HolderLease::from_pttl(0).left(), nullptr);  // about to expire: no wait past it
  EXPECT_EQ(*HolderLease::from_pttl(0).left(), 0ms);
}

// A waiter tries again after its policy's pause, but never after the
// holder's lease ends nor after the deadline; at once when the lock was
// released since its attempt; and, when a release will be announced, it
// waits for that or for the lease's end, not for a pause of its own.
TEST(HolderLease, BoundsTheWaitBeforeTheNextAttempt) {
  using detail::HolderLease;
  using detail::next_attempt_at;
  const AcquirePolicy policy = FixedInterval(200ms);
  const auto far = detail::SteadyClock::now() + 1h;
  const auto wait = [&](HolderLease holder, bool announced, detail::SteadyClock::time_point by) {
    const auto before = detail::SteadyClock::now();
    const auto at = next_attempt_at(policy, 1, holder, by, announced);
    return std::pair{at - before, detail::SteadyClock::now() - before};  // bounds of the pause
  };
  const auto near = [](std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds> span,
                       std::chrono::nanoseconds expected) {
    return span.first >= expected && span.first <= expected + span.second;
  };
  EXPECT_TRUE(near(wait(HolderLease::from_pttl(5000), false, far), 200ms)) << "the policy's pause";
  EXPECT_TRUE(near(wait(HolderLease::from_pttl(50), false, far), 50ms)) << "the lease's end";
  EXPECT_TRUE(near(wait(HolderLease::from_pttl(5000), true, far), 5000ms)) << "announced";
  EXPECT_TRUE(near(wait(HolderLease::endless(), true, far), 200ms)) << "no end: the policy";
  EXPECT_TRUE(near(wait(HolderLease::endless(), false, far), 200ms));
  EXPECT_TRUE(near(wait(HolderLease::from_pttl(-2), false, far), 0ms)) << "released: at once";
  const auto soon = detail::SteadyClock::now() + 20ms;
  EXPECT_LE(next_attempt_at(policy, 1, HolderLease::from_pttl(5000), soon, true), soon);
  EXPECT_LE(next_attempt_at(policy, 1, HolderLease::endless(), soon, false), soon);
}

}  // namespace
}  // namespace distlock
