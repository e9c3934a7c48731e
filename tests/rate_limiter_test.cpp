// Tests for rate_limiter.hpp against real redis-servers: exact admission
// under concurrent callers in several processes, retry_after, the waiting
// calls (their deadlines on any clock, and cancel_waits()), the key's
// expiry, bad input, and that no client time ever reaches the server.
#include "distlock/rate_limiter.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "distlock/detail/wire/counting_scripts.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"
#include "support/sanitized.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;

class RateLimiterTest : public testing::RedisClientTest {
 protected:
  // Forks `children` processes that each call try_acquire() `calls` times
  // on `options` and count their admissions in Redis; returns the total.
  long long admitted_by_children(const RateOptions& options, int children, int calls) {
    const ClientOptions where = client_options(server());
    const int failed = testing::run_in_children(children, [&] {
      Client own(where);
      RateLimiter limiter(own, "shared", options);
      long long mine = 0;
      for (int i = 0; i < calls; ++i) mine += limiter.try_acquire().allowed ? 1 : 0;
      own.command("INCRBY", "admitted", std::to_string(mine));
    });
    EXPECT_EQ(failed, 0);
    const Reply total = client().command("GET", "admitted");
    return total.is_nil() ? 0 : std::stoll(std::string(total.str()));
  }
};

TEST_F(RateLimiterTest, FixedWindowAdmitsExactlyTheLimitAcrossProcesses) {
  // 4 processes x 40 calls within one 60 s window: 37 admitted, no more.
  EXPECT_EQ(admitted_by_children(RateOptions{}.fixed_window(37, 60s), 4, 40), 37);
}

TEST_F(RateLimiterTest, SmoothAdmitsExactlyTheBurstAcrossProcesses) {
  // One unit an hour comes back: all the processes share the burst of 23.
  EXPECT_EQ(admitted_by_children(RateOptions{}.smooth(1, 1h, 23), 4, 40), 23);
}

TEST_F(RateLimiterTest, FixedWindowCountsRemainingAndRefusesWithoutCounting) {
  RateLimiter visits(client(), "visits:user:7", RateOptions{}.fixed_window(3, 10s));
  RateDecision d = visits.try_acquire();
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2u);
  EXPECT_EQ(d.retry_after, 0ms);
  EXPECT_EQ(visits.try_acquire(2).remaining, 0u);
  d = visits.try_acquire();
  EXPECT_FALSE(d);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_GT(d.retry_after, 9000ms);
  EXPECT_LE(d.retry_after, 10001ms);
  EXPECT_EQ(get("visits:user:7"), "3");  // the refusal counted nothing
}

TEST_F(RateLimiterTest, FixedWindowCounterNeverExistsWithoutItsExpiry) {
  RateLimiter limiter(client(), "w", RateOptions{}.fixed_window(5, 10s));
  ASSERT_TRUE(limiter.try_acquire().allowed);
  const long long pttl = client().command("PTTL", "w").integer();
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  // A stray counter without expiry (left by other code) starts a window.
  client().command("SET", "w", "5");
  ASSERT_TRUE(limiter.try_acquire().allowed);
  EXPECT_GT(client().command("PTTL", "w").integer(), 9000);
  EXPECT_EQ(get("w"), "1");
}

TEST_F(RateLimiterTest, FixedWindowRetryAfterIsHonoured) {
  RateLimiter limiter(client(), "r", RateOptions{}.fixed_window(2, 200ms));
  ASSERT_TRUE(limiter.try_acquire(2).allowed);
  const RateDecision refused = limiter.try_acquire();
  ASSERT_FALSE(refused.allowed);
  ASSERT_GT(refused.retry_after, 0ms);
  std::this_thread::sleep_for(refused.retry_after);  // the contract under test
  EXPECT_TRUE(limiter.try_acquire().allowed);
}

TEST_F(RateLimiterTest, SmoothRefillsOneUnitPerInterval) {
  // 10 per second: one unit every 100 ms, 3 at once.
  RateLimiter limiter(client(), "s", RateOptions{}.smooth(10, 1s, 3));
  EXPECT_EQ(limiter.options().interval(), 100ms);
  EXPECT_EQ(limiter.try_acquire().remaining, 2u);
  EXPECT_EQ(limiter.try_acquire().remaining, 1u);
  EXPECT_EQ(limiter.try_acquire().remaining, 0u);
  const RateDecision refused = limiter.try_acquire();
  ASSERT_FALSE(refused.allowed);
  EXPECT_GT(refused.retry_after, 0ms);
  EXPECT_LE(refused.retry_after, 100ms);
  std::this_thread::sleep_for(refused.retry_after);  // the contract under test
  EXPECT_TRUE(limiter.try_acquire().allowed);
  // The bucket's key ends when it would be full again.
  const long long pttl = client().command("PTTL", "s").integer();
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 300);
}

TEST_F(RateLimiterTest, SmoothRefusesACostTheBucketCannotHoldYet) {
  RateLimiter limiter(client(), "c", RateOptions{}.smooth(4, 4s));
  ASSERT_TRUE(limiter.try_acquire(3).allowed);
  const RateDecision refused = limiter.try_acquire(2);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.remaining, 1u);
  EXPECT_GT(refused.retry_after, 900ms);
  EXPECT_LE(refused.retry_after, 1000ms);
  EXPECT_TRUE(limiter.try_acquire(1).allowed);
}

TEST_F(RateLimiterTest, TryAcquireForWaitsForTheNextWindow) {
  RateLimiter limiter(client(), "a", RateOptions{}.fixed_window(1, 150ms));
  ASSERT_TRUE(limiter.try_acquire().allowed);
  const Clock::time_point start = Clock::now();
  const RateDecision d = limiter.try_acquire_for(5s);
  EXPECT_TRUE(d.allowed);
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST_F(RateLimiterTest, TryAcquireUntilGivesUpAtOnceWhenTheNextChanceIsPastTheDeadline) {
  RateLimiter limiter(client(), "a", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(limiter.try_acquire().allowed);
  const Clock::time_point start = Clock::now();
  const RateDecision d = limiter.try_acquire_until(Clock::now() + 2s);
  EXPECT_FALSE(d.allowed);
  EXPECT_GT(d.retry_after, 50s);
  EXPECT_LT(Clock::now() - start, 1s);  // did not sleep towards the deadline
}

// A stopped server: the timed call ends by its deadline with TimeoutError,
// an outage told apart from a refusal, not an empty refusal that reads as
// "rate limited".
TEST_F(RateLimiterTest, AStoppedServerIsAnOutageByTheDeadlineNotARefusal) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client quiet(where);
  RateLimiter limiter(quiet, "a", RateOptions{}.fixed_window(10, 60s));
  ASSERT_TRUE(limiter.try_acquire().allowed);  // a connection is pooled before the stop
  server().pause();
  const Clock::time_point deadline = Clock::now() + 200ms;
  EXPECT_THROW(limiter.try_acquire_until(deadline), TimeoutError);
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
}

TEST_F(RateLimiterTest, TryAcquireForWithNoTimeLeftIsOneAttemptOfCostOne) {
  // A zero or negative timeout, or a deadline already past, is try_acquire().
  RateLimiter limiter(client(), "a", RateOptions{}.fixed_window(3, 60s));
  RateDecision d = limiter.try_acquire_for(0s);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2u);  // the cost is 1 unless given
  EXPECT_TRUE(limiter.try_acquire_for(-1s).allowed);
  EXPECT_TRUE(limiter.try_acquire_until(std::chrono::system_clock::now() - 1s).allowed);
  EXPECT_EQ(get("a"), "3");
  const Clock::time_point start = Clock::now();
  d = limiter.try_acquire_for(0s);
  EXPECT_FALSE(d.allowed);
  EXPECT_GT(d.retry_after, 50s);
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST_F(RateLimiterTest, TryAcquireUntilASystemClockDeadlineWaitsAsASteadyOne) {
  using System = std::chrono::system_clock;
  RateLimiter quick(client(), "q", RateOptions{}.fixed_window(2, 150ms));
  ASSERT_TRUE(quick.try_acquire(2).allowed);
  Clock::time_point start = Clock::now();
  const RateDecision admitted = quick.try_acquire_until(System::now() + 5s, 2);
  EXPECT_TRUE(admitted.allowed);
  EXPECT_EQ(admitted.remaining, 0u);
  EXPECT_GE(Clock::now() - start, 50ms);  // waited for the next window
  EXPECT_LT(Clock::now() - start, 5s);
  // The next chance (a minute away) is past the deadline: refused at once.
  RateLimiter slow(client(), "s", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(slow.try_acquire().allowed);
  start = Clock::now();
  const RateDecision refused = slow.try_acquire_until(System::now() + 2s);
  EXPECT_FALSE(refused.allowed);
  EXPECT_GT(refused.retry_after, 50s);
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST_F(RateLimiterTest, AcquireWaitsWithoutADeadlineUntilAdmitted) {
  RateLimiter limiter(client(), "a", RateOptions{}.smooth(10, 1s, 3));
  ASSERT_TRUE(limiter.try_acquire(3).allowed);
  const Clock::time_point start = Clock::now();
  const RateDecision d = limiter.acquire(2);  // two units: 200 ms
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_GE(Clock::now() - start, 100ms);
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_TRUE(limiter.acquire().allowed);  // one unit, a further 100 ms
}

TEST_F(RateLimiterTest, CancelWaitsEndsEveryWaitOfTheObject) {
  // The budget is spent for a minute: only the cancel ends the waits.
  RateLimiter limiter(client(), "a", RateOptions{}.fixed_window(3, 60s));
  ASSERT_TRUE(limiter.try_acquire(3).allowed);
  auto timed = std::async(std::launch::async, [&] { return limiter.try_acquire_for(120s); });
  auto until = std::async(std::launch::async, [&] {
    return limiter.try_acquire_until(std::chrono::system_clock::now() + 120s);
  });
  auto blocking = std::async(std::launch::async, [&] {
    try {
      static_cast<void>(limiter.acquire());
      return std::string("admitted");
    } catch (const Error& error) {
      return std::string(error.code() == Errc::cancelled ? "cancelled" : error.what());
    }
  });
  // A cancel reaches only waits already under way: cancel until all three
  // have ended (each within a few ms of its start).
  const Clock::time_point start = Clock::now();
  const auto ended = [](auto& future) { return future.wait_for(0s) == std::future_status::ready; };
  const bool all_ended = eventually([&] {
    limiter.cancel_waits();
    return ended(timed) && ended(until) && ended(blocking);
  });
  if (!all_ended) limiter.reset();  // room for all three at their next attempt, in a minute
  ASSERT_TRUE(all_ended) << "a wait was not cancelled";
  EXPECT_LT(Clock::now() - start, 10s);
  for (auto* future : {&timed, &until}) {
    const RateDecision d = future->get();
    EXPECT_FALSE(d.allowed);
    EXPECT_GT(d.retry_after, 30s);  // the last refusal
  }
  EXPECT_EQ(blocking.get(), "cancelled");
  EXPECT_EQ(get("a"), "3");  // nothing more was counted
  limiter.reset();
  EXPECT_TRUE(limiter.try_acquire_for(1s).allowed);  // later waits are unaffected
}

TEST_F(RateLimiterTest, BadInputIsRefused) {
  EXPECT_THROW(RateOptions{}.fixed_window(0, 1s), InvalidArgument);
  EXPECT_THROW(RateOptions{}.fixed_window(3, 0s), InvalidArgument);
  EXPECT_THROW(RateOptions{}.smooth(0, 1s), InvalidArgument);
  EXPECT_THROW(RateOptions{}.smooth(3, -1s), InvalidArgument);
  EXPECT_THROW(RateLimiter(client(), "x", RateOptions{}), InvalidArgument);
  EXPECT_THROW(RateLimiter(client(), "", RateOptions{}.fixed_window(1, 1s)), InvalidArgument);
  RateLimiter fixed(client(), "x", RateOptions{}.fixed_window(3, 1s));
  EXPECT_THROW(static_cast<void>(fixed.try_acquire(0)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(fixed.try_acquire(4)), InvalidArgument);
  RateLimiter smooth(client(), "y", RateOptions{}.smooth(10, 1s, 2));
  EXPECT_THROW(static_cast<void>(smooth.try_acquire(3)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(smooth.try_acquire_for(1s, 3)), InvalidArgument);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(RateLimiterTest, ResetStartsAFreshWindow) {
  RateLimiter limiter(client(), "z", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(limiter.try_acquire().allowed);
  ASSERT_FALSE(limiter.try_acquire().allowed);
  limiter.reset();
  EXPECT_TRUE(limiter.try_acquire().allowed);
}

// What the server receives for each call, as MONITOR shows it.
std::vector<std::string> monitored_evalsha(const testing::RedisServer& server, int calls,
                                           const RateOptions& options) {
  Connection monitor(client_options(server));
  monitor.command("MONITOR");
  Client caller(client_options(server));
  RateLimiter limiter(caller, "clock", options);
  std::vector<std::string> lines;
  for (int i = 0; i < calls; ++i) {
    static_cast<void>(limiter.try_acquire());
    // Apart in time, so a client clock read would change the arguments.
    std::this_thread::sleep_for(20ms);
  }
  while (static_cast<int>(lines.size()) < calls) {
    const std::string line(monitor.read_reply().str());
    const auto at = line.find("\"EVALSHA\"");
    if (at != std::string::npos) lines.push_back(line.substr(at));
  }
  return lines;
}

TEST_F(RateLimiterTest, CallsCarryNoClientTimeAndTheScriptReadsTheServerClock) {
  for (const RateOptions& options :
       {RateOptions{}.fixed_window(100, 10s), RateOptions{}.smooth(100, 10s)}) {
    const std::vector<std::string> lines = monitored_evalsha(server(), 3, options);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], lines[1]);  // byte for byte: no time, nothing per call
    EXPECT_EQ(lines[1], lines[2]);
    client().command("DEL", "clock");
  }
  EXPECT_NE(scripts::rate_gcra.source.find("redis.call('time')"), std::string_view::npos);
}

}  // namespace
}  // namespace distlock
