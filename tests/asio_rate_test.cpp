// Tests for a RateLimiter's async calls (distlock/asio.hpp:
// async_try_acquire, async_try_acquire_for/_until, async_acquire) over a
// real io_context and a real server: one count with the blocking calls,
// the wait for retry_after, a next chance past the deadline refused at
// once, a server that does not answer, a bad cost, cancel_waits() and
// terminal cancellation.
#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/asio.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;

struct Decided {
  std::error_code ec;
  RateDecision decision;
};

class AsioRateTest : public testing::AsioTest {
 protected:
  // Starts a call, `initiate(token)`, whose completion the future gives.
  template <class Initiate>
  std::future<Decided> decide(Initiate initiate, asio::cancellation_slot slot = {}) {
    auto done = std::make_shared<std::promise<Decided>>();
    std::future<Decided> result = done->get_future();
    initiate(asio::bind_cancellation_slot(
        slot, asio::bind_executor(io_, testing::Completion<std::error_code, RateDecision>(
                                           [done](std::error_code ec, RateDecision decision) {
                                             done->set_value(Decided{ec, decision});
                                           }))));
    return result;
  }
  Decided try_acquire(RateLimiter& limiter, std::uint64_t cost = 1) {
    return wait_for(
        decide([&](auto token) { async_try_acquire(limiter, cost, std::move(token)); }));
  }
  // The rate scripts the server ran: the attempts made.
  long long attempts() {
    const std::string stats = server().command({"INFO", "commandstats"});
    long long calls = 0;
    for (const char* name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
      const std::string::size_type at = stats.find(name);
      if (at != std::string::npos) calls += std::stoll(stats.substr(at + std::strlen(name)));
    }
    return calls;
  }
};

TEST_F(AsioRateTest, AsyncAndBlockingCallsShareOneCount) {
  Client client(client_options(server()));
  RateLimiter visits(client, "async:visits", RateOptions{}.fixed_window(5, 10s));
  for (std::uint64_t left : {4u, 3u}) {
    const Decided admitted = try_acquire(visits);
    ASSERT_FALSE(admitted.ec) << admitted.ec.message();
    EXPECT_TRUE(admitted.decision.allowed);
    EXPECT_EQ(admitted.decision.remaining, left);
  }
  EXPECT_TRUE(visits.try_acquire(3));  // blocking: the last three
  const Decided refused = try_acquire(visits);
  ASSERT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.decision.allowed);
  EXPECT_GT(refused.decision.retry_after, 0ms);
  EXPECT_LE(refused.decision.retry_after, 11s);  // the window, rounded up
  EXPECT_FALSE(visits.try_acquire());
}

// A refusal sleeps its retry_after, then admits, before the deadline.
TEST_F(AsioRateTest, TryAcquireForWaitsForTheNextChance) {
  Client client(client_options(server()));
  RateLimiter mails(client, "async:mails", RateOptions{}.fixed_window(1, 300ms));
  ASSERT_TRUE(mails.try_acquire());
  const auto begun = Clock::now();
  const Decided admitted =
      wait_for(decide([&](auto token) { async_try_acquire_for(mails, 5s, std::move(token)); }));
  ASSERT_FALSE(admitted.ec) << admitted.ec.message();
  EXPECT_TRUE(admitted.decision.allowed);
  EXPECT_GE(Clock::now() - begun, 200ms);  // not before the window ended
  EXPECT_LE(attempts(), 4);                // slept, did not poll
}

// The next chance comes after the deadline: refused at once, no sleep.
TEST_F(AsioRateTest, ANextChanceAfterTheDeadlineIsRefusedAtOnce) {
  Client client(client_options(server()));
  RateLimiter exports(client, "async:exports", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(exports.try_acquire());
  const auto begun = Clock::now();
  const Decided refused = wait_for(decide([&](auto token) {
    async_try_acquire_until(exports, std::chrono::system_clock::now() + 5s, std::move(token));
  }));
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.decision.allowed);
  EXPECT_GT(refused.decision.retry_after, 50s);
  EXPECT_LT(Clock::now() - begun, 4s);
}

TEST_F(AsioRateTest, ABadCostIsAnErrorAndCountsNothing) {
  Client client(client_options(server()));
  RateLimiter bursts(client, "async:bursts", RateOptions{}.smooth(10, 1s, 3));
  EXPECT_EQ(try_acquire(bursts, 0).ec, Errc::invalid_argument);
  EXPECT_EQ(try_acquire(bursts, 4).ec, Errc::invalid_argument);
  EXPECT_EQ(attempts(), 0);
  const Decided three = try_acquire(bursts, 3);
  EXPECT_TRUE(three.decision.allowed) << three.ec.message();
}

// No answer within the command timeout is an error for a call without a
// deadline; a timed call ends by its deadline, an outage (Errc::timed_out)
// rather than a refusal, as the blocking calls do.
TEST_F(AsioRateTest, AServerThatDoesNotAnswerEndsEveryCallInTime) {
  ClientOptions where = client_options(server());
  where.command_timeout = 500ms;
  Client client(where);
  RateLimiter quiet(client, "async:quiet", RateOptions{}.fixed_window(10, 10s));
  ASSERT_TRUE(try_acquire(quiet).decision.allowed);  // the link is connected
  server().pause();
  auto begun = Clock::now();
  const Decided silent = try_acquire(quiet);
  EXPECT_EQ(silent.ec, Errc::timed_out) << silent.ec.message();
  EXPECT_LT(Clock::now() - begun, 500ms + 1500ms);
  begun = Clock::now();
  const Decided cut =
      wait_for(decide([&](auto token) { async_try_acquire_for(quiet, 200ms, std::move(token)); }));
  EXPECT_EQ(cut.ec, Errc::timed_out) << cut.ec.message();
  EXPECT_FALSE(cut.decision.allowed);
  EXPECT_LT(Clock::now() - begun, 200ms + 400ms);
  server().resume();
}

TEST_F(AsioRateTest, CancelWaitsEndsASleepingCall) {
  Client client(client_options(server()));
  RateLimiter reports(client, "async:reports", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(reports.try_acquire());
  std::future<Decided> waiting =
      decide([&](auto token) { async_acquire(reports, std::move(token)); });
  std::future<Decided> timed =
      decide([&](auto token) { async_try_acquire_for(reports, 120s, std::move(token)); });
  ASSERT_TRUE(eventually([&] { return attempts() >= 3; }));  // both were refused
  reports.cancel_waits();
  const Decided cancelled = wait_for(std::move(waiting));
  EXPECT_EQ(cancelled.ec, Errc::cancelled) << cancelled.ec.message();
  EXPECT_FALSE(cancelled.decision.allowed);
  const Decided refused = wait_for(std::move(timed));  // the last refusal, as the blocking call
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.decision.allowed);
  EXPECT_GT(refused.decision.retry_after, 0ms);
}

// A deferred call starts after the limiter it was made from is gone: it
// runs on a copy taken at the call (ASan would see the original used).
TEST_F(AsioRateTest, ADeferredCallOutlivesItsLimiter) {
  Client client(client_options(server()));
  auto limiter =
      std::make_unique<RateLimiter>(client, "async:deferred", RateOptions{}.fixed_window(1, 10s));
  auto call = async_try_acquire(*limiter, asio::experimental::deferred);
  limiter.reset();
  const Decided later = wait_for(decide([&](auto token) { std::move(call)(std::move(token)); }));
  ASSERT_FALSE(later.ec) << later.ec.message();
  EXPECT_TRUE(later.decision.allowed);
}

TEST_F(AsioRateTest, TerminalCancellationEndsASleepingCall) {
  Client client(client_options(server()));
  RateLimiter reports(client, "async:aborted", RateOptions{}.fixed_window(1, 60s));
  ASSERT_TRUE(reports.try_acquire());
  asio::cancellation_signal cancel;
  std::future<Decided> waiting =
      decide([&](auto token) { async_acquire(reports, std::move(token)); }, cancel.slot());
  ASSERT_TRUE(eventually([&] { return attempts() >= 2; }));
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Decided aborted = wait_for(std::move(waiting));
  EXPECT_EQ(aborted.ec, asio::error::operation_aborted);
  EXPECT_FALSE(aborted.decision.allowed);
}

}  // namespace
}  // namespace distlock
