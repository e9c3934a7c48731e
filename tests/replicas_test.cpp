// Replica acknowledgement (LockOptions::replicas) against a real master and
// replica (tests/support/replicated_server.hpp): the failover double grant
// without it, and what it changes; every single-server lock type; deadlines;
// bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distlock/client.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/replicated_server.hpp"

namespace distlock::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

class Replicas : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    servers_ = std::make_unique<ReplicatedServer>(1);
    client_ = std::make_unique<Client>(client_options(servers_->master()));
  }
  void TearDown() override {
    client_.reset();
    servers_.reset();
  }

  ReplicatedServer& servers() { return *servers_; }
  Client& client() { return *client_; }
  std::string master_get(const std::string& key) {
    return servers().master().command({"GET", key});
  }
  std::string master_exists(const std::string& key) {
    return servers().master().command({"EXISTS", key});
  }

  // The failover of the issue: the master dies with whatever its replica
  // had not received, and the replica becomes the master.
  void fail_over() {
    servers().kill_master();
    servers().continue_replica();
    servers().promote();
  }

  static LockOptions replicated() {
    return LockOptions{}.ttl(seconds(30)).replicas(1, milliseconds(300));
  }

  std::unique_ptr<ReplicatedServer> servers_;
  std::unique_ptr<Client> client_;
};

// The control: without replicas(), the failover hands the lock out twice.
// If this ever stops happening the scenario below proves nothing.
TEST_F(Replicas, WithoutReplicasFailoverGrantsTheLockTwice) {
  Mutex first(client(), "job", LockOptions{}.ttl(seconds(30)));
  servers().stop_replica();
  // Cut the link too: bytes the master wrote to a stopped replica's socket
  // would still be read by it before it notices the master's death.
  servers().master().command({"CLIENT", "KILL", "TYPE", "replica"});
  ASSERT_TRUE(first.try_lock());
  fail_over();
  Client promoted(client_options(servers().replica()));
  Mutex second(promoted, "job", LockOptions{}.ttl(seconds(30)));
  EXPECT_TRUE(second.try_lock()) << "the promoted replica never had the first grant";
  EXPECT_TRUE(first.owns_lock());  // both believe they hold it
}

TEST_F(Replicas, GrantNotAcknowledgedThrowsAndLeavesNoKey) {
  Mutex lock(client(), "job", replicated());
  servers().stop_replica();
  try {
    static_cast<void>(lock.try_lock());
    FAIL() << "try_lock() reported a grant no replica had";
  } catch (const NotReplicatedError& error) {
    EXPECT_EQ(error.code(), Errc::not_replicated);
    EXPECT_EQ(error.acknowledged(), 0);
    EXPECT_EQ(error.wanted(), 1);
  }
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(master_exists("job"), "0");
  servers().continue_replica();
}

TEST_F(Replicas, AcknowledgedGrantSurvivesFailover) {
  Mutex first(client(), "job", replicated());
  ASSERT_TRUE(first.try_lock());
  EXPECT_EQ(first.replicas_acknowledged(), 1);
  const std::string token = first.token();
  fail_over();
  EXPECT_EQ(servers().replica().command({"GET", "job"}), token);
  Client promoted(client_options(servers().replica()));
  Mutex second(promoted, "job", LockOptions{}.ttl(seconds(30)));
  EXPECT_FALSE(second.try_lock()) << "the promoted replica gave out a lock already held";
}

TEST_F(Replicas, TryLockForReturnsByItsDeadlineWhileReplicaStopped) {
  // The replica timeout is far past the deadline: the deadline cuts WAIT.
  Mutex lock(client(), "job", LockOptions{}.ttl(seconds(30)).replicas(1, seconds(10)));
  ASSERT_TRUE(lock.try_lock());  // reads INFO replication while all is well
  lock.unlock();
  servers().stop_replica();
  const auto start = steady_clock::now();
  EXPECT_FALSE(lock.try_lock_for(milliseconds(300)));
  // Slack for a loaded machine, far below the 10 s WAIT the deadline cuts.
  // The undo of the grant whose WAIT never answered goes apart, on a
  // connection of its own, after the call.
  EXPECT_LE(steady_clock::now() - start, milliseconds(300 + 200));
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_TRUE(eventually([&] { return master_exists("job") == "0"; }))
      << "the grant no replica acknowledged was not given back";
  servers().continue_replica();
}

TEST_F(Replicas, UndoOfAGrantWhoseWaitNeverAnsweredIsNotLostWithItsConnection) {
  // The server drops a closed client's commands queued behind a blocked
  // one. Held up on the way, as a busy server would leave it unread, WAIT
  // reaches the server together with the undo written behind it and the
  // close: WAIT blocks (the replica is stopped), the close frees the
  // client, and an undo queued behind WAIT never runs, leaving the grant
  // for its 30 s lease.
  FaultProxy proxy(servers().master().host(), servers().master().port());
  ClientOptions through = client_options(servers().master());
  through.host = proxy.host();
  through.port = proxy.port();
  Client proxied(through);
  Mutex lock(proxied, "job", LockOptions{}.ttl(seconds(30)).replicas(1, seconds(10)));
  ASSERT_TRUE(lock.try_lock());  // reads INFO replication while all is well
  lock.unlock();
  servers().stop_replica();
  proxy.set_latency(FaultProxy::Direction::to_client, milliseconds(300));  // the grant's reply
  auto attempt = std::async(std::launch::async, [&] { return lock.try_lock_for(seconds(1)); });
  const auto granted_by = steady_clock::now() + seconds(5);
  while (master_exists("job") != "1" && steady_clock::now() < granted_by) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_EQ(master_exists("job"), "1");
  proxy.stall(FaultProxy::Direction::to_server);  // what follows the grant: WAIT, undo, close
  EXPECT_FALSE(attempt.get());
  proxy.set_latency(FaultProxy::Direction::to_client, milliseconds(0));
  proxy.release(FaultProxy::Direction::to_server);
  const auto undone_by = steady_clock::now() + seconds(5);
  while (master_exists("job") != "0" && steady_clock::now() < undone_by) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(master_exists("job"), "0") << "the undo was lost; the grant stays for its lease";
  servers().continue_replica();
}

TEST_F(Replicas, UndoOfAnAttemptTheServerReadsLateIsNotLostBehindItsWait) {
  // The attempt carries its WAIT in the same write. A stopped master reads
  // the attempt, its WAIT, the undo written behind them and the close all
  // at once when it resumes: the WAIT blocks (the replica is stopped), the
  // close frees the client, and an undo queued behind the WAIT never runs.
  // The attempt must be undone on a connection of its own as well.
  Mutex lock(client(), "job", LockOptions{}.ttl(seconds(30)).replicas(1, seconds(10)));
  ASSERT_TRUE(lock.try_lock());  // reads INFO replication while all is well
  lock.unlock();
  servers().stop_replica();
  servers().master().pause();
  // The master silent: an outage, not a busy lock.
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(milliseconds(300))), TimeoutError);
  servers().master().resume();
  const auto undone_by = steady_clock::now() + seconds(5);
  while (master_exists("job") != "0" && steady_clock::now() < undone_by) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(master_exists("job"), "0") << "the undo was lost; the grant stays for its lease";
  servers().continue_replica();
}

TEST_F(Replicas, ScriptedGrantIsConfirmedAfterTheScriptCacheWasFlushed) {
  // After NOSCRIPT the WAIT sent with the EVALSHA answered for nothing:
  // the EVAL that follows is confirmed by a WAIT of its own.
  Mutex lock(client(), "job", replicated().fencing(true));
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  servers().master().command({"SCRIPT", "FLUSH"});
  servers().stop_replica();
  EXPECT_THROW(static_cast<void>(lock.try_lock()), NotReplicatedError);
  EXPECT_EQ(master_exists("job"), "0");
  servers().continue_replica();
  servers().wait_in_sync();
  servers().master().command({"SCRIPT", "FLUSH"});
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.replicas_acknowledged(), 1);
  lock.unlock();
}

TEST_F(Replicas, RefusedAttemptsAndExtendsKeepTheirConnection) {
  // A refused step's WAIT is read too, so the pooled connection owes no
  // reply and is lent again, not dropped and replaced.
  Mutex holder(client(), "job", replicated());
  ASSERT_TRUE(holder.try_lock());
  ClientOptions one = client_options(servers().master());
  one.pool_size = 1;
  Client single(one);
  Mutex waiter(single, "job", replicated());
  Mutex other(single, "other", replicated());
  ASSERT_TRUE(other.try_lock());  // connects, reads INFO replication
  Connection probe(client_options(servers().master()));
  // The id of the one pooled connection (not a count of the server's
  // connections: the Client's server watch connects on its own thread).
  const auto pooled = [&] { return single.command("CLIENT", "ID").integer(); };
  const long long before = pooled();
  EXPECT_FALSE(waiter.try_lock());         // refused attempt
  EXPECT_TRUE(other.extend(seconds(60)));  // extend that took effect
  probe.command("DEL", "other");
  EXPECT_FALSE(other.extend(seconds(60)));  // refused extend
  holder.unlock();
  EXPECT_TRUE(waiter.try_lock());
  EXPECT_EQ(waiter.replicas_acknowledged(), 1);
  EXPECT_EQ(pooled(), before) << "a connection was dropped and replaced";
}

TEST_F(Replicas, FencedGrantIsConfirmedWithItsFence) {
  Mutex lock(client(), "job", replicated().fencing(true));
  ASSERT_TRUE(lock.try_lock());
  const long long fence = lock.fence();
  lock.unlock();
  fail_over();
  // The counter the promoted replica has is the one the grant returned.
  EXPECT_EQ(servers().replica().command({"GET", "{job}:fence"}), std::to_string(fence));
}

TEST_F(Replicas, ExtendNotAcknowledgedThrowsAndKeepsTheHold) {
  Mutex lock(client(), "job", replicated());
  ASSERT_TRUE(lock.try_lock());
  servers().stop_replica();
  EXPECT_THROW(static_cast<void>(lock.extend(seconds(60))), NotReplicatedError);
  EXPECT_TRUE(lock.owns_lock());
  servers().continue_replica();
  servers().wait_in_sync();
  EXPECT_TRUE(lock.extend(seconds(60)));
}

TEST_F(Replicas, RenewalsNoReplicaAcknowledgesDoNotKeepTheLease) {
  Mutex lock(client(), "job",
             LockOptions{}.ttl(milliseconds(900)).auto_renew(true).replicas(1, milliseconds(200)));
  ASSERT_TRUE(lock.try_lock());
  client().watchdog().renew_all_now();  // confirmed: the replica answers
  EXPECT_FALSE(lock.lost());
  servers().stop_replica();
  // Renewals still reach the master, but are not counted: the lease runs out.
  const auto until = steady_clock::now() + seconds(5);
  while (!lock.lost() && steady_clock::now() < until) {
    client().watchdog().renew_all_now();
  }
  EXPECT_TRUE(lock.lost());
  servers().continue_replica();
}

TEST_F(Replicas, SimpleMutexRefusesAutoRenewalWithReplicas) {
  EXPECT_THROW(SimpleMutex(client(), "job", LockOptions{}.replicas(1, seconds(1))),
               InvalidArgument);
  SimpleMutex unrenewed(client(), "job", LockOptions{}.ttl(seconds(5)).replicas(1, seconds(1)));
  EXPECT_FALSE(unrenewed.owns_lock());
}

// Every single-server lock type: a grant no replica has is given back and
// reported, one the replica has is held.
template <class Lock, class Take>
void expect_confirmed(ReplicatedServer& servers, Client& client, Take take,
                      const std::string& key) {
  Lock lock(client, "job", LockOptions{}.ttl(seconds(30)).replicas(1, milliseconds(300)));
  servers.stop_replica();
  EXPECT_THROW(static_cast<void>(take(lock)), NotReplicatedError);
  EXPECT_EQ(servers.master().command({"EXISTS", key}), "0");
  servers.continue_replica();
  servers.wait_in_sync();
  EXPECT_TRUE(take(lock));
}

TEST_F(Replicas, EveryLockTypeWaitsForItsReplica) {
  const auto exclusive = [](auto& lock) { return lock.try_lock(); };
  {
    SCOPED_TRACE("SimpleMutex");
    expect_confirmed<SimpleMutex>(servers(), client(), exclusive, "job");
  }
  client().command("DEL", "job");
  {
    SCOPED_TRACE("ReentrantMutex");
    expect_confirmed<ReentrantMutex>(servers(), client(), exclusive, "job");
  }
  client().command("DEL", "job");
  {
    SCOPED_TRACE("SharedMutex write");
    expect_confirmed<SharedMutex>(servers(), client(), exclusive, "job");
  }
  client().command("DEL", "job");
  {
    SCOPED_TRACE("SharedMutex read");
    expect_confirmed<SharedMutex>(
        servers(), client(), [](SharedMutex& lock) { return lock.try_lock_shared(); }, "job");
  }
}

TEST_F(Replicas, MoreReplicasThanConnectedIsAnErrorAtOnce) {
  Mutex lock(client(), "job", LockOptions{}.ttl(seconds(30)).replicas(2, seconds(10)));
  const auto start = steady_clock::now();
  try {
    static_cast<void>(lock.try_lock());
    FAIL() << "replicas(2) with one replica connected";
  } catch (const NotReplicatedError& error) {
    EXPECT_EQ(error.acknowledged(), 1);
    EXPECT_EQ(error.wanted(), 2);
    EXPECT_NE(std::string(error.what()).find("connected"), std::string::npos) << error.what();
  }
  EXPECT_LT(steady_clock::now() - start, seconds(5)) << "waited for a replica that is not there";
  EXPECT_EQ(master_exists("job"), "0");
}

TEST_F(Replicas, MajorityOfOneReplicaIsOne) {
  Mutex lock(client(), "job", LockOptions{}.ttl(seconds(30)).replicas_majority(milliseconds(200)));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.replicas_acknowledged(), 1);
  lock.unlock();
  servers().stop_replica();
  EXPECT_THROW(static_cast<void>(lock.try_lock()), NotReplicatedError);
  servers().continue_replica();
}

TEST_F(Replicas, WaitRefusedByAclIsAClearError) {
  servers().master().command(
      {"ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait"});
  ClientOptions options = client_options(servers().master());
  options.username = "nowait";
  options.password = "pw";
  Client limited(options);
  Mutex lock(limited, "job", replicated());
  try {
    static_cast<void>(lock.try_lock());
    FAIL() << "WAIT was refused, yet the lock was reported held";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::noperm);
    EXPECT_NE(std::string(error.what()).find("WAIT"), std::string::npos) << error.what();
  }
  EXPECT_EQ(master_exists("job"), "0");
}

TEST(ReplicasOptions, BadInputIsRefusedWhereWritten) {
  EXPECT_THROW(LockOptions{}.replicas(0, seconds(1)), InvalidArgument);
  EXPECT_THROW(LockOptions{}.replicas(-3, seconds(1)), InvalidArgument);
  EXPECT_THROW(LockOptions{}.replicas(LockOptions::max_replicas + 1, seconds(1)), InvalidArgument);
  EXPECT_THROW(LockOptions{}.replicas(1, milliseconds(0)), InvalidArgument);  // WAIT 0: for ever
  EXPECT_THROW(LockOptions{}.replicas_majority(milliseconds(-5)), InvalidArgument);
  EXPECT_EQ(LockOptions{}.replicas(), 0);
  const LockOptions majority = LockOptions{}.replicas_majority(seconds(1));
  EXPECT_EQ(majority.replicas(), LockOptions::majority);
  EXPECT_EQ(majority.replica_timeout(), seconds(1));
}

class ReplicasOnLoneMaster : public RedisClientTest {};

TEST_F(ReplicasOnLoneMaster, MajorityOfNoReplicasIsAnError) {
  Mutex lock(client(), "job", LockOptions{}.replicas_majority(seconds(1)));
  EXPECT_THROW(static_cast<void>(lock.try_lock()), NotReplicatedError);
  EXPECT_EQ(get("job"), "(nil)");
}

}  // namespace
}  // namespace distlock::testing
