// Tests for hold_keeper.hpp's minimum hold (LockOptions::min_hold) against
// real redis-servers: a release before the minimum hold has passed keeps
// the lease, token and all, until it ends, so a late second run (cron on
// another machine) is refused; the lock is free once it ends, waiters get
// it then; later releases, lost leases and the option's checks. Each
// typed test runs over Mutex, SimpleMutex, ReentrantMutex and SharedMutex's
// write side; one runs a Redlock.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::eventually;

template <class Lock>
class MinHoldTest : public testing::RedisClientTest {
 protected:
  // What the server holds for the lock at `key`: the token of a string
  // lease, every field and count of a hash; "(none)" when there is no key.
  std::string record(const std::string& key) {
    const std::string type(client().command("TYPE", key).str());
    if (type == "string") return get(key);
    if (type != "hash") return "(" + type + ")";
    const Reply fields = client().command("HGETALL", key);
    std::string out;
    for (std::size_t i = 0; i < fields.size(); ++i) out += std::string(fields[i].str()) + ' ';
    return out;
  }
  long long pttl(const std::string& key) { return client().command("PTTL", key).integer(); }

  // Where the lock announces its releases.
  static std::string channel(const std::string& key) {
    if constexpr (std::is_same_v<Lock, ReentrantMutex>)
      return "redisson_lock__channel:{" + key + "}";
    if constexpr (std::is_same_v<Lock, SharedMutex>) return "redisson_rwlock:{" + key + "}";
    return "{" + key + "}:released";
  }
};

using ExclusiveLocks = ::testing::Types<Mutex, SimpleMutex, ReentrantMutex, SharedMutex>;
struct ExclusiveLockName {
  template <class Lock>
  static std::string GetName(int) {
    if (std::is_same_v<Lock, Mutex>) return "Mutex";
    if (std::is_same_v<Lock, SimpleMutex>) return "SimpleMutex";
    if (std::is_same_v<Lock, ReentrantMutex>) return "ReentrantMutex";
    return "SharedMutexWriter";
  }
};
TYPED_TEST_SUITE(MinHoldTest, ExclusiveLocks, ExclusiveLockName);
using ReentrantMinHold = MinHoldTest<ReentrantMutex>;
using SharedMinHold = MinHoldTest<SharedMutex>;
using MutexMinHold = MinHoldTest<Mutex>;

// The cron case: two machines start the same job a second apart.
TYPED_TEST(MinHoldTest, AnUnlockBeforeTheMinimumHoldKeepsTheLockUntilItEnds) {
  Client other(client_options(this->server()));
  TypeParam first(this->client(), "cron", LockOptions{}.min_hold(2500ms));
  TypeParam late(other, "cron");
  testing::RawSubscriber announcements(client_options(this->server()), this->channel("cron"));

  const Clock::time_point started = Clock::now();
  ASSERT_TRUE(first.try_lock());
  const std::string held = this->record("cron");
  first.unlock();  // the job took no time at all
  const Clock::time_point unlocked = Clock::now();

  EXPECT_EQ(this->record("cron"), held) << "the lease stays as it was, token and all";
  const long long left = this->pttl("cron");
  EXPECT_GT(left,
            2500 -
                std::chrono::duration_cast<std::chrono::milliseconds>(unlocked - started).count() -
                100);
  EXPECT_LE(left, 2500) << "the lease ends with the minimum hold, not with the 30 s ttl";
  EXPECT_FALSE(first.owns_lock());
  // No release is announced while the lock is held; waiting a second for
  // one (the subscriber's timeout) is also the late machine's delay.
  EXPECT_THROW(static_cast<void>(announcements.next()), TimeoutError);
  EXPECT_FALSE(late.try_lock()) << "the late run is refused";
  EXPECT_FALSE(first.try_lock()) << "so is this object, until the minimum hold ends";

  // Free once the minimum hold ends, without any renewal keeping it.
  ASSERT_TRUE(eventually([&] { return late.try_lock(); }));
  EXPECT_GE(Clock::now() - started, 2500ms);
  EXPECT_EQ(late.release(), Release::released);
}

TYPED_TEST(MinHoldTest, AWaiterGetsTheLockWhenTheMinimumHoldEnds) {
  Client other(client_options(this->server()));
  TypeParam first(this->client(), "cron", LockOptions{}.min_hold(1500ms));
  TypeParam waiter(other, "cron");
  const Clock::time_point started = Clock::now();
  ASSERT_TRUE(first.try_lock());
  EXPECT_EQ(first.release(), Release::kept);
  ASSERT_TRUE(waiter.try_lock_for(5s));
  const Clock::duration waited = Clock::now() - started;
  EXPECT_GE(waited, 1500ms);
  EXPECT_LT(waited, 2500ms) << "woken by the lease's end, not by a late poll";
}

TYPED_TEST(MinHoldTest, ReleaseSetsTheLeaseToWhatIsLeftOfTheMinimumHold) {
  // A lease shorter than the minimum hold is lengthened to it, and one
  // longer shortened; neither is renewed after.
  TypeParam shorter(this->client(), "short", LockOptions{}.ttl(500ms).min_hold(2s));
  TypeParam longer(this->client(), "long", LockOptions{}.ttl(20s).min_hold(2s));
  ASSERT_TRUE(shorter.try_lock());
  ASSERT_TRUE(longer.try_lock());
  const std::string short_record = this->record("short");
  const std::string long_record = this->record("long");
  EXPECT_EQ(shorter.release(), Release::kept);
  EXPECT_EQ(longer.release(), Release::kept);
  for (const char* key : {"short", "long"}) {
    const long long left = this->pttl(key);
    EXPECT_GT(left, 1000) << key;
    EXPECT_LE(left, 2000) << key;
  }
  EXPECT_EQ(this->record("short"), short_record);
  EXPECT_EQ(this->record("long"), long_record);
}

TYPED_TEST(MinHoldTest, AnUnlockAfterTheMinimumHoldReleasesAsUsual) {
  TypeParam lock(this->client(), "job", LockOptions{}.min_hold(100ms));
  const Clock::time_point started = Clock::now();
  ASSERT_TRUE(lock.try_lock());
  std::this_thread::sleep_for(150ms);  // the job's work, outlasting the minimum hold
  ASSERT_GE(Clock::now() - started, 100ms);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(this->record("job"), "(none)");
}

TYPED_TEST(MinHoldTest, ALeaseGoneBeforeTheUnlockIsReportedAsWithoutIt) {
  TypeParam lock(this->client(), "job", LockOptions{}.min_hold(5s));
  ASSERT_TRUE(lock.try_lock());
  this->client().command("DEL", "job");
  EXPECT_EQ(lock.release(), Release::expired);
  EXPECT_EQ(this->record("job"), "(none)") << "nothing is written back";
}

TYPED_TEST(MinHoldTest, AnotherHoldersLockIsLeftAlone) {
  TypeParam lock(this->client(), "job", LockOptions{}.ttl(10s).min_hold(5s));
  ASSERT_TRUE(lock.try_lock());
  this->client().command("DEL", "job");
  if constexpr (std::is_same_v<TypeParam, Mutex> || std::is_same_v<TypeParam, SimpleMutex>) {
    this->client().command("SET", "job", "someone-else", "PX", "60000");
  } else {
    this->client().command("HSET", "job", "someone:else", "1");
    this->client().command("PEXPIRE", "job", "60000");
  }
  EXPECT_EQ(lock.release(), Release::not_owner);
  EXPECT_GT(this->pttl("job"), 50000) << "its lease is untouched";
}

TEST_F(ReentrantMinHold, OnlyTheOutermostUnlockKeepsTheLock) {
  ReentrantMutex lock(client(), "tree", LockOptions{}.min_hold(3s));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.release(), Release::released);  // the inner one
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_EQ(lock.release(), Release::kept);
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_GT(pttl("tree"), 2000);
  // Another object of this thread is a new owner while the hold is kept,
  // and is refused as any other.
  ReentrantMutex again(client(), "tree");
  EXPECT_FALSE(again.try_lock());
}

TEST_F(SharedMinHold, AReadHoldIsReleasedAtOnce) {
  SharedMutex lock(client(), "rw", LockOptions{}.min_hold(3s));
  ASSERT_TRUE(lock.try_lock_shared());
  EXPECT_EQ(lock.release_shared(), Release::released);
  EXPECT_EQ(record("rw"), "(none)");
}

// A Redlock keeps its lease on every master, by the same token-checked
// extend, and a second Redlock is refused until the minimum hold ends.
TEST(MinHoldRedlock, KeepsTheLeaseOnEveryMaster) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  std::vector<std::unique_ptr<testing::RedisServer>> servers;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Client*> masters;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<testing::RedisServer>());
    clients.push_back(std::make_unique<Client>(client_options(*servers.back())));
    masters.push_back(clients.back().get());
  }
  Redlock first(masters, "cron", RedlockOptions{}.ttl(10s).min_hold(1500ms));
  Redlock late(masters, "cron", RedlockOptions{}.ttl(10s));
  const Clock::time_point started = Clock::now();
  ASSERT_TRUE(first.try_lock());
  const std::string token = first.token();
  EXPECT_EQ(first.release(), Release::kept);
  for (const std::unique_ptr<Client>& master : clients) {
    EXPECT_EQ(master->command("GET", "cron").str(), token);
    const long long left = master->command("PTTL", "cron").integer();
    EXPECT_GT(left, 1000);
    EXPECT_LE(left, 1500);
  }
  EXPECT_FALSE(late.try_lock());
  ASSERT_TRUE(eventually([&] { return late.try_lock(); }));
  EXPECT_GE(Clock::now() - started, 1500ms);
}

TEST(MinHoldOptions, AreCheckedWhereTheyAreWritten) {
  EXPECT_EQ(LockOptions{}.min_hold().count(), 0);
  EXPECT_EQ(LockOptions{}.min_hold(1500ms).min_hold(), 1500ms);
  EXPECT_THROW(LockOptions{}.min_hold(0ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.min_hold(-1s), InvalidArgument);
  EXPECT_THROW(LockOptions{}.min_hold(max_ttl + 1ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.max_hold(5s).min_hold(10s), InvalidArgument);
  EXPECT_THROW(LockOptions{}.min_hold(10s).max_hold(5s), InvalidArgument);
  EXPECT_EQ(LockOptions{}.min_hold(5s).max_hold(5s).min_hold(), 5s);
}

TEST_F(MutexMinHold, ASemaphoreRefusesIt) {
  EXPECT_THROW(Semaphore(client(), "s", 2, LockOptions{}.min_hold(1s)), InvalidArgument);
}

}  // namespace
}  // namespace distlock
