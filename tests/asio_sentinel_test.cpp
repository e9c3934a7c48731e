// Tests for the async locks (distlock/asio.hpp) over a SentinelClient,
// against a real master, two replicas and three Sentinels: the link goes to
// the master the Sentinels name, an async waiter is woken by a release
// there, and after a failover the next async calls reach the new master
// while a hold taken before it is given back there.
#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "distlock/asio.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"
#include "distlock/sentinel_client.hpp"
#include "distlock/sentinel_options.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/sentinel_group.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::SentinelGroup;
using testing::Tried;

class AsioSentinelTest : public testing::AsioTest {
 protected:
  void SetUp() override {
    testing::AsioTest::SetUp();
    if (HasFatalFailure()) return;
    group_ = std::make_unique<SentinelGroup>();
  }
  void TearDown() override {
    stop_running();
    group_.reset();
    testing::AsioTest::TearDown();
  }

  SentinelGroup& group() { return *group_; }
  SentinelOptions options() {
    SentinelOptions options(SentinelGroup::master_name, group().sentinel_addresses());
    options.connect_timeout = 500ms;
    options.command_timeout = 1000ms;
    return options;
  }
  std::string on_master(const std::string& key) {
    return group().master().command({"EXISTS", key});
  }

  std::unique_ptr<SentinelGroup> group_;
};

TEST_F(AsioSentinelTest, AsyncLocksRunOnTheMasterTheSentinelsName) {
  SentinelClient sentinel(options());
  Mutex job(sentinel, "job");
  Tried got = try_lock(job);
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(on_master("job"), "1");
  Mutex other(sentinel, "job");
  EXPECT_FALSE(other.try_lock());
  EXPECT_EQ(release(got.hold).second, Release::released);
  EXPECT_EQ(on_master("job"), "0");

  // A waiter parked on the link is woken by a release at the master.
  ASSERT_TRUE(other.try_lock());
  std::future<Tried> waiting = start_lock(job);
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  other.unlock();
  Tried woken = wait_for(std::move(waiting));
  ASSERT_TRUE(woken.hold) << woken.ec.message();
  EXPECT_EQ(release(woken.hold).second, Release::released);

  // The counting primitives too.
  Semaphore permits(sentinel, "permits", 1);
  auto permit = wait_for(
      start<AsyncPermit>([&](auto token) { async_try_acquire(permits, std::move(token)); }));
  ASSERT_TRUE(permit.hold) << permit.ec.message();
  EXPECT_EQ(release(permit.hold).second, Release::released);
}

// After a failover the old master is a replica (or gone): the link made to
// it is let go, the next attempt goes to the master the Sentinels name
// now, and a hold taken before the failover (its key on both replicas) is
// given back there.
TEST_F(AsioSentinelTest, AfterAFailoverTheNextCallsReachTheNewMaster) {
  SentinelClient sentinel(options());
  Mutex job(sentinel, "job");
  Tried first = try_lock(job);  // the link is made to the first master
  ASSERT_TRUE(first.hold) << first.ec.message();
  EXPECT_EQ(release(first.hold).second, Release::released);
  Mutex held(sentinel, "held", LockOptions{}.ttl(60s));
  Tried kept = try_lock(held);
  ASSERT_TRUE(kept.hold) << kept.ec.message();
  // On both replicas: whichever is promoted has it.
  ASSERT_EQ(group().master().command({"WAIT", "2", "1000"}), "2");

  const std::string old_master = sentinel.master_address();
  group().failover();
  ASSERT_TRUE(eventually([&] { return sentinel.switches() >= 1; })) << "no switch seen";
  ASSERT_NE(sentinel.master_address(), old_master);

  // A step that meets the old master's closed connection may fail; the
  // next is made to the new master.
  Tried again;
  for (int i = 0; i < 3 && !again.hold; ++i) again = try_lock(job);
  ASSERT_TRUE(again.hold) << again.ec.message();
  EXPECT_EQ(on_master("job"), "1");
  EXPECT_EQ(release(again.hold).second, Release::released);
  EXPECT_EQ(on_master("job"), "0");
  EXPECT_EQ(release(kept.hold).second, Release::released);
  EXPECT_EQ(on_master("held"), "0");
}

// A waiter parked on the link while the master moves (subscribed again at
// the new one by the notifier, as a blocking waiter is) is woken by the
// holder's release there, and its attempt goes to the new master.
TEST_F(AsioSentinelTest, AnAsyncWaiterIsWokenByAReleaseOnTheNewMaster) {
  SentinelClient holder_side(options());
  SentinelClient waiter_side(options());
  // Both replicas have the grant, whichever is promoted.
  Mutex holder(holder_side, "job", LockOptions{}.ttl(60s).replicas(2, 1000ms));
  ASSERT_TRUE(holder.try_lock());
  Mutex lock(waiter_side, "job", LockOptions{}.ttl(5s));
  std::future<Tried> waiting = start_lock(lock);
  ASSERT_TRUE(eventually(
      [&] { return detail::NotifierProbe::channel_count(waiter_side.notifier()) == 1; }));
  group().failover();
  ASSERT_TRUE(eventually([&] { return waiter_side.switches() >= 1; }));
  ASSERT_TRUE(eventually([&] {
    return group().master().command({"PUBSUB", "NUMSUB", "{job}:released"}) == "{job}:released\n1";
  })) << "the waiter is not subscribed at the new master";
  ASSERT_TRUE(eventually([&] { return !holder.lost() && holder_side.switches() >= 1; }));
  EXPECT_EQ(waiting.wait_for(0s), std::future_status::timeout);  // the lock is still held
  holder.unlock();
  Tried woken = wait_for(std::move(waiting));
  ASSERT_TRUE(woken.hold) << woken.ec.message();
  EXPECT_EQ(on_master("job"), "1");
  EXPECT_EQ(release(woken.hold).second, Release::released);
}

}  // namespace
}  // namespace distlock
