// Least privilege on a Redis Cluster: Mutex (fenced, woken by a release),
// Semaphore and ReentrantMutex over a ClusterClient whose user has, on every
// node, exactly docs/connecting.md's rules for the type with the Cluster's extras
// (support/acl_rules.hpp: sharded pub/sub in place of the unsharded, the
// slot map, ASKING). Each runs try, a wait woken by another client's
// release, a Watchdog renewal, extend and release; one more extends across
// a slot's migration window (ASK). No node may refuse anything on the way
// (ACL LOG), and each extra dropped alone shows where it is needed. The
// users are made with ACL SETUSER on each node (a cluster shares no ACL).
// One cluster for the suite (support/cluster_suite.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "support/acl_rules.hpp"
#include "support/cluster_suite.hpp"
#include "support/eventually.hpp"

namespace distlock {
// Named, so that it holds in any company (a unity batch).
namespace cluster_acl_test {
namespace {

using namespace std::chrono_literals;
using testing::acl::cluster_extras;
using testing::acl::mutex_rules;
using testing::acl::on_cluster;
using testing::acl::reentrant_rules;
using testing::acl::refusals;
using testing::acl::Rules;
using testing::acl::semaphore_rules;
using testing::acl::set_user;
using testing::acl::without;

const LockOptions renewed_fenced = LockOptions{}.ttl(600ms).auto_renew(true).fencing(true);
const LockOptions renewing = LockOptions{}.ttl(600ms).auto_renew(true);

class ClusterAcl : public testing::ClusterSuite {
 protected:
  void SetUp() override {
    ClusterSuite::SetUp();
    if (HasFatalFailure()) return;
    static_cast<void>(all_refusals());
  }

  // The user "app" with `rules` on every node.
  void set_users(const Rules& rules) {
    for (std::size_t i = 0; i < cluster().size(); ++i) set_user(cluster().node(i), "app", rules);
  }

  // What any node refused since the last look ("" when nothing).
  std::string all_refusals() {
    std::string out;
    for (std::size_t i = 0; i < cluster().size(); ++i) {
      const std::string log = refusals(cluster().node(i));
      if (!log.empty()) out += "node " + std::to_string(i) + ": " + log + "\n";
    }
    return out;
  }

  static ClusterOptions as_app() {
    ClusterOptions options = ClusterSuite::options();
    options.username = "app";
    options.password = "pw";
    return options;
  }

  // The node that owns `key` now.
  std::size_t owner(const std::string& key) { return cluster().owner_of(detail::key_slot(key)); }
  long long pttl(const std::string& key) { return pttl_at(owner(key), key); }

  // A lease renewed by the Watchdog: its PTTL goes up between two looks.
  // (testing::eventually: ClusterSuite's asks once more after the last
  // look, which a look that compares with the one before cannot take.)
  bool renewed(const std::string& key) {
    long long last = pttl(key);
    return testing::eventually(
        [&] {
          const long long now = pttl(key);
          return now > std::exchange(last, now);
        },
        5s);
  }

  // No client is subscribed to `channel` at its node any more.
  bool unsubscribed(const std::string& channel) {
    return testing::eventually(
        [&] {
          const std::string answer = at(owner(channel), {"PUBSUB", "SHARDNUMSUB", channel});
          return answer.substr(answer.find('\n') + 1) == "0";
        },
        5s);
  }

  // The exclusive paths as "app": try_lock, the fence, a second client's
  // try_lock_for woken by the release on `channel` (SSUBSCRIBEd at the
  // key's node), a Watchdog renewal, extend, release.
  template <class Lock>
  std::string exclusive_paths(const std::string& name, const std::string& channel, bool fenced) {
    try {
      ClusterClient holder_client(as_app());
      ClusterClient waiter_client(as_app());
      Lock holder(holder_client, name, renewed_fenced);
      Lock waiter(waiter_client, name, renewed_fenced);
      DISTLOCK_STEP(holder.try_lock());
      const long long fence = fenced ? holder.fence() : 0;
      if (fenced) DISTLOCK_STEP(fence > 0);
      // The waiter's hold is its thread's (a ReentrantMutex's is), so that
      // thread gives it back.
      auto waited = testing::acl::wait_on(waiter, [&] {
        const bool taken = waiter.try_lock_for(5s);
        const long long next = taken && fenced ? waiter.fence() : 0;
        if (taken) waiter.unlock();
        return std::make_pair(taken, next);
      });
      DISTLOCK_STEP(subscribed_at(owner(channel), channel));
      DISTLOCK_STEP(renewed(name));
      DISTLOCK_STEP(holder.extend(5s));
      DISTLOCK_STEP(pttl(name) > 4000);
      DISTLOCK_STEP(holder.release() == Release::released);
      const auto [taken, next] = waited.get();
      DISTLOCK_STEP(taken);
      if (fenced) DISTLOCK_STEP(next > fence);
      DISTLOCK_STEP(at(owner(name), {"EXISTS", name}) == "0");
      // The waiter left the channel: its notifier SUNSUBSCRIBEs.
      DISTLOCK_STEP(unsubscribed(channel));
      return "";
    } catch (const std::exception& error) {
      return error.what();
    }
  }

  std::string mutex_paths() {
    const std::string name = name_on(0, "jobs:nightly");
    return exclusive_paths<Mutex>(name, "{" + name + "}:released", true);
  }

  std::string reentrant_paths() {
    const std::string name = name_on(1, "jobs:tree");
    return exclusive_paths<ReentrantMutex>(name, "redisson_lock__channel:{" + name + "}", true);
  }

  // The score (deadline) of the semaphore's one permit.
  long long permit_deadline(const std::string& key) {
    const std::string answer = at(owner(key), {"ZRANGE", key, "0", "0", "WITHSCORES"});
    const auto newline = answer.find('\n');
    return newline == std::string::npos ? 0 : std::stoll(answer.substr(newline + 1));
  }

  std::string semaphore_paths() {
    const std::string name = name_on(2, "jobs:exports");
    try {
      ClusterClient holder_client(as_app());
      ClusterClient waiter_client(as_app());
      Semaphore holder(holder_client, name, 1, renewing);
      Semaphore waiter(waiter_client, name, 1, renewing);
      {
        // The count the first acquire adopts goes with the last live permit.
        auto once = holder.try_acquire();
        DISTLOCK_STEP(once);
        DISTLOCK_STEP(once.release() == Release::released);
      }
      auto permit = holder.try_acquire();
      DISTLOCK_STEP(permit);
      auto waited = testing::acl::wait_on(waiter, [&] { return waiter.try_acquire_for(5s); });
      const std::string channel = "{" + name + "}:released";
      DISTLOCK_STEP(subscribed_at(owner(channel), channel));
      long long last = permit_deadline(name);
      DISTLOCK_STEP(testing::eventually(
          [&] {
            const long long now = permit_deadline(name);
            return now > std::exchange(last, now);
          },
          5s));
      DISTLOCK_STEP(permit.extend(5s));
      holder.resize(1);  // the stored count, and its read
      DISTLOCK_STEP(holder.available() == 0);
      DISTLOCK_STEP(permit.release() == Release::released);
      auto second = waited.get();
      DISTLOCK_STEP(second);
      DISTLOCK_STEP(second.release() == Release::released);
      DISTLOCK_STEP(unsubscribed(channel));
      return "";
    } catch (const std::exception& error) {
      return error.what();
    }
  }

  // A held lease extended while its slot's keys have moved but the slot
  // has not (ASK, then ASKING at the importing node), then released at
  // the new owner. The slot moves for good either way.
  std::string asked_paths() {
    const std::string name = name_on(2, "jobs:asked");
    const int slot = detail::key_slot(name);
    bool migrating = false;
    struct Finish {
      testing::RedisCluster& cluster;
      int slot;
      bool& migrating;
      ~Finish() {
        if (migrating) cluster.finish_migration(slot, 0);
      }
    } finish{cluster(), slot, migrating};
    try {
      ClusterClient client(as_app());
      Mutex held(client, name, LockOptions{}.ttl(10s));
      DISTLOCK_STEP(held.try_lock());
      cluster().begin_migration(slot, 2, 0);
      migrating = true;
      cluster().migrate_keys(slot, 2, 0);
      DISTLOCK_STEP(held.extend(20s));  // ASK from node 2, ASKING at node 0
      cluster().finish_migration(slot, 0);
      migrating = false;
      DISTLOCK_STEP(pttl_at(0, name) > 10000);
      DISTLOCK_STEP(held.release() == Release::released);
      return "";
    } catch (const std::exception& error) {
      return error.what();
    }
  }

  // Runs `path` as "app" with `rules` on every node: every step works and
  // no node refused anything.
  template <class Path>
  void expect_works(const Rules& rules, Path path) {
    set_users(rules);
    EXPECT_EQ(path(), "");
    EXPECT_EQ(all_refusals(), "");
  }

  // Without `dropped`, some step of `path` fails (with `fails`; without,
  // the client works around the refusal) and some node logs the refusal
  // of what the rule allowed.
  template <class Path>
  void expect_needs(const Rules& rules, const std::string& dropped, Path path, bool fails) {
    set_users(without(rules, dropped));
    const std::string failed = path();
    if (fails) {
      EXPECT_NE(failed, "") << "passed without " << dropped;
    }
    const std::string refused = all_refusals();
    EXPECT_NE(refused.find(dropped.substr(1)), std::string::npos)
        << "not refused without " << dropped << ":\n"
        << refused;
  }
};

TEST_F(ClusterAcl, Mutex) {
  expect_works(on_cluster(mutex_rules), [&] { return mutex_paths(); });
}
TEST_F(ClusterAcl, ReentrantMutex) {
  expect_works(on_cluster(reentrant_rules), [&] { return reentrant_paths(); });
}
TEST_F(ClusterAcl, Semaphore) {
  expect_works(on_cluster(semaphore_rules), [&] { return semaphore_paths(); });
}
TEST_F(ClusterAcl, MutexAcrossAMigrationWindow) {
  expect_works(on_cluster(mutex_rules), [&] { return asked_paths(); });
}

// Each of the Cluster's own rules dropped alone.
TEST_F(ClusterAcl, SharedPubSubIsNeeded) {
  const Rules rules = on_cluster(mutex_rules);
  const auto mutex = [&] { return mutex_paths(); };
  expect_needs(rules, "+spublish", mutex, true);      // the release
  expect_needs(rules, "+ssubscribe", mutex, true);    // the wake-up
  expect_needs(rules, "+sunsubscribe", mutex, true);  // the waiter leaving
}
TEST_F(ClusterAcl, AskingIsNeeded) {
  expect_needs(
      on_cluster(mutex_rules), "+asking", [&] { return asked_paths(); }, true);
}

// CLUSTER SHARDS refused, the map is read with CLUSTER SLOTS (the lock
// works, the refusal is logged); both refused, nothing works.
TEST_F(ClusterAcl, TheSlotMapIsNeeded) {
  const Rules rules = on_cluster(mutex_rules);
  const auto mutex = [&] { return mutex_paths(); };
  expect_needs(rules, "+cluster|shards", mutex, false);
  expect_needs(without(rules, "+cluster|slots"), "+cluster|shards", mutex, true);
}

// CLUSTER SLOTS checks a doubtful SHARDS reply, one that leaves a slot
// unserved (as while a failover settles): with a slot unassigned, a map
// read asks it, refused or not.
TEST_F(ClusterAcl, ClusterSlotsChecksADoubtfulMap) {
  const int hole = detail::key_slot("jobs:hole");
  const auto read_map = [&](const Rules& rules) {
    set_users(rules);
    ClusterClient client(as_app());
    try {
      client.refresh();
    } catch (const std::exception& error) {
      ADD_FAILURE() << error.what();
    }
    return all_refusals();
  };
  cluster().unassign_slot(hole);
  const std::string allowed = read_map(on_cluster(mutex_rules));
  const std::string refused = read_map(without(on_cluster(mutex_rules), "+cluster|slots"));
  cluster().restore_slot(hole);
  EXPECT_EQ(allowed, "");
  EXPECT_NE(refused.find("cluster|slots"), std::string::npos) << refused;
}

}  // namespace
}  // namespace cluster_acl_test
}  // namespace distlock
