// Tests for a StripedMutex's async waits for any stripe
// (distlock/asio_striped.hpp) over a real io_context and a real server:
// a pass takes the free stripe and settles on it next time, every stripe
// busy is an empty result after one pass, a wait is ended by a release of
// any stripe, by its deadline, by cancel_waits() and by terminal
// cancellation (the attempt in flight undone), it outlives its object, and
// async and blocking holders of the stripes exclude each other.
#include <gtest/gtest.h>

#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"
#include "support/sanitized.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using GotStripe = testing::Got<AsyncStripe>;
using Clock = std::chrono::steady_clock;

// The striped calls, over either fixture.
template <class Fixture>
class Striped : public Fixture {
 protected:
  GotStripe try_any(StripedMutex& segments, std::vector<std::size_t> among) {
    return this->wait_for(this->template start<AsyncStripe>(
        [&](auto token) { async_try_lock_any(segments, std::move(among), std::move(token)); }));
  }
  GotStripe try_any(StripedMutex& segments) {
    return this->wait_for(this->template start<AsyncStripe>(
        [&](auto token) { async_try_lock_any(segments, std::move(token)); }));
  }
  std::future<GotStripe> start_lock_any(StripedMutex& segments, asio::cancellation_slot slot = {}) {
    return this->template start<AsyncStripe>(
        [&](auto token) { async_lock_any(segments, std::move(token)); }, slot);
  }
  // Holds every stripe of `segments` through another object of the name.
  std::vector<std::unique_ptr<Mutex>> hold_all(Client& client, const StripedMutex& segments) {
    std::vector<std::unique_ptr<Mutex>> held;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      held.push_back(std::make_unique<Mutex>(client, segments.stripe(i).key(), raw_key()));
      EXPECT_TRUE(held.back()->try_lock()) << i;
    }
    return held;
  }
  static LockOptions raw_key() { return LockOptions().key_prefix("").ttl(30s); }
  long long keys_in_db() { return std::stoll(this->server().command({"DBSIZE"})); }
};

class AsioStripedTest : public Striped<testing::AsioTest> {};

TEST_F(AsioStripedTest, APassTakesTheFreeStripeAndSettlesOnItNextTime) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:stock", 4, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  others[3]->unlock();  // only stripe 3 is free
  GotStripe taken = try_any(segments);
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_EQ(taken.hold.stripe, 3u);
  EXPECT_EQ(server().command({"GET", segments.stripe(3).key()}), taken.hold.hold.id());
  EXPECT_EQ(release(taken.hold.hold).second, Release::released);
  for (const std::unique_ptr<Mutex>& other : others) other->unlock();
  // Every stripe free now: the one taken last comes first, each time.
  for (int round = 0; round < 6; ++round) {
    GotStripe again = try_any(segments);
    ASSERT_TRUE(again.hold) << again.ec.message();
    EXPECT_EQ(again.hold.stripe, 3u) << round;
    EXPECT_EQ(release(again.hold.hold).second, Release::released);
  }
  // ... unless it is busy, or not among those listed.
  ASSERT_TRUE(segments.stripe(3).try_lock());
  GotStripe elsewhere = try_any(segments);
  ASSERT_TRUE(elsewhere.hold) << elsewhere.ec.message();
  EXPECT_NE(elsewhere.hold.stripe, 3u);
  EXPECT_EQ(release(elsewhere.hold.hold).second, Release::released);
  segments.stripe(3).unlock();
  GotStripe listed = try_any(segments, {1});
  ASSERT_TRUE(listed.hold) << listed.ec.message();
  EXPECT_EQ(listed.hold.stripe, 1u);
}

TEST_F(AsioStripedTest, EveryStripeBusyIsAnEmptyResultAfterOnePass) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:busy", 3, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  GotStripe tried = try_any(segments);
  EXPECT_FALSE(tried.ec) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_FALSE(tried.hold.hold.owns_lock());
  EXPECT_EQ(keys_in_db(), 3);
  GotStripe none = try_any(segments, {});
  EXPECT_FALSE(none.ec) << none.ec.message();
  EXPECT_FALSE(none.hold);
}

TEST_F(AsioStripedTest, AStripePastTheEndIsAClearErrorThatTouchesNothing) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:past", 3, LockOptions().ttl(30s));
  GotStripe tried = try_any(segments, {0, 3});
  EXPECT_EQ(tried.ec, Errc::invalid_argument);
  EXPECT_FALSE(tried.hold);
  EXPECT_EQ(keys_in_db(), 0);
}

TEST_F(AsioStripedTest, AWaitTakesWhicheverStripeIsReleased) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:wait", 4, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  std::future<GotStripe> pending = start_lock_any(segments);
  // It waits on one stripe's release channel (the others' releases are
  // seen at its next pass).
  EXPECT_TRUE(eventually([&] {
    long long waiting = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      waiting += subscribers(detail::companion_key(segments.stripe(i).key(), "released"));
    }
    return waiting == 1;
  }));
  EXPECT_EQ(pending.wait_for(50ms), std::future_status::timeout);
  others[2]->unlock();
  GotStripe taken = wait_for(std::move(pending));
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_EQ(taken.hold.stripe, 2u);
  EXPECT_FALSE(others[2]->try_lock());
}

TEST_F(AsioStripedTest, ATimedWaitBusyAllAlongEndsEmptyByItsDeadline) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:timed", 4, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  const auto began = Clock::now();
  const auto deadline = began + 300ms;
  GotStripe tried = wait_for(start<AsyncStripe>(
      [&](auto token) { async_try_lock_any_until(segments, deadline, std::move(token)); }));
  const auto ended = Clock::now();
  EXPECT_FALSE(tried.ec) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_GE(ended, deadline);
  EXPECT_LT(ended, deadline + testing::deadline_slack);
  EXPECT_EQ(keys_in_db(), 4);
  // A listed stripe freed meanwhile is taken, the others are not tried.
  others[1]->unlock();
  GotStripe listed = wait_for(start<AsyncStripe>([&](auto token) {
    async_try_lock_any_for(segments, 2s, {0, 1}, std::move(token));
  }));
  ASSERT_TRUE(listed.hold) << listed.ec.message();
  EXPECT_EQ(listed.hold.stripe, 1u);
}

// A server that stops answering is an outage by the deadline, not a busy
// stripe: mid-wait, and before the call (the link connected first).
TEST_F(AsioStripedTest, AServerStoppedMidWaitIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client client(where);
  StripedMutex segments(client, "async:outage", 3, LockOptions().ttl(60s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  const auto deadline = Clock::now() + 600ms;
  std::future<GotStripe> pending = start<AsyncStripe>(
      [&](auto token) { async_try_lock_any_until(segments, deadline, std::move(token)); });
  EXPECT_EQ(pending.wait_for(100ms), std::future_status::timeout);
  server().pause();
  GotStripe ended = wait_for(std::move(pending));
  EXPECT_EQ(ended.ec, Errc::timed_out) << ended.ec.message();
  EXPECT_FALSE(ended.hold);
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
}

TEST_F(AsioStripedTest, AServerStoppedBeforeTheCallIsAnOutageByTheDeadline) {
  ClientOptions where = client_options(server());
  where.command_timeout = 1000ms;
  Client client(where);
  StripedMutex segments(client, "async:stopped", 3, LockOptions().ttl(60s));
  GotStripe warm = try_any(segments);  // the link is connected before the stop
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  ASSERT_EQ(release(warm.hold.hold).second, Release::released);
  server().pause();
  const auto deadline = Clock::now() + 100ms;
  GotStripe ended = wait_for(start<AsyncStripe>(
      [&](auto token) { async_try_lock_any_until(segments, deadline, std::move(token)); }));
  EXPECT_EQ(ended.ec, Errc::timed_out) << ended.ec.message();
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  server().resume();
  // The attempt cut short was undone behind itself once the server woke.
  EXPECT_TRUE(eventually([&] { return keys_in_db() == 0; }));
}

// A stripe freed in the last sleep before the deadline is taken by the
// pass after it, which gets a last step's time (the blocking call's last
// pass is not cut at all). Five rounds, the stripe freed 3 ms before each
// deadline: one may miss it only where Redis took over 5 ms to answer;
// with no time for that pass, every round misses it.
TEST_F(AsioStripedTest, AStripeFreedInTheLastSleepIsTakenByTheLastPass) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:last", 1,
                        LockOptions().ttl(30s).wake_on_release(false));  // woken by its pauses
  Mutex other(client, segments.stripe(0).key(), raw_key());
  int taken = 0;
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(other.try_lock());
    const auto deadline = Clock::now() + 200ms;
    std::future<GotStripe> pending = start<AsyncStripe>(
        [&](auto token) { async_try_lock_any_until(segments, deadline, std::move(token)); });
    std::this_thread::sleep_until(deadline - 3ms);
    other.unlock();
    GotStripe got = wait_for(std::move(pending));
    EXPECT_FALSE(got.ec) << got.ec.message();
    if (!got.hold) continue;
    ++taken;
    EXPECT_EQ(release(got.hold.hold).second, Release::released);
  }
  EXPECT_GE(taken, 1);
}

TEST_F(AsioStripedTest, CancelWaitsEndsAWaitWithCancelled) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:cancel", 2, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  std::future<GotStripe> pending = start_lock_any(segments);
  EXPECT_EQ(pending.wait_for(100ms), std::future_status::timeout);
  segments.cancel_waits();
  GotStripe ended = wait_for(std::move(pending));
  EXPECT_EQ(ended.ec, Errc::cancelled);
  EXPECT_FALSE(ended.hold);
  // Later waits are unaffected.
  others[0]->unlock();
  GotStripe later = try_any(segments);
  EXPECT_TRUE(later.hold) << later.ec.message();
}

TEST_F(AsioStripedTest, TerminalCancellationEndsASleepingWaitForGood) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:abort", 3, LockOptions().ttl(30s));
  std::vector<std::unique_ptr<Mutex>> others = hold_all(client, segments);
  asio::cancellation_signal cancel;
  std::future<GotStripe> pending = start_lock_any(segments, cancel.slot());
  EXPECT_EQ(pending.wait_for(100ms), std::future_status::timeout);
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  GotStripe ended = wait_for(std::move(pending));
  EXPECT_EQ(ended.ec, asio::error::operation_aborted);
  EXPECT_FALSE(ended.hold);
  // Stripes freed afterwards stay free: its pauses (50 ms at most) would
  // have had it try four times.
  for (const std::unique_ptr<Mutex>& other : others) other->unlock();
  EXPECT_FALSE(eventually([&] { return keys_in_db() > 0; }, 200ms));
}

TEST_F(AsioStripedTest, AWaitOutlivesItsObject) {
  Client client(client_options(server()));
  std::vector<std::unique_ptr<Mutex>> others;
  std::future<GotStripe> pending;
  std::string key;
  {
    StripedMutex segments(client, "async:gone", 2, LockOptions().ttl(30s));
    others = hold_all(client, segments);
    key = segments.stripe(1).key();
    pending = start_lock_any(segments);
  }
  others[1]->unlock();
  GotStripe taken = wait_for(std::move(pending));
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  EXPECT_EQ(taken.hold.stripe, 1u);
  EXPECT_EQ(server().command({"GET", key}), taken.hold.hold.id());
  EXPECT_EQ(release(taken.hold.hold).second, Release::released);
  EXPECT_FALSE(key_exists(key));
}

// Through the fault proxy: an attempt in flight when the wait is cancelled
// is undone behind itself, whether or not its answer ever comes.
class AsioStripedFaultTest : public Striped<testing::AsioFaultTest> {};

TEST_F(AsioStripedFaultTest, ACancelledAttemptInFlightIsUndone) {
  options_.command_timeout = 30s;
  Client client(options_);
  StripedMutex segments(client, "async:inflight", 2, LockOptions().ttl(60s));
  const std::string key = segments.stripe(0).key();
  auto try_first = [&](auto token) { async_try_lock_any(segments, {0}, std::move(token)); };
  GotStripe warm = wait_for(start<AsyncStripe>(try_first));  // the link connected
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  ASSERT_EQ(release(warm.hold.hold).second, Release::released);
  proxy_->stall(testing::FaultProxy::Direction::to_client);
  proxy_->sync();
  asio::cancellation_signal cancel;
  std::future<GotStripe> pending = start<AsyncStripe>(try_first, cancel.slot());
  ASSERT_TRUE(eventually([&] { return key_exists(key); }));  // the attempt was applied
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  GotStripe ended = wait_for(std::move(pending));
  EXPECT_EQ(ended.ec, asio::error::operation_aborted);
  EXPECT_FALSE(ended.hold);
  // Its undo, written behind it, reaches the server though no reply comes.
  EXPECT_TRUE(eventually([&] { return !key_exists(key); }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
}

// An attempt cut at the deadline is undone behind itself too, and, with
// no reply heard all along, the call is an outage.
TEST_F(AsioStripedFaultTest, AnAttemptCutAtTheDeadlineIsUndone) {
  options_.command_timeout = 30s;
  Client client(options_);
  StripedMutex segments(client, "async:cut", 2, LockOptions().ttl(60s));
  const std::string key = segments.stripe(0).key();
  GotStripe warm = try_any(segments, {0});  // the link connected
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  ASSERT_EQ(release(warm.hold.hold).second, Release::released);
  proxy_->stall(testing::FaultProxy::Direction::to_client);
  proxy_->sync();
  const auto deadline = Clock::now() + 300ms;
  std::future<GotStripe> pending = start<AsyncStripe>(
      [&](auto token) { async_try_lock_any_until(segments, deadline, {0}, std::move(token)); });
  ASSERT_TRUE(eventually([&] { return key_exists(key); }));  // applied
  GotStripe ended = wait_for(std::move(pending));
  EXPECT_EQ(ended.ec, Errc::timed_out) << ended.ec.message();
  EXPECT_FALSE(ended.hold);
  EXPECT_LT(Clock::now(), deadline + testing::deadline_slack);
  // Undone, though no reply comes.
  EXPECT_TRUE(eventually([&] { return !key_exists(key); }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
}

// 200 async waits and two threads on three stripes, each hold marking its
// stripe: no stripe ever has two holders, and every wait is served.
TEST_F(AsioStripedTest, AsyncAndBlockingHoldersOfTheStripesExcludeEachOther) {
  Client client(client_options(server()));
  StripedMutex segments(client, "async:mixed", 3, LockOptions().ttl(30s));
  std::vector<std::atomic<int>> in_use(segments.size());
  std::atomic<int> overlaps{0};
  auto enter = [&](std::size_t stripe) {
    if (in_use[stripe].fetch_add(1) != 0) overlaps.fetch_add(1);
  };
  auto leave = [&](std::size_t stripe) { in_use[stripe].fetch_sub(1); };
  constexpr int waits = 200;
  std::atomic<int> served{0};
  std::promise<void> all_served;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int n = 0; n < waits; ++n) {
    async_lock_any(segments, asio::bind_executor(
                                 io_, testing::Completion<std::error_code, AsyncStripe>(
                                          [&](std::error_code ec, AsyncStripe taken) {
                                            if (ec || !taken) {
                                              std::lock_guard<std::mutex> guard(failures_mutex);
                                              failures.push_back(ec.message());
                                            } else {
                                              enter(taken.stripe);
                                              leave(taken.stripe);  // then released as `taken` goes
                                            }
                                            if (served.fetch_add(1) + 1 == waits)
                                              all_served.set_value();
                                          })));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int n = 0; n < 20; ++n) {
        StripedMutex::Taken taken = segments.try_lock_any_for(10s);
        if (!taken) continue;
        enter(taken.stripe);
        std::this_thread::sleep_for(1ms);
        leave(taken.stripe);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::future<void> done = all_served.get_future();
  ASSERT_EQ(done.wait_for(60s), std::future_status::ready) << served.load() << " served";
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, the first: " << failures.front();
  EXPECT_TRUE(eventually([&] { return keys_in_db() == 0; }));
}

}  // namespace
}  // namespace distlock
