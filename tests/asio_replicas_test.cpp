// Tests for async locks with replica acknowledgement (LockOptions::replicas)
// over a real io_context and a real master with one replica
// (support/replicated_server.hpp): a grant stands once WAIT says the
// replica has it, and is given back and reported when it does not; the
// count is asked once, an ACL's refusal or too few replicas failing the
// call before anything is granted; the caller's deadline cuts WAIT; a
// cancelled wait leaves no key; and another lock's steps on the same
// context are answered while a WAIT blocks.
#include <gtest/gtest.h>

#include <asio/cancellation_signal.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/asio.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"
#include "support/replicated_server.hpp"

namespace distlock {
// Named, so that it holds in any company (a unity batch).
namespace asio_replicas_test {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using testing::Tried;

// A master with one replica in sync; server() is the master.
class Replicated : public ::testing::Test {
 public:
  testing::RedisServer& server() { return servers_->master(); }
  testing::ReplicatedServer& servers() { return *servers_; }

 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    servers_ = std::make_unique<testing::ReplicatedServer>(1);
  }
  void TearDown() override { servers_.reset(); }

  std::unique_ptr<testing::ReplicatedServer> servers_;
};

class AsioReplicasTest : public testing::AsioOn<Replicated> {
 protected:
  static LockOptions replicated(std::chrono::milliseconds timeout = 300ms) {
    return LockOptions().ttl(30s).replicas(1, timeout);
  }
  // Stops the replica (it stops acknowledging) until the test ends.
  void stop_replica() {
    servers().stop_replica();
    stopped_ = true;
  }
  void TearDown() override {
    if (stopped_) servers().continue_replica();
    AsioOn<Replicated>::TearDown();
  }

  bool stopped_ = false;
};

TEST_F(AsioReplicasTest, AGrantTheReplicaAcknowledgedIsHeldAndTheReplicaHasIt) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", replicated());
  Tried got = try_lock(lock);
  ASSERT_FALSE(got.ec) << got.ec.message();
  ASSERT_TRUE(got.hold);
  EXPECT_EQ(got.hold.replicas_acknowledged(), 1);
  // WAIT answered 1: the replica has the grant already.
  EXPECT_EQ(servers().replica().command({"GET", lock.key()}), got.hold.id());
  EXPECT_EQ(release(got.hold).second, Release::released);
  EXPECT_FALSE(key_exists(lock.key()));
}

TEST_F(AsioReplicasTest, AGrantNoReplicaAcknowledgedIsNotReplicatedAndLeavesNoKey) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", replicated());
  stop_replica();
  const Tried got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::not_replicated)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_TRUE(eventually([&] { return !key_exists(lock.key()); }))
      << "the grant no replica had was left on the master";
}

// As try_lock_for(): the deadline cuts WAIT, and the call ends by it, busy
// rather than failed, with the grant given back.
TEST_F(AsioReplicasTest, TheDeadlineCutsAWaitForAStoppedReplica) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", replicated(10s));
  Tried warm = try_lock(lock);  // the count is asked while all is well
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  stop_replica();
  const auto began = std::chrono::steady_clock::now();
  const Tried got = wait_for(
      start<testing::Hold>([&](auto token) { async_try_lock_for(lock, 300ms, std::move(token)); }));
  // Far below the 10 s WAIT it cuts: the deadline, and slack for a loaded machine.
  EXPECT_LE(std::chrono::steady_clock::now() - began, 300ms + 2s);
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(lock.key()); }));
}

TEST_F(AsioReplicasTest, MoreReplicasThanConnectedFailsBeforeAnythingIsGranted) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", LockOptions().ttl(30s).replicas(2, 10s));
  const Tried got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::not_replicated)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_FALSE(key_exists(lock.key()));
}

TEST_F(AsioReplicasTest, AWaitTheAclRefusesIsAServerErrorAndLeavesNoKey) {
  server().command({"ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait"});
  ClientOptions options = client_options(server());
  options.username = "nowait";
  options.password = "pw";
  Client limited(options);
  Mutex lock(limited, "async:job", replicated());
  const Tried got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::server_error)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_FALSE(key_exists(lock.key()));
}

// After NOSCRIPT the WAIT written with the EVALSHA answers ahead of the
// EVAL sent again behind it: the grant needs a WAIT of its own.
TEST_F(AsioReplicasTest, AGrantIsConfirmedAfterTheScriptCacheWasFlushed) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", replicated().fencing(true));
  Tried warm = try_lock(lock);
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  server().command({"SCRIPT", "FLUSH"});
  stop_replica();
  const Tried got = try_lock(lock);
  EXPECT_EQ(got.ec, make_error_code(Errc::not_replicated)) << got.ec.message();
  EXPECT_FALSE(got.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(lock.key()); }));
}

// A WAIT holds up its connection: another lock's steps on the same
// context go on another link, and are answered meanwhile.
TEST_F(AsioReplicasTest, AnotherLocksStepsAreAnsweredWhileAWaitBlocks) {
  Client client(client_options(server()));
  Mutex replicated_lock(client, "async:job", replicated(30s));
  Mutex plain(client, "async:other", LockOptions().ttl(30s));
  Tried warm = try_lock(replicated_lock);
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  stop_replica();
  std::future<Tried> blocked = start_try_lock(replicated_lock);
  ASSERT_TRUE(eventually([&] { return key_exists(replicated_lock.key()); }));
  Tried other = try_lock(plain);
  ASSERT_TRUE(other.hold) << other.ec.message();
  EXPECT_EQ(release(other.hold).second, Release::released);
  EXPECT_EQ(blocked.wait_for(0s), std::future_status::timeout)
      << "the WAIT was not blocking: this test proves nothing";
  servers().continue_replica();
  stopped_ = false;
  const Tried confirmed = wait_for(std::move(blocked));
  EXPECT_TRUE(confirmed.hold) << confirmed.ec.message();
}

// Cancelled while its WAIT blocks: operation_aborted, and the grant, which
// stands on the master, is given back.
TEST_F(AsioReplicasTest, ACancelledWaitLeavesNoKey) {
  Client client(client_options(server()));
  Mutex lock(client, "async:job", replicated(30s));
  Tried warm = try_lock(lock);
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  stop_replica();
  asio::cancellation_signal cancel;
  std::future<Tried> waiting = start_lock(lock, cancel.slot());
  ASSERT_TRUE(eventually([&] { return key_exists(lock.key()); }));
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Tried got = wait_for(std::move(waiting));
  EXPECT_EQ(got.ec, asio::error::operation_aborted) << got.ec.message();
  EXPECT_FALSE(got.hold);
  // Given back apart: the undo behind the WAIT waits for the replica.
  EXPECT_TRUE(eventually([&] { return !key_exists(lock.key()); }));
}

// A waiter woken by the holder's release takes the lock, acknowledged.
TEST_F(AsioReplicasTest, AWaiterTakesTheLockOnceReleasedAndItIsAcknowledged) {
  Client client(client_options(server()));
  Mutex holder(client, "async:job", replicated());
  Mutex waiter(client, "async:job", replicated());
  ASSERT_TRUE(holder.try_lock());
  std::future<Tried> waiting = start_lock(waiter);
  const std::string channel = detail::companion_key(waiter.key(), "released");
  ASSERT_TRUE(eventually([&] { return subscribers(channel) > 0; }));
  holder.unlock();
  Tried got = wait_for(std::move(waiting));
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(got.hold.replicas_acknowledged(), 1);
}

// Every single-server lock type: a grant no replica has is reported and
// given back, one the replica has is held.
template <class Lock, class Try>
void expect_confirmed(testing::AsioOn<Replicated>& test, Lock& lock, Try try_it) {
  test.servers().stop_replica();
  auto refused = try_it(lock);
  EXPECT_EQ(refused.ec, make_error_code(Errc::not_replicated)) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  EXPECT_TRUE(eventually([&] { return test.server().command({"EXISTS", lock.key()}) == "0"; }));
  test.servers().continue_replica();
  test.servers().wait_in_sync();
  auto held = try_it(lock);
  ASSERT_TRUE(held.hold) << held.ec.message();
  EXPECT_EQ(held.hold.replicas_acknowledged(), 1);
}

TEST_F(AsioReplicasTest, EveryLockTypeWaitsForItsReplica) {
  Client client(client_options(server()));
  const LockOptions options = LockOptions().ttl(30s).replicas(1, 300ms);
  const auto exclusive = [&](auto& lock) { return try_lock(lock); };
  {
    SCOPED_TRACE("SimpleMutex");
    SimpleMutex lock(client, "async:simple", options);
    expect_confirmed(*this, lock, exclusive);
  }
  {
    SCOPED_TRACE("ReentrantMutex");
    ReentrantMutex lock(client, "async:reentrant", options);
    expect_confirmed(*this, lock, exclusive);
  }
  {
    SCOPED_TRACE("SharedMutex write");
    SharedMutex lock(client, "async:shared", options);
    expect_confirmed(*this, lock, exclusive);
  }
  {
    SCOPED_TRACE("SharedMutex read");
    SharedMutex lock(client, "async:read", options);
    expect_confirmed(*this, lock, [&](SharedMutex& shared) {
      return wait_for(start<AsyncSharedHold<SharedMutex>>(
          [&](auto token) { async_try_lock_shared(shared, std::move(token)); }));
    });
  }
}

}  // namespace
}  // namespace asio_replicas_test
}  // namespace distlock
