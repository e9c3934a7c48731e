// Tests for the async locks (distlock/asio.hpp) over a ClusterClient,
// against a real 3-master Redis Cluster: each key's steps go to the link
// of the node that owns its slot, async and blocking holders exclude each
// other there, a waiter is woken by a release published at that node, and
// a slot that moves (MOVED) or is being migrated (ASK) is followed, the
// step sent again where the cluster says, and so is a failover.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "distlock/cluster_client.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/asio_fixture.hpp"
#include "support/cluster_suite.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::Tried;

using AsioClusterTest = testing::AsioOn<testing::ClusterSuite>;

TEST_F(AsioClusterTest, EachKeyIsLockedAtTheNodeThatOwnsItsSlot) {
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string name = name_on(master, "async-owned");
    Mutex lock(client(), name);
    Tried got = try_lock(lock);
    ASSERT_TRUE(got.hold) << got.ec.message();
    EXPECT_EQ(at(master, {"GET", name}), got.hold.id()) << "master " << master;
    Mutex blocking(client(), name);
    EXPECT_FALSE(blocking.try_lock());
    EXPECT_EQ(release(got.hold).second, Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
    ASSERT_TRUE(blocking.try_lock());

    // A waiter is woken by the release published (SPUBLISH) at that node.
    std::future<Tried> waiting = start_lock(lock);
    EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
    blocking.unlock();
    Tried woken = wait_for(std::move(waiting));
    ASSERT_TRUE(woken.hold) << woken.ec.message();

    // And by an async release, published there too (its lease, 30 s, would
    // end the wait much later).
    Mutex next(client(), name);
    std::future<Tried> behind = start_lock(next);
    EXPECT_EQ(behind.wait_for(100ms), std::future_status::timeout);
    EXPECT_EQ(release(woken.hold).second, Release::released);
    Tried taken = wait_for(std::move(behind));
    ASSERT_TRUE(taken.hold) << taken.ec.message();
    EXPECT_EQ(release(taken.hold).second, Release::released);
  }
}

TEST_F(AsioClusterTest, TheCountingPrimitivesAndStripesRunOnEveryNode) {
  Semaphore permits(client(), name_on(1, "async-permits"), 1);
  auto permit = wait_for(
      start<AsyncHold<PermitLock>>([&](auto token) { async_try_lock(permits, std::move(token)); }));
  ASSERT_TRUE(permit.hold) << permit.ec.message();
  EXPECT_FALSE(permits.try_acquire());
  EXPECT_EQ(release(permit.hold).second, Release::released);

  RateLimiter limiter(client(), name_on(2, "async-rate"), RateOptions{}.fixed_window(2, 10s));
  for (const bool allowed : {true, true, false}) {
    std::promise<std::pair<std::error_code, RateDecision>> decided;
    async_try_acquire(limiter, 1,
                      asio::bind_executor(io_, testing::Completion<std::error_code, RateDecision>(
                                                   [&](std::error_code ec, RateDecision decision) {
                                                     decided.set_value({ec, decision});
                                                   })));
    const auto [ec, decision] = wait_for(decided.get_future());
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(decision.allowed, allowed);
  }

  // Sixteen stripes spread over the three masters: every one is taken.
  StripedMutex stripes(client(), "async-stripes", 16);
  std::vector<AsyncStripe> taken;
  for (int i = 0; i < 16; ++i) {
    auto got = wait_for(
        start<AsyncStripe>([&](auto token) { async_try_lock_any(stripes, std::move(token)); }));
    ASSERT_TRUE(got.hold) << got.ec.message();
    taken.push_back(std::move(got.hold));
  }
  auto none = wait_for(
      start<AsyncStripe>([&](auto token) { async_try_lock_any(stripes, std::move(token)); }));
  EXPECT_FALSE(none.ec) << none.ec.message();
  EXPECT_FALSE(none.hold);
}

// The slot moves to another master with the hold in it: the next steps,
// sent on the old owner's link, are answered MOVED and sent again to the
// new owner, where the hold is.
TEST_F(AsioClusterTest, ASlotThatMovedIsFollowedToItsNewOwner) {
  const std::string name = name_on(1, "async-moved");
  const int slot = detail::key_slot(name);
  Mutex lock(client(), name);
  Tried got = try_lock(lock);
  ASSERT_TRUE(got.hold) << got.ec.message();
  cluster().move_slot(slot, 2);
  const long long moved = errors_at(1, "MOVED");

  Mutex other(client(), name);
  Tried refused = try_lock(other);
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.hold);  // held, at node 2
  EXPECT_GT(errors_at(1, "MOVED"), moved) << "the attempt never went to the old owner";
  EXPECT_EQ(release(got.hold).second, Release::released);
  EXPECT_EQ(at(2, {"EXISTS", name}), "0");
  Tried taken = try_lock(other);
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  EXPECT_EQ(at(2, {"GET", name}), taken.hold.id());
  EXPECT_EQ(release(taken.hold).second, Release::released);
}

// Mid-migration the old owner answers ASK for a key it no longer has: the
// attempt goes once to the importing node, behind ASKING, and is granted
// there; a blocking client, following the same ASK, finds it held.
TEST_F(AsioClusterTest, AKeyOfASlotBeingMigratedIsTakenAtTheImportingNode) {
  const std::string name = name_on(2, "async-asked");
  const int slot = detail::key_slot(name);
  Mutex lock(client(), name);
  Tried warm = try_lock(lock);  // the link to node 2 is made, and used
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  cluster().begin_migration(slot, 2, 0);
  cluster().migrate_keys(slot, 2, 0);
  const long long asked = errors_at(2, "ASK");

  Tried got = try_lock(lock);
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_GT(errors_at(2, "ASK"), asked);
  Mutex blocking(client(), name);
  EXPECT_FALSE(blocking.try_lock());
  cluster().finish_migration(slot, 0);
  EXPECT_EQ(at(0, {"GET", name}), got.hold.id());
  EXPECT_EQ(release(got.hold).second, Release::released);
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");
}

// A SimpleMutex's refused attempt looks at the holder's key (PTTL, then
// TYPE, in one write). Mid-migration, at the importing node the ASK sent
// it to, each of the two needs an ASKING of its own: without, TYPE was
// answered MOVED, sent back to the source, ASKed again, until the
// redirects ran out and the try failed with an error.
TEST_F(AsioClusterTest, ARefusedTryLooksAtTheHolderAtTheImportingNode) {
  const std::string name = name_on(2, "async-asked-holder");
  const int slot = detail::key_slot(name);
  SimpleMutex held(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(held.try_lock());
  cluster().begin_migration(slot, 2, 0);
  cluster().migrate_keys(slot, 2, 0);
  const long long asked = errors_at(2, "ASK");

  SimpleMutex other(client(), name, LockOptions{}.ttl(10s));
  testing::Got<AsyncHold<SimpleMutex>> refused = try_lock(other);
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  EXPECT_GT(errors_at(2, "ASK"), asked);
  cluster().finish_migration(slot, 0);
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");
}

// While a slot has no owner every node answers CLUSTERDOWN (the cluster
// requires full coverage): an async release and an async attempt are
// refused for now, and sent again after a pause, doubling from
// retry_pause, until the cluster serves them again, as the blocking path
// sends its steps.
TEST_F(AsioClusterTest, StepsRefusedWhileTheClusterIsDownGoAgainOnceItIsUp) {
  ClusterOptions patient = options();
  patient.retry_pause = 200ms;  // max_redirects (5) pauses: about 6 s
  ClusterClient patient_client(patient);
  const std::string name = name_on(0, "async-down");
  Mutex lock(patient_client, name);
  Tried held = try_lock(lock);  // the link to node 0 made
  ASSERT_TRUE(held.hold) << held.ec.message();
  const int unserved = detail::key_slot(name_on(1, "async-down-elsewhere"));
  struct Restore {
    testing::RedisCluster& cluster;
    int slot;
    ~Restore() { cluster.restore_slot(slot); }
  } restore{cluster(), unserved};
  const auto refused_after = [&](long long before) {
    return eventually([&] { return errors_at(0, "CLUSTERDOWN") > before; });
  };

  long long before = errors_at(0, "CLUSTERDOWN");
  cluster().unassign_slot(unserved);
  std::future<std::pair<std::error_code, Release>> releasing =
      std::async(std::launch::async, [&] { return release(held.hold); });
  EXPECT_TRUE(refused_after(before));
  cluster().restore_slot(unserved);
  const std::pair<std::error_code, Release> released = releasing.get();
  EXPECT_FALSE(released.first) << released.first.message();
  EXPECT_EQ(released.second, Release::released);
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");

  before = errors_at(0, "CLUSTERDOWN");
  cluster().unassign_slot(unserved);
  std::future<Tried> taking =
      start<testing::Hold>([&](auto token) { async_try_lock_for(lock, 30s, std::move(token)); });
  EXPECT_TRUE(refused_after(before));
  cluster().restore_slot(unserved);
  Tried taken = wait_for(std::move(taking));
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  EXPECT_EQ(at(0, {"GET", name}), taken.hold.id());
  EXPECT_EQ(release(taken.hold).second, Release::released);
}

// Each master with a replica: a master to kill.
class AsioClusterFailover : public testing::AsioOn<testing::ClusterSuite> {
 protected:
  static void SetUpTestSuite() { testing::ClusterSuite::start(1); }
};

// The master of the key dies and its replica takes over. The link to it,
// idle longer than its 10 ms check (a real failover takes seconds), is
// found closed and made again; that connect fails, the map is read again,
// and the attempt goes to the promoted replica.
TEST_F(AsioClusterFailover, TheNextCallAfterItsMasterIsKilledGoesToThePromotedReplica) {
  const std::string name = name_on(0, "async-killed");
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  Tried warm = try_lock(lock);
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);

  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  std::this_thread::sleep_for(20ms);  // lets the link sit idle that long; waits for no event
  Tried got = try_lock(lock);
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(at(promoted, {"GET", name}), got.hold.id());
  EXPECT_EQ(release(got.hold).second, Release::released);
}

}  // namespace
}  // namespace distlock
