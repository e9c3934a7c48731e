// Tests for cluster_client.hpp (and the routing in detail/backend/cluster_routing.hpp)
// against a real 3-master Redis Cluster (support/redis_cluster.hpp). One
// cluster is shared by the tests of a suite: every test uses names of its
// own, and the harness keeps track of the slots a test moves.
#include "distlock/cluster_client.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"
#include "distlock/detail/wire/counting_scripts.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/detail/wire/sharded_scripts.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/inspect.hpp"
#include "distlock/multi_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/cluster_suite.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixture.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::FaultProxy;
using testing::RedisCluster;
using testing::RedisServer;

/// A port nothing listens on (as far as a test can tell).
int closed_port() { return testing::detail::pick_free_port(); }

// ---------------------------------------------------------------------------
// Options: no server needed.

TEST(ClusterClientOptions, FromUriTakesEverySeedAndTheOptions) {
  const ClusterOptions options = ClusterOptions::from_uri(
      "redis://:secret@h1:7000,h2:7001,[::1]:7002?command_timeout=250&pool_size=3");
  EXPECT_EQ(options.seeds, (std::vector<std::string>{"h1:7000", "h2:7001", "[::1]:7002"}));
  EXPECT_EQ(options.password, "secret");
  EXPECT_EQ(options.command_timeout, 250ms);
  EXPECT_EQ(options.pool_size, 3u);
  EXPECT_EQ(ClusterOptions::from_uri("redis://h1").seeds, std::vector<std::string>{"h1:6379"});
}

TEST(ClusterClientOptions, BadInputIsAnInvalidArgument) {
  EXPECT_THROW(ClusterClient{ClusterOptions{}}, InvalidArgument);  // no seed
  EXPECT_THROW(ClusterClient{"redis://h1:7000,,h2:7001"}, InvalidArgument);
  EXPECT_THROW(ClusterClient{"redis://h1:7000/2"}, InvalidArgument);  // db 2
  EXPECT_THROW(ClusterClient{"redis://h1:notaport"}, InvalidArgument);
  EXPECT_THROW(ClusterClient{"unix:///tmp/redis.sock"}, InvalidArgument);
  EXPECT_THROW(ClusterClient{ClusterOptions({"h1:7000/0"})}, InvalidArgument);
  ClusterOptions no_redirects({"h1:7000"});
  no_redirects.max_redirects = 0;
  EXPECT_THROW(ClusterClient{no_redirects}, InvalidArgument);
}

TEST(ClusterClientOptions, UnboundCopyRefusesToBorrow) {
  ClusterClient cluster{ClusterOptions({"127.0.0.1:" + std::to_string(closed_port())})};
  EXPECT_THROW(static_cast<void>(cluster.borrow()), InvalidArgument);
  EXPECT_EQ(cluster.slot(), -1);
  EXPECT_EQ(cluster.for_key("foo").slot(), 12182);
}

TEST(ClusterClientOptions, AClientMadeBeforeForkRefusesInTheChild) {
  ClusterClient cluster{ClusterOptions({"127.0.0.1:" + std::to_string(closed_port())})};
  EXPECT_FALSE(cluster.forked());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // In the child: only what fork() leaves is safe, so _exit, no gtest.
    bool refused = false;
    try {
      cluster.check_process();
    } catch (const Error& error) {
      refused = error.code() == Errc::forked &&
                std::string(error.what()).find("make a new ClusterClient in the child") !=
                    std::string::npos;
    }
    ::_exit(cluster.forked() && refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(cluster.forked());
  EXPECT_NO_THROW(cluster.check_process());
}

// ---------------------------------------------------------------------------
// A cluster shared by the tests of one suite.

using ClusterTest = testing::ClusterSuite;

// ---------------------------------------------------------------------------
// Routing: what reaches which node.

class ClusterRouting : public ClusterTest {};

TEST_F(ClusterRouting, SlotsAgreeWithTheServer) {
  for (const std::string key : {"foo", "bar", "{user1000}.following", "a}b", "x{}y", "q{", "",
                                "stock:{42}", "{}", "}{", "{a}{b}"}) {
    EXPECT_EQ(std::to_string(detail::key_slot(key)), at(0, {"CLUSTER", "KEYSLOT", key})) << key;
  }
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i * 7919);
    ASSERT_EQ(std::to_string(detail::key_slot(key)), at(1, {"CLUSTER", "KEYSLOT", key})) << key;
  }
}

TEST_F(ClusterRouting, CommandsReachTheOwnerOnEveryMaster) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string key = name_on(master, "routed");
    EXPECT_TRUE(client().command("SET", key, "v" + std::to_string(master)).is_ok());
    EXPECT_EQ(at(master, {"GET", key}), "v" + std::to_string(master));
    EXPECT_EQ(client().command("GET", key).str(), "v" + std::to_string(master));
  }
}

TEST_F(ClusterRouting, UnreachableSeedsFailNamingThem) {
  const std::string seed = "127.0.0.1:" + std::to_string(closed_port());
  ClusterOptions options({seed});
  options.connect_timeout = 200ms;
  ClusterClient nowhere{options};
  try {
    client_.reset();
    static_cast<void>(nowhere.command("GET", "k"));
    FAIL() << "a cluster with no reachable seed answered";
  } catch (const ConnectionError& error) {
    EXPECT_NE(std::string(error.what()).find(seed), std::string::npos) << error.what();
  }
}

TEST_F(ClusterRouting, ANodeNotInClusterModeIsAClearError) {
  RedisServer plain;
  ClusterClient wrong{ClusterOptions({plain.host() + ":" + std::to_string(plain.port())})};
  try {
    static_cast<void>(wrong.command("GET", "k"));
    FAIL() << "a server without cluster mode was taken for a cluster";
  } catch (const ConnectionError& error) {
    EXPECT_NE(std::string(error.what()).find("cluster support disabled"), std::string::npos)
        << error.what();
  }
}

// A plain Client pointed at a cluster node follows no redirects: the MOVED
// it meets says to use ClusterClient, on a command and on a lock's steps
// (a command, a script), where before it said only where the slot lives.
TEST_F(ClusterRouting, APlainClientAtANodeIsToldToUseClusterClient) {
  Client plain(testing::client_options(cluster().node(0)));
  const std::string key = name_on(1, "elsewhere");
  const auto expect_hint = [](const char* label, auto call) {
    try {
      call();
      ADD_FAILURE() << label << ": no error";
    } catch (const ServerError& error) {
      const std::string what = error.what();
      EXPECT_EQ(what.rfind("MOVED ", 0), 0u) << label << ": " << what;
      EXPECT_NE(what.find("use ClusterClient"), std::string::npos) << label << ": " << what;
    }
  };
  expect_hint("command", [&] { static_cast<void>(plain.command("SET", key, "v")); });
  Mutex mutex(plain, key);
  expect_hint("Mutex", [&] { static_cast<void>(mutex.try_lock()); });
  ReentrantMutex reentrant(plain, key);
  expect_hint("ReentrantMutex", [&] { static_cast<void>(reentrant.try_lock()); });
  // The ClusterClient follows the same redirect.
  EXPECT_TRUE(client().command("SET", key, "v").is_ok());
  Mutex routed(client(), key + "-lock");
  EXPECT_TRUE(routed.try_lock());
}

// inspect(), is_locked() and force_unlock() take a ClusterClient as a lock
// does, and go to the node that owns each name: a lease and a Redisson hash
// on every master are seen and removed, application data is refused there.
TEST_F(ClusterRouting, InspectAndForceUnlockGoToTheNodeThatOwnsTheName) {
  for (std::size_t master = 0; master < 3; ++master) {
    const std::string lease = name_on(master, "inspect-lease");
    const std::string hash = name_on(master, "inspect-hash");
    const std::string data = name_on(master, "inspect-data");
    Mutex mutex(client(), lease);
    ReentrantMutex reentrant(client(), hash);
    ASSERT_TRUE(mutex.try_lock());
    ASSERT_TRUE(reentrant.try_lock());
    EXPECT_EQ(inspect(client(), lease).kind, LockKind::lease) << master;
    EXPECT_EQ(inspect(client(), hash).kind, LockKind::reentrant) << master;
    EXPECT_TRUE(is_locked(client(), hash)) << master;
    EXPECT_TRUE(force_unlock(client(), lease)) << master;
    EXPECT_TRUE(force_unlock(client(), hash)) << master;
    EXPECT_EQ(pttl_at(master, lease), -2);
    EXPECT_EQ(pttl_at(master, hash), -2);
    EXPECT_FALSE(is_locked(client(), lease)) << master;
    EXPECT_EQ(mutex.release(), Release::expired);
    EXPECT_EQ(reentrant.release(), Release::expired);

    client().command("SET", data, "application data");
    EXPECT_EQ(inspect(client(), data).kind, LockKind::other) << master;
    EXPECT_THROW(static_cast<void>(force_unlock(client(), data)), NotALockError) << master;
    EXPECT_EQ(client().command("GET", data).str(), "application data");
    client().command("DEL", data);
  }
}

TEST_F(ClusterRouting, TheMapComesFromClusterShards) {
  const auto calls = [&](const std::string& command) {
    long long sum = 0;
    for (std::size_t master = 0; master < cluster().masters(); ++master) {
      sum += calls_at(master, command);
    }
    return sum;
  };
  const long long shards = calls("cluster|shards");
  const long long slots = calls("cluster|slots");
  ClusterClient fresh{options()};
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    EXPECT_EQ(fresh.node_of(detail::key_slot(name_on(master, "shards"))),
              cluster().seed_list()[master]);
  }
  EXPECT_GT(calls("cluster|shards"), shards);
  EXPECT_EQ(calls("cluster|slots"), slots);
}

TEST_F(ClusterRouting, AUserDeniedClusterShardsStillRoutesByClusterSlots) {
  // An ACL user who may run everything but CLUSTER SHARDS, on every node.
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    ASSERT_EQ(at(master, {"ACL", "SETUSER", "no-shards", "reset", "on", ">no-shards-pw", "~*", "&*",
                          "+@all", "-cluster|shards"}),
              "OK");
  }
  ClusterOptions denied = options();
  denied.username = "no-shards";
  denied.password = "no-shards-pw";
  ClusterClient cluster_client{denied};
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string name = name_on(master, "no-shards");
    Mutex lock(cluster_client, name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(lock.try_lock()) << name;
    EXPECT_EQ(at(master, {"GET", name}), lock.token());
    EXPECT_EQ(lock.release(), Release::released);
  }
  // Asked once and refused; CLUSTER SLOTS from then on.
  long long refused = 0;
  long long slots = 0;
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    const std::string stats = at(master, {"INFO", "commandstats"});
    const auto found = stats.find("cmdstat_cluster|shards:");
    if (found != std::string::npos) {
      const auto field = stats.find("rejected_calls=", found);
      refused += std::stoll(stats.substr(field + 15));
    }
    slots += calls_at(master, "cluster|slots");
  }
  EXPECT_EQ(refused, 1);
  EXPECT_GT(slots, 0);
  for (std::size_t master = 0; master < cluster().masters(); ++master) {
    at(master, {"ACL", "DELUSER", "no-shards"});
  }
}

TEST_F(ClusterRouting, EvalRefusesKeysOfTwoSlots) {
  const Script echo{"return 1", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"};
  EXPECT_EQ(client().eval(echo, {"{t}a", "{t}b"}, {}).integer(), 1);
  EXPECT_THROW(client().eval(echo, {"foo", "bar"}, {}), InvalidArgument);
}

// ---------------------------------------------------------------------------
// Every lock type, on each master.

class ClusterLocks : public ClusterTest {};

TEST_F(ClusterLocks, MutexOnEachMaster) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "mutex");
    Mutex lock(client(), name, LockOptions{}.ttl(10s));
    Mutex other(client(), name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(lock.try_lock()) << name;
    EXPECT_EQ(at(master, {"GET", name}), lock.token());
    EXPECT_GT(pttl_at(master, name), 9000);
    EXPECT_FALSE(other.try_lock());
    EXPECT_TRUE(lock.extend(20s));
    EXPECT_GT(pttl_at(master, name), 19000);
    EXPECT_EQ(lock.release(), Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
    EXPECT_TRUE(other.try_lock());
    other.unlock();
  }
}

TEST_F(ClusterLocks, FencingCountsAtTheSlotOwner) {
  const std::string name = name_on(2, "fenced");
  Mutex lock(client(), name, LockOptions{}.ttl(10s).fencing(true));
  ASSERT_TRUE(lock.try_lock());
  const long long first = lock.fence();
  lock.unlock();
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.fence(), first + 1);
  EXPECT_EQ(at(2, {"GET", detail::companion_key(name, "fence")}), std::to_string(first + 1));
  lock.unlock();
}

TEST_F(ClusterLocks, NameWhoseKeysSpanSlotsIsRefused) {
  for (const char* name : {"a}b", "x{}y"}) {
    try {
      Mutex lock(client(), name);
      FAIL() << "a lock whose keys span slots was made: " << name;
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(std::string("\"") + name + "\""), std::string::npos)
          << error.what();
    }
    EXPECT_THROW(ReentrantMutex(client(), name), InvalidArgument);
    EXPECT_THROW(SharedMutex(client(), name), InvalidArgument);
  }
  // A hash tag keeps every key in one slot.
  EXPECT_NO_THROW(Mutex(client(), "{a}b"));
}

TEST_F(ClusterLocks, SimpleMutexOnEachMaster) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "simple");
    SimpleMutex lock(client(), name, LockOptions{}.ttl(10s));
    SimpleMutex other(client(), name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(lock.try_lock());
    EXPECT_EQ(at(master, {"GET", name}), lock.token());
    EXPECT_FALSE(other.try_lock());
    EXPECT_TRUE(lock.extend(20s));
    EXPECT_EQ(lock.release(), Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
  }
}

TEST_F(ClusterLocks, ReentrantMutexOnEachMaster) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "reentrant");
    ReentrantMutex lock(client(), name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(lock.try_lock());
    EXPECT_EQ(at(master, {"TYPE", name}), "hash");
    std::thread([&] {
      ReentrantMutex other(client(), name, LockOptions{}.ttl(10s));
      EXPECT_FALSE(other.try_lock());
    }).join();
    EXPECT_EQ(lock.release(), Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
  }
}

// A FairMutex's queue and deadlines share the lock's slot, and a release
// reaches the waiter at the front on its own shard channel (SPUBLISH), not
// by its poll: the holder's lease outlasts the waiter's deadline.
TEST_F(ClusterLocks, FairMutexOnEachMasterWakesTheWaiterAtTheFront) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "fair");
    FairMutex holder(client(), name, LockOptions{}.ttl(60s));
    ASSERT_TRUE(holder.try_lock());
    FairMutex waiter(client(), name, LockOptions{}.ttl(60s));
    std::future<bool> waited = std::async(std::launch::async, [&] {
      const bool got = waiter.try_lock_for(20s);
      if (got) waiter.unlock();
      return got;
    });
    const std::string queue = holder.queue_key();
    ASSERT_TRUE(testing::eventually([&] { return at(master, {"LLEN", queue}) == "1"; }));
    holder.unlock();
    EXPECT_TRUE(waited.get()) << master;
    EXPECT_EQ(at(master, {"EXISTS", name, queue, holder.deadlines_key()}), "0");
  }
}

// Names on every master's slots are taken slot by slot: one held by a
// Mutex refuses the whole, and the slots taken before it are given back.
// Its release wakes the waiter through that name's shard (the holder's
// lease outlasts the waiter's deadline, its policy polls hourly); then
// every name holds the one token, and the release frees them all.
TEST_F(ClusterLocks, MultiMutexOverNamesOnEveryMaster) {
  std::vector<std::string> names;
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    names.push_back(name_on(master, "multi"));
  }
  // The name that sorts last is in the slot taken last.
  const std::size_t last =
      static_cast<std::size_t>(std::max_element(names.begin(), names.end()) - names.begin());
  Mutex holder(client(), names[last], LockOptions{}.ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  MultiMutex all(client(), names, LockOptions{}.ttl(60s), FixedInterval{std::chrono::hours(1)});
  EXPECT_FALSE(all.try_lock());
  for (std::size_t master = 0; master < names.size(); ++master) {
    if (master != last) {
      EXPECT_EQ(at(master, {"EXISTS", names[master]}), "0") << master;
    }
  }
  std::future<bool> waited = std::async(std::launch::async, [&] { return all.try_lock_for(20s); });
  const std::string channel = "{" + names[last] + "}:released";
  ASSERT_TRUE(testing::eventually([&] {
    return at(last, {"PUBSUB", "SHARDNUMSUB", channel}) == channel + "\n1";
  }));
  holder.unlock();
  ASSERT_TRUE(waited.get());
  for (std::size_t master = 0; master < names.size(); ++master) {
    EXPECT_EQ(at(master, {"GET", names[master]}), all.token()) << master;
  }
  EXPECT_EQ(all.release(), Release::released);
  for (std::size_t master = 0; master < names.size(); ++master) {
    EXPECT_EQ(at(master, {"EXISTS", names[master]}), "0") << master;
  }
}

TEST_F(ClusterLocks, SharedMutexOnEachMaster) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "shared");
    SharedMutex reader(client(), name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(reader.try_lock_shared());
    EXPECT_EQ(at(master, {"HGET", name, "mode"}), "read");
    std::thread([&] {
      SharedMutex other_reader(client(), name, LockOptions{}.ttl(10s));
      SharedMutex writer(client(), name, LockOptions{}.ttl(10s));
      EXPECT_TRUE(other_reader.try_lock_shared());
      other_reader.unlock_shared();
      EXPECT_FALSE(writer.try_lock());  // our reader keeps it out
    }).join();
    reader.unlock_shared();
    SharedMutex writer(client(), name, LockOptions{}.ttl(10s));
    ASSERT_TRUE(writer.try_lock());
    EXPECT_EQ(at(master, {"HGET", name, "mode"}), "write");
    EXPECT_EQ(writer.release(), Release::released);
    EXPECT_EQ(at(master, {"EXISTS", name}), "0");
  }
}

TEST_F(ClusterLocks, WatchdogRenewsLeasesOnEveryMaster) {
  // Leases long enough that no slow machine sees one run out; a renewal
  // round is asked for, and each lease is renewed (the script found its
  // token) where it lives.
  RenewalCount count;
  ClusterClient counted(counting(count));
  std::vector<std::unique_ptr<Mutex>> locks;
  std::vector<std::string> names;
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    for (int i = 0; i < 2; ++i) {  // two slots per master: one batch each
      names.push_back(name_on(master, "renewed" + std::to_string(i)));
      locks.push_back(
          std::make_unique<Mutex>(counted, names.back(), LockOptions{}.ttl(30s).auto_renew(true)));
      ASSERT_TRUE(locks.back()->try_lock());
    }
  }
  counted.watchdog().renew_all_now();
  for (std::size_t i = 0; i < locks.size(); ++i) {
    const std::size_t master = cluster().owner_of(detail::key_slot(names[i]));
    EXPECT_TRUE(eventually([&] { return count.of(names[i]) > 0; })) << names[i];
    EXPECT_FALSE(locks[i]->lost()) << names[i];
    EXPECT_EQ(at(master, {"GET", names[i]}), locks[i]->token()) << names[i];
    EXPECT_GT(pttl_at(master, names[i]), 20000) << names[i];
    EXPECT_EQ(locks[i]->release(), Release::released) << names[i];
  }
}

TEST_F(ClusterLocks, WaiterIsWokenByTheRelease) {
  // The waiter's own pause is 20 s: only the release's announcement can
  // bring it back in time.
  const std::string name = name_on(1, "woken");
  Mutex holder(client(), name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> waiting{false};
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    Mutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
    waiting = true;
    got = lock.try_lock_for(10s);
    if (got) lock.unlock();
  });
  while (!waiting) std::this_thread::yield();
  // Let the waiter subscribe: until its subscription is confirmed it polls.
  const auto subscribed_by = Clock::now() + 5s;
  while (detail::NotifierProbe::channel_count(client().for_key(name).notifier()) == 0 &&
         Clock::now() < subscribed_by) {
    std::this_thread::sleep_for(5ms);
  }
  const auto released = Clock::now();
  holder.unlock();
  waiter.join();
  EXPECT_TRUE(got);
  EXPECT_LT(Clock::now() - released, 5s);
}

// ---------------------------------------------------------------------------
// Slots that move while a lock is held.

class ClusterMigration : public ClusterTest {};

TEST_F(ClusterMigration, ReleaseAndExtendFollowMovedAfterTheSlotMoved) {
  const std::string name = name_on(0, "moved");
  const int slot = detail::key_slot(name);
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  cluster().move_slot(slot, 1);
  EXPECT_EQ(at(1, {"GET", name}), lock.token());
  EXPECT_TRUE(lock.extend(20s));  // sent to node 0, MOVED to node 1
  EXPECT_GT(pttl_at(1, name), 19000);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(at(1, {"EXISTS", name}), "0");
  EXPECT_EQ(client().node_of(slot), cluster().seed_list()[1]);
}

TEST_F(ClusterMigration, WatchdogRenewsAtTheNewOwner) {
  // A lease long enough that no slow machine sees it run out. The round
  // asked for after the move goes where the client's map still says, node
  // 1, which answers MOVED; the Watchdog's own retry must then renew the
  // lease at node 2, where its expiry moves on.
  RenewalCount count;
  ClusterClient counted(counting(count));
  const std::string name = name_on(1, "renewed-moved");
  const int slot = detail::key_slot(name);
  Mutex lock(counted, name, LockOptions{}.ttl(30s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  cluster().move_slot(slot, 2);
  const long long expiry = expiry_at(2, name);
  const long long moved = errors_at(1, "MOVED");
  counted.watchdog().renew_all_now();
  EXPECT_GT(errors_at(1, "MOVED"), moved) << "the first renewal did not meet the move";
  EXPECT_TRUE(eventually([&] { return count.of(name) > 0; })) << "never renewed";
  EXPECT_GT(expiry_at(2, name), expiry) << "the renewal did not reach node 2";
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(at(2, {"GET", name}), lock.token());
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(ClusterMigration, AskDuringTheMigrationWindowReachesTheImportingNode) {
  const std::string name = name_on(2, "asked");
  const int slot = detail::key_slot(name);
  Mutex held(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(held.try_lock());
  cluster().begin_migration(slot, 2, 0);
  cluster().migrate_keys(slot, 2, 0);
  // Node 2 still owns the slot but no longer has the key: it answers ASK,
  // and only ASKING lets node 0 serve the key.
  EXPECT_TRUE(held.extend(20s));
  // A new key of the slot is made at the importing node too.
  const std::string sibling = "{" + name + "}:sibling";
  Mutex other(client(), sibling, LockOptions{}.ttl(10s));
  ASSERT_TRUE(other.try_lock());
  // The source has neither key: it sends a reader of either on with ASK.
  EXPECT_EQ(at(2, {"GET", sibling}).rfind("(error) ASK ", 0), 0u);
  EXPECT_EQ(at(2, {"GET", name}).rfind("(error) ASK ", 0), 0u);
  cluster().finish_migration(slot, 0);  // node 0 answers for the slot from now on
  EXPECT_GT(pttl_at(0, name), 10000);   // the extend reached it
  EXPECT_EQ(at(0, {"GET", sibling}), other.token());
  EXPECT_EQ(other.release(), Release::released);
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");
}

// Defect: a refused try_lock() looks at the holder's key with PTTL and TYPE
// in one write. Sent on with ASK to the importing node, only the PTTL
// carried ASKING: the TYPE was sent back with MOVED to the source, which
// sent it on with ASK again, until the redirects ran out and MOVED was
// thrown (a StripedMutex waiter's thread ended the process with it).
TEST_F(ClusterMigration, ARefusedTryLockLooksAtTheHolderAcrossTheMigrationWindow) {
  const std::string name = name_on(2, "refused-asked");
  const int slot = detail::key_slot(name);
  Mutex held(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(held.try_lock());
  cluster().begin_migration(slot, 2, 0);
  cluster().migrate_keys(slot, 2, 0);
  ClusterClient other_client(options());
  Mutex other(other_client, name, LockOptions{}.ttl(10s));
  bool taken = true;
  EXPECT_NO_THROW(taken = other.try_lock());
  EXPECT_FALSE(taken);
  cluster().finish_migration(slot, 0);
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(at(0, {"EXISTS", name}), "0");
}

TEST_F(ClusterMigration, ReleaseDuringTheMigrationWindowIsRetriedUntilItEnds) {
  // A release names two keys (the lock and its channel, which never exists),
  // so the importing node answers TRYAGAIN until the slot is its own.
  ClusterOptions patient = options();
  patient.retry_pause = 100ms;  // retries over about 3 s
  ClusterClient cluster_client{patient};
  const std::string name = name_on(1, "tryagain");
  const int slot = detail::key_slot(name);
  Mutex held(cluster_client, name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(held.try_lock());
  cluster().begin_migration(slot, 1, 2);
  cluster().migrate_keys(slot, 1, 2);
  const auto tryagains = [&] {
    const std::string stats = at(2, {"INFO", "errorstats"});
    const auto found = stats.find("errorstat_TRYAGAIN:count=");
    return found == std::string::npos ? 0 : std::stoll(stats.substr(found + 25));
  };
  const long long before = tryagains();
  std::optional<Release> released;
  std::string failed;
  std::thread releaser([&] {
    try {
      released = held.release();
    } catch (const Error& error) {
      failed = error.what();
    }
  });
  const auto refused_by = Clock::now() + 5s;
  while (tryagains() == before && Clock::now() < refused_by) std::this_thread::yield();
  EXPECT_GT(tryagains(), before);
  cluster().finish_migration(slot, 2);
  releaser.join();
  EXPECT_EQ(released, Release::released) << failed;
  EXPECT_EQ(at(2, {"EXISTS", name}), "0");
}

TEST_F(ClusterMigration, NoScriptAtTheNewOwnerFallsBackToEval) {
  const std::string name = name_on(0, "noscript");
  const int slot = detail::key_slot(name);
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  cluster().move_slot(slot, 2);
  at(2, {"SCRIPT", "FLUSH"});
  const long long evals = calls_at(2, "eval");
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_EQ(calls_at(2, "eval"), evals + 1);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(at(2, {"EXISTS", name}), "0");
}

// ---------------------------------------------------------------------------
// Wake-on-release by sharded pub/sub: releases SPUBLISH, waiters SSUBSCRIBE
// at the node that owns the lock's slot.

class ClusterPubSub : public ClusterTest {};

TEST_F(ClusterPubSub, ShardedTwinsOfTheScriptsAreNamedByTheirSha1) {
  EXPECT_EQ(detail::sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(detail::sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  for (const Script* script :
       {&scripts::release, &scripts::extend, &scripts::reentrant_release, &scripts::read_release,
        &scripts::write_release, &scripts::force_unlock, &scripts::semaphore_acquire,
        &scripts::semaphore_release, &scripts::semaphore_resize}) {
    const Script& twin = detail::with_sharded_publish(*script);
    EXPECT_EQ(at(0, {"SCRIPT", "LOAD", std::string(twin.source)}), twin.sha1) << script->source;
    // Publishes, and only they, changed.
    EXPECT_EQ(twin.source.find("'publish'"), std::string_view::npos) << script->source;
    EXPECT_EQ(twin.sha1 == script->sha1,
              script->source.find("'publish'") == std::string_view::npos);
  }
}

TEST_F(ClusterPubSub, WaiterOnEachMasterIsWokenByTheShardedRelease) {
  for (std::size_t master = 0; master < cluster().size(); ++master) {
    const std::string name = name_on(master, "sharded");
    ReentrantMutex holder(client(), name, LockOptions{}.ttl(30s));
    ASSERT_TRUE(holder.try_lock());
    const long long spublished = calls_at(master, "spublish");
    std::atomic<bool> got{false};
    // The waiter's own pause is 20 s: only the announcement brings it back.
    std::thread waiter([&] {
      ReentrantMutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
      got = lock.try_lock_for(10s);
      if (got) lock.unlock();
    });
    EXPECT_TRUE(subscribed_at(master, holder.channel())) << "master " << master;
    const auto released = Clock::now();
    holder.unlock();
    waiter.join();
    EXPECT_TRUE(got) << "master " << master;
    EXPECT_LT(Clock::now() - released, 5s) << "master " << master;
    EXPECT_GT(calls_at(master, "spublish"), spublished) << "master " << master;
  }
}

TEST_F(ClusterPubSub, WaiterIsWokenByARedissonReleaseInClusterMode) {
  // Held by a Redisson client; released as Redisson's cluster mode does:
  // the hash deleted, "0" announced with SPUBLISH on the lock's channel.
  const std::string name = name_on(1, "redisson");
  const std::string channel = "redisson_lock__channel:{" + name + "}";
  ASSERT_EQ(at(1, {"HSET", name, "5f1c2e7a-redisson:1", "1"}), "1");
  ASSERT_EQ(at(1, {"PEXPIRE", name, "30000"}), "1");
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    ReentrantMutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
    got = lock.try_lock_for(10s);
    if (got) lock.unlock();
  });
  EXPECT_TRUE(subscribed_at(1, channel));
  const auto released = Clock::now();
  at(1, {"DEL", name});
  at(1, {"SPUBLISH", channel, "0"});
  waiter.join();
  EXPECT_TRUE(got);
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(ClusterPubSub, WaiterSubscribesAgainWhereTheSlotMoved) {
  const std::string name = name_on(0, "sharded-moved");
  const int slot = detail::key_slot(name);
  Mutex holder(client(), name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> got{false};
  std::string failed;
  std::thread waiter([&] {
    try {
      Mutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
      got = lock.try_lock_for(15s);
      if (got) lock.unlock();
    } catch (const Error& error) {
      failed = error.what();
    }
  });
  const std::string subscribed = [&] {
    const auto until = Clock::now() + 5s;
    while (Clock::now() < until) {
      const std::string channels = at(0, {"PUBSUB", "SHARDCHANNELS"});
      if (channels.find(name) != std::string::npos) return channels;
      std::this_thread::sleep_for(5ms);
    }
    return std::string();
  }();
  ASSERT_FALSE(subscribed.empty()) << "the waiter never subscribed at master 0";
  // Moving the slot drops the subscription at master 0 (sunsubscribe).
  cluster().move_slot(slot, 2);
  const auto until = Clock::now() + 5s;
  while (at(2, {"PUBSUB", "SHARDCHANNELS"}).find(name) == std::string::npos &&
         Clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_NE(at(2, {"PUBSUB", "SHARDCHANNELS"}).find(name), std::string::npos)
      << "the waiter did not subscribe again at the new owner";
  const auto released = Clock::now();
  EXPECT_EQ(holder.release(), Release::released);
  waiter.join();
  EXPECT_TRUE(got) << failed;
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(ClusterPubSub, AWaiterBehindItsOwnObjectsHolderSubscribesOnceWhereTheSlotMoved) {
  // The waiter's lock object is held by another of its threads, so it sends
  // no step that a MOVED could answer: only its dropped subscription tells
  // it the slot moved (when its pause of 1 s ends). It must subscribe again
  // at the new owner, and not spin on the old node's refusals until the
  // map is next read (a minute from now here).
  const std::string name = name_on(1, "own-holder-moved");
  const std::string channel = detail::companion_key(name, "released");
  std::atomic<unsigned> attempts{0};
  ClusterOptions own_options = options();
  own_options.refresh_interval = 60s;
  own_options.on_event = [&](const LockEvent& event) {
    if (event.type == LockEventType::acquired && event.key == name) attempts = event.attempts;
  };
  ClusterClient own(own_options);
  Mutex lock(own, name, LockOptions{}.ttl(30s), FixedInterval(1s));
  ASSERT_TRUE(lock.try_lock());
  std::atomic<bool> done{false};
  std::atomic<bool> got{false};
  Waiter<decltype(lock)> waiter{lock, std::thread([&] {
                                  got = lock.try_lock_for(25s);
                                  done = true;
                                })};
  ASSERT_TRUE(subscribed_at(1, channel));
  const long long before = calls_at(1, "ssubscribe");
  cluster().move_slot(detail::key_slot(name), 2);
  EXPECT_TRUE(subscribed_at(2, channel)) << "the waiter did not subscribe again at the new owner";
  EXPECT_LE(calls_at(1, "ssubscribe") - before, 2) << "it subscribed again and again at master 1";
  EXPECT_FALSE(done);
  lock.unlock();
  EXPECT_TRUE(eventually([&] { return done.load(); })) << "the waiter slept on";
  waiter.thread.join();
  EXPECT_TRUE(got);
  // One look a second while the test runs, not one per refusal.
  EXPECT_LE(attempts.load(), 20u);
  lock.unlock();
}

TEST_F(ClusterPubSub, CancelWaitsEndsAWaitAfterTheSlotMoved) {
  // The waiter sleeps on its subscription at master 0 (its own pause is
  // 20 s); the slot moves to master 2, and then its wait is cancelled.
  const std::string name = name_on(0, "cancel-moved");
  Mutex holder(client(), name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  Mutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
  std::atomic<bool> done{false};
  std::atomic<bool> got{true};
  Waiter<decltype(lock)> waiter{lock, std::thread([&] {
                                  got = lock.try_lock_for(25s);
                                  done = true;
                                })};
  ASSERT_TRUE(subscribed_at(0, detail::companion_key(name, "released")));
  cluster().move_slot(detail::key_slot(name), 2);
  EXPECT_FALSE(done) << "the wait ended before it was cancelled";
  const auto cancelled = Clock::now();
  lock.cancel_waits();
  EXPECT_TRUE(eventually([&] { return done.load(); })) << "the waiter slept on";
  waiter.thread.join();
  EXPECT_FALSE(got);
  EXPECT_LT(Clock::now() - cancelled, 5s);
  EXPECT_EQ(holder.release(), Release::released);
}

// ---------------------------------------------------------------------------
// Failover: a master killed (its replica takes over) or handing over. Each
// test fails over a master of its own: a killed master's replica is the last
// copy of its slots.

class ClusterFailover : public ClusterTest {
 protected:
  static void SetUpTestSuite() { start(1); }

  /// Deletes `key` on the replica of `master` only: the master keeps it (as
  /// when a write had not reached the replica when the master died). The
  /// delete is replicated; the key is then put back without replication.
  void drop_on_replica(std::size_t master, const std::string& key) {
    const std::string diverge =
        "local v = redis.call('get', KEYS[1]) local t = redis.call('pttl', KEYS[1]) "
        "redis.call('del', KEYS[1]) redis.set_repl(redis.REPL_NONE) "
        "redis.call('set', KEYS[1], v, 'PX', t) return 1";
    ASSERT_EQ(at(master, {"EVAL", diverge, "1", key}), "1");
    cluster().wait_replicated(master);
  }

  /// A real failover takes seconds, so the client's pooled connections to
  /// the dead master sit idle past the pool's 10 ms idle check (which drops
  /// a connection the server closed) before they are used again; the
  /// harness's takes a few milliseconds. This lets that much time pass; it
  /// waits for no event.
  static void as_long_as_a_real_failover() { std::this_thread::sleep_for(20ms); }

  /// Polls `done` until it holds or 5 s pass.
  template <class Done>
  static bool within_5s(Done done) {
    const auto until = Clock::now() + 5s;
    while (!done() && Clock::now() < until) std::this_thread::sleep_for(5ms);
    return done();
  }
};

TEST_F(ClusterFailover, CallersRecoverWithinTheirDeadlinesAfterTheirMasterIsKilled) {
  const std::string first = name_on(0, "killed-first");
  const std::string second = name_on(0, "killed-second");
  {
    // The client knows the master and has a pooled connection to it.
    Mutex warm(client(), first);
    ASSERT_TRUE(warm.try_lock());
    warm.unlock();
  }
  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  as_long_as_a_real_failover();
  // A call with a deadline looks for the slot's new owner until then.
  Mutex timed(client(), first, LockOptions{}.ttl(10s));
  const auto started = Clock::now();
  EXPECT_TRUE(timed.try_lock_for(3s));
  EXPECT_LT(Clock::now() - started, 3s + 500ms);
  EXPECT_EQ(at(promoted, {"GET", first}), timed.token());
  // One without, max_redirects times.
  Mutex untimed(client(), second, LockOptions{}.ttl(10s));
  EXPECT_TRUE(untimed.try_lock());
  EXPECT_EQ(timed.release(), Release::released);
  EXPECT_EQ(untimed.release(), Release::released);
}

TEST_F(ClusterFailover, LeasesOnAKilledMasterAreRevalidatedAtTheNewOwner) {
  // Renewals every 10 s: only the revalidation after the failover can
  // settle these leases within the 5 s the test waits.
  std::atomic<int> renewed_kept{0};
  std::atomic<int> lost_calls{0};
  std::atomic<LostReason> lost_reason{LostReason::expired};
  ClusterOptions hooked = options();
  const std::string kept_name = name_on(1, "failover-kept");
  const std::string dropped_name = name_on(1, "failover-dropped");
  hooked.on_event = [&](const LockEvent& event) {
    if (event.type == LockEventType::renewed && event.key == kept_name) ++renewed_kept;
  };
  ClusterClient cluster_client(hooked);
  const LockOptions lease =
      LockOptions{}.ttl(30s).auto_renew(true).on_lost([&](const LeaseInfo& info) {
        lost_reason = info.reason;
        ++lost_calls;
      });
  Mutex kept(cluster_client, kept_name, lease);
  Mutex dropped(cluster_client, dropped_name, lease);
  ASSERT_TRUE(kept.try_lock());
  ASSERT_TRUE(dropped.try_lock());
  cluster().wait_replicated(1);
  drop_on_replica(1, dropped_name);
  ASSERT_EQ(at(1, {"GET", dropped_name}), dropped.token());

  const std::size_t promoted = cluster().fail_over(1, /*kill=*/true);
  as_long_as_a_real_failover();
  ASSERT_EQ(at(promoted, {"EXISTS", dropped_name}), "0");
  // Any call that meets the dead master reads the map again.
  Mutex other(cluster_client, name_on(promoted, "failover-other"));
  EXPECT_TRUE(other.try_lock_for(3s));
  other.unlock();

  EXPECT_TRUE(within_5s([&] { return dropped.lost(); })) << "a lease the new owner lacks";
  EXPECT_TRUE(within_5s([&] { return lost_calls.load() == 1; }));
  EXPECT_EQ(lost_reason.load(), LostReason::taken);
  EXPECT_TRUE(within_5s([&] { return renewed_kept.load() > 0; })) << "the kept lease re-read";
  EXPECT_FALSE(kept.lost());
  EXPECT_GT(kept.validity(), 25s);
  EXPECT_GT(std::stoll(at(promoted, {"PTTL", kept_name})), 25000);
  EXPECT_EQ(kept.release(), Release::released);
  EXPECT_EQ(dropped.release(), Release::lost);
}

TEST_F(ClusterFailover, LeasesSurviveAHandOverByClusterFailover) {
  const std::string name = name_on(2, "handover");
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  cluster().wait_replicated(2);
  const std::size_t promoted = cluster().fail_over(2, /*kill=*/false);
  // The old master answers MOVED now: extend and release follow it.
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_GT(std::stoll(at(promoted, {"PTTL", name})), 10000);
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(at(promoted, {"EXISTS", name}), "0");
}

// One master and its replica: a master of its own to kill.
class ClusterFailoverWaits : public ClusterFailover {
 protected:
  static void SetUpTestSuite() { start(1, /*masters=*/1); }
};

TEST_F(ClusterFailoverWaits, CancelWaitsReachesAWaiterAtAKilledMaster) {
  // The waiter sleeps on its subscription at master 0 (its own pause is
  // 20 s). Master 0 is killed and its replica takes over; the client's map
  // names the new owner, but the waiter still sleeps at the dead master's
  // notifier, which nothing wakes (it cannot reconnect). cancel_waits()
  // must reach it there.
  const std::string name = name_on(0, "cancel-killed");
  // The replica is a seed too: the master is the cluster's only other node.
  ClusterOptions both = options();
  const RedisServer& replica = cluster().node(cluster().replica_of(0));
  both.seeds.push_back(replica.host() + ":" + std::to_string(replica.port()));
  client_.emplace(both);
  Mutex holder(client(), name, LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  cluster().wait_replicated(0);
  Mutex lock(client(), name, LockOptions{}.ttl(30s), FixedInterval(20s));
  std::atomic<bool> done{false};
  std::atomic<bool> got{true};
  std::string failed;
  const long long sets = calls_at(0, "set");
  Waiter<decltype(lock)> waiter{lock, std::thread([&] {
                                  // An attempt whose reply the kill cut off
                                  // fails as on one server: wait again.
                                  for (bool again = true; again;) {
                                    again = false;
                                    try {
                                      got = lock.try_lock_for(25s);
                                    } catch (const ConnectionError&) {
                                      again = true;
                                    } catch (const Error& error) {
                                      failed = error.what();
                                    }
                                  }
                                  done = true;
                                })};
  ASSERT_TRUE(subscribed_at(0, detail::companion_key(name, "released")));
  // Its attempt after the subscription has run too: it is about to sleep.
  ASSERT_TRUE(eventually([&] { return calls_at(0, "set") >= sets + 2; }));
  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  const std::string new_owner =
      cluster().node(promoted).host() + ":" + std::to_string(cluster().node(promoted).port());
  // Read until the map names the new owner: the precondition of what
  // follows, not its subject (the order of map reads has its own test,
  // ClusterFailoverMapOrder).
  ASSERT_TRUE(eventually([&] {
    client().refresh();
    return client().node_of(detail::key_slot(name)) == new_owner;
  })) << "the map still names "
      << client().node_of(detail::key_slot(name));
  EXPECT_FALSE(done) << "the wait ended before it was cancelled";
  const auto cancelled = Clock::now();
  lock.cancel_waits();
  EXPECT_TRUE(eventually([&] { return done.load(); })) << "the waiter slept on";
  waiter.thread.join();
  EXPECT_EQ(failed, "");
  EXPECT_FALSE(got);
  EXPECT_LT(Clock::now() - cancelled, 5s);
  EXPECT_EQ(holder.release(), Release::released);
}

// A map read that began before a failover and is answered after a later
// read installed the new map: the older map must not replace the newer one.
class ClusterFailoverMapOrder : public ClusterFailover {
 protected:
  static void SetUpTestSuite() { start(1, /*masters=*/1); }
};

TEST_F(ClusterFailoverMapOrder, AMapReadAnsweredLateDoesNotUndoANewerOne) {
  // The client's only seed is the replica, through a proxy that can hold
  // the replies of the connections open so far.
  const RedisServer& replica = cluster().node(cluster().replica_of(0));
  FaultProxy proxy(replica.host(), replica.port());
  ClusterOptions seeded = options();
  seeded.seeds = {proxy.host() + ":" + std::to_string(proxy.port())};
  seeded.command_timeout = 20s;  // the held read waits for the test, not its timeout
  client_.emplace(seeded);
  const std::string name = name_on(0, "map-order");
  const int slot = detail::key_slot(name);
  client().refresh();  // a pooled connection through the proxy
  const std::string old_owner = client().node_of(slot);
  const std::size_t replica_index = cluster().replica_of(0);

  // A read whose reply, the map before the failover, is held.
  proxy.hold_open(FaultProxy::Direction::to_client);
  const long long asked = calls_at(replica_index, "cluster|shards");
  std::thread held([&] { client().refresh(); });
  struct Join {
    FaultProxy& proxy;
    std::thread& thread;
    ~Join() {
      proxy.release(FaultProxy::Direction::to_client);
      if (thread.joinable()) thread.join();
    }
  } join{proxy, held};
  ASSERT_TRUE(eventually([&] { return calls_at(replica_index, "cluster|shards") > asked; }));

  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  ASSERT_EQ(promoted, replica_index);
  const std::string new_owner =
      cluster().node(promoted).host() + ":" + std::to_string(cluster().node(promoted).port());
  ASSERT_NE(old_owner, new_owner);
  // A later read, on a new connection the proxy lets through, installs the
  // new map.
  ASSERT_TRUE(eventually([&] {
    client().refresh();
    return client().node_of(slot) == new_owner;
  })) << "the map still names "
      << client().node_of(slot);

  // The held read gets its reply now: the older map, which it must drop.
  proxy.release(FaultProxy::Direction::to_client);
  held.join();
  EXPECT_EQ(client().node_of(slot), new_owner);
  // And the lock is taken at the new owner, at once.
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  EXPECT_TRUE(lock.try_lock());
  EXPECT_EQ(at(promoted, {"GET", name}), lock.token());
  EXPECT_EQ(lock.release(), Release::released);
}

// The slot map while the cluster's own map changes under it: a suite of
// its own, since its tests fail over a master or leave a slot unserved.
class ClusterFailoverMap : public ClusterFailover {
 protected:
  /// CLUSTER SHARDS and CLUSTER SLOTS the client has asked, at every node.
  long long map_reads() {
    long long reads = 0;
    for (std::size_t i = 0; i < cluster().size(); ++i) {
      if (!cluster().node(i).running()) continue;
      reads += calls_at(i, "cluster|shards") + calls_at(i, "cluster|slots");
    }
    return reads;
  }
};

TEST_F(ClusterFailoverMap, AMapReadOnceTheLiveNodesAgreeNamesThePromotedNode) {
  const std::string name = name_on(0, "map-killed");
  Mutex warm(client(), name);
  ASSERT_TRUE(warm.try_lock());
  warm.unlock();
  const int first = cluster().first_slot_of(0);
  const std::size_t promoted = cluster().fail_over(0, /*kill=*/true);
  const RedisServer& node = cluster().node(promoted);
  const std::string address = node.host() + ":" + std::to_string(node.port());
  // Every live node says the promoted node owns the slots: so does a map
  // read from any of them, whatever the dead master's entry looks like.
  client().refresh();
  EXPECT_EQ(client().node_of(first), address);
  EXPECT_EQ(client().node_of(detail::key_slot(name)), address);
  // A call goes there at once: it has no dead master to try until its
  // deadline.
  Mutex timed(client(), name, LockOptions{}.ttl(10s));
  EXPECT_TRUE(timed.try_lock_for(3s));
  EXPECT_EQ(at(promoted, {"GET", name}), timed.token());
  EXPECT_EQ(timed.release(), Release::released);
}

TEST_F(ClusterFailoverMap, ACallWaitsForASlotNoNodeServesUntilItsDeadline) {
  const std::string name = name_on(1, "map-unserved");
  const int slot = detail::key_slot(name);
  cluster().unassign_slot(slot);
  struct Restore {
    RedisCluster& cluster;
    int slot;
    ~Restore() { cluster.restore_slot(slot); }
  } restore{cluster(), slot};
  // Until its deadline, as for the cluster's own CLUSTERDOWN: then an
  // outage (TimeoutError), not a busy lock.
  {
    Mutex lock(client(), name, LockOptions{}.ttl(10s));
    const auto started = Clock::now();
    EXPECT_THROW(static_cast<void>(lock.try_lock_for(300ms)), TimeoutError);
    EXPECT_GE(Clock::now() - started, 300ms);
    EXPECT_LT(Clock::now() - started, 300ms + 1s);
  }
  // And one whose slot gets an owner again before then takes the lock.
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  const long long reads = map_reads();
  std::atomic<bool> done{false};
  std::atomic<bool> got{false};
  std::string failed;
  Waiter<decltype(lock)> waiter{lock, std::thread([&] {
                                  try {
                                    got = lock.try_lock_for(20s);
                                  } catch (const Error& error) {
                                    failed = error.what();
                                  }
                                  done = true;
                                })};
  // It has read the map again and still found no owner.
  ASSERT_TRUE(eventually([&] { return done || map_reads() >= reads + 2; }));
  ASSERT_FALSE(done) << "it gave up while the slot had no owner: " << failed;
  cluster().restore_slot(slot);
  EXPECT_TRUE(eventually([&] { return done.load(); }));
  waiter.thread.join();
  EXPECT_EQ(failed, "");
  EXPECT_TRUE(got);
  EXPECT_EQ(at(1, {"GET", name}), lock.token());
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(ClusterFailoverMap, ACallToAKilledMasterWithNoSuccessorYetEndsByItsDeadline) {
  // Every node still names the dead master: its connects are refused (the
  // client has no pooled connection to it), and the call looks for a
  // successor until its deadline, not past it. (Its replica takes over on
  // its own only after cluster-node-timeout, 5 s.)
  const std::string name = name_on(2, "map-no-successor");
  cluster().kill(2);
  Mutex lock(client(), name, LockOptions{}.ttl(10s));
  const auto started = Clock::now();
  try {
    EXPECT_FALSE(lock.try_lock_for(1s));
  } catch (const ConnectionError&) {
    // No node to take the lock at: a failure, not a "no".
  }
  EXPECT_LT(Clock::now() - started, 1s + 1s);
}

}  // namespace
}  // namespace distlock
