// Redis Cluster over TLS: ClusterOptions::from_uri with rediss://, and a
// real TLS-only cluster (support/redis_cluster.hpp with a RedisServerTls:
// port 0, tls-port, tls-cluster, tls-replication) whose certificates are
// made at test time. Every connection the client makes (the pools, the
// map reads, the notifiers, the Watchdog's) can only work over TLS there,
// so a lock that works is one that went over TLS end to end; the failover
// suites check that the lock contract holds across a killed master and a
// hand-over.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "support/cluster_suite.hpp"
#include "support/redis_server.hpp"
#include "support/test_certs.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RedisServer;
using testing::RedisServerTls;
using testing::TempPki;

TEST(ClusterTlsOptions, RedissUriTakesEverySeedAndTheTlsOptions) {
  const ClusterOptions options = ClusterOptions::from_uri(
      "rediss://:secret@h1:7000,h2:7001?ca_file=/etc/ca.pem&server_name=redis.internal"
      "&pool_size=3");
  EXPECT_TRUE(options.tls.enabled);
  EXPECT_EQ(options.seeds, (std::vector<std::string>{"h1:7000", "h2:7001"}));
  EXPECT_EQ(options.password, "secret");
  EXPECT_EQ(options.tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(options.tls.server_name, "redis.internal");
  EXPECT_EQ(options.pool_size, 3u);
  EXPECT_TRUE(ClusterOptions::from_uri("REDISS://h1").tls.enabled);
  EXPECT_FALSE(ClusterOptions::from_uri("redis://h1,h2").tls.enabled);
  // TLS options without TLS, and what is refused with or without it.
  EXPECT_THROW(ClusterOptions::from_uri("redis://h1,h2?ca_file=/ca.pem"), InvalidArgument);
  EXPECT_THROW(ClusterOptions::from_uri("rediss://h1,,h2"), InvalidArgument);
  EXPECT_THROW(ClusterOptions::from_uri("rediss://h1/2"), InvalidArgument);
  EXPECT_THROW(ClusterOptions::from_uri("redi://h1"), InvalidArgument);
}

// Where a Mutex named `name` (no prefix) announces its release.
std::string released_channel(const std::string& name) {
  return detail::companion_key(name, "released");
}

// A TLS-only cluster of `masters` masters with `replicas` replicas each,
// its certificates made for the suite; clients trust the suite's CA.
template <std::size_t Replicas>
class TlsClusterSuite : public testing::ClusterSuite {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    pki_ = new TempPki;
    TlsOptions client;
    client.enabled = true;
    client.ca_file = (*pki_)->ca.file();
    start(Replicas, 3,
          RedisServerTls{(*pki_)->server.cert, (*pki_)->server.key, (*pki_)->ca.file()}, client);
  }
  static void TearDownTestSuite() {
    ClusterSuite::TearDownTestSuite();
    delete pki_;
    pki_ = nullptr;
  }

  /// Total calls of `command` ("cluster|slots") at the masters.
  long long calls_at_masters(const std::string& command) {
    long long sum = 0;
    for (std::size_t master = 0; master < cluster().masters(); ++master) {
      sum += calls_at(master, command);
    }
    return sum;
  }

  inline static TempPki* pki_ = nullptr;
};

// ---------------------------------------------------------------------------
// Locks over a TLS cluster.

class ClusterTls : public TlsClusterSuite<0> {};

TEST_F(ClusterTls, TheMapComesFromClusterShardsAtTheTlsPorts) {
  // A TLS-only node lists "tls-port" and no "port" in CLUSTER SHARDS: read
  // at the wrong field, the reply serves no slot and is checked with
  // CLUSTER SLOTS at every map read.
  const long long shards = calls_at_masters("cluster|shards");
  const long long slots = calls_at_masters("cluster|slots");
  ClusterClient fresh{options()};
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    EXPECT_EQ(fresh.node_of(detail::key_slot(name_on(master, "shards"))),
              cluster().seed_list()[master]);
  }
  EXPECT_GT(calls_at_masters("cluster|shards"), shards);
  EXPECT_EQ(calls_at_masters("cluster|slots"), slots);
}

TEST_F(ClusterTls, MutexOnEachMaster) {
  ClusterClient rival_client{options()};
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string name = name_on(master, "tls-mutex");
    Mutex lock(client(), name, LockOptions{}.ttl(10s));
    Mutex rival(rival_client, name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(lock.try_lock()) << name;
    EXPECT_EQ(at(master, {"GET", name}), lock.token());
    EXPECT_FALSE(rival.try_lock());
    EXPECT_TRUE(lock.extend(20s));
    EXPECT_GT(pttl_at(master, name), 19000);
    EXPECT_EQ(lock.release(), Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
    EXPECT_TRUE(rival.try_lock());
    rival.unlock();
  }
}

TEST_F(ClusterTls, WatchdogRenewsOverTlsOnEveryMaster) {
  RenewalCount count;
  ClusterClient counted(counting(count));
  std::vector<std::unique_ptr<Mutex>> locks;
  std::vector<std::string> names;
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    names.push_back(name_on(master, "tls-renewed"));
    locks.push_back(
        std::make_unique<Mutex>(counted, names.back(), LockOptions{}.ttl(30s).auto_renew(true)));
    ASSERT_TRUE(locks.back()->try_lock());
  }
  counted.watchdog().renew_all_now();
  for (std::size_t i = 0; i < locks.size(); ++i) {
    EXPECT_TRUE(eventually([&] { return count.of(names[i]) > 0; })) << names[i];
    EXPECT_FALSE(locks[i]->lost()) << names[i];
    EXPECT_EQ(locks[i]->release(), Release::released) << names[i];
  }
}

TEST_F(ClusterTls, WaiterIsWokenByTheShardedReleaseOverTls) {
  // The waiter's own pause is 20 s: only the release's announcement, on
  // its TLS subscription at the slot's owner, can bring it back in time.
  const std::string name = name_on(2, "tls-woken");
  Mutex holder(client(), name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  Mutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
  std::atomic<bool> got{false};
  Waiter<Mutex> waiter{lock, std::thread([&] {
                         got = lock.try_lock_for(10s);
                         if (got) lock.unlock();
                       })};
  ASSERT_TRUE(subscribed_at(2, released_channel(name)));
  const auto released = Clock::now();
  holder.unlock();
  waiter.thread.join();
  EXPECT_TRUE(got);
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(ClusterTls, AClientThatDoesNotTrustTheCaFailsNamingTheSeeds) {
  ClusterOptions untrusting = options();
  untrusting.tls.ca_file = (*pki_)->other_ca.file();
  ClusterClient cluster_client{untrusting};
  Mutex lock(cluster_client, "tls-untrusted");
  try {
    static_cast<void>(lock.try_lock());
    ADD_FAILURE() << "locked through a cluster whose CA is not trusted";
  } catch (const ConnectionError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find(cluster().seed_list()[0]), std::string::npos) << what;
    EXPECT_NE(what.find("certificate verify failed"), std::string::npos) << what;
  }
}

// ---------------------------------------------------------------------------
// Failover over TLS: the promoted replica got the lock's key over a TLS
// replication link, and every client reaches it over TLS.

class ClusterTlsFailover : public TlsClusterSuite<1> {};

TEST_F(ClusterTlsFailover, TheLockContractHoldsWhenItsMasterIsKilled) {
  const std::string name = name_on(0, "tls-killed");
  RenewalCount count;
  ClusterClient holder_client(counting(count));
  ClusterClient rival_client{options()};
  Mutex holder(holder_client, name, LockOptions{}.ttl(30s).auto_renew(true));
  Mutex rival(rival_client, name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  ASSERT_FALSE(rival.try_lock());
  cluster().wait_replicated(0);

  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  // The pools' connections to the dead master have sat idle as long as a
  // real failover would leave them (see ClusterFailover in
  // cluster_client_test.cpp); this waits for no event.
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(at(promoted, {"GET", name}), holder.token());
  // The rival finds the new owner within its deadline, and is refused
  // there: the key came over with the replica.
  Mutex probe(rival_client, name_on(promoted, "tls-probe"));
  ASSERT_TRUE(probe.try_lock_for(3s));
  probe.unlock();
  EXPECT_FALSE(rival.try_lock());
  // The holder's lease lives on at the new owner: extended there (the
  // call that meets the dead master has the map read again), and renewed.
  EXPECT_TRUE(holder.extend(40s));
  EXPECT_GT(pttl_at(promoted, name), 30000);
  const int renewed = count.of(name);
  holder_client.watchdog().renew_all_now();
  EXPECT_TRUE(eventually([&] { return count.of(name) > renewed; }));
  EXPECT_FALSE(holder.lost());

  // A waiter at the new owner is woken by the holder's release.
  Mutex waiting(rival_client, name, LockOptions{}.ttl(30s), FixedInterval(20s));
  std::atomic<bool> got{false};
  Waiter<Mutex> waiter{waiting, std::thread([&] {
                         got = waiting.try_lock_for(10s);
                         if (got) waiting.unlock();
                       })};
  ASSERT_TRUE(subscribed_at(promoted, released_channel(name)));
  const auto released = Clock::now();
  EXPECT_EQ(holder.release(), Release::released);
  waiter.thread.join();
  EXPECT_TRUE(got);
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(ClusterTlsFailover, ALeaseFollowsAHandOverOverTls) {
  const std::string name = name_on(1, "tls-handover");
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  Mutex rival(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  cluster().wait_replicated(1);
  const std::size_t promoted = cluster().fail_over(1, /*kill=*/false);
  // The old master answers MOVED, naming the new owner's TLS port.
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_GT(pttl_at(promoted, name), 10000);
  EXPECT_FALSE(rival.try_lock());
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(at(promoted, {"EXISTS", name}), "0");
  EXPECT_TRUE(rival.try_lock());
  rival.unlock();
}

}  // namespace
}  // namespace distlock
