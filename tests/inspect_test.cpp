// Tests for inspect.hpp: inspect() and is_locked() for every layout, and
// force_unlock() removing each (readers' timeout keys included), waking
// waiters of every kind and keeping the fence counter; application data at
// a lock's name (no expiry, or not a lock's layout) is reported as no lock
// and never deleted.
#include "distlock/inspect.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <utility>

#include "distlock/fair_mutex.hpp"
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

// Application data at a lock's name: inspect() reports it as no lock,
// is_locked() and force_unlock() refuse it naming the key and what it holds,
// and nothing is deleted or changed.
class NotALock : public Inspect {
 protected:
  void expect_not_a_lock(const std::string& key, const std::string& holds) {
    const std::string before = dump(key);
    const LockStatus status = inspect(client(), key);
    EXPECT_FALSE(status.held) << key;
    EXPECT_EQ(status.kind, LockKind::other) << key;
    EXPECT_EQ(status.holders, 0u) << key;
    EXPECT_NE(status.holds.find(holds), std::string::npos) << status.holds;
    // force_unlock's script decides on the server as inspect() does here,
    // in the same words.
    expect_refused([&] { static_cast<void>(is_locked(client(), key)); }, key, status.holds);
    expect_refused([&] { static_cast<void>(force_unlock(client(), key)); }, key, status.holds,
                   "; not deleted");
    EXPECT_EQ(dump(key), before) << key << " was changed";
  }

  template <class Call>
  void expect_refused(Call call, const std::string& key, const std::string& holds,
                      const std::string& outcome = "") {
    try {
      call();
      ADD_FAILURE() << key << ": no error";
    } catch (const NotALockError& error) {
      const std::string what = error.what();
      EXPECT_EQ(error.key(), key);
      EXPECT_EQ(error.holds(), holds);
      EXPECT_EQ(error.kind(), ServerErrorKind::wrongtype);  // a WrongTypeError
      EXPECT_EQ(what.find("key '" + key + "' is " + holds + ", not a lock" + outcome), 0u) << what;
    }
  }

  // The key's value and expiry, as DUMP and PTTL give them.
  std::string dump(const std::string& key) {
    const Reply value = client().command("DUMP", key);
    return (value.is_nil() ? std::string("(none)") : std::string(value.str())) + "/" +
           (client().command("PTTL", key).integer() < 0 ? "persistent" : "expiring");
  }
};

TEST_F(NotALock, AJsonStringWithoutExpiry) {
  client().command("SET", "user:42", R"({"name":"ann","plan":"pro"})");
  expect_not_a_lock("user:42", "a string without expiry");
}

TEST_F(NotALock, AHashWithoutExpiry) {
  client().command("HSET", "session:9", "user", "42", "started", "1700000000");
  expect_not_a_lock("session:9", "a hash without expiry");
}

TEST_F(NotALock, AHashWithExpiryWhoseFieldsAreNoHolds) {
  client().command("HSET", "profile:7", "name", "bob", "visits", "3");
  client().command("PEXPIRE", "profile:7", "60000");
  expect_not_a_lock("profile:7", "a hash whose field 'name' is no owner with a hold count");
  client().command("HSET", "counts", "a:1", "0");  // a count of no hold
  client().command("PEXPIRE", "counts", "60000");
  expect_not_a_lock("counts", "a hash whose field 'a:1' is no owner");
  client().command("HSET", "moded", "mode", "fast", "a:1", "1");  // no read or write mode
  client().command("PEXPIRE", "moded", "60000");
  expect_not_a_lock("moded", "a hash whose 'mode' is neither read nor write");
}

TEST_F(NotALock, AList) {
  client().command("RPUSH", "queue", "job-1", "job-2");
  expect_not_a_lock("queue", "a list");
}

// A string with an expiry is what every lease lock writes (distlock's,
// redis-py's, node-redlock's): a cache entry with a TTL looks the same, and
// counts as a lease.
TEST_F(Inspect, AStringWithAnExpiryIsALease) {
  client().command("SET", "cache:1", "value", "PX", "60000");
  const LockStatus status = inspect(client(), "cache:1");
  EXPECT_TRUE(status.held);
  EXPECT_EQ(status.kind, LockKind::lease);
  EXPECT_TRUE(status.ttl.has_value());
  EXPECT_TRUE(is_locked(client(), "cache:1"));
  EXPECT_TRUE(force_unlock(client(), "cache:1"));
}

// Redisson's layouts as a Java peer writes them are locks; the fields'
// values are hold counts.
TEST_F(Inspect, RedissonsLayoutsWrittenByAPeerAreLocks) {
  client().command("HSET", "rlock", "8d1c7e0a-uuid:52", "2");
  client().command("HSET", "rwlock", "mode", "write", "8d1c7e0a-uuid:52:write", "1");
  client().command("HSET", "readers", "mode", "read", "a-uuid:1", "1", "b-uuid:7", "3");
  for (const char* key : {"rlock", "rwlock", "readers"}) client().command("PEXPIRE", key, "30000");
  EXPECT_EQ(inspect(client(), "rlock").kind, LockKind::reentrant);
  EXPECT_EQ(inspect(client(), "rwlock").kind, LockKind::write);
  const LockStatus readers = inspect(client(), "readers");
  EXPECT_EQ(readers.kind, LockKind::read);
  EXPECT_EQ(readers.holders, 2u);
  for (const char* key : {"rlock", "rwlock", "readers"}) {
    EXPECT_TRUE(is_locked(client(), key)) << key;
    EXPECT_TRUE(force_unlock(client(), key)) << key;
  }
  EXPECT_EQ(keys(), 0);
}

// Every lock type's layout is a lock, with its kind and holders.
TEST_F(Inspect, EveryLockTypesLayoutIsALock) {
  Mutex mutex(client(), "m");
  ReentrantMutex reentrant(client(), "r");
  SharedMutex reader(client(), "sr");
  SharedMutex writer(client(), "sw");
  ASSERT_TRUE(mutex.try_lock());
  ASSERT_TRUE(reentrant.try_lock());
  ASSERT_TRUE(reader.try_lock_shared());
  ASSERT_TRUE(writer.try_lock());
  const std::pair<const char*, LockKind> layouts[] = {{"m", LockKind::lease},
                                                      {"r", LockKind::reentrant},
                                                      {"sr", LockKind::read},
                                                      {"sw", LockKind::write}};
  for (const auto& [name, kind] : layouts) {
    EXPECT_EQ(inspect(client(), name).kind, kind) << name;
    EXPECT_EQ(inspect(client(), name).holders, 1u) << name;
    EXPECT_TRUE(is_locked(client(), name)) << name;
    EXPECT_TRUE(force_unlock(client(), name)) << name;
  }
  EXPECT_EQ(keys(), 0);
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
// attempts run; `more` goes to each lock's constructor after its options.
template <class Lock, class Acquire, class... More>
void expect_force_unlock_wakes(Client& client, const char* command, Acquire acquire, More... more) {
  for (const Script* script : scripts::all) client.command("SCRIPT", "LOAD", script->source);
  Lock holder(client, "w", LockOptions{}.ttl(30s), more...);
  Lock waiter(client, "w", LockOptions{}.ttl(30s), more...);
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
  // A fair waiter hears only its own channel; with a long waiter timeout
  // it would ask again only when the holder's lease ends.
  expect_force_unlock_wakes<FairMutex>(
      client(), "evalsha", [](FairMutex& m) { return m.try_lock_for(20s); }, AcquirePolicy{},
      FairMutex::redisson_waiter_timeout);
}

}  // namespace
}  // namespace distlock
