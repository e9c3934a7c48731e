// Least privilege behind Redis Sentinel: a fenced Mutex, woken by a
// release and renewed by the Watchdog, over a SentinelClient whose master
// user has exactly docs/connecting.md's Mutex rules with Sentinel's extras for the
// master (ROLE, INFO), and whose Sentinel user (sentinel_username) has
// exactly docs/connecting.md's rules for the Sentinels
// (support/acl_rules.hpp). The users are made with ACL SETUSER on every
// data node (a replica is the next master) and on every Sentinel. Nothing
// may be refused on the way (ACL LOG, on the data nodes and the
// Sentinels), also across a failover, and each extra dropped alone shows
// where it is needed. Each test starts its own group
// (support/sentinel_group.hpp), so there are three.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "distlock/mutex.hpp"
#include "distlock/sentinel_client.hpp"
#include "support/acl_rules.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/sentinel_group.hpp"

namespace distlock::testing {
namespace {

using namespace std::chrono_literals;
using acl::mutex_rules;
using acl::on_sentinel_master;
using acl::refusals;
using acl::Rules;
using acl::sentinel_rules;
using acl::set_user;
using acl::without;

class SentinelAcl : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    group_ = std::make_unique<SentinelGroup>();
    static_cast<void>(all_refusals());
  }

  // "app" with `master` on every data node and `sentinel` on every Sentinel.
  void set_users(const Rules& master, const Rules& sentinel) {
    for (std::size_t i = 0; i < 3; ++i) {
      set_user(group_->server(i), "app", master);
      set_user(group_->sentinel(i), "app", sentinel);
    }
  }

  // What any data node or Sentinel refused since the last look.
  std::string all_refusals() {
    std::string out;
    for (std::size_t i = 0; i < 3; ++i) {
      const std::string data = refusals(group_->server(i));
      if (!data.empty()) out += "server " + std::to_string(i) + ": " + data + "\n";
      const std::string sentinel = refusals(group_->sentinel(i));
      if (!sentinel.empty()) out += "sentinel " + std::to_string(i) + ": " + sentinel + "\n";
    }
    return out;
  }

  SentinelOptions as_app() const {
    SentinelOptions options(SentinelGroup::master_name, group_->sentinel_addresses());
    options.connect_timeout = 500ms;
    options.command_timeout = 1000ms;
    options.username = "app";
    options.password = "pw";
    options.sentinel_username = "app";
    options.sentinel_password = "pw";
    return options;
  }

  long long pttl(const std::string& key) {
    return std::stoll(group_->master().command({"PTTL", key}));
  }
  // Connections of "app" subscribed to a channel at a Sentinel (which has
  // no PUBSUB): the watch's, the only one that subscribes there.
  static int watches(const RedisServer& sentinel) {
    std::istringstream list(sentinel.command({"CLIENT", "LIST"}));
    int count = 0;
    for (std::string line; std::getline(list, line);) {
      const auto sub = line.find(" sub=");
      if (line.find(" user=app ") != std::string::npos && sub != std::string::npos &&
          std::stoi(line.substr(sub + 5)) > 0) {
        ++count;
      }
    }
    return count;
  }
  static long long subscribers(const RedisServer& server, const std::string& channel) {
    const std::string answer = server.command({"PUBSUB", "NUMSUB", channel});
    return std::stoll(answer.substr(answer.find('\n') + 1));
  }

  // As "app": try_lock, the fence, the +switch-master watch at the first
  // Sentinel, a second client's try_lock_for woken by the release, a
  // Watchdog renewal, extend, release.
  std::string mutex_paths() {
    const std::string name = "jobs:nightly";
    try {
      const LockOptions options = LockOptions{}.ttl(600ms).auto_renew(true).fencing(true);
      SentinelClient holder_client(as_app());
      SentinelClient waiter_client(as_app());
      Mutex holder(holder_client, name, options);
      Mutex waiter(waiter_client, name, options);
      DISTLOCK_STEP(holder.try_lock());
      const long long fence = holder.fence();
      DISTLOCK_STEP(fence > 0);
      DISTLOCK_STEP(eventually([&] { return watches(group_->sentinel(0)) > 0; }, 5s));
      auto waited = acl::wait_on(waiter, [&] {
        const bool taken = waiter.try_lock_for(5s);
        const long long next = taken ? waiter.fence() : 0;
        if (taken) waiter.unlock();
        return std::make_pair(taken, next);
      });
      const std::string channel = "{" + name + "}:released";
      DISTLOCK_STEP(eventually([&] { return subscribers(group_->master(), channel) > 0; }, 5s));
      long long last = pttl(name);
      DISTLOCK_STEP(eventually(
          [&] {
            const long long now = pttl(name);
            return now > std::exchange(last, now);
          },
          5s));
      DISTLOCK_STEP(holder.extend(5s));
      DISTLOCK_STEP(pttl(name) > 4000);
      DISTLOCK_STEP(holder.release() == Release::released);
      const auto [taken, next] = waited.get();
      DISTLOCK_STEP(taken);
      DISTLOCK_STEP(next > fence);
      return "";
    } catch (const std::exception& error) {
      return error.what();
    }
  }

  std::unique_ptr<SentinelGroup> group_;
};

TEST_F(SentinelAcl, Mutex) {
  set_users(on_sentinel_master(mutex_rules), sentinel_rules);
  EXPECT_EQ(mutex_paths(), "");
  EXPECT_EQ(all_refusals(), "");
}

// A failover as the same user: the switch learned from the Sentinels'
// announcement, the new master asked ROLE and INFO, the release notifier
// moved there and the lease revalidated on it; nothing refused on the way.
TEST_F(SentinelAcl, MutexAcrossAFailover) {
  set_users(on_sentinel_master(mutex_rules), sentinel_rules);
  SentinelClient client(as_app());
  Mutex held(client, "jobs:failover", LockOptions{}.ttl(60s).auto_renew(true).fencing(true));
  ASSERT_TRUE(held.try_lock());
  // Both replicas have the lease before the switch (replication is
  // asynchronous, and this test is not about losing it).
  ASSERT_EQ(group_->master().command({"WAIT", "2", "5000"}), "2");
  const std::string old_master = client.master_address();
  group_->failover();
  ASSERT_TRUE(eventually([&] { return client.switches() >= 1; })) << "no switch seen";
  EXPECT_NE(client.master_address(), old_master);
  EXPECT_TRUE(held.extend(60s));
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(group_->master().command({"GET", "jobs:failover"}), held.token());
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(all_refusals(), "");
}

// A master that refuses ROLE to the user is a permission problem, said at
// once as the server's NOPERM, not waited out like a failover until the
// deadline and then called an outage.
TEST_F(SentinelAcl, AMasterThatRefusesRoleIsANopermErrorAtOnce) {
  set_users(without(on_sentinel_master(mutex_rules), "+role"), sentinel_rules);
  SentinelClient client(as_app());
  Mutex mutex(client, "jobs:refused");
  const auto start = std::chrono::steady_clock::now();
  try {
    static_cast<void>(mutex.try_lock_for(10s));
    ADD_FAILURE() << "locked without ROLE";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::noperm) << error.what();
    EXPECT_NE(std::string(error.what()).find("ROLE at"), std::string::npos) << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not the server's refusal: " << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the 10 s deadline was waited out";
}

// Each of Sentinel's own rules dropped alone: on the master ROLE (no server
// is taken for the master without it) and INFO (refused, the master is
// still found, but a restarted one at the same address is not told apart);
// on the Sentinels the question where the master is, and the watch.
TEST_F(SentinelAcl, EachExtraIsNeeded) {
  const Rules master = on_sentinel_master(mutex_rules);
  const auto needs = [&](const Rules& master_rules, const Rules& sentinel, const char* dropped,
                         bool fails) {
    // The last run's watch has left the first Sentinel (its subscriber
    // there would pass the watch's step).
    EXPECT_TRUE(eventually([&] { return watches(group_->sentinel(0)) == 0; }));
    set_users(master_rules, sentinel);
    const std::string failed = mutex_paths();
    if (fails) {
      EXPECT_NE(failed, "") << "passed without " << dropped;
    }
    // The refusal of what the rule allowed ("role", "+switch-master").
    const std::string refused = all_refusals();
    EXPECT_NE(refused.find(std::string(dropped).substr(1)), std::string::npos)
        << "not refused without " << dropped << ":\n"
        << refused;
  };
  needs(without(master, "+role"), sentinel_rules, "+role", true);
  needs(without(master, "+info"), sentinel_rules, "+info", false);
  for (const std::string& rule : sentinel_rules) {
    needs(master, without(sentinel_rules, rule), rule.c_str(), true);
  }
}

}  // namespace
}  // namespace distlock::testing
