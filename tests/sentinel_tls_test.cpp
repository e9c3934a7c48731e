// SentinelClient over TLS (sentinel_options.hpp: `tls` for the data nodes,
// `sentinel_tls` for the Sentinels), against real groups whose
// certificates are made at test time (support/sentinel_group.hpp with a
// SentinelGroupTls): TLS everywhere, across a kill -9 of the master; TLS
// to the data nodes only, across SENTINEL FAILOVER; plain text to
// TLS-only Sentinels refused by them. Each test starts its own group.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "distlock/sentinel_client.hpp"
#include "distlock/sentinel_options.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_group.hpp"
#include "support/test_certs.hpp"

namespace distlock::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

TEST(SentinelTlsOptions, SentinelsHaveTheirOwnTlsAndNoneUnlessAsked) {
  SentinelOptions options("master", {"s1:26379"});
  options.tls.enabled = true;
  options.tls.ca_file = "/data-ca.pem";
  EXPECT_FALSE(options.sentinel_connection("s1:26379").tls.enabled);
  options.sentinel_tls.enabled = true;
  options.sentinel_tls.ca_file = "/sentinel-ca.pem";
  options.sentinel_tls.server_name = "sentinel.internal";
  EXPECT_EQ(options.sentinel_connection("s1:26379").tls, options.sentinel_tls);
  EXPECT_EQ(options.tls.ca_file, "/data-ca.pem");
  EXPECT_TRUE(options.tls.server_name.empty());
}

class SentinelTls : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    group_ = std::make_unique<SentinelGroup>("", "", tls(sentinels_tls_only()));
  }
  void TearDown() override { group_.reset(); }

  virtual bool sentinels_tls_only() const { return true; }

  SentinelGroupTls tls(bool sentinels_tls_only) const {
    return {RedisServerTls{pki_->server.cert, pki_->server.key, pki_->ca.file()},
            sentinels_tls_only};
  }

  /// TLS to the data nodes, trusting the test CA; none to the Sentinels.
  SentinelOptions options() const {
    SentinelOptions options(SentinelGroup::master_name, group_->sentinel_addresses());
    options.connect_timeout = milliseconds(500);
    options.command_timeout = milliseconds(1000);
    options.tls.enabled = true;
    options.tls.ca_file = pki_->ca.file();
    return options;
  }
  /// TLS to the Sentinels too.
  SentinelOptions all_tls_options() const {
    SentinelOptions both = options();
    both.sentinel_tls = both.tls;
    return both;
  }

  SentinelGroup& group() { return *group_; }

  TempPki pki_;
  std::unique_ptr<SentinelGroup> group_;
};

TEST_F(SentinelTls, ALockKeepsItsContractAcrossAKilledMaster) {
  SentinelClient holder_side(all_tls_options());
  SentinelClient rival_side(all_tls_options());
  // Renewals are 20 s away: only the Sentinels' announcement, on the
  // watch's TLS subscription, tells of the switch.
  Mutex holder(holder_side, "job", LockOptions{}.ttl(seconds(60)).auto_renew(true));
  Mutex rival(rival_side, "job", LockOptions{}.ttl(seconds(5)));
  ASSERT_TRUE(holder.try_lock());
  // Both replicas have the grant (over the TLS replication links),
  // whichever is promoted.
  ASSERT_EQ(group().master().command({"WAIT", "2", "5000"}), "2");
  EXPECT_EQ(holder_side.master_address(), "127.0.0.1:" + std::to_string(group().master().port()));
  EXPECT_FALSE(rival.try_lock());

  const int old_port = group().master().port();
  group().kill_master();
  group().wait_for_switch(old_port);
  EXPECT_TRUE(eventually([&] { return holder_side.switches() >= 1; })) << "no switch seen";
  EXPECT_EQ(holder_side.master_address(), "127.0.0.1:" + std::to_string(group().master().port()));
  // The new master has the lease: the rival is refused there, the holder
  // keeps and extends it.
  EXPECT_EQ(group().master().command({"GET", "job"}), holder.token());
  EXPECT_FALSE(rival.try_lock_for(milliseconds(500)));
  EXPECT_FALSE(holder.lost());
  EXPECT_TRUE(holder.extend(seconds(90)));
  EXPECT_GT(std::stoll(group().master().command({"PTTL", "job"})), 60000);
  EXPECT_EQ(holder.release(), Release::released);
  EXPECT_TRUE(rival.try_lock_for(seconds(5)));
  rival.unlock();
}

TEST_F(SentinelTls, PlainTextToTlsOnlySentinelsFailsNamingThem) {
  SentinelClient plain_to_sentinels(options());
  Mutex lock(plain_to_sentinels, "job");
  try {
    static_cast<void>(lock.try_lock());
    ADD_FAILURE() << "locked through Sentinels it spoke plain text to";
  } catch (const ConnectionError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("sentinel " + group().sentinel_addresses()[0]), std::string::npos) << what;
  }
}

// The Sentinels take plain-text clients (and talk TLS to the data nodes
// and to each other): the default of SentinelOptions, TLS to the data
// nodes only.
class SentinelTlsDataOnly : public SentinelTls {
 protected:
  bool sentinels_tls_only() const override { return false; }
};

TEST_F(SentinelTlsDataOnly, ALockFollowsSentinelFailoverToTlsDataNodes) {
  SentinelClient sentinel(options());
  Mutex held(sentinel, "job", LockOptions{}.ttl(seconds(60)).auto_renew(true));
  ASSERT_TRUE(held.try_lock());
  ASSERT_EQ(group().master().command({"WAIT", "2", "5000"}), "2");
  const std::string old_master = sentinel.master_address();
  group().failover();
  EXPECT_TRUE(eventually([&] { return sentinel.switches() >= 1; })) << "no switch seen";
  EXPECT_NE(sentinel.master_address(), old_master);
  EXPECT_EQ(group().master().command({"GET", "job"}), held.token());
  EXPECT_FALSE(held.lost());
  EXPECT_TRUE(held.extend(seconds(90)));
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(group().master().command({"EXISTS", "job"}), "0");
}

}  // namespace
}  // namespace distlock::testing
