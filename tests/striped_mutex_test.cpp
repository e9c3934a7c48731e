// Tests for striped_mutex.hpp against real redis-servers: the stripe hash,
// the keys, exclusion per stripe (threads and processes), try_lock_any's spread
// and deadline, and its wake-up on a release; the waits on a key's stripe,
// deadlines on any clock, and cancel_waits().
#include "distlock/striped_mutex.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

class StripedMutexTest : public testing::RedisClientTest {};

TEST(StripeHash, IsFnv1a32OfTheKeyBytes) {
  // The published FNV-1a test vectors.
  EXPECT_EQ(fnv1a32(""), 0x811c9dc5u);
  EXPECT_EQ(fnv1a32("a"), 0xe40c292cu);
  EXPECT_EQ(fnv1a32("foobar"), 0xbf9cf968u);
  EXPECT_EQ(fnv1a32(std::string_view("\xff\x00", 2)), fnv1a32(std::string_view("\xff\x00", 2)));
  static_assert(fnv1a32("a") == 0xe40c292cu, "usable at compile time");
}

TEST_F(StripedMutexTest, StripeOfIsTheHashModuloTheCountAndSpreadsKeys) {
  StripedMutex striped(client(), "sale", 16);
  EXPECT_EQ(striped.size(), 16u);
  EXPECT_EQ(striped.stripe_of("foobar"), 0xbf9cf968u % 16);
  std::vector<int> counts(16);
  for (int n = 0; n < 16000; ++n) ++counts[striped.stripe_of("item:" + std::to_string(n))];
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_GT(counts[i], 700) << "stripe " << i;  // 1000 each on average
    EXPECT_LT(counts[i], 1300) << "stripe " << i;
  }
}

TEST_F(StripedMutexTest, EachStripeIsAMutexOnItsOwnKeyWithNoCommonHashTag) {
  StripedMutex striped(client(), "sale:stock", 3, LockOptions{}.key_prefix("p:"));
  EXPECT_EQ(striped.stripe(0).key(), "p:sale:stock:0");
  EXPECT_EQ(striped.stripe(2).key(), "p:sale:stock:2");
  EXPECT_THROW(static_cast<void>(striped.stripe(3)), std::out_of_range);
  const std::size_t i = striped.lock("item:1");
  EXPECT_EQ(i, striped.stripe_of("item:1"));
  EXPECT_EQ(get("p:sale:stock:" + std::to_string(i)), striped.stripe(i).token());
  EXPECT_EQ(client().command("DBSIZE").integer(), 1);
  striped.unlock("item:1");
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(StripedMutexTest, LockByKeyExcludesOnlyThatKeysStripe) {
  StripedMutex mine(client(), "s", 8);
  StripedMutex theirs(client(), "s", 8);
  ASSERT_TRUE(mine.try_lock("a"));
  EXPECT_FALSE(theirs.try_lock("a"));
  std::string other = "b";
  while (mine.stripe_of(other) == mine.stripe_of("a")) other += "b";
  EXPECT_TRUE(theirs.try_lock(other));
  theirs.unlock(other);
  mine.unlock("a");
  EXPECT_TRUE(theirs.try_lock("a"));
}

TEST_F(StripedMutexTest, TryLockAnyTakesTheFreeStripeAndSaysWhich) {
  StripedMutex holder(client(), "s", 4);
  StripedMutex seeker(client(), "s", 4);
  for (std::size_t i : {0u, 1u, 3u}) ASSERT_TRUE(holder.stripe(i).try_lock());
  EXPECT_EQ(seeker.try_lock_any(), std::optional<std::size_t>(2));
  EXPECT_EQ(seeker.try_lock_any(), std::nullopt);  // all four held now
  EXPECT_EQ(seeker.try_lock_any({0, 1}), std::nullopt);
  holder.stripe(1).unlock();
  EXPECT_EQ(seeker.try_lock_any({0, 1}), std::optional<std::size_t>(1));
  EXPECT_EQ(seeker.try_lock_any({}), std::nullopt);
}

TEST_F(StripedMutexTest, TryLockAnyStartsAtARandomStripe) {
  // 400 objects, each taking and giving back once on 8 free stripes: each
  // stripe is first about 50 times. Always starting at stripe 0 would take
  // only stripe 0.
  std::vector<int> taken(8);
  for (int n = 0; n < 400; ++n) {
    StripedMutex striped(client(), "s", 8);
    const std::optional<std::size_t> i = striped.try_lock_any();
    ASSERT_TRUE(i);
    ++taken[*i];
    striped.stripe(*i).unlock();
  }
  for (std::size_t i = 0; i < taken.size(); ++i) EXPECT_GE(taken[i], 15) << "stripe " << i;
}

TEST_F(StripedMutexTest, TryLockAnyGoesBackToTheStripeItTookLast) {
  // Contenders that keep their objects settle on stripes of their own
  // instead of meeting at random ones (each meeting is a refused round trip).
  StripedMutex striped(client(), "s", 16);
  const std::optional<std::size_t> home = striped.try_lock_any();
  ASSERT_TRUE(home);
  striped.stripe(*home).unlock();
  for (int n = 0; n < 50; ++n) {
    ASSERT_EQ(striped.try_lock_any(), home) << "pass " << n;
    striped.stripe(*home).unlock();
  }
}

TEST_F(StripedMutexTest, TryLockAnyRefusedAtItsStripeSettlesOnAnother) {
  StripedMutex seeker(client(), "s", 16);
  StripedMutex other(client(), "s", 16);
  const std::optional<std::size_t> home = seeker.try_lock_any();
  ASSERT_TRUE(home);
  seeker.stripe(*home).unlock();
  ASSERT_TRUE(other.stripe(*home).try_lock());  // someone else took it meanwhile
  const std::optional<std::size_t> moved = seeker.try_lock_any();
  ASSERT_TRUE(moved);
  EXPECT_NE(moved, home);
  seeker.stripe(*moved).unlock();
  other.stripe(*home).unlock();
  EXPECT_EQ(seeker.try_lock_any(), moved);  // the new one, though the old is free again
  seeker.stripe(*moved).unlock();
  EXPECT_EQ(seeker.try_lock_any({*home}), home);  // `among` still rules
}

TEST_F(StripedMutexTest, TryLockAnyForReturnsByItsDeadlineWhenAllAreHeld) {
  StripedMutex holder(client(), "s", 4);
  StripedMutex seeker(client(), "s", 4);
  for (std::size_t i = 0; i < 4; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  const Clock::time_point start = Clock::now();
  const auto taken = seeker.try_lock_any_for(150ms);
  const auto took = Clock::now() - start;
  EXPECT_FALSE(taken);
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 150ms + 500ms);
  const Clock::time_point again = Clock::now();
  EXPECT_FALSE(seeker.try_lock_any_for(-1s));  // one pass, no wait
  EXPECT_LT(Clock::now() - again, 500ms);
}

TEST_F(StripedMutexTest, TryLockAnyForTakesTheStripeReleasedWhileItWaits) {
  StripedMutex holder(client(), "s", 4, LockOptions{}.ttl(60s));
  StripedMutex seeker(client(), "s", 4, LockOptions{}.ttl(60s));
  for (std::size_t i = 0; i < 4; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  auto waiting = std::async(std::launch::async, [&] {
    auto [stripe, guard] = seeker.try_lock_any_for(20s);
    return guard.owns_lock() ? static_cast<int>(stripe) : -1;
  });
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  holder.stripe(3).unlock();
  EXPECT_EQ(waiting.get(), 3);  // the holders' leases are 60 s: a release woke it
  EXPECT_EQ(client().command("EXISTS", "s:3").integer(), 0);  // the guard gave it back
}

// A stopped server: the wait ends by its deadline with TimeoutError (an
// outage, not busy stripes), not one command timeout (1 s here) per
// attempt later; the attempt cut short is undone once the server wakes.
TEST_F(StripedMutexTest, AServerStoppedMidWaitIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client seeking(where);
  StripedMutex holder(client(), "s", 3, LockOptions{}.ttl(60s));
  StripedMutex seeker(seeking, "s", 3, LockOptions{}.ttl(60s));
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  const Clock::time_point deadline = Clock::now() + 600ms;
  auto waiting = std::async(std::launch::async, [&] {
    try {
      return seeker.try_lock_any_until(deadline).guard.owns_lock() ? "taken" : "busy";
    } catch (const TimeoutError& e) {
      return e.code() == Errc::timed_out ? "outage" : "another timeout";
    }
  });
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  server().pause();
  EXPECT_STREQ(waiting.get(), "outage");
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
}

TEST_F(StripedMutexTest, AServerStoppedBeforeTheCallIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client seeking(where);
  StripedMutex seeker(seeking, "s", 3, LockOptions{}.ttl(60s));
  seeker.try_lock_any_for(1s).guard.unlock();  // a connection is pooled before the stop
  server().pause();
  const Clock::time_point deadline = Clock::now() + 100ms;
  EXPECT_THROW(seeker.try_lock_any_until(deadline), TimeoutError);
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
  // The attempt cut short was undone behind itself once the server woke.
  EXPECT_TRUE(eventually([&] { return client().command("DBSIZE").integer() == 0; }));
}

// Stopped 10 ms before the deadline, after answering the wait all along:
// busy (Redis answered within the probe window), not an outage.
TEST_F(StripedMutexTest, AServerStoppedJustBeforeTheDeadlineLeavesTheStripesBusy) {
  StripedMutex holder(client(), "s", 3, LockOptions{}.ttl(60s));
  StripedMutex seeker(client(), "s", 3, LockOptions{}.ttl(60s));
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  const Clock::time_point deadline = Clock::now() + 300ms;
  auto waiting = std::async(std::launch::async, [&] {
    try {
      return seeker.try_lock_any_until(deadline).guard.owns_lock() ? "taken" : "busy";
    } catch (const TimeoutError&) {
      return "outage";
    }
  });
  std::this_thread::sleep_until(deadline - 10ms);
  server().pause();
  EXPECT_STREQ(waiting.get(), "busy");
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
}

// A stripe freed during the last sleep is taken by the pass after it,
// which gets a last step's few milliseconds past the deadline.
TEST_F(StripedMutexTest, AStripeFreedInTheLastSleepIsTakenByTheLastPass) {
  StripedMutex holder(client(), "s", 2, LockOptions{}.ttl(30s));
  StripedMutex seeker(client(), "s", 2, LockOptions{}.ttl(30s).wake_on_release(false));
  int taken = 0;
  for (int round = 0; round < 5; ++round) {
    for (std::size_t i = 0; i < 2; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
    const Clock::time_point deadline = Clock::now() + 120ms;
    auto waiting = std::async(
        std::launch::async, [&] { return seeker.try_lock_any_until(deadline).guard.owns_lock(); });
    std::this_thread::sleep_until(deadline - 3ms);
    holder.stripe(1).unlock();
    if (waiting.get()) ++taken;
    EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
    holder.stripe(0).unlock();
  }
  EXPECT_GE(taken, 1);
}

TEST_F(StripedMutexTest, TryLockForAndUntilTakeTheKeysStripe) {
  using System = std::chrono::system_clock;
  StripedMutex holder(client(), "s", 8, LockOptions{}.ttl(60s));
  StripedMutex seeker(client(), "s", 8, LockOptions{}.ttl(60s));
  std::string other = "b";
  while (seeker.stripe_of(other) == seeker.stripe_of("a")) other += "b";
  ASSERT_TRUE(holder.try_lock("a"));
  Clock::time_point start = Clock::now();
  EXPECT_FALSE(seeker.try_lock_for("a", 150ms));
  EXPECT_GE(Clock::now() - start, 150ms);
  start = Clock::now();
  EXPECT_FALSE(seeker.try_lock_until("a", System::now() + 150ms));
  EXPECT_GE(Clock::now() - start, 100ms);  // waited (the clocks' translation aside)
  EXPECT_LT(Clock::now() - start, 150ms + 500ms);
  // Another key's stripe is free.
  ASSERT_TRUE(seeker.try_lock_for(other, 1s));
  EXPECT_TRUE(seeker.stripe(seeker.stripe_of(other)).owns_lock());
  seeker.unlock(other);
  // A release while it waits, with a deadline on either clock.
  for (const bool on_system : {false, true}) {
    auto waiting = std::async(std::launch::async, [&] {
      return on_system ? seeker.try_lock_until("a", System::now() + 20s)
                       : seeker.try_lock_until("a", Clock::now() + 20s);
    });
    EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
    holder.unlock("a");
    EXPECT_TRUE(waiting.get()) << (on_system ? "system" : "steady");
    EXPECT_TRUE(seeker.stripe(seeker.stripe_of("a")).owns_lock());
    seeker.unlock("a");
    ASSERT_TRUE(holder.try_lock("a"));
  }
}

TEST_F(StripedMutexTest, TryLockAnyUntilASystemClockDeadlineWaitsAsASteadyOne) {
  using System = std::chrono::system_clock;
  StripedMutex holder(client(), "s", 4, LockOptions{}.ttl(60s));
  StripedMutex seeker(client(), "s", 4, LockOptions{}.ttl(60s));
  for (std::size_t i = 0; i < 4; ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  Clock::time_point start = Clock::now();
  EXPECT_FALSE(seeker.try_lock_any_until(System::now() + 150ms));
  EXPECT_GE(Clock::now() - start, 100ms);  // waited (the clocks' translation aside)
  EXPECT_LT(Clock::now() - start, 150ms + 500ms);
  start = Clock::now();
  EXPECT_FALSE(seeker.try_lock_any_until(System::now() - 1s));  // one pass, no wait
  EXPECT_FALSE(seeker.try_lock_any_until(Clock::now() - 1s, {0, 1}));
  EXPECT_LT(Clock::now() - start, 500ms);
  holder.stripe(2).unlock();
  EXPECT_FALSE(seeker.try_lock_any_until(System::now() + 100ms, {0, 1}));  // `among` rules
  auto [stripe, guard] = seeker.try_lock_any_until(System::now() + 5s);
  EXPECT_TRUE(guard.owns_lock());
  EXPECT_EQ(stripe, 2u);
}

// Every stripe held by another object for a minute: only the cancel ends
// the waits, on one stripe or on any.
void expect_cancel_waits_ends_every_wait(StripedMutex& holder, StripedMutex& seeker) {
  for (std::size_t i = 0; i < holder.size(); ++i) ASSERT_TRUE(holder.stripe(i).try_lock());
  auto any_for = std::async(std::launch::async, [&] { return seeker.try_lock_any_for(30s); });
  auto any_until = std::async(std::launch::async, [&] {
    return seeker.try_lock_any_until(std::chrono::system_clock::now() + 30s, {0, 1});
  });
  auto one_for = std::async(std::launch::async, [&] { return seeker.try_lock_for("a", 30s); });
  auto one_until = std::async(std::launch::async, [&] {
    return seeker.try_lock_until("b", std::chrono::system_clock::now() + 30s);
  });
  auto blocking = std::async(std::launch::async, [&] {
    try {
      seeker.lock("c");
      return std::string("acquired");
    } catch (const Error& error) {
      return std::string(error.code() == Errc::cancelled ? "cancelled" : error.what());
    }
  });
  // A cancel reaches only waits already under way: cancel until all have
  // ended (each within a few ms of its start).
  const Clock::time_point start = Clock::now();
  const auto ended = [](auto& future) { return future.wait_for(0s) == std::future_status::ready; };
  const bool all_ended = eventually([&] {
    seeker.cancel_waits();
    return ended(any_for) && ended(any_until) && ended(one_for) && ended(one_until) &&
           ended(blocking);
  });
  if (!all_ended) {
    for (std::size_t i = 0; i < holder.size(); ++i) holder.stripe(i).unlock();  // end them
  }
  ASSERT_TRUE(all_ended) << "a wait was not cancelled";
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_FALSE(any_for.get());
  EXPECT_FALSE(any_until.get());
  EXPECT_FALSE(one_for.get());
  EXPECT_FALSE(one_until.get());
  EXPECT_EQ(blocking.get(), "cancelled");
  for (std::size_t i = 0; i < seeker.size(); ++i) EXPECT_FALSE(seeker.stripe(i).owns_lock());
  // Later waits are unaffected.
  holder.stripe(3).unlock();
  auto [stripe, guard] = seeker.try_lock_any_for(5s);
  EXPECT_TRUE(guard.owns_lock());
  EXPECT_EQ(stripe, 3u);
}

TEST_F(StripedMutexTest, CancelWaitsEndsEveryWaitOfTheObject) {
  StripedMutex holder(client(), "s", 4, LockOptions{}.ttl(60s));
  StripedMutex seeker(client(), "s", 4, LockOptions{}.ttl(60s));
  expect_cancel_waits_ends_every_wait(holder, seeker);
}

TEST_F(StripedMutexTest, CancelWaitsEndsEveryWaitOfTheObjectWhenPolling) {
  // No release announcements: the waits sleep on their own timers.
  const LockOptions polling = LockOptions{}.ttl(60s).wake_on_release(false);
  StripedMutex holder(client(), "s", 4, polling);
  StripedMutex seeker(client(), "s", 4, polling);
  expect_cancel_waits_ends_every_wait(holder, seeker);
}

// A copy is a handle on the same stripes (say, one captured by value in a
// task): a stripe held through one is held through the other, and
// cancel_waits() on either ends the waits of both.
TEST_F(StripedMutexTest, ACopySharesTheStripesOfItsOriginal) {
  StripedMutex original(client(), "s", 2, LockOptions{}.ttl(60s));
  StripedMutex copy = original;
  const std::optional<std::size_t> taken = original.try_lock_any();
  ASSERT_TRUE(taken);
  EXPECT_TRUE(copy.stripe(*taken).owns_lock());
  const std::optional<std::size_t> other = copy.try_lock_any();
  ASSERT_TRUE(other);
  EXPECT_NE(*other, *taken);
  auto waiting = std::async(std::launch::async, [&] { return original.try_lock_any_for(30s); });
  EXPECT_TRUE(eventually([&] {
    copy.cancel_waits();
    return waiting.wait_for(0s) == std::future_status::ready;
  })) << "cancel_waits() on the copy left the original's wait on";
  EXPECT_FALSE(waiting.get());
  copy.stripe(*taken).unlock();
  EXPECT_FALSE(original.stripe(*taken).owns_lock());

  StripedMutex moved = std::move(copy);
  EXPECT_TRUE(moved.stripe(*other).owns_lock());
  moved.stripe(*other).unlock();
}

TEST_F(StripedMutexTest, StripesExcludeAcrossProcesses) {
  // 4 processes x 25 unsafe increments of one counter per stripe, each under
  // that stripe's lock: every count is exact.
  const ClientOptions where = client_options(server());
  const int failed = testing::run_in_children(4, [&] {
    Client own(where);
    StripedMutex striped(own, "s", 4);
    for (int n = 0; n < 25; ++n) {
      const std::string key = "key:" + std::to_string(n % 8);
      std::lock_guard guard(striped.of(key));
      testing::unsafe_increment(own, "count:" + std::to_string(striped.stripe_of(key)));
    }
  });
  EXPECT_EQ(failed, 0);
  StripedMutex striped(client(), "s", 4);
  std::vector<long long> expected(4);
  for (int n = 0; n < 25; ++n) expected[striped.stripe_of("key:" + std::to_string(n % 8))] += 4;
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string value = get("count:" + std::to_string(i));
    EXPECT_EQ(value == "(nil)" ? 0 : std::stoll(value), expected[i]) << "stripe " << i;
  }
}

TEST_F(StripedMutexTest, BadInputIsRefused) {
  EXPECT_THROW(StripedMutex(client(), "s", 0), InvalidArgument);
  EXPECT_THROW(StripedMutex(client(), "s", StripedMutex::max_stripes + 1), InvalidArgument);
  EXPECT_THROW(StripedMutex(client(), "", 4), InvalidArgument);
}

}  // namespace
}  // namespace distlock
