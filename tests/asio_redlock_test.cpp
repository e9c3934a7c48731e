// Tests for async Redlocks (distlock/asio.hpp) over a real io_context and
// three real masters: each attempt goes to every master at once and is
// judged as the blocking one is (a quorum with validity left; a majority
// down is NoQuorum; a stopped master is slow), a refused or cancelled
// attempt is taken back on every master it reached, a late one as it
// lands, and async and blocking holders exclude each other.
#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "distlock/redlock.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
// Named, so that it holds in any company (a unity batch).
namespace asio_redlock_test {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using RedlockHold = AsyncHold<Redlock>;
using Got = testing::Got<RedlockHold>;

// Three masters, each with its Client; server() is the first.
class Masters : public ::testing::Test {
 public:
  testing::RedisServer& server(std::size_t i = 0) { return *servers_[i]; }

 protected:
  static constexpr std::size_t count = 3;

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

  std::vector<Client*> masters() {
    std::vector<Client*> out;
    for (const auto& client : clients_) out.push_back(client.get());
    return out;
  }
  std::string get(std::size_t i, const std::string& key) { return server(i).command({"GET", key}); }

  std::vector<std::unique_ptr<testing::RedisServer>> servers_;
  std::vector<std::unique_ptr<Client>> clients_;
};

class AsioRedlockTest : public testing::AsioOn<Masters> {
 protected:
  Got try_lock_for(Redlock& lock, std::chrono::milliseconds timeout,
                   asio::cancellation_slot slot = {}) {
    return wait_for(start_try_lock_for(lock, timeout, slot));
  }
  std::future<Got> start_try_lock_for(Redlock& lock, std::chrono::milliseconds timeout,
                                      asio::cancellation_slot slot = {}) {
    return start<RedlockHold>(
        [&](auto token) { async_try_lock_for(lock, timeout, std::move(token)); }, slot);
  }
  // No master has `key` but with `token` (or at all, with none).
  bool only(const std::string& key, const std::string& token) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::string value = get(i, key);
      if (value != (token.empty() ? "(nil)" : token)) return false;
    }
    return true;
  }
  // A quorum of masters has `key` with `token`, and no master has it with
  // another: a grant may lack a master that answered it before another
  // holder's release reached it there.
  bool held_by(const std::string& key, const std::string& token) {
    std::size_t with_token = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string value = get(i, key);
      if (value == token) {
        ++with_token;
      } else if (value != "(nil)") {
        return false;
      }
    }
    return with_token >= count / 2 + 1;
  }
};

TEST_F(AsioRedlockTest, ATryTakesEveryMasterWithOneTokenAndTheReleaseFreesThem) {
  Redlock lock(masters(), "async:job", LockOptions().ttl(10s));
  Got got = try_lock(lock);
  ASSERT_FALSE(got.ec) << got.ec.message();
  ASSERT_TRUE(got.hold);
  EXPECT_EQ(got.hold.id().size(), 32u);
  EXPECT_TRUE(only(lock.key(), got.hold.id()));
  EXPECT_GT(got.hold.validity(), 9s);
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_TRUE(only(lock.key(), ""));
}

TEST_F(AsioRedlockTest, AsyncAndBlockingHoldersExcludeEachOther) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock other(masters(), "async:job", LockOptions().ttl(10s));
  ASSERT_TRUE(holder.try_lock());
  const Got refused = try_lock(other);
  EXPECT_FALSE(refused.ec) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  // The refused attempt was taken back without touching the holder's keys.
  EXPECT_TRUE(only(holder.key(), holder.token()));
  holder.unlock();
  Got got = try_lock(other);
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_FALSE(holder.try_lock());
}

TEST_F(AsioRedlockTest, AWaiterTakesTheLockOnceTheHolderReleasesIt) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock waiter(masters(), "async:job", LockOptions().ttl(10s));
  ASSERT_TRUE(holder.try_lock());
  std::future<Got> waiting = start_lock(waiter);
  ASSERT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  holder.unlock();
  Got got = wait_for(std::move(waiting));
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_TRUE(held_by(waiter.key(), got.hold.id()));
}

// As try_lock_for(): busy until the deadline, then an empty hold, no error.
TEST_F(AsioRedlockTest, ATimedTryEndsByItsDeadlineWhileTheLockIsHeld) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock waiter(masters(), "async:job", LockOptions().ttl(10s));
  ASSERT_TRUE(holder.try_lock());
  const auto began = std::chrono::steady_clock::now();
  const Got got = try_lock_for(waiter, 300ms);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_GE(took, 300ms);
  EXPECT_LE(took, 300ms + 2s);  // the deadline, and slack for a loaded machine
  EXPECT_TRUE(only(holder.key(), holder.token()));
}

TEST_F(AsioRedlockTest, OneMasterDownCostsItsVoteOnly) {
  server(2).kill();
  Redlock lock(masters(), "async:job", LockOptions().ttl(10s));
  Got got = try_lock(lock);
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(get(0, lock.key()), got.hold.id());
  EXPECT_EQ(get(1, lock.key()), got.hold.id());
}

TEST_F(AsioRedlockTest, AMajorityDownIsNoQuorumAndLeavesNoKey) {
  server(1).kill();
  server(2).kill();
  Redlock lock(masters(), "async:job", LockOptions().ttl(10s));
  const Got got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::no_quorum)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_TRUE(eventually([&] { return get(0, lock.key()) == "(nil)"; }));
}

// A stopped master does not answer within the attempt's budget: the two
// others decide, and what the stopped one applies once it resumes is
// taken back right after it, on the same connection.
TEST_F(AsioRedlockTest, AStoppedMastersLateSetIsTakenBackWhenItLands) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock lock(masters(), "async:job", RedlockOptions{}.ttl(10s).node_timeout(100ms));
  // The holder has the first master only: the attempt gets one yes of
  // the two that answer, and fails.
  server(0).command({"SET", lock.key(), "theirs", "PX", "10000"});
  server(2).pause();
  const Got got = try_lock(lock);
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_EQ(get(1, lock.key()), "(nil)") << "the refused attempt was not taken back";
  server(2).resume();
  // The late SET landed and was released behind it.
  EXPECT_TRUE(eventually([&] { return get(2, lock.key()) == "(nil)"; }));
  EXPECT_EQ(get(0, lock.key()), "theirs");
}

// A grant waits, as the blocking call does, for every master that answers
// within the node timeout: granted at the first quorum, a slow master's
// SET could land after the hold's release had been there (the release goes
// on another connection), and stay for the lease.
TEST_F(AsioRedlockTest, AGrantWaitsForASlowMastersAnswer) {
  Redlock lock(masters(), "async:job", RedlockOptions{}.ttl(10s).node_timeout(5s));
  server(2).pause();
  std::future<Got> waiting = start_try_lock_for(lock, 10s);
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout)
      << "granted before the third master answered";
  server(2).resume();
  Got got = wait_for(std::move(waiting));
  ASSERT_FALSE(got.ec) << got.ec.message();
  ASSERT_TRUE(got.hold);
  EXPECT_TRUE(only(lock.key(), got.hold.id()));
  EXPECT_EQ(release(got.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_TRUE(only(lock.key(), ""));
}

TEST_F(AsioRedlockTest, CancellingAWaitCompletesAbortedAndLeavesNoKeyOfItsOwn) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock waiter(masters(), "async:job", LockOptions().ttl(10s));
  ASSERT_TRUE(holder.try_lock());
  asio::cancellation_signal cancel;
  std::future<Got> waiting = start_lock(waiter, cancel.slot());
  ASSERT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Got got = wait_for(std::move(waiting));
  EXPECT_EQ(got.ec, asio::error::operation_aborted) << got.ec.message();
  EXPECT_FALSE(got.hold);
  holder.unlock();
  EXPECT_TRUE(eventually([&] { return only(waiter.key(), ""); }));
}

TEST_F(AsioRedlockTest, CancelWaitsReachesAnAsyncWaiter) {
  Redlock holder(masters(), "async:job", LockOptions().ttl(10s));
  Redlock waiter(masters(), "async:job", LockOptions().ttl(10s));
  ASSERT_TRUE(holder.try_lock());
  std::future<Got> waiting = start_lock(waiter);
  ASSERT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  waiter.cancel_waits();
  const Got got = wait_for(std::move(waiting));
  EXPECT_EQ(got.ec, make_error_code(Errc::cancelled)) << got.ec.message();
  EXPECT_FALSE(got.hold);
}

// Every master holds a hash at the name: no Redlock can ever be taken
// there, and a try says so rather than report a busy lock.
TEST_F(AsioRedlockTest, AKeyOfAnotherTypeOnAMajorityIsAnError) {
  Redlock lock(masters(), "async:job", LockOptions().ttl(10s));
  for (std::size_t i = 0; i < count; ++i) server(i).command({"HSET", lock.key(), "f", "v"});
  const Got got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::server_error)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_EQ(server(i).command({"HGET", lock.key(), "f"}), "v") << "master " << i;
  }
}

// A Redlock's hold is given back on the connector thread, to every master
// from there. Until that is answered, the context's run() goes on: a
// program that runs its context until nothing is left to do, then lets its
// Clients go, must not end with the release still to be sent. (The event
// hook, run by the release, is slow here, so that run() returning first
// is seen.)
TEST_F(AsioRedlockTest, RunGoesOnUntilAHoldGivenBackIsReleased) {
  std::atomic<bool> told{false};
  std::vector<std::unique_ptr<Client>> clients;
  for (std::size_t i = 0; i < count; ++i) {
    ClientOptions options = client_options(server(i));
    options.on_event = [&told](const LockEvent& event) {
      if (event.type != LockEventType::released) return;
      std::this_thread::sleep_for(200ms);
      told = true;
    };
    clients.push_back(std::make_unique<Client>(options));
  }
  Redlock lock({clients[0].get(), clients[1].get(), clients[2].get()}, "async:job",
               LockOptions().ttl(10s));
  asio::io_context own;
  bool held = false;
  async_try_lock(lock, asio::bind_executor(own, testing::Completion<std::error_code, RedlockHold>(
                                                    [&](std::error_code, RedlockHold hold) {
                                                      held = static_cast<bool>(
                                                          hold);  // given back as the handler ends
                                                    })));
  own.run();
  EXPECT_TRUE(held);
  EXPECT_TRUE(told) << "run() returned before the hold's release was answered";
  EXPECT_TRUE(only(lock.key(), ""));
}

TEST_F(AsioRedlockTest, RunLockedRunsTheTaskUnderTheLockAndReleasesIt) {
  Redlock lock(masters(), "async:job", LockOptions().ttl(10s));
  auto done = std::make_shared<std::promise<std::pair<std::error_code, RunLocked>>>();
  std::future<std::pair<std::error_code, RunLocked>> finished = done->get_future();
  std::string seen;
  async_run_locked(
      lock,
      [&](auto complete) {
        seen = get(1, lock.key());
        std::move(complete)();
      },
      asio::bind_executor(io_, testing::Completion<std::error_code, RunLocked>(
                                   [done](std::error_code ec, RunLocked outcome) {
                                     done->set_value({ec, outcome});
                                   })));
  const auto [ec, outcome] = wait_for(std::move(finished));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(outcome, RunLocked::held);
  EXPECT_EQ(seen.size(), 32u);
  EXPECT_TRUE(eventually([&] { return only(lock.key(), ""); }));
}

}  // namespace
}  // namespace asio_redlock_test
}  // namespace distlock
