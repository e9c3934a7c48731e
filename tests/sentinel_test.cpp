// SentinelClient against a real master, two replicas and three Sentinels
// (tests/support/sentinel_group.hpp): locks across SENTINEL FAILOVER and
// across kill -9 of the master, deadlines during the switch, leases
// revalidated on the new master or reported lost, waiters subscribed
// again; a plain Client whose server comes back as another process; bad
// input. Each test starts its own group (about 3 s) and fails over at most
// once (2 to 5 s).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "distlock/client.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/inspect.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/multi_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/sentinel_client.hpp"
#include "distlock/sentinel_options.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_group.hpp"

namespace distlock::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// A thread joined when it goes out of scope, so that a failed assertion
// in the test body does not end the process with a joinable thread.
class JoiningThread {
 public:
  template <class F>
  explicit JoiningThread(F&& body) : thread_(std::forward<F>(body)) {}
  ~JoiningThread() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

SentinelOptions sentinel_options(const SentinelGroup& group) {
  SentinelOptions options(SentinelGroup::master_name, group.sentinel_addresses());
  options.connect_timeout = milliseconds(500);
  options.command_timeout = milliseconds(1000);
  return options;
}

// Counts the events of one kind a client's locks report, after a mark.
class EventCount {
 public:
  EventHook hook() {
    return [this](const LockEvent& event) {
      std::lock_guard<std::mutex> guard(mutex_);
      if (counting_) ++counts_[static_cast<int>(event.type)];
    };
  }
  void start() {
    std::lock_guard<std::mutex> guard(mutex_);
    counting_ = true;
  }
  int of(LockEventType type) {
    std::lock_guard<std::mutex> guard(mutex_);
    return counts_[static_cast<int>(type)];
  }

 private:
  std::mutex mutex_;
  bool counting_ = false;
  int counts_[64] = {};
};

class Sentinel : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    group_ = std::make_unique<SentinelGroup>();
  }
  void TearDown() override { group_.reset(); }

  SentinelGroup& group() { return *group_; }
  std::unique_ptr<SentinelGroup> group_;
};

// A lease long enough that its scheduled renewal (every ttl/3) cannot be
// what the tests see within their limits: only revalidation can.
LockOptions long_lease() { return LockOptions{}.ttl(seconds(60)).auto_renew(true); }

// Takes `lock` through a Client whose server just went away and came back:
// the first step may meet the old, broken connection.
void take_after_reconnect(Mutex& lock) {
  for (int i = 0; i < 3 && !lock.owns_lock(); ++i) {
    try {
      static_cast<void>(lock.try_lock());
    } catch (const ConnectionError&) {
      // the broken connection, dropped: the next step makes a new one
    }
  }
}

TEST_F(Sentinel, FindsTheMasterAndEveryLockWorks) {
  SentinelClient sentinel(sentinel_options(group()));
  Mutex mutex(sentinel, "job");
  ASSERT_TRUE(mutex.try_lock());
  EXPECT_EQ(sentinel.master_address(), "127.0.0.1:" + std::to_string(group().master().port()));
  EXPECT_EQ(group().master().command({"EXISTS", "job"}), "1");
  mutex.unlock();
  ReentrantMutex reentrant(sentinel, "re");
  ASSERT_TRUE(reentrant.try_lock());
  reentrant.unlock();
  // A FairMutex waiter is woken on its own channel through the master the
  // Sentinels name (the holder's lease outlasts the waiter's deadline).
  FairMutex fair(sentinel, "fair", LockOptions{}.ttl(seconds(60)));
  ASSERT_TRUE(fair.try_lock());
  std::thread waiter([&] {
    FairMutex next(sentinel, "fair", LockOptions{}.ttl(seconds(60)));
    EXPECT_TRUE(next.try_lock_for(seconds(20)));
  });
  ASSERT_TRUE(eventually([&] {
    return group().master().command({"LLEN", fair.queue_key()}) == "1";
  }));
  fair.unlock();
  waiter.join();
  MultiMutex both(sentinel, {"move:a", "move:b"});
  ASSERT_TRUE(both.try_lock());
  EXPECT_EQ(group().master().command({"MGET", "move:a", "move:b"}),
            both.token() + "\n" + both.token());
  both.unlock();
  SharedMutex shared(sentinel, "rw");
  ASSERT_TRUE(shared.try_lock_shared());
  shared.unlock_shared();
  SimpleMutex simple(sentinel, "simple", LockOptions{}.ttl(seconds(5)));
  ASSERT_TRUE(simple.try_lock());
  simple.unlock();
  Semaphore permits(sentinel, "permits", 2);
  auto permit = permits.try_acquire();
  ASSERT_TRUE(permit);
  EXPECT_EQ(permit.release(), Release::released);
  StripedMutex stripes(sentinel, "stripes", 4);
  auto taken = stripes.try_lock_any_for(seconds(2));
  ASSERT_TRUE(taken);
  taken.guard.unlock();
  RateLimiter limiter(sentinel, "visits", RateOptions{}.fixed_window(1, seconds(10)));
  EXPECT_TRUE(limiter.try_acquire().allowed);
  EXPECT_FALSE(limiter.try_acquire().allowed);

  // The administrative functions take the same backend.
  ASSERT_TRUE(mutex.try_lock());
  EXPECT_TRUE(inspect(sentinel, "job").held);
  EXPECT_TRUE(is_locked(sentinel, "job"));
  EXPECT_TRUE(force_unlock(sentinel, "job"));
  EXPECT_EQ(group().master().command({"EXISTS", "job"}), "0");
  EXPECT_EQ(mutex.release(), Release::expired);
}

TEST_F(Sentinel, ReplicatedLeaseSurvivesSentinelFailoverAndIsRevalidated) {
  EventCount events;
  SentinelOptions options = sentinel_options(group());
  options.on_event = events.hook();
  SentinelClient sentinel(options);
  std::atomic<int> lost_calls{0};
  Mutex held(sentinel, "job",
             long_lease().replicas_majority(milliseconds(1000)).on_lost([&](const LeaseInfo&) {
               ++lost_calls;
             }));
  ASSERT_TRUE(held.try_lock());
  const std::string old_master = sentinel.master_address();
  events.start();
  group().failover();
  // The switch is learned from the Sentinels' announcement, and the lease
  // revalidated at once (its next scheduled renewal is 20 s away).
  ASSERT_TRUE(eventually([&] { return sentinel.switches() >= 1; })) << "no switch seen";
  EXPECT_NE(sentinel.master_address(), old_master);
  // The new master has one replica at first (the old master rejoins as
  // the second): a round WAIT cannot confirm is unknown and tried again
  // soon, with the replicas counted again; the lease stays held meanwhile.
  EXPECT_TRUE(eventually([&] { return events.of(LockEventType::renewed) >= 1; }, seconds(15)))
      << "the lease was not revalidated on the new master";
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(lost_calls.load(), 0);
  EXPECT_GT(held.validity(), seconds(50));
  EXPECT_EQ(group().master().command({"GET", "job"}), held.token());
  // Locks keep working on the new master.
  Mutex other(sentinel, "other");
  EXPECT_TRUE(other.try_lock_for(seconds(5)));
  other.unlock();
  EXPECT_EQ(held.release(), Release::released);
}

TEST_F(Sentinel, LeaseThePromotedReplicaNeverHadIsReportedLost) {
  SentinelClient sentinel(sentinel_options(group()));
  std::atomic<int> taken{0};
  Mutex held(sentinel, "job", long_lease().on_lost([&](const LeaseInfo& info) {
    if (info.reason == LostReason::taken) ++taken;
  }));
  // Neither replica gets the grant: both stopped, their links cut.
  group().replica(0).pause();
  group().replica(1).pause();
  group().master().command({"CLIENT", "KILL", "TYPE", "replica"});
  ASSERT_TRUE(held.try_lock());
  const int old_port = group().master().port();
  group().kill_master();
  group().replica(0).resume();  // replica() no longer counts the dead master
  group().replica(1).resume();
  // Meanwhile callers with deadlines return by them, whatever the switch does.
  std::atomic<bool> switching{true};
  std::atomic<long long> worst_overrun_ms{0};
  JoiningThread caller([&] {
    Mutex probe(sentinel, "probe", LockOptions{}.ttl(seconds(5)));
    while (switching) {
      const auto start = steady_clock::now();
      bool got = false;
      try {
        got = probe.try_lock_for(milliseconds(300));
      } catch (const Error&) {
      }
      const auto overrun =
          std::chrono::duration_cast<milliseconds>(steady_clock::now() - start - milliseconds(300));
      worst_overrun_ms = std::max<long long>(worst_overrun_ms, overrun.count());
      if (got) probe.unlock();
    }
  });
  struct Stop {
    std::atomic<bool>& flag;
    ~Stop() { flag = false; }
  } stop{switching};
  group().wait_for_switch(old_port);
  EXPECT_TRUE(eventually([&] { return held.lost(); })) << "the lease was believed after failover";
  switching = false;
  caller.join();
  EXPECT_TRUE(eventually([&] { return taken.load() > 0; }));  // on_lost runs after lost()
  EXPECT_EQ(taken.load(), 1);
  EXPECT_LT(worst_overrun_ms.load(), 1500) << "a caller overran its deadline during the switch";
  EXPECT_EQ(held.release(), Release::lost);
  // And the name is free on the new master.
  Mutex second(sentinel, "job", LockOptions{}.ttl(seconds(5)));
  EXPECT_TRUE(second.try_lock_for(seconds(5)));
}

// A lease of fixed ttl (no auto_renew) answers to a failover too: the one
// both replicas had is kept, with its expiry as it was (not lengthened);
// the one no replica had is reported lost. The hook hears of the switch
// once.
TEST_F(Sentinel, FixedTtlLeasesAreRevalidatedOnTheNewMaster) {
  EventCount events;
  SentinelOptions options = sentinel_options(group());
  options.on_event = events.hook();
  SentinelClient sentinel(options);
  const LockOptions fixed = LockOptions{}.ttl(seconds(60));
  std::atomic<int> kept_lost{0};
  std::atomic<int> taken{0};
  Mutex kept(sentinel, "kept",
             LockOptions(fixed).replicas(2, milliseconds(1000)).on_lost([&](const LeaseInfo&) {
               ++kept_lost;
             }));
  ASSERT_TRUE(kept.try_lock());
  // Neither replica gets the second grant: both stopped, their links cut.
  group().replica(0).pause();
  group().replica(1).pause();
  group().master().command({"CLIENT", "KILL", "TYPE", "replica"});
  Mutex gone(sentinel, "gone", LockOptions(fixed).on_lost([&](const LeaseInfo& info) {
    if (info.reason == LostReason::taken) ++taken;
  }));
  ASSERT_TRUE(gone.try_lock());
  events.start();
  const int old_port = group().master().port();
  group().kill_master();
  group().replica(0).resume();
  group().replica(1).resume();
  group().wait_for_switch(old_port);
  EXPECT_TRUE(eventually([&] { return gone.lost(); }))
      << "a fixed-ttl lease the new master never had was still believed";
  // lost() turns true before on_lost runs: wait on the hook.
  EXPECT_TRUE(eventually([&] { return taken.load() > 0; }));
  EXPECT_EQ(taken.load(), 1);
  EXPECT_EQ(gone.release(), Release::lost);
  EXPECT_TRUE(eventually([&] { return events.of(LockEventType::master_switched) >= 1; }));
  EXPECT_EQ(events.of(LockEventType::master_switched), static_cast<int>(sentinel.switches()));
  EXPECT_FALSE(kept.lost());
  EXPECT_EQ(kept_lost.load(), 0);
  EXPECT_EQ(group().master().command({"GET", "kept"}), kept.token());
  // Revalidation does not lengthen a fixed lease.
  EXPECT_LE(kept.validity(), seconds(60));
  EXPECT_LE(std::stoll(group().master().command({"PTTL", "kept"})), 60000);
  EXPECT_EQ(events.of(LockEventType::renewed), 0);
  EXPECT_EQ(kept.release(), Release::released);
}

// Destroying the last handle while the watch thread is asking a master
// that does not answer (stopped) returns at once, not after the command
// timeout (10 s here).
TEST_F(Sentinel, DestructionDoesNotWaitForALookInProgress) {
  SentinelOptions options = sentinel_options(group());
  options.connect_timeout = seconds(10);
  options.command_timeout = seconds(10);
  auto sentinel = std::make_unique<SentinelClient>(options);
  {
    Mutex mutex(*sentinel, "job", LockOptions{}.ttl(seconds(5)));
    ASSERT_TRUE(mutex.try_lock());
    mutex.unlock();
  }
  // No failover while the master is stopped: the Sentinels wait a minute.
  for (std::size_t i = 0; i < 3; ++i) {
    group().sentinel(i).command(
        {"SENTINEL", "SET", SentinelGroup::master_name, "down-after-milliseconds", "60000"});
  }
  RedisServer& master = group().master();
  master.pause();
  // Sentinels accept no PUBLISH but their own hellos, so the watch is sent
  // looking by a resubscription: its connection is killed, it connects
  // again (one new connection), is woken, and asks the Sentinel (another),
  // then asks the stopped master ROLE and waits for the reply.
  RedisServer& watched = group().sentinel(0);
  ASSERT_TRUE(eventually([&] {
    return !watched.command({"CLIENT", "LIST", "TYPE", "pubsub"}).empty();
  })) << "the watch is not subscribed";
  const auto connections = [&] {
    const std::string stats = watched.command({"INFO", "stats"});
    const std::string field = "total_connections_received:";
    return std::stoll(stats.substr(stats.find(field) + field.size()));
  };
  const long long before = connections();
  watched.command({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return connections() >= before + 2; })) << "the watch did not look";
  const auto start = steady_clock::now();
  sentinel.reset();
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - start);
  EXPECT_LT(took, seconds(1)) << "destruction waited " << took.count() << " ms for the look";
  master.resume();
}

TEST_F(Sentinel, WaiterIsWokenByAReleaseOnTheNewMaster) {
  SentinelClient holder_side(sentinel_options(group()));
  SentinelClient waiter_side(sentinel_options(group()));
  // Both replicas have the grant, whichever is promoted.
  Mutex holder(holder_side, "job", long_lease().replicas(2, milliseconds(1000)));
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> acquired{false};
  std::atomic<long long> acquired_at_ns{0};
  JoiningThread waiter([&] {
    Mutex lock(waiter_side, "job", LockOptions{}.ttl(seconds(5)));
    const auto limit = steady_clock::now() + seconds(30);
    while (!acquired && steady_clock::now() < limit) {
      try {
        // A step that meets the dead master throws; a waiter asleep when
        // the master moves is subscribed again and keeps waiting.
        if (lock.try_lock_until(limit)) {
          acquired_at_ns = steady_clock::now().time_since_epoch().count();
          acquired = true;
          lock.unlock();
        }
      } catch (const Error&) {
      }
    }
  });
  // From here on a failed check lets the test go on to the release, which
  // ends the waiter.
  EXPECT_TRUE(eventually(
      [&] { return distlock::detail::NotifierProbe::channel_count(waiter_side.notifier()) == 1; }));
  const int old_port = group().master().port();
  group().kill_master();
  EXPECT_NO_THROW(group().wait_for_switch(old_port));
  EXPECT_TRUE(eventually([&] { return waiter_side.switches() >= 1; }));
  // Subscribed again at the new master before the release.
  EXPECT_TRUE(eventually([&] {
    return group().master().command({"PUBSUB", "NUMSUB", "{job}:released"}) == "{job}:released\n1";
  })) << "the waiter is not subscribed at the new master";
  EXPECT_TRUE(eventually([&] { return !holder.lost() && holder_side.switches() >= 1; }));
  const auto released = steady_clock::now();
  holder.unlock();
  waiter.join();
  ASSERT_TRUE(acquired.load());
  const auto woke = steady_clock::time_point(steady_clock::duration(acquired_at_ns.load()));
  EXPECT_LT(woke - released, seconds(3)) << "the waiter was not woken by the release";
}

// The Sentinels and the data nodes each have their own password: each is
// sent where it belongs, and one in the wrong place is refused.
TEST(SentinelAuth, SentinelsAndDataNodesAuthenticateSeparately) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  SentinelGroup group("data-secret", "sentinel-secret");
  SentinelOptions options = sentinel_options(group);
  options.password = "data-secret";
  options.sentinel_password = "sentinel-secret";
  SentinelClient sentinel(options);
  Mutex mutex(sentinel, "job");
  ASSERT_TRUE(mutex.try_lock());
  mutex.unlock();

  SentinelOptions swapped = options;
  swapped.password = "sentinel-secret";
  swapped.sentinel_password = "data-secret";
  SentinelClient wrong(swapped);
  Mutex refused(wrong, "job");
  try {
    static_cast<void>(refused.try_lock());
    FAIL() << "locked with the passwords swapped";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("sentinel"), std::string::npos) << error.what();
  }
}

TEST(SentinelBadInput, UnknownMasterNameIsAClearError) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  RedisServerOptions options;
  options.sentinel = true;
  options.config_lines = {"sentinel monitor known 127.0.0.1 1 2"};
  RedisServer lone_sentinel(options);
  SentinelOptions sentinel_options("unknown",
                                   {"127.0.0.1:" + std::to_string(lone_sentinel.port())});
  SentinelClient sentinel(sentinel_options);
  Mutex mutex(sentinel, "job");
  const auto start = steady_clock::now();
  try {
    static_cast<void>(mutex.try_lock_for(seconds(5)));
    FAIL() << "locked through a master no Sentinel knows";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("unknown"), std::string::npos) << error.what();
  }
  EXPECT_LT(steady_clock::now() - start, seconds(2)) << "an unknown name is not worth waiting for";
}

TEST(SentinelBadInput, NoSentinelReachableFailsByTheDeadline) {
  const int closed_port = detail::pick_free_port();
  SentinelOptions options("mymaster", {"127.0.0.1:" + std::to_string(closed_port)});
  options.connect_timeout = milliseconds(200);
  SentinelClient sentinel(options);
  Mutex mutex(sentinel, "job");
  auto start = steady_clock::now();
  // Kept asking until the deadline: an outage, not a busy lock.
  EXPECT_THROW(static_cast<void>(mutex.try_lock_for(milliseconds(400))), TimeoutError);
  EXPECT_LT(steady_clock::now() - start, milliseconds(1400));
  start = steady_clock::now();
  try {
    static_cast<void>(mutex.try_lock());
    FAIL() << "locked with no Sentinel reachable";
  } catch (const ConnectionError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find(std::to_string(closed_port)), std::string::npos) << what;
    // The error is said once: the wait that gave up adds no second copy
    // of the code's message.
    const std::string twice = error.code().message() + ": " + error.code().message();
    EXPECT_EQ(what.find(twice), std::string::npos) << what;
  }
  EXPECT_LT(steady_clock::now() - start, seconds(3));
}

TEST(SentinelBadInput, OptionsAreChecked) {
  EXPECT_THROW(SentinelClient(SentinelOptions("", {"127.0.0.1:26379"})), InvalidArgument);
  EXPECT_THROW(SentinelClient(SentinelOptions("m", {})), InvalidArgument);
  EXPECT_THROW(SentinelClient(SentinelOptions("m", {"user@127.0.0.1:26379"})), InvalidArgument);
}

// A plain Client whose endpoint comes back as another server process (a
// restart without persistence on the same port): its leases are gone, and
// it says so as soon as it reconnects, not at the next scheduled renewal.
TEST(ClientRestart, LeasesAreRevalidatedOnANewServerProcess) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  RedisServer server;
  Client client(client_options(server));
  std::atomic<int> taken{0};
  Mutex held(client, "job", long_lease().on_lost([&](const LeaseInfo& info) {
    if (info.reason == LostReason::taken) ++taken;
  }));
  ASSERT_TRUE(held.try_lock());
  server.restart();
  // Any step through the Client reconnects; the new server's run_id differs.
  Mutex other(client, "other", LockOptions{}.ttl(seconds(5)));
  take_after_reconnect(other);
  ASSERT_TRUE(other.owns_lock());
  EXPECT_TRUE(eventually([&] { return held.lost(); }, seconds(5)))
      << "a lease granted by the old server process was still believed";
  EXPECT_TRUE(eventually([&] { return taken.load() > 0; }));  // on_lost runs after lost()
  EXPECT_EQ(taken.load(), 1);
}

// The same with a lease of fixed ttl, and the rest of a same-address
// failover: the hook hears master_switched once (the new process's
// endpoint), and a new lock works.
TEST(ClientRestart, SameAddressNewServerReportsEveryLeaseLostAndTheSwitch) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  RedisServer server;
  EventCount events;
  ClientOptions options = client_options(server);
  options.on_event = events.hook();
  Client client(options);
  std::atomic<int> taken{0};
  const auto count_taken = [&](const LeaseInfo& info) {
    if (info.reason == LostReason::taken) ++taken;
  };
  Mutex renewed(client, "renewed", long_lease().on_lost(count_taken));
  Mutex fixed(client, "fixed", LockOptions{}.ttl(seconds(60)).on_lost(count_taken));
  ASSERT_TRUE(renewed.try_lock());
  ASSERT_TRUE(fixed.try_lock());
  events.start();
  server.restart();
  Mutex other(client, "other", LockOptions{}.ttl(seconds(60)));
  take_after_reconnect(other);
  ASSERT_TRUE(other.owns_lock());
  EXPECT_TRUE(eventually([&] { return renewed.lost() && fixed.lost(); }, seconds(5)))
      << "a lease granted by the old server process was still believed";
  EXPECT_TRUE(eventually([&] { return taken.load() >= 2; }));  // on_lost runs after lost()
  EXPECT_EQ(taken.load(), 2);
  EXPECT_EQ(events.of(LockEventType::master_switched), 1);
  EXPECT_EQ(events.of(LockEventType::lost), 2);
  EXPECT_EQ(fixed.release(), Release::lost);
  Mutex again(client, "fixed", LockOptions{}.ttl(seconds(5)));
  EXPECT_TRUE(again.try_lock());
  EXPECT_EQ(other.release(), Release::released);
}

// A connection dropped by the same server process is no switch: the
// leases are revalidated and kept, fixed ttl too, and no event is told.
TEST(ClientRestart, DroppedConnectionToTheSameServerKeepsLeasesAndSwitchesNothing) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  RedisServer server;
  EventCount events;
  ClientOptions options = client_options(server);
  options.on_event = events.hook();
  Client client(options);
  Mutex fixed(client, "fixed", LockOptions{}.ttl(seconds(60)));
  ASSERT_TRUE(fixed.try_lock());
  events.start();
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  Mutex other(client, "other", LockOptions{}.ttl(seconds(5)));
  take_after_reconnect(other);
  ASSERT_TRUE(other.owns_lock());
  client.watchdog().renew_all_now();  // a round that revalidates the fixed lease too
  EXPECT_FALSE(fixed.lost());
  EXPECT_EQ(events.of(LockEventType::master_switched), 0);
  EXPECT_LE(std::stoll(server.command({"PTTL", "fixed"})), 60000);
  EXPECT_EQ(fixed.release(), Release::released);
}

}  // namespace
}  // namespace distlock::testing
