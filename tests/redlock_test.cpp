// Tests for redlock.hpp, against five real redis-servers per test: quorum
// with masters killed or stopped, the validity rule, the cleanup of failed
// attempts, release and extend with masters missing, validation, and the
// timeout rules.
#include "distlock/redlock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;

class RedlockTest : public ::testing::Test {
 protected:
  static constexpr std::size_t count = 5;

  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    for (std::size_t i = 0; i < count; ++i) {
      servers_.push_back(std::make_unique<testing::RedisServer>());
      clients_.push_back(std::make_unique<Client>(client_options(*servers_.back())));
    }
  }

  void TearDown() override {
    clients_.clear();
    servers_.clear();
  }

  testing::RedisServer& server(std::size_t i) { return *servers_[i]; }
  Client& client(std::size_t i) { return *clients_[i]; }
  std::string endpoint(std::size_t i) { return client(i).options().endpoint(); }

  std::vector<Client*> masters() {
    std::vector<Client*> out;
    for (const auto& c : clients_) out.push_back(c.get());
    return out;
  }

  /// A command on master i through a connection of its own, so the pools
  /// under test are not involved.
  std::string on(std::size_t i, const std::vector<std::string>& argv) {
    return server(i).command(argv);
  }
  bool has_key(std::size_t i, const std::string& key) { return on(i, {"EXISTS", key}) == "1"; }
  testing::CommandCalls calls_on(std::size_t i) {
    return testing::CommandCalls{on(i, {"INFO", "commandstats"})};
  }

  std::vector<std::unique_ptr<testing::RedisServer>> servers_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(RedlockTest, AcquiresOnEveryMasterWithOneTokenAndLease) {
  Redlock lock(masters(), "job", LockOptions{}.ttl(10s));
  EXPECT_EQ(lock.quorum(), 3u);
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(lock.token().size(), 32u);
  for (std::size_t i = 0; i < count; ++i) {
    // The plain layout node-redlock and redsync use.
    EXPECT_EQ(on(i, {"GET", "job"}), lock.token()) << i;
    EXPECT_EQ(on(i, {"TYPE", "job"}), "string") << i;
    const long long pttl = std::stoll(on(i, {"PTTL", "job"}));
    EXPECT_GT(pttl, 9000) << i;
    EXPECT_LE(pttl, 10000) << i;
  }
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.step, RedlockStep::acquire);
  EXPECT_TRUE(attempt.succeeded);
  EXPECT_EQ(attempt.quorum, 3u);
  ASSERT_EQ(attempt.nodes.size(), count);
  for (const NodeOutcome& node : attempt.nodes) {
    EXPECT_EQ(node.status, NodeStatus::ok);
    EXPECT_FALSE(node.error);
    EXPECT_TRUE(node.message.empty());
  }
  EXPECT_EQ(attempt.validity, 10s - attempt.elapsed - redlock_drift(10s));
  EXPECT_EQ(redlock_drift(10s), 102ms);
  EXPECT_GT(lock.validity(), 9s);
  EXPECT_LE(lock.validity(), 10s - 102ms);

  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(lock.last_attempt().step, RedlockStep::release);
  EXPECT_EQ(lock.last_attempt().ok(), count);
  for (std::size_t i = 0; i < count; ++i) EXPECT_FALSE(has_key(i, "job")) << i;
}

TEST_F(RedlockTest, AcquiresWithTwoMastersDownEveryTime) {
  server(1).kill();
  server(3).kill();
  Redlock lock(masters(), "k");
  ASSERT_TRUE(lock.try_lock());
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.ok(), 3u);
  for (const std::size_t down : {1u, 3u}) {
    EXPECT_EQ(attempt.nodes[down].status, NodeStatus::failed);
    EXPECT_EQ(attempt.nodes[down].error, Errc::connect_failed);
    EXPECT_NE(attempt.nodes[down].message.find(endpoint(down)), std::string::npos)
        << attempt.nodes[down].message;
  }
  lock.unlock();

  int acquired = 0;
  for (int i = 0; i < 200; ++i) {
    if (lock.try_lock()) {
      ++acquired;
      lock.unlock();
    }
  }
  EXPECT_EQ(acquired, 200);
  for (const std::size_t up : {0u, 2u, 4u}) EXPECT_FALSE(has_key(up, "k")) << up;
}

TEST_F(RedlockTest, AMajorityDownFailsWithinTheDeadlineAndLeavesNoKey) {
  server(0).kill();
  server(2).kill();
  server(4).kill();
  Redlock lock(masters(), "k");
  const auto start = Clock::now();
  try {
    static_cast<void>(lock.try_lock_for(2s));
    ADD_FAILURE() << "acquired with three of five masters down";
  } catch (const NoQuorumError& error) {
    EXPECT_EQ(error.code(), Errc::no_quorum);
    const RedlockAttempt& attempt = error.attempt();
    EXPECT_FALSE(attempt.succeeded);
    EXPECT_EQ(attempt.ok(), 2u);
    EXPECT_EQ(attempt.count(NodeStatus::failed), 3u);
    EXPECT_NE(std::string(error.what()).find(endpoint(4)), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_FALSE(lock.owns_lock());
  // The two masters that granted it were given it back.
  EXPECT_FALSE(has_key(1, "k"));
  EXPECT_FALSE(has_key(3, "k"));
  EXPECT_THROW(static_cast<void>(lock.try_lock()), NoQuorumError);
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::failed), 3u);
  EXPECT_FALSE(has_key(1, "k"));
  EXPECT_FALSE(has_key(3, "k"));
}

TEST_F(RedlockTest, AStoppedMasterCostsOneNodeTimeoutAndTheOthersGrant) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(300ms));
  server(2).pause();
  const auto start = Clock::now();
  ASSERT_TRUE(lock.try_lock());
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);  // it waited for the stopped master, to its timeout
  EXPECT_LT(took, 300ms + 300ms);
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.ok(), 4u);
  EXPECT_EQ(attempt.nodes[2].status, NodeStatus::timed_out);
  EXPECT_EQ(attempt.nodes[2].error, Errc::timed_out);
  EXPECT_NE(attempt.nodes[2].message.find(endpoint(2)), std::string::npos);
  EXPECT_GT(lock.validity(), 9s);
  EXPECT_EQ(lock.release(), Release::released);
  server(2).resume();
}

TEST_F(RedlockTest, StoppedMastersAreWaitedForTogetherNotOneAfterAnother) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(300ms));
  server(0).pause();
  server(3).pause();
  auto start = Clock::now();
  ASSERT_TRUE(lock.try_lock());
  auto took = Clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2 * 300ms);  // one timeout for both
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::timed_out), 2u);
  start = Clock::now();
  EXPECT_EQ(lock.release(), Release::released);
  took = Clock::now() - start;
  EXPECT_LT(took, 2 * 300ms);
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::timed_out), 2u);
  server(0).resume();
  server(3).resume();
}

TEST_F(RedlockTest, RepliesArrivingAfterTheLeaseFailTheAttemptAndLeaveNoKeys) {
  // Every master holds writes back for 1.5 s, so each SET lands and is
  // acknowledged only after the 1 s lease: all five grant, validity < 0.
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(1s).node_timeout(5s));
  for (std::size_t i = 0; i < count; ++i) client(i).command("CLIENT", "PAUSE", "1500", "WRITE");
  EXPECT_FALSE(lock.try_lock());
  EXPECT_FALSE(lock.owns_lock());
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_FALSE(attempt.succeeded);
  EXPECT_EQ(attempt.ok(), count);
  EXPECT_LE(attempt.validity, 0ns);
  EXPECT_GE(attempt.elapsed, 1s);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_FALSE(has_key(i, "k")) << i;
    // Deleted by the release script, not expired: the SET's lease began
    // when the pause ended.
    EXPECT_EQ(calls_on(i).of("del"), 1) << i;
  }
}

TEST_F(RedlockTest, AStoppedMastersLateSetIsTakenBackWhenItLands) {
  // Masters 1-4 hold writes back for 1 s; master 0 is stopped outright. The
  // attempt waits 1.5 s for master 0, past the 1.4 s lease, so it fails
  // although four masters granted it.
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(1400ms).node_timeout(1500ms));
  for (std::size_t i = 1; i < count; ++i) client(i).command("CLIENT", "PAUSE", "1000", "WRITE");
  server(0).pause();
  EXPECT_FALSE(lock.try_lock());
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.ok(), 4u);
  EXPECT_EQ(attempt.nodes[0].status, NodeStatus::timed_out);
  EXPECT_LE(attempt.validity, 0ns);
  for (std::size_t i = 1; i < count; ++i) {
    EXPECT_FALSE(has_key(i, "k")) << i;
    EXPECT_EQ(calls_on(i).of("del"), 1) << i;  // released, not expired
  }
  // Master 0 received the SET and, queued behind it on the same
  // connection, the release. Once it runs again it applies both, in order.
  server(0).resume();
  const auto deadline = Clock::now() + 10s;
  while (calls_on(0).of("eval") == 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  const testing::CommandCalls calls = calls_on(0);
  EXPECT_EQ(calls.of("set"), 1) << calls.text;
  EXPECT_EQ(calls.of("eval"), 1) << calls.text;
  EXPECT_EQ(calls.of("del"), 1) << calls.text;
  EXPECT_FALSE(has_key(0, "k"));
}

TEST_F(RedlockTest, NoMasterIsWaitedForPastTheCallersDeadline) {
  Redlock lock(masters(), "k", LockOptions{}.ttl(30s));
  ASSERT_EQ(lock.node_timeout(), 1s);
  server(0).pause();
  server(1).pause();
  server(2).pause();
  const auto start = Clock::now();
  // The time ran out with no quorum answering: an outage, not a busy lock.
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(150ms)), TimeoutError);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 150ms + 300ms);
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.count(NodeStatus::timed_out), 3u);
  EXPECT_EQ(attempt.ok(), 2u);
  EXPECT_FALSE(has_key(3, "k"));
  EXPECT_FALSE(has_key(4, "k"));
  for (std::size_t i = 0; i < 3; ++i) server(i).resume();
}

TEST_F(RedlockTest, AMajorityStoppedFailsTheAttemptWithNoQuorumAfterOneTimeout) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(200ms));
  server(1).pause();
  server(2).pause();
  server(3).pause();
  const auto start = Clock::now();
  EXPECT_THROW(static_cast<void>(lock.try_lock()), NoQuorumError);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 200ms + 400ms);
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::timed_out), 3u);
  EXPECT_FALSE(has_key(0, "k"));
  EXPECT_FALSE(has_key(4, "k"));
  for (std::size_t i = 1; i < 4; ++i) server(i).resume();
}

// A majority slower than the node timeout is no reason to give up early: a
// call with a deadline takes each such attempt as a "no" and tries again
// until its deadline; a quorum that never answered is then an outage
// (TimeoutError, not a busy lock's false), and no key is left behind.
TEST_F(RedlockTest, TryLockForRetriesAMajorityStoppedUntilItsDeadlineThenReportsTheOutage) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(40ms));
  server(1).pause();
  server(2).pause();
  server(3).pause();
  const auto start = Clock::now();
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(400ms)), TimeoutError);
  const auto took = Clock::now() - start;
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_GE(took, 400ms) << "gave up before its deadline";
  EXPECT_LT(took, 400ms + 150ms);
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::timed_out), 3u);
  EXPECT_FALSE(has_key(0, "k"));
  EXPECT_FALSE(has_key(4, "k"));
  for (std::size_t i = 1; i < 4; ++i) server(i).resume();
}

// An attempt that ends just short of the deadline (its node timeout fits in
// the time left, with a millisecond to spare) is a "no" like any other: the
// call tries once more in what is left rather than giving up early (and
// then reports the outage).
TEST_F(RedlockTest, AnAttemptEndingJustBeforeTheDeadlineIsNotTakenForTheDeadline) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(40ms));
  // Connected first, so the attempt under test is all node timeout.
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  server(1).pause();
  server(2).pause();
  server(3).pause();
  const auto start = Clock::now();
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(41ms)), TimeoutError);
  const auto took = Clock::now() - start;
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_GE(took, 41ms) << "gave up before its deadline";
  EXPECT_FALSE(has_key(0, "k"));
  EXPECT_FALSE(has_key(4, "k"));
  for (std::size_t i = 1; i < 4; ++i) server(i).resume();
}

// The same majority back before the deadline: the call acquires.
TEST_F(RedlockTest, TryLockForAcquiresOnceAStoppedMajorityResumesBeforeItsDeadline) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(40ms));
  server(1).pause();
  server(2).pause();
  server(3).pause();
  // The schedule of the fault, not a synchronisation: the masters come back
  // 300 ms in, well inside the 5 s the call waits.
  std::thread resume([this] {
    std::this_thread::sleep_for(300ms);
    for (std::size_t i = 1; i < 4; ++i) server(i).resume();
  });
  bool acquired = false;
  EXPECT_NO_THROW(acquired = lock.try_lock_for(5s));
  resume.join();
  EXPECT_TRUE(acquired);
  if (acquired) {
    EXPECT_GE(lock.last_attempt().ok(), 3u);
    lock.unlock();
  }
}

// Masters that are down leave no quorum to wait for: a call with a
// deadline says so at once rather than waiting it out.
TEST_F(RedlockTest, TryLockForWithAMajorityDownThrowsAtOnce) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(10s).node_timeout(40ms));
  server(1).kill();
  server(2).kill();
  server(3).kill();
  const auto start = Clock::now();
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(5s)), NoQuorumError);
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_FALSE(has_key(0, "k"));
  EXPECT_FALSE(has_key(4, "k"));
}

TEST_F(RedlockTest, ExcludesProcessesFromACriticalSection) {
  constexpr int processes = 3;
  constexpr int rounds = 15;
  std::vector<ClientOptions> where;
  for (std::size_t i = 0; i < count; ++i) where.push_back(client_options(server(i)));
  const int failed_children = testing::run_in_children(processes, [&] {
    // A child never touches its parent's connections.
    std::vector<std::unique_ptr<Client>> own;
    std::vector<Client*> own_masters;
    for (const ClientOptions& options : where) {
      own.push_back(std::make_unique<Client>(options));
      own_masters.push_back(own.back().get());
    }
    Redlock lock(own_masters, "counter-lock", LockOptions{}.ttl(10s));
    for (int i = 0; i < rounds; ++i) {
      std::lock_guard guard(lock);
      testing::unsafe_increment(*own[0], "counter");
    }
  });
  EXPECT_EQ(failed_children, 0);
  EXPECT_EQ(on(0, {"GET", "counter"}), std::to_string(processes * rounds));
  for (std::size_t i = 0; i < count; ++i) EXPECT_FALSE(has_key(i, "counter-lock")) << i;
}

TEST_F(RedlockTest, ThreadsMayShareOneRedlock) {
  Redlock lock(masters(), "shared-lock", LockOptions{}.ttl(10s));
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      try {
        for (int i = 0; i < 10; ++i) {
          std::lock_guard guard(lock);
          testing::unsafe_increment(client(0), "counter");
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(on(0, {"GET", "counter"}), "30");
}

TEST_F(RedlockTest, ReleaseWithMastersDownReleasesTheRestAndSaysWhichFailed) {
  Redlock lock(masters(), "k");
  ASSERT_TRUE(lock.try_lock());
  server(0).kill();
  server(4).kill();
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_FALSE(lock.owns_lock());
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.step, RedlockStep::release);
  EXPECT_TRUE(attempt.succeeded);
  EXPECT_EQ(attempt.ok(), 3u);
  for (const std::size_t down : {0u, 4u}) {
    EXPECT_EQ(attempt.nodes[down].status, NodeStatus::failed) << down;
    EXPECT_TRUE(attempt.nodes[down].error) << down;
    EXPECT_NE(attempt.nodes[down].message.find(endpoint(down)), std::string::npos)
        << attempt.nodes[down].message;
  }
  for (std::size_t up = 1; up < 4; ++up) EXPECT_FALSE(has_key(up, "k")) << up;
}

TEST_F(RedlockTest, ReleaseWithAMajorityDownThrowsNoQuorumButUnlockDoesNot) {
  Redlock lock(masters(), "k");
  ASSERT_TRUE(lock.try_lock());
  server(0).kill();
  server(1).kill();
  server(2).kill();
  try {
    static_cast<void>(lock.release());
    ADD_FAILURE() << "release with three of five masters down did not throw";
  } catch (const NoQuorumError& error) {
    EXPECT_EQ(error.attempt().step, RedlockStep::release);
    EXPECT_EQ(error.attempt().ok(), 2u);
  }
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_FALSE(has_key(3, "k"));  // the masters that answered did release
  EXPECT_FALSE(has_key(4, "k"));

  Redlock again(masters(), "again");
  server(0).restart();
  server(1).restart();
  ASSERT_TRUE(again.try_lock());
  server(0).kill();
  server(1).kill();
  EXPECT_NO_THROW(again.unlock());
  EXPECT_FALSE(again.owns_lock());
}

TEST_F(RedlockTest, ExtendNeedsAQuorumAndRecomputesTheValidity) {
  Redlock lock(masters(), "k", LockOptions{}.ttl(1s));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.extend(20s));
  RedlockAttempt attempt = lock.last_attempt();
  EXPECT_EQ(attempt.step, RedlockStep::extend);
  EXPECT_EQ(attempt.ok(), count);
  EXPECT_EQ(attempt.validity, 20s - attempt.elapsed - redlock_drift(20s));
  EXPECT_GT(lock.validity(), 19s);
  EXPECT_LE(lock.validity(), 20s - redlock_drift(20s));
  for (std::size_t i = 0; i < count; ++i) EXPECT_GT(std::stoll(on(i, {"PTTL", "k"})), 15000) << i;

  server(2).kill();
  server(4).kill();
  ASSERT_TRUE(lock.extend(30s));
  attempt = lock.last_attempt();
  EXPECT_EQ(attempt.ok(), 3u);
  EXPECT_EQ(attempt.nodes[2].status, NodeStatus::failed);
  EXPECT_EQ(attempt.nodes[4].status, NodeStatus::failed);
  EXPECT_GT(lock.validity(), 29s);
  EXPECT_TRUE(lock.owns_lock());
}

TEST_F(RedlockTest, ExtendFailsWhenAMajorityLostTheKeyAndReleasesTheRest) {
  Redlock lock(masters(), "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  for (std::size_t i = 0; i < 3; ++i) on(i, {"DEL", "k"});
  EXPECT_FALSE(lock.extend(10s));
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(lock.validity(), 0ms);
  const RedlockAttempt attempt = lock.last_attempt();
  EXPECT_FALSE(attempt.succeeded);
  EXPECT_EQ(attempt.count(NodeStatus::no_key), 3u);
  EXPECT_EQ(attempt.ok(), 2u);
  for (std::size_t i = 0; i < count; ++i) EXPECT_FALSE(has_key(i, "k")) << i;
}

TEST_F(RedlockTest, ExtendWithAMajorityDownThrowsAndKeepsTheLease) {
  Redlock lock(masters(), "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  server(0).kill();
  server(1).kill();
  server(3).kill();
  EXPECT_THROW(static_cast<void>(lock.extend(20s)), NoQuorumError);
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_GT(lock.validity(), 5s);
  EXPECT_LE(lock.validity(), 10s);
  EXPECT_EQ(lock.last_attempt().step, RedlockStep::extend);
}

TEST_F(RedlockTest, WatchdogRenewalKeepsTheLeaseWhileAMajorityLives) {
  std::atomic<int> lost_calls{0};
  const auto ttl = 600ms;
  Redlock lock(
      masters(), "renewed",
      RedlockOptions{}.ttl(ttl).auto_renew(true).on_lost([&](const LeaseInfo&) { ++lost_calls; }));
  ASSERT_TRUE(lock.try_lock());
  std::this_thread::sleep_for(ttl);
  server(4).kill();  // a master dies mid-hold
  std::this_thread::sleep_for(3 * ttl);
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(lost_calls, 0);
  EXPECT_GT(lock.validity(), 0ms);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(on(i, {"GET", "renewed"}), lock.token()) << i;
  // With a majority gone no renewal can reach a quorum: the loss is
  // reported by the end of the validity.
  server(3).kill();
  server(2).kill();
  const auto majority_gone = Clock::now();
  while (!lock.lost() && Clock::now() - majority_gone < 3 * ttl) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(lock.lost());
  EXPECT_LE(Clock::now() - majority_gone, ttl + 100ms);
  // on_lost runs on the Watchdog's thread, just after lost() turns true.
  EXPECT_TRUE(testing::eventually([&] { return lost_calls.load() > 0; }, 5s));
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lock.release(), Release::lost);
}

TEST_F(RedlockTest, ARoundOfManyRedlocksIsOneScriptCallPerHundredOnEachMaster) {
  constexpr int on_five = 150;  // two calls' worth
  const RedlockOptions options = RedlockOptions{}.ttl(60s).auto_renew(true);
  std::vector<std::unique_ptr<Redlock>> held;
  for (int i = 0; i < on_five; ++i) {
    held.push_back(std::make_unique<Redlock>(masters(), "lease:" + std::to_string(i), options));
    ASSERT_TRUE(held.back()->try_lock());
  }
  // Redlocks over three of the masters are batched apart from the others.
  const std::vector<Client*> three = {&client(0), &client(1), &client(2)};
  std::vector<std::unique_ptr<Redlock>> held_on_three;
  for (int i = 0; i < 10; ++i) {
    held_on_three.push_back(
        std::make_unique<Redlock>(three, "three:" + std::to_string(i), options));
    ASSERT_TRUE(held_on_three.back()->try_lock());
  }
  client(0).watchdog().renew_all_now();  // the first round loads the script (EVAL once)
  for (std::size_t m = 0; m < count; ++m) on(m, {"PEXPIRE", "lease:3", "5000"});  // restored
  for (std::size_t m = 0; m < 3; ++m) {
    on(m, {"SET", "lease:7", "someone-else"});  // taken on a majority: lost
    on(m, {"PEXPIRE", "three:4", "5000"});
  }
  for (std::size_t m = 0; m < count; ++m) on(m, {"CONFIG", "RESETSTAT"});
  client(0).watchdog().renew_all_now();
  for (std::size_t m = 0; m < count; ++m) {
    const testing::CommandCalls calls = calls_on(m);
    const long long expected = m < 3 ? 3 : 2;  // two for the 150, one for the ten
    EXPECT_EQ(calls.of("evalsha") + calls.of("eval"), expected) << m << ": " << calls.text;
    EXPECT_GT(std::stoll(on(m, {"PTTL", "lease:3"})), 50000) << m;
  }
  for (std::size_t m = 0; m < 3; ++m) EXPECT_GT(std::stoll(on(m, {"PTTL", "three:4"})), 50000);
  EXPECT_TRUE(held[7]->lost());
  EXPECT_FALSE(held[6]->lost());
  EXPECT_FALSE(held[8]->lost());
  EXPECT_FALSE(held_on_three[4]->lost());
  EXPECT_EQ(held[7]->last_attempt().ok(), 2u);  // each lease keeps its own report
  EXPECT_EQ(held[8]->last_attempt().ok(), count);
}

TEST_F(RedlockTest, WatchdogRenewalLosesTheLeaseWhenAMajorityLostTheKey) {
  std::atomic<int> lost_calls{0};
  Redlock lock(masters(), "renewed",
               RedlockOptions{}.ttl(600ms).auto_renew(true).on_lost([&](const LeaseInfo& info) {
                 if (info.reason == LostReason::taken) ++lost_calls;
               }));
  ASSERT_TRUE(lock.try_lock());
  for (std::size_t i = 0; i < 3; ++i) on(i, {"SET", "renewed", "someone-else"});
  const auto deadline = Clock::now() + 2s;
  while (!lock.lost() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(lock.lost());
  // on_lost runs on the Watchdog's thread, just after lost() turns true.
  EXPECT_TRUE(testing::eventually([&] { return lost_calls.load() > 0; }, 5s));
  EXPECT_EQ(lost_calls, 1);
  EXPECT_FALSE(lock.extend(10s));  // never revived
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(on(i, {"GET", "renewed"}), "someone-else");
}

// Two of five masters lost the key and two are stopped: one yes and two
// noes. The stopped two may still hold it, so the lease may stand on a
// quorum: the round decides nothing, and the lease is kept until the
// masters answer (or its validity runs out). The DEBUG SLEEP fault run
// lost renewed leases this way.
TEST_F(RedlockTest, RenewalWhoseSilentMastersCouldStillMakeAQuorumKeepsTheLease) {
  std::atomic<int> lost_calls{0};
  Redlock lock(masters(), "renewed",
               RedlockOptions{}.ttl(10s).auto_renew(true).node_timeout(100ms).on_lost(
                   [&](const LeaseInfo&) { ++lost_calls; }));
  ASSERT_TRUE(lock.try_lock());
  on(0, {"DEL", "renewed"});
  on(1, {"SET", "renewed", "someone-else"});
  server(2).pause();
  server(3).pause();
  client(0).watchdog().renew_all_now();
  const RedlockAttempt undecided = lock.last_attempt();
  EXPECT_EQ(undecided.step, RedlockStep::extend);
  EXPECT_EQ(undecided.ok(), 1u);
  EXPECT_EQ(undecided.refused(), 2u);
  EXPECT_EQ(undecided.count(NodeStatus::timed_out), 2u);
  EXPECT_FALSE(lock.lost());
  EXPECT_THROW(static_cast<void>(lock.extend(10s)), NoQuorumError);  // extend judges alike
  EXPECT_FALSE(lock.lost());
  server(2).resume();
  server(3).resume();
  client(0).watchdog().renew_all_now();
  EXPECT_FALSE(lock.lost());
  // 3, or 4 if the watchdog's own retry came first and put master 0's back.
  EXPECT_GE(lock.last_attempt().ok(), 3u);
  EXPECT_EQ(lost_calls, 0);
  EXPECT_EQ(on(0, {"GET", "renewed"}), lock.token());  // put back (see below)
  // Three noes leave no quorum anywhere: lost.
  for (std::size_t i = 2; i < count; ++i) on(i, {"SET", "renewed", "someone-else"});
  client(0).watchdog().renew_all_now();
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(testing::eventually([&] { return lost_calls == 1; }, 5s));  // told off the round
}

// A master that lost the key while a quorum kept it gets it back at the
// next renewal (or extend), so that the lease does not go on standing on
// the bare quorum. A key another client holds there is left alone.
TEST_F(RedlockTest, RenewalPutsTheLeaseBackOnMastersThatLostIt) {
  Redlock lock(masters(), "renewed", RedlockOptions{}.ttl(10s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  on(0, {"DEL", "renewed"});
  on(1, {"SET", "renewed", "someone-else", "PX", "60000"});
  client(0).watchdog().renew_all_now();
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(on(0, {"GET", "renewed"}), lock.token());
  EXPECT_GT(std::stoll(on(0, {"PTTL", "renewed"})), 5000);
  EXPECT_EQ(on(1, {"GET", "renewed"}), "someone-else");
  on(2, {"DEL", "renewed"});
  EXPECT_TRUE(lock.extend(20s));
  EXPECT_EQ(on(2, {"GET", "renewed"}), lock.token());
  EXPECT_GT(std::stoll(on(2, {"PTTL", "renewed"})), 15000);
  EXPECT_EQ(lock.release(), Release::released);
  for (std::size_t i = 0; i < count; ++i) {
    if (i != 1) {
      EXPECT_FALSE(has_key(i, "renewed")) << i;
    }
  }
}

TEST_F(RedlockTest, RejectsWhatCannotBeARedlock) {
  EXPECT_THROW(Redlock(std::vector<Client*>{}, "k"), InvalidArgument);
  EXPECT_THROW(Redlock({&client(0), nullptr, &client(1)}, "k"), InvalidArgument);
  EXPECT_THROW(Redlock({&client(0), &client(1), &client(0)}, "k"), InvalidArgument);
  Client second_for_one(client_options(server(1)));
  try {
    Redlock lock({&client(0), &client(1), &second_for_one}, "k");
    ADD_FAILURE() << "accepted one server twice";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(endpoint(1)), std::string::npos) << error.what();
  }
  try {
    Redlock lock(masters(), "k", LockOptions{}.fencing(true));
    ADD_FAILURE() << "accepted fencing";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("fencing"), std::string::npos) << error.what();
  }
  EXPECT_THROW(Redlock(masters(), "k", RedlockOptions{}.fencing(true)), InvalidArgument);
  // Renewal is opt-in; its cap and callback mean nothing without it.
  EXPECT_NO_THROW(Redlock(masters(), "k", LockOptions{}.ttl(5s).auto_renew(true)));
  EXPECT_THROW(Redlock(masters(), "k", LockOptions{}.max_hold(1min)), InvalidArgument);
  EXPECT_THROW(Redlock(masters(), "k", LockOptions{}.on_lost([](const LeaseInfo&) {})),
               InvalidArgument);
  EXPECT_NO_THROW(Redlock(masters(), "k", LockOptions{}.auto_renew(false)));
  EXPECT_NO_THROW(Redlock(masters(), "k", LockOptions{}.wake_on_release(false)));
  // WAIT counts one server's replicas; a Redlock never sends it, so asking
  // for it is refused rather than ignored.
  try {
    Redlock lock(masters(), "k", LockOptions{}.replicas(1, 100ms));
    ADD_FAILURE() << "accepted replicas";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("replicas"), std::string::npos) << error.what();
  }
  EXPECT_THROW(Redlock(masters(), "k", LockOptions{}.replicas_majority(100ms)), InvalidArgument);
  EXPECT_EQ(Redlock(masters(), "k").options().ttl(), 30s);  // the default lease, unrenewed
  EXPECT_THROW(Redlock(masters(), ""), InvalidArgument);
  EXPECT_THROW(Redlock(masters(), std::string(max_name_size + 1, 'x')), InvalidArgument);
  // A lease no longer than its drift allowance could never be held.
  EXPECT_THROW(Redlock(masters(), "k", LockOptions{}.ttl(2ms)), InvalidArgument);
  EXPECT_NO_THROW(Redlock(masters(), "k", LockOptions{}.ttl(3ms)));
  EXPECT_THROW(RedlockOptions{}.node_timeout(0ms), InvalidArgument);
  EXPECT_THROW(RedlockOptions{}.node_timeout(-1s), InvalidArgument);
  EXPECT_THROW(RedlockOptions{}.node_timeout(max_ttl + 1ms), InvalidArgument);

  Redlock lock(masters(), "k");
  EXPECT_THROW(lock.release(), NotHeldError);
  EXPECT_THROW(static_cast<void>(lock.extend(1s)), NotHeldError);
  EXPECT_NO_THROW(lock.unlock());
  EXPECT_TRUE(lock.token().empty());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_THROW(static_cast<void>(lock.extend(2ms)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(lock.extend(max_ttl + 1ms)), InvalidArgument);
  EXPECT_TRUE(lock.owns_lock());
  lock.unlock();
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(on(i, {"DBSIZE"}), "0") << i;
}

TEST_F(RedlockTest, AcceptsAnyNumberOfMastersWithAMajorityQuorum) {
  EXPECT_EQ(Redlock({&client(0)}, "k").quorum(), 1u);
  EXPECT_EQ(Redlock({&client(0), &client(1)}, "k").quorum(), 2u);
  EXPECT_EQ(Redlock({&client(0), &client(1), &client(2), &client(3)}, "k").quorum(), 3u);
  EXPECT_EQ(Redlock(masters(), "k").quorum(), 3u);
  Redlock by_reference({client(0), client(1), client(2)}, "k");
  EXPECT_EQ(by_reference.quorum(), 2u);
  ASSERT_TRUE(by_reference.try_lock());  // on each of the three masters given
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(has_key(i, "k")) << i;
  by_reference.unlock();
  // Two masters of four down leaves no quorum.
  Redlock four({&client(0), &client(1), &client(2), &client(3)}, "four");
  server(0).kill();
  server(1).kill();
  EXPECT_THROW(static_cast<void>(four.try_lock()), NoQuorumError);
  EXPECT_TRUE(Redlock({&client(2), &client(3), &client(4)}, "three").try_lock());
}

TEST_F(RedlockTest, NodeTimeoutDefaultsToATenthOfTheLeaseWithinTheCommandTimeout) {
  // client_options() sets command_timeout to 1 s.
  EXPECT_EQ(Redlock(masters(), "k", LockOptions{}.ttl(30s)).node_timeout(), 1s);
  EXPECT_EQ(Redlock(masters(), "k", LockOptions{}.ttl(2s)).node_timeout(), 200ms);
  EXPECT_EQ(Redlock(masters(), "k", LockOptions{}.ttl(5ms)).node_timeout(), 1ms);
  EXPECT_EQ(Redlock(masters(), "k", RedlockOptions{}.ttl(2s).node_timeout(50ms)).node_timeout(),
            50ms);
  EXPECT_EQ(Redlock(masters(), "k", RedlockOptions{}.node_timeout(5s).ttl(1s)).node_timeout(), 5s);
  ClientOptions quick = client_options(server(0));
  quick.command_timeout = 20ms;
  Client quick_client(quick);
  EXPECT_EQ(
      Redlock({&quick_client, &client(1), &client(2)}, "k", LockOptions{}.ttl(2s)).node_timeout(),
      20ms);
}

TEST_F(RedlockTest, TimeoutRulesWhileHeldByAnotherRedlock) {
  Redlock holder(masters(), "k", LockOptions{}.ttl(30s));
  Redlock waiter(masters(), "k");
  ASSERT_TRUE(holder.try_lock());
  struct Case {
    const char* what;
    std::function<bool()> call;
    std::chrono::milliseconds at_least, at_most;
  };
  const std::vector<Case> cases = {
      {"try_lock", [&] { return waiter.try_lock(); }, 0ms, 100ms},
      {"negative for", [&] { return waiter.try_lock_for(-5s); }, 0ms, 100ms},
      {"zero for", [&] { return waiter.try_lock_for(0ms); }, 0ms, 100ms},
      {"finite for", [&] { return waiter.try_lock_for(200ms); }, 200ms, 500ms},
      {"past until", [&] { return waiter.try_lock_until(Clock::now() - 1s); }, 0ms, 100ms},
      {"finite until", [&] { return waiter.try_lock_until(Clock::now() + 200ms); }, 190ms, 500ms},
      {"system clock until",
       [&] { return waiter.try_lock_until(std::chrono::system_clock::now() + 200ms); }, 190ms,
       500ms},
      {"past system clock until",
       [&] { return waiter.try_lock_until(std::chrono::system_clock::now() - 1h); }, 0ms, 100ms},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    EXPECT_FALSE(c.call()) << c.what;
    const auto took = Clock::now() - start;
    EXPECT_GE(took, c.at_least) << c.what;
    EXPECT_LE(took, c.at_most) << c.what;
    // A majority refused (an attempt made at the deadline has only a few
    // ms for the masters to answer; the slowest may miss them).
    EXPECT_GE(waiter.last_attempt().count(NodeStatus::other_owner), waiter.quorum()) << c.what;
  }
  EXPECT_FALSE(waiter.owns_lock());
  // The loser's cleanup left the holder's keys alone.
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(on(i, {"GET", "k"}), holder.token()) << i;
}

TEST_F(RedlockTest, TimeoutRulesWhenFree) {
  Redlock lock(masters(), "k");
  ASSERT_TRUE(lock.try_lock_for(-1s));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_for(0ms));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_until(Clock::now() - 1h));
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_for(std::chrono::hours::max()));  // saturates, never wraps
  lock.unlock();
  ASSERT_TRUE(lock.try_lock_until(Clock::time_point::max()));
}

TEST_F(RedlockTest, LockingTwiceFromTheHoldingThreadThrowsInsteadOfDeadlocking) {
  Redlock lock(masters(), "k");
  lock.lock();
  try {
    lock.lock();
    FAIL() << "second lock() returned";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::resource_deadlock_would_occur);
  }
  EXPECT_THROW(static_cast<void>(lock.try_lock()), std::system_error);
  EXPECT_TRUE(lock.owns_lock());
}

TEST_F(RedlockTest, WorksWithStandardGuards) {
  Redlock a(masters(), "a");
  Redlock b(masters(), "b");
  {
    std::lock_guard guard(a);
    EXPECT_TRUE(a.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  {
    std::unique_lock guard(a, std::try_to_lock);
    EXPECT_TRUE(guard.owns_lock());
  }
  {
    std::unique_lock guard(a, 500ms);
    EXPECT_TRUE(guard.owns_lock());
  }
  {
    std::scoped_lock both(a, b);
    EXPECT_TRUE(a.owns_lock());
    EXPECT_TRUE(b.owns_lock());
  }
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(on(i, {"DBSIZE"}), "0") << i;
}

TEST_F(RedlockTest, ReleaseAfterExpiryLeavesTheSuccessorsLockAlone) {
  // A short lease gets a short default node timeout (a tenth of it); these
  // tests want the lease short, not the patience.
  Redlock first(masters(), "k", RedlockOptions{}.ttl(300ms).node_timeout(250ms));
  Redlock second(masters(), "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(first.try_lock());
  const auto deadline = Clock::now() + 5s;
  for (std::size_t i = 0; i < count; ++i) {
    while (has_key(i, "k") && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(second.try_lock());
  EXPECT_EQ(first.release(), Release::not_owner);
  EXPECT_EQ(first.last_attempt().count(NodeStatus::other_owner), count);
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(on(i, {"GET", "k"}), second.token()) << i;
}

TEST_F(RedlockTest, ReleaseAfterLosingTheMajorityTakesOnlyItsOwnKeys) {
  // The first holder's lease is gone from three masters (as if they had
  // expired it first); a successor takes those three, a quorum.
  Redlock first(masters(), "k", LockOptions{}.ttl(10s));
  Redlock second(masters(), "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(first.try_lock());
  for (std::size_t i = 0; i < 3; ++i) on(i, {"DEL", "k"});
  ASSERT_TRUE(second.try_lock());
  EXPECT_EQ(second.last_attempt().ok(), 3u);
  EXPECT_EQ(first.release(), Release::not_owner);
  const RedlockAttempt attempt = first.last_attempt();
  EXPECT_FALSE(attempt.succeeded);
  EXPECT_EQ(attempt.ok(), 2u);  // its own stale keys are gone...
  EXPECT_EQ(attempt.count(NodeStatus::other_owner), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(on(i, {"GET", "k"}), second.token()) << i;
  EXPECT_FALSE(has_key(3, "k"));  // ...and the successor's are untouched
  EXPECT_FALSE(has_key(4, "k"));
}

TEST_F(RedlockTest, ReleaseAfterExpiryWithNoSuccessorSaysExpired) {
  Redlock lock(masters(), "k", RedlockOptions{}.ttl(300ms).node_timeout(250ms));
  ASSERT_TRUE(lock.try_lock());
  const auto deadline = Clock::now() + 5s;
  for (std::size_t i = 0; i < count; ++i) {
    while (has_key(i, "k") && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(lock.release(), Release::expired);
  EXPECT_EQ(lock.last_attempt().count(NodeStatus::no_key), count);
}

TEST_F(RedlockTest, LockAndUnlockSendOneCommandToEachMaster) {
  Redlock lock(masters(), "k");
  lock.lock();
  lock.unlock();  // the first release also loads the script on every master
  for (std::size_t i = 0; i < count; ++i) client(i).command("CONFIG", "RESETSTAT");
  lock.lock();
  for (std::size_t i = 0; i < count; ++i) {
    const testing::CommandCalls calls = testing::command_calls(client(i));
    EXPECT_EQ(calls.total_except("config|resetstat"), 1) << calls.text;
    EXPECT_EQ(calls.of("set"), 1) << calls.text;
    client(i).command("CONFIG", "RESETSTAT");
  }
  lock.unlock();
  for (std::size_t i = 0; i < count; ++i) {
    const testing::CommandCalls calls = testing::command_calls(client(i));
    EXPECT_EQ(calls.of("evalsha"), 1) << calls.text;
    EXPECT_EQ(calls.of("eval"), 0) << calls.text;
    EXPECT_EQ(calls.of("set"), 0) << calls.text;
  }
}

TEST_F(RedlockTest, SurvivesScriptFlushOnTheMasters) {
  Redlock lock(masters(), "k");
  ASSERT_TRUE(lock.try_lock());
  for (std::size_t i = 0; i < count; ++i) on(i, {"SCRIPT", "FLUSH"});
  ASSERT_TRUE(lock.extend(5s));
  EXPECT_EQ(lock.last_attempt().ok(), count);
  for (std::size_t i = 0; i < count; ++i) on(i, {"SCRIPT", "FLUSH"});
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(lock.last_attempt().ok(), count);
  for (std::size_t i = 0; i < count; ++i) EXPECT_FALSE(has_key(i, "k")) << i;
}

TEST_F(RedlockTest, WatchdogRenewalGoesOnWithTheFirstMasterDown) {
  // A minority may die, whichever masters it is: here the first of three,
  // down before the lock is taken.
  server(0).kill();
  const std::vector<Client*> three{&client(0), &client(1), &client(2)};
  std::atomic<int> lost_calls{0};
  Redlock lock(
      three, "renewed",
      RedlockOptions{}.ttl(1s).auto_renew(true).on_lost([&](const LeaseInfo&) { ++lost_calls; }));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(lock.last_attempt().ok(), 2u);
  // Three leases long, unless the lock is reported lost first.
  const auto acquired = Clock::now();
  while (!lock.lost() && Clock::now() - acquired < 3s) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(lock.lost())
      << "reported lost after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - acquired).count()
      << " ms";
  EXPECT_EQ(lost_calls, 0);
  EXPECT_GT(lock.validity(), 0ms);
  for (std::size_t i = 1; i < 3; ++i) EXPECT_EQ(on(i, {"GET", "renewed"}), lock.token()) << i;
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(RedlockTest, ExtendRacingRenewalsNeverLeavesAMastersLeaseShortOfTheRecord) {
  // A renewal that read the old lease before extend() and reaches the
  // masters after it must not set them back to the old lease while the
  // record counts the new one.
  const std::vector<Client*> three{&client(0), &client(1), &client(2)};
  Redlock lock(three, "k", RedlockOptions{}.ttl(1s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  const auto renew_round = [&] {
    for (Client* master : three) master->watchdog().renew_all_now();
  };
  const auto check = [&](int iteration) {
    ASSERT_FALSE(lock.lost()) << "iteration " << iteration;
    for (std::size_t i = 0; i < three.size(); ++i) {
      const auto before = Clock::now();
      const std::chrono::milliseconds claimed = lock.validity();
      const long long pttl = client(i).command("PTTL", "k").integer();
      const auto between =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - before);
      EXPECT_GE(pttl, (claimed - between - 50ms).count())
          << "iteration " << iteration << ", master " << i << ": validity() says "
          << claimed.count() << " ms";
    }
  };
  const int ran = testing::extend_against_renewal_rounds(lock, 60s, 1s, renew_round, check);
  if (!HasFailure()) {
    EXPECT_GE(ran, 100);  // enough rounds to have met the race
  }
  EXPECT_EQ(lock.release(), Release::released);
}

// Every LockOptions setter a Redlock takes keeps a RedlockOptions chain
// going: one that returned LockOptions& would turn back into a
// RedlockOptions without the node timeout set before it, silently.
TEST(RedlockOptionsChain, EverySetterKeepsTheNodeTimeout) {
  const RedlockOptions held = RedlockOptions{}.node_timeout(50ms).min_hold(1s);
  EXPECT_EQ(held.node_timeout(), 50ms);
  EXPECT_EQ(held.min_hold(), 1s);
  const RedlockOptions renewed = RedlockOptions{}
                                     .node_timeout(50ms)
                                     .ttl(2s)
                                     .auto_renew(true)
                                     .max_hold(10s)
                                     .on_lost([](const LeaseInfo&) {})
                                     .key_prefix("app:")
                                     .fencing(false);
  EXPECT_EQ(renewed.node_timeout(), 50ms);
}

}  // namespace
}  // namespace distlock
