// Tests for a Redlock whose masters are ClusterClients (redlock.hpp over
// cluster_client.hpp): three separate clusters, each one master of the
// Redlock. The first has two masters, so that the lock's slot can move
// inside it; the others one each. The clusters are shared by the suite.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/events.hpp"
#include "distlock/redlock.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RedisCluster;
using testing::RedisServer;

class ClusterRedlockTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    try {
      for (const std::size_t masters : {std::size_t{2}, std::size_t{1}, std::size_t{1}}) {
        clusters_.push_back(new RedisCluster(masters));
      }
    } catch (const std::exception& error) {
      start_error_ = new std::string(error.what());
    }
  }
  static void TearDownTestSuite() {
    for (RedisCluster* cluster : clusters_) delete cluster;
    clusters_.clear();
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    ASSERT_EQ(clusters_.size(), 3u)
        << "the clusters did not start: " << (start_error_ != nullptr ? *start_error_ : "?");
    for (RedisCluster* cluster : clusters_) {
      clients_.push_back(std::make_unique<ClusterClient>(options(*cluster)));
    }
  }

  static ClusterOptions options(RedisCluster& cluster) {
    ClusterOptions options(cluster.seed_list());
    options.connect_timeout = 1s;
    options.command_timeout = 1s;
    return options;
  }

  std::vector<ClusterClient*> masters() {
    std::vector<ClusterClient*> out;
    for (const auto& client : clients_) out.push_back(client.get());
    return out;
  }

  /// `command` at the node of cluster `c` that owns `key` (as the harness
  /// moved it).
  std::string at(std::size_t c, const std::string& key, std::vector<std::string> command) {
    RedisCluster& cluster = *clusters_[c];
    return cluster.node(cluster.owner_of(detail::key_slot(key))).command(command);
  }

  /// Polls `done` until it holds or 10 s pass (a bound, not a timing).
  template <class Done>
  static bool eventually(Done done) {
    const auto until = Clock::now() + 10s;
    while (!done() && Clock::now() < until) std::this_thread::sleep_for(5ms);
    return done();
  }

  static std::vector<RedisCluster*> clusters_;
  static std::string* start_error_;
  std::vector<std::unique_ptr<ClusterClient>> clients_;
};

std::vector<RedisCluster*> ClusterRedlockTest::clusters_;
std::string* ClusterRedlockTest::start_error_ = nullptr;

class ClusterRedlock : public ClusterRedlockTest {};

TEST_F(ClusterRedlock, LocksAndUnlocksOnEveryCluster) {
  // A name on the first cluster's second master: routed, not just sent to a seed.
  std::string name;
  for (int i = 0; name.empty(); ++i) {
    const std::string candidate = "redlock-cluster-" + std::to_string(i);
    if (clusters_[0]->owner_of(detail::key_slot(candidate)) == 1) name = candidate;
  }
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  for (std::size_t c = 0; c < clusters_.size(); ++c) {
    EXPECT_EQ(at(c, name, {"GET", name}), lock.token()) << "cluster " << c;
  }
  lock.unlock();
  for (std::size_t c = 0; c < clusters_.size(); ++c) {
    EXPECT_EQ(at(c, name, {"EXISTS", name}), "0") << "cluster " << c;
  }
}

TEST_F(ClusterRedlock, TwoRedlocksExcludeEachOther) {
  const std::string name = "redlock-cluster-contended";
  // The second holder has clients of its own, as another process would.
  std::vector<std::unique_ptr<ClusterClient>> others;
  std::vector<ClusterClient*> other_masters;
  for (RedisCluster* cluster : clusters_) {
    others.push_back(std::make_unique<ClusterClient>(options(*cluster)));
    other_masters.push_back(others.back().get());
  }
  Redlock first(masters(), name, RedlockOptions{}.ttl(10s));
  Redlock second(other_masters, name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(first.try_lock());
  EXPECT_FALSE(second.try_lock());
  EXPECT_EQ(second.last_attempt().count(NodeStatus::other_owner), 3u);
  first.unlock();
  EXPECT_TRUE(second.try_lock_for(5s));
  EXPECT_FALSE(first.try_lock());
  second.unlock();
}

TEST_F(ClusterRedlock, WatchdogRenewsOnEveryCluster) {
  // Renewal events go to the first master's hook. A lease long enough that
  // no slow machine sees it run out; a round is asked for.
  std::mutex mutex;
  int renewed = 0;
  ClusterOptions hooked = options(*clusters_[0]);
  hooked.on_event = [&](const LockEvent& event) {
    if (event.type != LockEventType::renewed) return;
    const std::lock_guard<std::mutex> guard(mutex);
    ++renewed;
  };
  ClusterClient first(hooked);
  std::vector<ClusterClient*> with_hook = masters();
  with_hook[0] = &first;
  const std::string name = "redlock-cluster-renewed";
  Redlock lock(with_hook, name, RedlockOptions{}.ttl(30s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  first.watchdog().renew_all_now();
  EXPECT_TRUE(eventually([&] {
    const std::lock_guard<std::mutex> guard(mutex);
    return renewed > 0;
  }));
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  for (std::size_t c = 0; c < clusters_.size(); ++c) {
    EXPECT_GT(std::stoll(at(c, name, {"PTTL", name})), 20000) << "cluster " << c;
  }
  lock.unlock();
}

// Masters of any backend, mixed: two clusters and one lone server's Client,
// each a vote, renewed together by one Watchdog round.
TEST_F(ClusterRedlock, MastersOfDifferentBackendsShareOneLock) {
  RedisServer lone;
  ClientOptions lone_options = testing::client_options(lone);
  std::mutex mutex;
  int renewed = 0;
  lone_options.on_event = [&](const LockEvent& event) {
    if (event.type != LockEventType::renewed) return;
    const std::lock_guard<std::mutex> guard(mutex);
    ++renewed;
  };
  Client plain(lone_options);
  const std::string name = "redlock-mixed";
  Redlock lock({plain, *clients_[0], *clients_[1]}, name,
               RedlockOptions{}.ttl(30s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  EXPECT_EQ(lone.command({"GET", name}), lock.token());
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(at(c, name, {"GET", name}), lock.token()) << "cluster " << c;
  }
  plain.watchdog().renew_all_now();
  EXPECT_TRUE(eventually([&] {
    const std::lock_guard<std::mutex> guard(mutex);
    return renewed > 0;
  }));
  EXPECT_FALSE(lock.lost());

  // Another process's Redlock on the same three is kept out.
  Client other_plain(testing::client_options(lone));
  Redlock rival({*clients_[1], other_plain, *clients_[0]}, name, RedlockOptions{}.ttl(10s));
  EXPECT_FALSE(rival.try_lock());
  lock.unlock();
  EXPECT_EQ(lone.command({"EXISTS", name}), "0");
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(at(c, name, {"EXISTS", name}), "0") << "cluster " << c;
  }
  EXPECT_TRUE(rival.try_lock_for(5s));
  rival.unlock();
}

// The masters' connections announce releases with SPUBLISH (the script
// variant a cluster runs): a release that meets NOSCRIPT must load that same
// variant by its EVAL, or every later release meets NOSCRIPT again and
// costs two round trips.
TEST_F(ClusterRedlock, AReleaseAfterAScriptFlushLoadsTheScriptItRunsNext) {
  const std::string name = "redlock-cluster-noscript";
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  for (std::size_t c = 0; c < clusters_.size(); ++c) at(c, name, {"SCRIPT", "FLUSH"});
  auto noscripts = [&](std::size_t c) {
    const std::string stats = at(c, name, {"INFO", "errorstats"});
    const std::string field = "errorstat_NOSCRIPT:count=";
    const auto at_count = stats.find(field);
    return at_count == std::string::npos ? 0LL : std::stoll(stats.substr(at_count + field.size()));
  };
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();  // NOSCRIPT once on each master: EVAL loads the script
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  std::vector<long long> before;
  for (std::size_t c = 0; c < clusters_.size(); ++c) before.push_back(noscripts(c));
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  for (std::size_t c = 0; c < clusters_.size(); ++c) {
    EXPECT_EQ(noscripts(c), before[c]) << "cluster " << c << ": NOSCRIPT again";
  }
}

/// A name owned by master `master` of the first cluster, not yet used.
std::string name_on(RedisCluster& cluster, const std::string& prefix, std::size_t master) {
  for (int i = 0;; ++i) {
    const std::string candidate = prefix + std::to_string(i);
    if (cluster.owner_of(detail::key_slot(candidate)) == master) return candidate;
  }
}

TEST_F(ClusterRedlock, AMasterWhoseSlotMovedFollowsItWithinTheStep) {
  const std::string name = name_on(*clusters_[0], "redlock-moved-", 0);
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  clusters_[0]->move_slot(detail::key_slot(name), 1);
  // The first cluster's map still names master 0, which answers MOVED: the
  // step follows it to the new owner, and keeps that cluster's vote.
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  EXPECT_GT(std::stoll(clusters_[0]->node(1).command({"PTTL", name})), 10000);
  lock.unlock();
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  EXPECT_EQ(clusters_[0]->node(1).command({"EXISTS", name}), "0");
}

TEST_F(ClusterRedlock, AnAcquireAfterASlotMoveKeepsThatClustersVote) {
  const std::string name = name_on(*clusters_[0], "redlock-moved-acquire-", 1);
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  clusters_[0]->move_slot(detail::key_slot(name), 0);
  // SET NX goes to master 1 first (the map this client read), which
  // answers MOVED; the step follows it once.
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.last_attempt().ok(), 3u);
  EXPECT_EQ(clusters_[0]->node(0).command({"GET", name}), lock.token());
  lock.unlock();
  EXPECT_EQ(clusters_[0]->node(0).command({"EXISTS", name}), "0");
}

TEST_F(ClusterRedlock, AStepDuringASlotMigrationFollowsAskWithinTheStep) {
  const std::string name = name_on(*clusters_[0], "redlock-asked-", 0);
  const int slot = detail::key_slot(name);
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());  // the first cluster's map names master 0
  lock.unlock();
  RedisCluster& first = *clusters_[0];
  const std::string slot_text = std::to_string(slot);
  first.begin_migration(slot, 0, 1);
  // Master 0 still owns the slot but has no key of it: it answers ASK, and
  // only ASKING on the same connection lets master 1 take the key.
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.last_attempt().ok(), 3u) << lock.last_attempt().nodes.at(0).message;
  EXPECT_EQ(first.node(1).command({"CLUSTER", "COUNTKEYSINSLOT", slot_text}), "1");
  EXPECT_EQ(first.node(0).command({"CLUSTER", "COUNTKEYSINSLOT", slot_text}), "0");
  // An extend (a script) is asked on too, and NOSCRIPT there is met by EVAL.
  first.node(1).command({"SCRIPT", "FLUSH"});
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_EQ(lock.last_attempt().ok(), 3u) << lock.last_attempt().nodes.at(0).message;
  first.finish_migration(slot, 1);
  EXPECT_EQ(first.node(1).command({"GET", name}), lock.token());
  EXPECT_GT(std::stoll(first.node(1).command({"PTTL", name})), 10000);
  lock.unlock();
  EXPECT_EQ(lock.last_attempt().ok(), 3u) << lock.last_attempt().nodes.at(0).message;
  EXPECT_EQ(first.node(1).command({"EXISTS", name}), "0");
}

TEST_F(ClusterRedlock, AClusterMastersErrorNamesTheClusterAndTheNode) {
  const std::string name = name_on(*clusters_[0], "redlock-error-", 1);
  Redlock lock(masters(), name, RedlockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  // The key turns into a hash on the first cluster: its extend fails there
  // with WRONGTYPE, the others carry the quorum.
  RedisServer& owner = clusters_[0]->node(1);
  owner.command({"DEL", name});
  owner.command({"HSET", name, "f", "v"});
  EXPECT_TRUE(lock.extend(20s));
  const RedlockAttempt extended = lock.last_attempt();
  const NodeOutcome& failed = extended.nodes.at(0);
  EXPECT_EQ(failed.error, Errc::server_error);
  EXPECT_NE(failed.message.find("cluster " + clusters_[0]->seed_list().front()), std::string::npos)
      << failed.message;
  const std::string node = owner.host() + ":" + std::to_string(owner.port());
  EXPECT_NE(failed.message.find("node " + node), std::string::npos) << failed.message;
  EXPECT_EQ(failed.message.find(clients_[0]->options().endpoint()), std::string::npos)
      << failed.message;
  owner.command({"DEL", name});
  lock.unlock();
}

TEST_F(ClusterRedlock, NamesAndMastersAreChecked) {
  // Keys of two slots: the release script could not run on a cluster.
  EXPECT_THROW(Redlock(masters(), "a}b"), InvalidArgument);
  // One cluster twice is one master, not two.
  std::vector<ClusterClient*> twice = masters();
  ClusterClient again(options(*clusters_[1]));
  twice[2] = &again;
  EXPECT_THROW(Redlock(twice, "k"), InvalidArgument);
}

}  // namespace
}  // namespace distlock
