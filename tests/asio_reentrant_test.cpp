// Tests for a ReentrantMutex's async acquires (distlock/asio.hpp) over a
// real io_context and a real server: each async acquire is an owner of its
// own in Redisson's layout, which never re-enters and excludes every
// thread's holds, waits woken by the release announcement, a cancelled
// attempt undone, a minimum hold kept, fencing, keys of another type, and
// the threads' own owner ids and counts left as they were.
#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "distlock/asio.hpp"
#include "distlock/detail/lifecycle/thread_owners.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using ReentrantHold = AsyncHold<ReentrantMutex>;
using GotReentrant = testing::Got<ReentrantHold>;

class AsioReentrantTest : public testing::AsioTest {
 protected:
  std::string field(const ReentrantMutex& lock, const std::string& owner) {
    return server().command({"HGET", lock.key(), owner});
  }
  long long pttl(const ReentrantMutex& lock) {
    return std::stoll(server().command({"PTTL", lock.key()}));
  }
  // Whether any thread's owner ids and counts were touched (see
  // detail/lifecycle/thread_owners.hpp): an async hold is no thread's.
  static bool threads_touched() { return detail::GivenBackElsewhere::any(); }
};

TEST_F(AsioReentrantTest, AnAsyncHoldIsAnOwnerOfItsOwnInRedissonsLayout) {
  Client client(client_options(server()));
  ReentrantMutex tree(client, "async:tree", LockOptions().ttl(30s));
  GotReentrant got = try_lock(tree);
  ASSERT_FALSE(got.ec) << got.ec.message();
  ASSERT_TRUE(got.hold);
  const std::string owner = got.hold.id();
  EXPECT_EQ(owner.rfind(client.id() + ":a", 0), 0u) << owner;
  EXPECT_EQ(field(tree, owner), "1");  // one hold, counted as Redisson counts it
  EXPECT_GT(pttl(tree), 20000);
  EXPECT_FALSE(tree.owns_lock());  // no thread's
  EXPECT_EQ(tree.hold_count(), 0u);
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_FALSE(got.hold);
  EXPECT_FALSE(key_exists(tree.key()));
  EXPECT_FALSE(threads_touched());
}

// An async hold never re-enters: a second async acquire through the same
// object is another owner, refused; a thread's lock is refused too, and
// an async acquire while a thread holds.
TEST_F(AsioReentrantTest, AsyncHoldsNeverReenterAndExcludeThreads) {
  Client client(client_options(server()));
  ReentrantMutex tree(client, "async:exclusive", LockOptions().ttl(30s));
  ReentrantMutex other(client, "async:exclusive", LockOptions().ttl(30s));
  GotReentrant first = try_lock(tree);
  ASSERT_TRUE(first.hold) << first.ec.message();
  GotReentrant second = try_lock(tree);
  EXPECT_FALSE(second.ec) << second.ec.message();
  EXPECT_FALSE(second.hold);
  EXPECT_FALSE(tree.try_lock());
  EXPECT_FALSE(other.try_lock());
  first.hold.unlock();
  ASSERT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
  ASSERT_TRUE(tree.try_lock());
  GotReentrant behind = try_lock(other);
  EXPECT_FALSE(behind.ec) << behind.ec.message();
  EXPECT_FALSE(behind.hold);
  tree.unlock();
  EXPECT_FALSE(key_exists(tree.key()));
  EXPECT_FALSE(threads_touched());
}

TEST_F(AsioReentrantTest, AWaiterIsWokenByTheReleaseAnnouncement) {
  Client client(client_options(server()));
  ReentrantMutex holder(client, "async:woken", LockOptions().ttl(60s));
  ReentrantMutex waiter(client, "async:woken", LockOptions().ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  std::future<GotReentrant> waiting = start_lock(waiter);
  ASSERT_TRUE(eventually([&] { return subscribers(waiter.channel()) == 1; }));
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  holder.unlock();
  GotReentrant got = wait_for(std::move(waiting));  // long before the holder's 60 s lease
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(field(waiter, got.hold.id()), "1");
  got.hold.unlock();
  EXPECT_TRUE(eventually([&] { return !key_exists(waiter.key()); }));
}

// A hold given back by any means, on any thread, leaves no thread's count
// or owner id to settle: by another thread's unlock(), by async_release,
// and by the AsyncHold's destructor (which keeps the lock's state alive:
// the object going first changes nothing).
TEST_F(AsioReentrantTest, GivingBackAnAsyncHoldTouchesNoThreadsCounts) {
  Client client(client_options(server()));
  {
    ReentrantMutex tree(client, "async:counts", LockOptions().ttl(30s));
    GotReentrant got = try_lock(tree);
    ASSERT_TRUE(got.hold) << got.ec.message();
    std::thread([&] { got.hold.unlock(); }).join();
    ASSERT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
    got = try_lock(tree);
    ASSERT_TRUE(got.hold) << got.ec.message();
    EXPECT_EQ(release(got.hold).second, Release::released);
    got = try_lock(tree);
    ASSERT_TRUE(got.hold) << got.ec.message();
    got.hold = ReentrantHold();  // given back without waiting
    ASSERT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
    got = try_lock(tree);
    ASSERT_TRUE(got.hold) << got.ec.message();
  }  // the hold goes first, its release posted to its link
  EXPECT_TRUE(eventually([&] { return !key_exists("async:counts"); }));
  EXPECT_FALSE(threads_touched());
  // The thread's own holds still re-enter and give back as before.
  ReentrantMutex tree(client, "async:counts", LockOptions().ttl(30s));
  ASSERT_TRUE(tree.try_lock());
  ASSERT_TRUE(tree.try_lock());
  EXPECT_EQ(tree.hold_count(), 2u);
  tree.unlock();
  tree.unlock();
  EXPECT_FALSE(key_exists(tree.key()));
}

// Released within its minimum hold, the hash stays until it ends, and no
// thread's owner id is retired for it.
TEST_F(AsioReentrantTest, AReleaseWithinAMinimumHoldKeepsTheHash) {
  Client client(client_options(server()));
  ReentrantMutex cron(client, "async:cron", LockOptions().ttl(10s).min_hold(30s));
  GotReentrant got = try_lock(cron);
  ASSERT_TRUE(got.hold) << got.ec.message();
  const std::string owner = got.hold.id();
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::kept));
  EXPECT_EQ(field(cron, owner), "1");
  EXPECT_GT(pttl(cron), 20000);
  EXPECT_FALSE(threads_touched());
  EXPECT_FALSE(try_lock(cron).hold);  // kept: nobody, async or not, takes it meanwhile
  EXPECT_FALSE(cron.try_lock());
}

TEST_F(AsioReentrantTest, AFencedHoldHasTheFenceOfItsGrant) {
  Client client(client_options(server()));
  ReentrantMutex tree(client, "async:fenced", LockOptions().ttl(30s).fencing(true));
  GotReentrant first = try_lock(tree);
  ASSERT_TRUE(first.hold) << first.ec.message();
  const long long fence = first.hold.fence();
  EXPECT_GT(fence, 0);
  first.hold.unlock();
  ASSERT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
  GotReentrant second = try_lock(tree);
  ASSERT_TRUE(second.hold) << second.ec.message();
  EXPECT_GT(second.hold.fence(), fence);
}

// A key of another type, or a hash that never expires, is an error (no
// wait that never ends), and stays as it was.
TEST_F(AsioReentrantTest, AKeyThatIsNoLockIsAnErrorAndUntouched) {
  Client client(client_options(server()));
  server().command({"SET", "async:string", "data"});
  ReentrantMutex on_string(client, "async:string");
  GotReentrant got = try_lock(on_string);
  EXPECT_TRUE(got.ec);
  EXPECT_FALSE(got.hold);
  EXPECT_EQ(server().command({"GET", "async:string"}), "data");
  server().command({"HSET", "async:endless", "someone", "1"});
  ReentrantMutex on_endless(client, "async:endless");
  got = try_lock(on_endless);
  EXPECT_TRUE(got.ec);
  EXPECT_FALSE(got.hold);
  EXPECT_EQ(server().command({"HGET", "async:endless", "someone"}), "1");
  EXPECT_EQ(pttl(on_endless), -1);
}

// The thread that runs the context keeps its owner id and counts: an
// async hold taken and given back there, within a minimum hold too (whose
// blocking twin retires the thread's owner id), counts nothing for it.
TEST_F(AsioReentrantTest, TheRunningThreadsOwnerIdAndCountsAreUntouched) {
  Client client(client_options(server()));
  ReentrantMutex tree(client, "async:mine", LockOptions().ttl(30s).min_hold(30s));
  const std::string before = tree.owner_id();
  asio::io_context here;  // run by this thread
  ReentrantHold held;
  async_try_lock(tree,
                 asio::bind_executor(here, testing::Completion<std::error_code, ReentrantHold>(
                                               [&](std::error_code ec, ReentrantHold hold) {
                                                 EXPECT_FALSE(ec) << ec.message();
                                                 held = std::move(hold);
                                               })));
  here.run();
  ASSERT_TRUE(held);
  EXPECT_TRUE(detail::ThreadFieldHolds::none());
  EXPECT_EQ(tree.hold_count(), 0u);
  Release outcome = Release::lost;
  async_release(held, asio::bind_executor(here, testing::Completion<std::error_code, Release>(
                                                    [&](std::error_code ec, Release answer) {
                                                      EXPECT_FALSE(ec) << ec.message();
                                                      outcome = answer;
                                                    })));
  here.restart();
  here.run();
  EXPECT_EQ(outcome, Release::kept);
  EXPECT_TRUE(detail::ThreadFieldHolds::none());
  EXPECT_EQ(tree.owner_id(), before);
  EXPECT_FALSE(threads_touched());
}

// The Watchdog renews an async owner's field, and finds it gone: the hold
// is then lost, and its release says so without touching the name.
TEST_F(AsioReentrantTest, AnAsyncHoldIsRenewedAndItsLossNoticed) {
  Client client(client_options(server()));
  ReentrantMutex tree(client, "async:renewed", LockOptions().ttl(600ms).auto_renew(true));
  GotReentrant got = try_lock(tree);
  ASSERT_TRUE(got.hold) << got.ec.message();
  long long last = pttl(tree);
  EXPECT_TRUE(eventually([&] {
    const long long now = pttl(tree);
    return now > std::exchange(last, now);
  }));
  EXPECT_TRUE(eventually([&] { return got.hold.validity() > 0ms; }));
  server().command({"DEL", tree.key()});
  EXPECT_TRUE(eventually([&] { return got.hold.lost(); }));
  EXPECT_EQ(release(got.hold).second, Release::lost);
  EXPECT_FALSE(key_exists(tree.key()));
}

// Through the fault proxy: an attempt whose answer does not come is
// undone, as a Mutex's is.
class AsioReentrantFaultTest : public testing::AsioFaultTest {};

TEST_F(AsioReentrantFaultTest, ACancelledAttemptIsUndoneBehindItself) {
  options_.command_timeout = 30s;  // the undo must not wait for the link to time out
  Client client(options_);
  ReentrantMutex tree(client, "async:cancelled", LockOptions().ttl(60s));
  asio::cancellation_signal cancel;
  std::future<GotReentrant> pending = try_unanswered(tree, cancel.slot());
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const GotReentrant tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  // Replies still held: the undo went out behind the attempt, and ran.
  EXPECT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
  EXPECT_FALSE(detail::GivenBackElsewhere::any());
}

TEST_F(AsioReentrantFaultTest, AConnectionResetUnderAnAttemptIsUndoneApart) {
  Client client(options_);
  ReentrantMutex tree(client, "async:reset", LockOptions().ttl(60s));
  std::future<GotReentrant> pending = try_unanswered(tree, {});
  proxy_->reset_all();
  proxy_->sync();
  proxy_->release(testing::FaultProxy::Direction::to_client);
  const GotReentrant tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, Errc::io_error) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  // Nothing written behind on a reset connection arrives: the connector
  // gave the hold back on a connection of its own (undo_on).
  EXPECT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
  EXPECT_FALSE(detail::GivenBackElsewhere::any());
}

// A server silent past the command timeout: an outage, and the attempt,
// applied, is undone behind itself as the link breaks.
TEST_F(AsioReentrantFaultTest, NoReplyWithinTheCommandTimeoutIsTimedOutAndUndone) {
  options_.command_timeout = 300ms;
  Client client(options_);
  ReentrantMutex tree(client, "async:silent", LockOptions().ttl(60s));
  const GotReentrant tried = wait_for(try_unanswered(tree, {}));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(tree.key()); }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
  GotReentrant again = try_lock(tree);
  ASSERT_FALSE(again.ec) << again.ec.message();  // on a new link
  EXPECT_TRUE(again.hold);
}

}  // namespace
}  // namespace distlock
