// Tests for a SimpleMutex's async acquires (distlock/asio.hpp) over a real
// io_context and a real server: the Mutex's lease with no script at all,
// so a user without scripting (docs/connecting.md's least-privilege rules) takes,
// waits for and gives back locks asynchronously; a fenced attempt is one
// MULTI on the link; a release, two round trips on one connection
// (WATCH, then MULTI), goes through the connector; and an attempt whose
// answer does not come is given back once its grant arrives, or read and
// deleted on a connection of its own, never deleted blindly.
#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "distlock/asio.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/acl_rules.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using SimpleHold = AsyncHold<SimpleMutex>;
using GotSimple = testing::Got<SimpleHold>;

class AsioSimpleTest : public testing::AsioTest {
 protected:
  bool subscribed(const SimpleMutex& lock) {
    return subscribers(detail::companion_key(lock.key(), "released")) > 0;
  }
};

TEST_F(AsioSimpleTest, AnAsyncHoldIsTheMutexsLease) {
  Client client(client_options(server()));
  SimpleMutex report(client, "async:simple", LockOptions().ttl(30s));
  GotSimple got = try_lock(report);
  ASSERT_FALSE(got.ec) << got.ec.message();
  ASSERT_TRUE(got.hold);
  EXPECT_EQ(server().command({"GET", report.key()}), got.hold.id());
  EXPECT_GT(std::stoll(server().command({"PTTL", report.key()})), 20000);
  GotSimple again = try_lock(report);
  EXPECT_FALSE(again.ec) << again.ec.message();
  EXPECT_FALSE(again.hold);
  EXPECT_FALSE(report.try_lock());
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_FALSE(got.hold);
  EXPECT_FALSE(key_exists(report.key()));
}

// Its release goes through the connector thread; until it is answered the
// context's run() goes on, so a program that runs its context until
// nothing is left, then lets its Client go, leaves no key (the event hook,
// run by the release, is slow here, so that run() returning first is seen).
TEST_F(AsioSimpleTest, RunGoesOnUntilAHoldGivenBackIsReleased) {
  std::atomic<bool> told{false};
  ClientOptions options = client_options(server());
  options.on_event = [&told](const LockEvent& event) {
    if (event.type != LockEventType::released) return;
    std::this_thread::sleep_for(200ms);
    told = true;
  };
  Client client(options);
  SimpleMutex report(client, "async:simple", LockOptions().ttl(30s));
  asio::io_context own;
  bool held = false;
  async_try_lock(report,
                 asio::bind_executor(own, testing::Completion<std::error_code, SimpleHold>(
                                              [&](std::error_code, SimpleHold hold) {
                                                held = static_cast<bool>(
                                                    hold);  // given back as the handler ends
                                              })));
  own.run();
  EXPECT_TRUE(held);
  EXPECT_TRUE(told) << "run() returned before the hold's release was answered";
  EXPECT_FALSE(key_exists(report.key()));
}

// The point of a SimpleMutex: a user the server allows no script. Every
// async call works under docs/connecting.md's rules for it, and the server
// refused nothing on the way.
TEST_F(AsioSimpleTest, EveryAsyncCallWorksForAUserWithoutScripting) {
  testing::acl::set_user(server(), "app", testing::acl::simple_mutex_rules);
  ClientOptions options = client_options(server());
  options.username = "app";
  options.password = "pw";
  Client client(options);
  server().command({"ACL", "LOG", "RESET"});
  SimpleMutex holder(client, "jobs:simple", LockOptions().ttl(60s));
  SimpleMutex waiter(client, "jobs:simple", LockOptions().ttl(30s).fencing(true));
  ASSERT_TRUE(holder.try_lock());
  std::future<GotSimple> waiting = start_lock(waiter);
  ASSERT_TRUE(eventually([&] { return subscribed(waiter); }));
  holder.unlock();
  GotSimple got = wait_for(std::move(waiting));  // woken by the release, long before 60 s
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_GT(got.hold.fence(), 0);
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_FALSE(key_exists(waiter.key()));
  EXPECT_EQ(testing::acl::refusals(server()), "");
}

// Without +multi, a fenced attempt fails (its MULTI refused), and the SET
// that then ran on its own is given back apart (read, then deleted).
TEST_F(AsioSimpleTest, AFencedAttemptWhoseMultiIsRefusedLeavesNoKey) {
  testing::acl::set_user(server(), "app",
                         testing::acl::without(testing::acl::simple_mutex_rules, "+multi"));
  ClientOptions options = client_options(server());
  options.username = "app";
  options.password = "pw";
  Client client(options);
  SimpleMutex report(client, "jobs:simple", LockOptions().ttl(30s).fencing(true));
  for (int attempt = 0; attempt < 2; ++attempt) {
    GotSimple got = try_lock(report);
    EXPECT_EQ(got.ec, Errc::server_error) << got.ec.message();
    EXPECT_FALSE(got.hold);
    EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); })) << attempt;
    EXPECT_EQ(server().command({"DBSIZE"}), "1");  // the fence counter only
  }
}

TEST_F(AsioSimpleTest, AFencedHoldHasTheFenceOfItsGrant) {
  Client client(client_options(server()));
  SimpleMutex report(client, "async:fenced", LockOptions().ttl(30s).fencing(true));
  GotSimple first = try_lock(report);
  ASSERT_TRUE(first.hold) << first.ec.message();
  const long long fence = first.hold.fence();
  EXPECT_GT(fence, 0);
  SimpleMutex other(client, "async:fenced", LockOptions().ttl(30s).fencing(true));
  GotSimple refused = try_lock(other);  // its INCR counts too: fences have gaps
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  first.hold.unlock();
  ASSERT_TRUE(eventually([&] { return !key_exists(report.key()); }));
  GotSimple second = try_lock(report);
  ASSERT_TRUE(second.hold) << second.ec.message();
  EXPECT_EQ(second.hold.fence(), fence + 2);
}

// A fenced grant whose INCR fails (the fence key holds no number) stands,
// since a transaction does not roll back: it is given back, and the call
// says why, blocking or not.
TEST_F(AsioSimpleTest, AGrantWithoutItsFenceIsGivenBack) {
  Client client(client_options(server()));
  SimpleMutex report(client, "async:unfenced", LockOptions().ttl(30s).fencing(true));
  const std::string fence_key = detail::companion_key(report.key(), "fence");
  server().command({"SET", fence_key, "not a number"});
  GotSimple got = try_lock(report);
  EXPECT_EQ(got.ec, Errc::server_error) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); }));
  EXPECT_THROW(static_cast<void>(report.try_lock()), ServerError);
  EXPECT_FALSE(key_exists(report.key()));
  EXPECT_EQ(server().command({"GET", fence_key}), "not a number");
}

TEST_F(AsioSimpleTest, AReleaseWithinAMinimumHoldKeepsTheKey) {
  Client client(client_options(server()));
  SimpleMutex cron(client, "async:cron", LockOptions().ttl(10s).min_hold(30s));
  GotSimple got = try_lock(cron);
  ASSERT_TRUE(got.hold) << got.ec.message();
  const std::string token = got.hold.id();
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::kept));
  EXPECT_EQ(server().command({"GET", cron.key()}), token);
  EXPECT_GT(std::stoll(server().command({"PTTL", cron.key()})), 20000);
}

// Through the fault proxy: an attempt whose answer does not come. A
// SimpleMutex cannot write a blind undo behind it (a token-checked delete
// needs a read first): its grant is given back when it arrives, or, where
// the connection broke, read and deleted on a connection of its own.
class AsioSimpleFaultTest : public testing::AsioFaultTest {};

TEST_F(AsioSimpleFaultTest, ACancelledAttemptIsGivenBackWhenItsGrantArrives) {
  options_.command_timeout = 30s;
  Client client(options_);
  SimpleMutex report(client, "async:cancelled", LockOptions().ttl(60s));
  asio::cancellation_signal cancel;
  std::future<GotSimple> pending = try_unanswered(report, cancel.slot());
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const GotSimple tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  EXPECT_TRUE(key_exists(report.key()));                       // nothing deleted blindly meanwhile
  proxy_->release(testing::FaultProxy::Direction::to_client);  // the grant arrives
  EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); }));
}

// A context shut down while an attempt is owed its answer: the link goes
// with it, and the attempt's sink, its only way back (no undo is written
// behind it), with the link; the attempt is read and deleted apart.
TEST_F(AsioSimpleFaultTest, AnAttemptOwedWhenItsContextGoesIsGivenBackApart) {
  options_.command_timeout = 30s;
  Client client(options_);
  SimpleMutex report(client, "async:teardown", LockOptions().ttl(60s));
  {
    asio::io_context own;  // run by this thread
    GotSimple warm;
    bool done = false;
    async_try_lock(report,
                   asio::bind_executor(own, testing::Completion<std::error_code, SimpleHold>(
                                                [&](std::error_code ec, SimpleHold hold) {
                                                  warm = GotSimple{ec, std::move(hold)};
                                                  done = true;
                                                })));
    while (!done && own.run_one() > 0) {
    }
    ASSERT_TRUE(warm.hold) << warm.ec.message();  // the link is connected
    warm.hold.unlock();
    ASSERT_TRUE(eventually([&] { return !key_exists(report.key()); }));
    proxy_->stall(testing::FaultProxy::Direction::to_client);
    proxy_->sync();
    async_try_lock(report,
                   asio::bind_executor(own, testing::Completion<std::error_code, SimpleHold>(
                                                [](std::error_code, SimpleHold) {})));
    ASSERT_TRUE(eventually([&] {
      own.poll();
      return key_exists(report.key());  // applied, its answer held back
    }));
  }
  proxy_->release(testing::FaultProxy::Direction::to_client);
  EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); }));
}

TEST_F(AsioSimpleFaultTest, AConnectionResetUnderAnAttemptIsReadAndDeletedApart) {
  Client client(options_);
  SimpleMutex report(client, "async:reset", LockOptions().ttl(60s));
  std::future<GotSimple> pending = try_unanswered(report, {});
  proxy_->reset_all();
  proxy_->sync();
  proxy_->release(testing::FaultProxy::Direction::to_client);
  const GotSimple tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, Errc::io_error) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); }));
}

// Silent past the command timeout: an outage, and the link broken. The
// undo's read, on a connection of its own, meets the same silence, so the
// grant runs out with its lease: never adopted, so never renewed.
TEST_F(AsioSimpleFaultTest, NoReplyWithinTheCommandTimeoutIsTimedOutAndNeverKept) {
  options_.command_timeout = 300ms;
  Client client(options_);
  SimpleMutex report(client, "async:silent", LockOptions().ttl(1s).auto_renew(true));
  const GotSimple tried = wait_for(try_unanswered(report, {}));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  proxy_->release(testing::FaultProxy::Direction::to_client);
  EXPECT_TRUE(eventually([&] { return !key_exists(report.key()); }, 5s));
  GotSimple again = try_lock(report);
  ASSERT_FALSE(again.ec) << again.ec.message();  // on a new link
  EXPECT_TRUE(again.hold);
}

}  // namespace
}  // namespace distlock
