// Tests for inspect.hpp: inspect() and is_locked() for every layout, and
// force_unlock() removing each (readers' timeout keys included), waking
// waiters of every kind, keeping the fence counter and leaving keys that are
// no lock alone.
#include "distlock/inspect.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;

class Inspect : public testing::RedisClientTest {
 protected:
  long long keys() { return client().command("DBSIZE").integer(); }
};

TEST_F(Inspect, AFreeNameIsNotHeld) {
  const LockStatus status = inspect(client(), "k");
  EXPECT_FALSE(status.held);
  EXPECT_EQ(status.kind, LockKind::none);
  EXPECT_FALSE(status.ttl.has_value());
  EXPECT_EQ(status.holders, 0u);
  EXPECT_FALSE(is_locked(client(), "k"));
}

TEST_F(Inspect, AMutexLeaseShowsItsTtl) {
  Mutex mutex(client(), "k", LockOptions{}.ttl(10s));
  ASSERT_TRUE(mutex.try_lock());
  const LockStatus status = inspect(client(), "k");
  EXPECT_TRUE(status.held);
  EXPECT_EQ(status.kind, LockKind::lease);
  ASSERT_TRUE(status.ttl.has_value());
  EXPECT_GT(*status.ttl, 0ms);
  EXPECT_LE(*status.ttl, 10s);
  EXPECT_EQ(status.holders, 1u);
  EXPECT_TRUE(is_locked(client(), "k"));
  mutex.unlock();
  EXPECT_FALSE(is_locked(client(), "k"));
}

TEST_F(Inspect, AKeyPrefixIsApplied) {
  const LockOptions prefixed = LockOptions{}.key_prefix("app:");
  Mutex mutex(client(), "k", prefixed);
  ASSERT_TRUE(mutex.try_lock());
  EXPECT_TRUE(is_locked(client(), "k", prefixed));
  EXPECT_FALSE(is_locked(client(), "k"));
  EXPECT_TRUE(force_unlock(client(), "k", prefixed));
  EXPECT_FALSE(is_locked(client(), "k", prefixed));
}

TEST_F(Inspect, HashLayoutsShowTheirKindAndHolders) {
  ReentrantMutex reentrant(client(), "r");
  ASSERT_TRUE(reentrant.try_lock());
  EXPECT_EQ(inspect(client(), "r").kind, LockKind::reentrant);
  EXPECT_EQ(inspect(client(), "r").holders, 1u);

  Client other(client_options(server()));  // another owner
  SharedMutex first(client(), "s");
  SharedMutex second(other, "s");
  ASSERT_TRUE(first.try_lock_shared());
  ASSERT_TRUE(second.try_lock_shared());
  const LockStatus read = inspect(client(), "s");
  EXPECT_TRUE(read.held);
  EXPECT_EQ(read.kind, LockKind::read);
  EXPECT_EQ(read.holders, 2u);
  first.unlock_shared();
  second.unlock_shared();

  ASSERT_TRUE(first.try_lock());
  EXPECT_EQ(inspect(client(), "s").kind, LockKind::write);
  EXPECT_EQ(inspect(client(), "s").holders, 1u);
}

TEST_F(Inspect, AStringWithoutExpiryHasNoTtlAndOtherTypesAreNoLock) {
  client().command("SET", "forever", "token");
  const LockStatus forever = inspect(client(), "forever");
  EXPECT_TRUE(forever.held);
  EXPECT_EQ(forever.kind, LockKind::lease);
  EXPECT_FALSE(forever.ttl.has_value());

  client().command("RPUSH", "list", "x");
  const LockStatus list = inspect(client(), "list");
  EXPECT_FALSE(list.held);
  EXPECT_EQ(list.kind, LockKind::other);
  EXPECT_THROW(force_unlock(client(), "list"), WrongTypeError);
  EXPECT_EQ(client().command("LLEN", "list").integer(), 1);
}

TEST_F(Inspect, ForceUnlockRemovesALeaseAndKeepsTheFence) {
  Mutex holder(client(), "k", LockOptions{}.ttl(30s).fencing(true));
  ASSERT_TRUE(holder.try_lock());
  const long long first_fence = holder.fence();
  EXPECT_TRUE(force_unlock(client(), "k"));
  EXPECT_FALSE(is_locked(client(), "k"));
  EXPECT_EQ(std::string(client().command("GET", detail::companion_key("k", "fence")).str()),
            std::to_string(first_fence));
  Mutex next(client(), "k", LockOptions{}.fencing(true));
  ASSERT_TRUE(next.try_lock());
  EXPECT_GT(next.fence(), first_fence);
  EXPECT_EQ(holder.release(), Release::not_owner);
  EXPECT_FALSE(force_unlock(client(), "absent"));
}

TEST_F(Inspect, ForceUnlockRemovesReadersTimeoutKeys) {
  Client other(client_options(server()));
  SharedMutex first(client(), "s", LockOptions{}.ttl(30s));
  SharedMutex second(other, "s", LockOptions{}.ttl(30s));
  ASSERT_TRUE(first.try_lock_shared());
  ASSERT_TRUE(second.try_lock_shared());
  ASSERT_GE(keys(), 3);  // the hash and a timeout key per reader
  EXPECT_TRUE(force_unlock(client(), "s"));
  EXPECT_EQ(keys(), 0) << "left behind: " << client().command("KEYS", "*").size();
  SharedMutex writer(client(), "s");
  EXPECT_TRUE(writer.try_lock());
}

// A waiter woken by the release announcement sleeps until the holder's
// lease ends (30 s here) or its own deadline (20 s): only force_unlock's
// announcement lets it in within 10 s. `command` is what the waiter's
// attempts run.
template <class Lock, class Acquire>
void expect_force_unlock_wakes(Client& client, const char* command, Acquire acquire) {
  for (const Script* script : scripts::all) client.command("SCRIPT", "LOAD", script->source);
  Lock holder(client, "w", LockOptions{}.ttl(30s));
  Lock waiter(client, "w", LockOptions{}.ttl(30s));
  ASSERT_TRUE(holder.try_lock());
  client.command("CONFIG", "RESETSTAT");
  auto waiting = std::async(std::launch::async, [&] { return acquire(waiter); });
  // Two attempts: the second after its subscription, so from then on a
  // release announcement ends its wait.
  ASSERT_TRUE(testing::server_ran(client.options(), command, 2));
  EXPECT_TRUE(force_unlock(client, "w"));
  const auto forced = std::chrono::steady_clock::now();
  EXPECT_TRUE(waiting.get()) << command;
  EXPECT_LT(std::chrono::steady_clock::now() - forced, 10s) << command << ": not woken";
}

TEST_F(Inspect, ForceUnlockWakesWaitersOfEveryKind) {
  expect_force_unlock_wakes<Mutex>(client(), "set", [](Mutex& m) { return m.try_lock_for(20s); });
  expect_force_unlock_wakes<ReentrantMutex>(client(), "evalsha",
                                            [](ReentrantMutex& m) { return m.try_lock_for(20s); });
  expect_force_unlock_wakes<SharedMutex>(client(), "evalsha",
                                         [](SharedMutex& m) { return m.try_lock_shared_for(20s); });
}

}  // namespace
}  // namespace distlock
