// Tests for shared_mutex.hpp against real redis-servers: readers share,
// writers exclude, each reader's lease is its own, downgrade and the refused
// upgrade, Redisson's RReadWriteLock layout and messages (checked with raw
// commands), waking, renewal, and exclusion across threads and processes.
#include "distlock/shared_mutex.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distlock/reentrant_mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::an_hour;
using testing::client_options;
using testing::command_calls;

class SharedMutexTest : public testing::RedisClientTest {
 protected:
  // The key of hold n of `owner` on lock `key` (no hash tag of its own).
  static std::string timeout_key(const std::string& key, const std::string& owner, int n) {
    return "{" + key + "}:" + owner + ":rwlock_timeout:" + std::to_string(n);
  }

  // Waits (boundedly) until someone subscribes to `channel`.
  bool eventually_subscribed(const std::string& channel) {
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (client().command("PUBSUB", "NUMSUB", channel)[1].integer() > 0) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  static std::vector<std::string> sorted(std::vector<std::string> lines) {
    std::sort(lines.begin(), lines.end());
    return lines;
  }

  // HGETALL as sorted "field=value" lines, for readable comparisons.
  std::vector<std::string> fields_of(const std::string& key) {
    const Reply all = client().command("HGETALL", key);
    std::vector<std::string> out;
    for (std::size_t i = 0; i + 1 < all.size(); i += 2) {
      out.push_back(std::string(all[i].str()) + "=" + std::string(all[i + 1].str()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Counts how many threads are inside at once, and the most there ever were.
struct Occupancy {
  std::mutex mutex;
  std::condition_variable changed;
  int inside = 0;
  int most = 0;
  void enter() {
    std::lock_guard guard(mutex);
    most = std::max(most, ++inside);
    changed.notify_all();
  }
  void leave() {
    std::lock_guard guard(mutex);
    --inside;
    changed.notify_all();
  }
  bool wait_for_inside(int count, std::chrono::milliseconds limit) {
    std::unique_lock guard(mutex);
    return changed.wait_for(guard, limit, [&] { return inside >= count; });
  }
};

TEST_F(SharedMutexTest, StoresRedissonsReadLayoutAndAnnouncesTheLastReader) {
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(10s));
  Client other(client_options(server()));
  SharedMutex elsewhere(other, "rw", LockOptions{}.ttl(20s));
  EXPECT_EQ(lock.channel(), "redisson_rwlock:{rw}");
  testing::RawSubscriber announcements(client_options(server()), "redisson_rwlock:{rw}");

  ASSERT_TRUE(lock.try_lock_shared());
  ASSERT_TRUE(lock.try_lock_shared());  // re-entry is counted locally
  const std::string me = lock.owner_id();
  EXPECT_EQ(client().command("TYPE", "rw").str(), "hash");
  EXPECT_EQ(fields_of("rw"), sorted({me + "=1", "mode=read"}));
  EXPECT_EQ(get(timeout_key("rw", me, 1)), "1");
  const long long hold_pttl = client().command("PTTL", timeout_key("rw", me, 1)).integer();
  EXPECT_GT(hold_pttl, 9000);
  EXPECT_LE(hold_pttl, 10000);
  EXPECT_GT(client().command("PTTL", "rw").integer(), 9000);

  ASSERT_TRUE(elsewhere.try_lock_shared());
  const std::string them = elsewhere.owner_id();
  EXPECT_EQ(fields_of("rw"), sorted({me + "=1", them + "=1", "mode=read"}));
  EXPECT_GT(client().command("PTTL", timeout_key("rw", them, 1)).integer(), 19000);
  EXPECT_GT(client().command("PTTL", "rw").integer(), 19000);  // the longest reader's

  lock.unlock_shared();
  lock.unlock_shared();
  EXPECT_EQ(client().command("HEXISTS", "rw", me).integer(), 0);
  EXPECT_EQ(client().command("EXISTS", timeout_key("rw", me, 1)).integer(), 0);
  EXPECT_EQ(client().command("EXISTS", "rw").integer(), 1);
  // A reader leaving while others stay announces nothing: a marker published
  // now is the next message.
  client().command("PUBLISH", "redisson_rwlock:{rw}", "marker");
  EXPECT_EQ(announcements.next(), "marker");

  elsewhere.unlock_shared();
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
  EXPECT_EQ(announcements.next(), "0");
}

TEST_F(SharedMutexTest, StoresRedissonsWriteLayoutAndAnnouncesTheWriter) {
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(10s));
  testing::RawSubscriber announcements(client_options(server()), "redisson_rwlock:{rw}");
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(fields_of("rw"), sorted({lock.owner_id() + ":write=1", "mode=write"}));
  const long long pttl = client().command("PTTL", "rw").integer();
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  lock.unlock();
  EXPECT_EQ(client().command("EXISTS", "rw").integer(), 1);
  lock.unlock();
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
  EXPECT_EQ(announcements.next(), "1");
}

TEST_F(SharedMutexTest, CompanionNamesKeepTheNamesHashTag) {
  SharedMutex lock(client(), "{cat}:x");
  EXPECT_EQ(lock.channel(), "redisson_rwlock:{cat}:x");
  ASSERT_TRUE(lock.try_lock_shared());
  EXPECT_EQ(get("{cat}:x:" + lock.owner_id() + ":rwlock_timeout:1"), "1");
  SharedMutex odd(client(), "odd{name");  // any '{' counts, as in Redisson
  EXPECT_EQ(odd.channel(), "redisson_rwlock:odd{name");
  ASSERT_TRUE(odd.try_lock_shared());
  EXPECT_EQ(get("odd{name:" + odd.owner_id() + ":rwlock_timeout:1"), "1");
  SharedMutex prefixed(client(), "x", LockOptions{}.key_prefix("locks:"));
  EXPECT_EQ(prefixed.channel(), "redisson_rwlock:{locks:x}");
  ASSERT_TRUE(prefixed.try_lock_shared());
  EXPECT_EQ(get(timeout_key("locks:x", prefixed.owner_id(), 1)), "1");
}

TEST_F(SharedMutexTest, WorksWithStandardGuards) {
  SharedMutex lock(client(), "rw");
  {
    std::shared_lock read(lock);
    EXPECT_TRUE(lock.owns_lock_shared());
    EXPECT_FALSE(lock.owns_lock());
  }
  {
    std::shared_lock read(lock, 500ms);
    EXPECT_TRUE(read.owns_lock());
  }
  {
    std::shared_lock read(lock, std::try_to_lock);
    EXPECT_TRUE(read.owns_lock());
  }
  {
    std::unique_lock write(lock);
    EXPECT_TRUE(lock.owns_lock());
  }
  {
    std::unique_lock write(lock, Clock::now() + 500ms);
    EXPECT_TRUE(write.owns_lock());
  }
  EXPECT_FALSE(lock.owns_lock_shared());
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(SharedMutexTest, ReadersShare) {
  constexpr int readers = 4;
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(30s));
  Occupancy occupancy;
  std::vector<std::thread> threads;
  for (int i = 0; i < readers; ++i) {
    threads.emplace_back([&] {
      std::shared_lock read(lock);
      occupancy.enter();
      // Every reader stays until all are in together.
      EXPECT_TRUE(occupancy.wait_for_inside(readers, 10s));
      std::this_thread::sleep_for(20ms);
      occupancy.leave();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(occupancy.most, readers);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

TEST_F(SharedMutexTest, AWriterWaitsForEveryReaderThenGetsIn) {
  constexpr int readers = 4;
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(30s));
  Occupancy occupancy;
  std::atomic<bool> writer_in{false};
  std::atomic<int> readers_left{readers};
  std::promise<void> go;
  std::shared_future<void> leave = go.get_future().share();
  std::vector<std::thread> threads;
  for (int i = 0; i < readers; ++i) {
    threads.emplace_back([&] {
      std::shared_lock read(lock);
      occupancy.enter();
      leave.wait();
      EXPECT_FALSE(writer_in) << "the writer got in while a reader held the lock";
      --readers_left;
      std::this_thread::sleep_for(10ms);
      read.unlock();
    });
  }
  ASSERT_TRUE(occupancy.wait_for_inside(readers, 10s));
  auto writer = std::async(std::launch::async, [&] {
    const bool got = lock.try_lock_for(20s);
    writer_in = got;
    const int left = readers_left;
    if (got) lock.unlock();
    return got && left == 0;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(writer_in);
  go.set_value();
  for (auto& t : threads) t.join();
  EXPECT_TRUE(writer.get());
}

TEST_F(SharedMutexTest, AWriterExcludesReadersAndWriters) {
  SharedMutex lock(client(), "rw");
  lock.lock();
  std::thread([&] {
    EXPECT_FALSE(lock.try_lock_shared());
    EXPECT_FALSE(lock.try_lock());
    EXPECT_FALSE(lock.try_lock_shared_for(100ms));
  }).join();
  Client other(client_options(server()));
  SharedMutex elsewhere(other, "rw");
  EXPECT_FALSE(elsewhere.try_lock_shared());
  EXPECT_FALSE(elsewhere.try_lock());
  lock.unlock();
  EXPECT_TRUE(elsewhere.try_lock_shared());
  EXPECT_FALSE(lock.try_lock());  // readers keep a writer out too
  elsewhere.unlock_shared();
  EXPECT_TRUE(lock.try_lock());
}

TEST_F(SharedMutexTest, AReadersLeaseRunningOutFreesAWriter) {
  Client other(client_options(server()));
  SharedMutex reader(other, "rw", LockOptions{}.ttl(300ms));
  SharedMutex writer(client(), "rw");
  ASSERT_TRUE(reader.try_lock_shared());
  EXPECT_FALSE(writer.try_lock());
  const auto start = Clock::now();
  ASSERT_TRUE(writer.try_lock_for(5s));
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_EQ(reader.release_shared(), Release::not_owner);  // the writer's hash is left alone
  EXPECT_TRUE(writer.owns_lock());
  EXPECT_EQ(fields_of("rw"), sorted({writer.owner_id() + ":write=1", "mode=write"}));
}

TEST_F(SharedMutexTest, TheHashLivesAsLongAsTheLongestLiveReader) {
  Client second_client(client_options(server()));
  SharedMutex long_reader(client(), "rw", LockOptions{}.ttl(20s));
  SharedMutex short_reader(second_client, "rw", LockOptions{}.ttl(2s));
  ASSERT_TRUE(short_reader.try_lock_shared());
  ASSERT_TRUE(long_reader.try_lock_shared());
  EXPECT_GT(client().command("PTTL", "rw").integer(), 15000);
  // The longest leaves: the hash now ends with the shorter reader's lease.
  long_reader.unlock_shared();
  const long long pttl = client().command("PTTL", "rw").integer();
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 2000);
}

TEST_F(SharedMutexTest, AReleaseFreesTheLockWhenTheOtherReadersLeasesHaveRunOut) {
  // A reader that stopped (crashed, paused) without releasing keeps its
  // field, but its own lease runs out; the next release finds no live
  // reader left and frees the lock at once.
  Client stopped_client(client_options(server()));
  SharedMutex stopped(stopped_client, "rw", LockOptions{}.ttl(200ms));
  SharedMutex live(client(), "rw", LockOptions{}.ttl(30s));
  ASSERT_TRUE(stopped.try_lock_shared());
  ASSERT_TRUE(live.try_lock_shared());
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(client().command("HEXISTS", "rw", stopped.owner_id()).integer(), 1);
  live.unlock_shared();
  EXPECT_EQ(client().command("EXISTS", "rw").integer(), 0);
  Client writer_client(client_options(server()));
  SharedMutex writer(writer_client, "rw");
  EXPECT_TRUE(writer.try_lock());
  EXPECT_EQ(stopped.release_shared(), Release::not_owner);
}

TEST_F(SharedMutexTest, ACrashedReaderBlocksWritersNoLongerThanItsLease) {
  // The child holds a renewed read lock until it is killed; fork first, so
  // no thread of ours runs yet.
  const auto ttl = 1s;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const ClientOptions where = client_options(server());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Client own(where);
    SharedMutex lock(own, "rw", LockOptions{}.ttl(ttl).auto_renew(true));
    lock.lock_shared();
    const char byte = 1;
    static_cast<void>(::write(ready[1], &byte, 1));
    for (;;) ::pause();  // renewed by the watchdog until killed
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  std::this_thread::sleep_for(2 * ttl);  // held past its lease: both keys are renewed
  ASSERT_EQ(client().command("EXISTS", "rw").integer(), 1);
  const Reply keys = client().command("KEYS", "{rw}:*:rwlock_timeout:1");
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_GT(client().command("PTTL", std::string(keys[0].str())).integer(), 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killed = Clock::now();
  SharedMutex writer(client(), "rw", LockOptions{}.ttl(5s));
  ASSERT_TRUE(writer.try_lock_for(5s));
  EXPECT_LE(Clock::now() - killed, ttl + ttl / 3 + 300ms);
}

TEST_F(SharedMutexTest, DowngradeKeepsTheDataLockedThroughout) {
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(30s), an_hour);
  lock.lock();
  // A reader elsewhere waits (with an hour-long policy) for the writer.
  auto reader = std::async(std::launch::async, [&] {
    Client other(client_options(server()));
    SharedMutex elsewhere(other, "rw", LockOptions{}.ttl(30s), an_hour);
    const bool got = elsewhere.try_lock_shared_for(20s);
    if (got) elsewhere.unlock_shared();
    return got;
  });
  ASSERT_TRUE(eventually_subscribed("redisson_rwlock:{rw}"));
  lock.lock_shared();
  EXPECT_EQ(fields_of("rw"),
            sorted({lock.owner_id() + "=1", lock.owner_id() + ":write=1", "mode=write"}));
  const auto downgraded = Clock::now();
  lock.unlock();  // now a reader, never unlocked in between
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_TRUE(lock.owns_lock_shared());
  // The waiting reader may be in already; our write field is gone, our
  // read hold stays.
  EXPECT_EQ(client().command("HGET", "rw", "mode").str(), "read");
  EXPECT_EQ(client().command("HGET", "rw", lock.owner_id()).str(), "1");
  EXPECT_EQ(client().command("HEXISTS", "rw", lock.owner_id() + ":write").integer(), 0);
  ASSERT_TRUE(reader.get());  // woken by the "1": readers share with us now
  EXPECT_LT(Clock::now() - downgraded, 5s);
  Client writer_client(client_options(server()));
  SharedMutex writer(writer_client, "rw");
  EXPECT_FALSE(writer.try_lock());
  lock.unlock_shared();
  EXPECT_TRUE(writer.try_lock());
}

TEST_F(SharedMutexTest, AnUpgradeIsRefusedAtOnceInsteadOfDeadlocking) {
  SharedMutex lock(client(), "rw");
  lock.lock_shared();
  const auto expect_refused = [&](const char* what, const std::function<void()>& call) {
    const auto start = Clock::now();
    try {
      call();
      ADD_FAILURE() << what << " was not refused";
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code(), std::errc::resource_deadlock_would_occur) << what;
    }
    EXPECT_LT(Clock::now() - start, 1s) << what;
  };
  expect_refused("lock()", [&] { lock.lock(); });
  expect_refused("try_lock()", [&] { static_cast<void>(lock.try_lock()); });
  expect_refused("try_lock_for()", [&] { static_cast<void>(lock.try_lock_for(10s)); });
  // Through another object of the same thread and Client: the same owner,
  // so the server refuses it.
  SharedMutex same_owner(client(), "rw");
  expect_refused("lock() through another object", [&] { same_owner.lock(); });
  expect_refused("try_lock_for() through another object",
                 [&] { static_cast<void>(same_owner.try_lock_for(10s)); });
  EXPECT_TRUE(lock.owns_lock_shared());
  EXPECT_FALSE(same_owner.owns_lock());
  lock.unlock_shared();
  EXPECT_TRUE(lock.try_lock());  // once the read lock is gone, fine
}

TEST_F(SharedMutexTest, AWriterIsWokenByTheLastReadersAnnouncement) {
  SharedMutex reader(client(), "rw", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(reader.try_lock_shared());
  auto writer = std::async(std::launch::async, [&] {
    Client other(client_options(server()));
    SharedMutex elsewhere(other, "rw", LockOptions{}.ttl(30s), an_hour);
    const bool got = elsewhere.try_lock_for(20s);
    if (got) elsewhere.unlock();
    return got;
  });
  ASSERT_TRUE(eventually_subscribed("redisson_rwlock:{rw}"));
  const auto released = Clock::now();
  reader.unlock_shared();
  ASSERT_TRUE(writer.get());
  EXPECT_LT(Clock::now() - released, 5s);  // far below the hour and the 30 s lease
}

TEST_F(SharedMutexTest, ReadersAreWokenByTheWritersAnnouncement) {
  SharedMutex writer(client(), "rw", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(writer.try_lock());
  std::vector<std::future<bool>> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(std::async(std::launch::async, [&] {
      const bool got = writer.try_lock_shared_for(20s);  // other threads: other owners
      if (got) writer.unlock_shared();
      return got;
    }));
  }
  ASSERT_TRUE(eventually_subscribed("redisson_rwlock:{rw}"));
  std::this_thread::sleep_for(50ms);
  const auto released = Clock::now();
  writer.unlock();
  for (auto& r : readers) EXPECT_TRUE(r.get());
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(SharedMutexTest, ReentrantHoldsCostNoRoundTrip) {
  SharedMutex lock(client(), "rw");
  lock.lock();  // warm-up: the server caches the scripts
  lock.lock_shared();
  lock.unlock();
  lock.unlock_shared();
  lock.lock();
  lock.lock_shared();
  client().command("CONFIG", "RESETSTAT");
  for (int i = 0; i < 50; ++i) {
    lock.lock();
    ASSERT_TRUE(lock.try_lock_for(1s));
    lock.lock_shared();
    ASSERT_TRUE(lock.try_lock_shared());
    lock.unlock_shared();
    lock.unlock_shared();
    lock.unlock();
    lock.unlock();
  }
  const testing::CommandCalls calls = command_calls(client());
  EXPECT_EQ(calls.total_except("config|resetstat"), 0) << calls.text;
  EXPECT_EQ(lock.hold_count(), 1u);
  EXPECT_EQ(lock.shared_hold_count(), 1u);
}

TEST_F(SharedMutexTest, WritersExcludeThreadsExactly) {
  constexpr int threads = 4;
  constexpr int rounds = 20;
  SharedMutex shared(client(), "counter-lock", LockOptions{}.ttl(10s));
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        SharedMutex own(client(), "counter-lock", LockOptions{}.ttl(10s));
        SharedMutex& lock = t % 2 == 0 ? shared : own;
        for (int i = 0; i < rounds; ++i) {
          std::unique_lock write(lock);
          testing::unsafe_increment(client(), "counter");
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(get("counter"), std::to_string(threads * rounds));
}

// Writes a and b to the same new value, with a pause in between: a reader
// that sees them differ saw half a write.
void write_pair(Client& client, int value) {
  client.command("SET", "a", std::to_string(value));
  std::this_thread::sleep_for(std::chrono::microseconds(300));
  client.command("SET", "b", std::to_string(value));
}

bool pair_is_whole(Client& client) {
  const Reply a = client.command("GET", "a");
  std::this_thread::sleep_for(std::chrono::microseconds(100));
  const Reply b = client.command("GET", "b");
  return a.is_nil() == b.is_nil() && a.str() == b.str();
}

TEST_F(SharedMutexTest, ReadersNeverSeeATornWrite) {
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(10s));
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      try {
        for (int i = 0; i < 15; ++i) {
          std::unique_lock write(lock);
          write_pair(client(), w * 1000 + i);
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    workers.emplace_back([&] {
      try {
        for (int i = 0; i < 25; ++i) {
          std::shared_lock read(lock);
          if (!pair_is_whole(client())) ++torn;
          ++reads;
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(reads, 75);
  EXPECT_EQ(torn, 0);
}

TEST_F(SharedMutexTest, ExcludesProcessesExactlyAndReadersSeeNoTornWrite) {
  constexpr int processes = 3;
  constexpr int rounds = 10;
  const ClientOptions where = client_options(server());
  const int failed_children = testing::run_in_children(processes, [&] {
    Client own(where);
    SharedMutex lock(own, "rw", LockOptions{}.ttl(10s));
    for (int i = 0; i < rounds; ++i) {
      {
        std::unique_lock write(lock);
        testing::unsafe_increment(own, "counter");
        write_pair(own, static_cast<int>(::getpid()) * 100 + i);
      }
      std::shared_lock read(lock);
      if (!pair_is_whole(own)) throw std::runtime_error("torn write seen");
    }
  });
  EXPECT_EQ(failed_children, 0);
  EXPECT_EQ(get("counter"), std::to_string(processes * rounds));
  EXPECT_EQ(client().command("EXISTS", "rw").integer(), 0);
}

TEST_F(SharedMutexTest, TheWatchdogRenewsBothKindsAndReportsAReadersLoss) {
  std::mutex mutex;
  std::vector<LeaseInfo> lost;
  const LostCallback record = [&](const LeaseInfo& info) {
    std::lock_guard guard(mutex);
    lost.push_back(info);
  };
  const LockOptions renewed = LockOptions{}.ttl(300ms).auto_renew(true).on_lost(record);
  SharedMutex writer(client(), "w", renewed);
  SharedMutex reader(client(), "r", renewed);
  ASSERT_TRUE(writer.try_lock());
  ASSERT_TRUE(reader.try_lock_shared());
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(client().command("HEXISTS", "w", writer.owner_id() + ":write").integer(), 1);
  EXPECT_GT(client().command("PTTL", "r").integer(), 0);
  EXPECT_GT(client().command("PTTL", timeout_key("r", reader.owner_id(), 1)).integer(), 0);
  EXPECT_FALSE(writer.lost());
  EXPECT_FALSE(reader.lost());
  // The read hold's own lease is gone (as if it had run out): it is lost,
  // even though its field is still there.
  client().command("DEL", timeout_key("r", reader.owner_id(), 1));
  // The callback runs just after the lease is marked lost: wait for it.
  const auto reported = [&] {
    std::lock_guard guard(mutex);
    return !lost.empty();
  };
  const auto deadline = Clock::now() + 3s;
  while (!reported() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(reader.lost());
  {
    std::lock_guard guard(mutex);
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0].name(), "r");
    EXPECT_EQ(lost[0].token, reader.owner_id());
  }
  EXPECT_THROW(reader.lock_shared(), LockLostError);
  EXPECT_EQ(reader.release_shared(), Release::lost);
  EXPECT_FALSE(writer.lost());
  EXPECT_EQ(writer.release(), Release::released);
}

TEST_F(SharedMutexTest, TimeoutRulesWhileWriteHeld) {
  Client other(client_options(server()));
  SharedMutex holder(other, "rw", LockOptions{}.ttl(30s));
  SharedMutex waiter(client(), "rw");
  ASSERT_TRUE(holder.try_lock());
  struct Case {
    const char* what;
    std::function<bool()> call;
    std::chrono::milliseconds at_least, at_most;
  };
  const std::vector<Case> cases = {
      {"negative for", [&] { return waiter.try_lock_shared_for(-5s); }, 0ms, 150ms},
      {"zero for", [&] { return waiter.try_lock_shared_for(0ms); }, 0ms, 150ms},
      {"finite for", [&] { return waiter.try_lock_shared_for(200ms); }, 190ms, 400ms},
      {"past until", [&] { return waiter.try_lock_shared_until(Clock::now() - 1s); }, 0ms, 150ms},
      {"finite until", [&] { return waiter.try_lock_shared_until(Clock::now() + 200ms); }, 190ms,
       400ms},
      {"system clock until",
       [&] { return waiter.try_lock_shared_until(std::chrono::system_clock::now() + 200ms); },
       190ms, 400ms},
      {"write, finite for", [&] { return waiter.try_lock_for(200ms); }, 190ms, 400ms},
      {"write, past until", [&] { return waiter.try_lock_until(Clock::now() - 1s); }, 0ms, 150ms},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    EXPECT_FALSE(c.call()) << c.what;
    const auto took = Clock::now() - start;
    EXPECT_GE(took, c.at_least) << c.what;
    EXPECT_LE(took, c.at_most) << c.what;
  }
}

TEST_F(SharedMutexTest, RejectsBadInputAndMisuseClearly) {
  Client& c = client();
  EXPECT_THROW(SharedMutex(c, ""), InvalidArgument);
  EXPECT_THROW(SharedMutex(c, std::string(max_name_size + 1, 'x')), InvalidArgument);
  EXPECT_NO_THROW(SharedMutex(c, std::string(max_name_size, 'x')));
  EXPECT_THROW(SharedMutex(c, "rw", LockOptions{}.fencing(true)), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(0ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(max_ttl + 1ms), InvalidArgument);
  SharedMutex lock(c, "rw");
  EXPECT_NO_THROW(lock.unlock());
  EXPECT_NO_THROW(lock.unlock_shared());
  EXPECT_THROW(lock.release(), NotHeldError);
  EXPECT_THROW(lock.release_shared(), NotHeldError);
  ASSERT_TRUE(lock.try_lock_shared());
  EXPECT_THROW(lock.release(), NotHeldError);  // holds a read lock, not the write lock
  EXPECT_NO_THROW(lock.unlock());
  EXPECT_TRUE(lock.owns_lock_shared());
  std::thread([&] {
    EXPECT_THROW(lock.release_shared(), NotHeldError);  // another thread's hold
    lock.unlock_shared();                               // does nothing
  }).join();
  EXPECT_EQ(lock.shared_hold_count(), 1u);
  EXPECT_EQ(lock.release_shared(), Release::released);
  EXPECT_EQ(c.command("DBSIZE").integer(), 0);
}

TEST_F(SharedMutexTest, TimedOutAcquireLeavesNoHoldBehind) {
  // As MutexTest.TimedOutAcquireLeavesNoLockBehind: a stopped server applies
  // the acquire after the caller gave up, so only the undo removes it.
  SharedMutex lock(client(), "rw");
  {
    SharedMutex warm(client(), "warm");  // the server caches the scripts
    std::shared_lock guard(warm);
  }
  client().command("CONFIG", "RESETSTAT");
  server().pause();
  // The reply missed the caller's deadline: an outage.
  EXPECT_THROW(static_cast<void>(lock.try_lock_shared_for(100ms)), TimeoutError);
  EXPECT_FALSE(lock.owns_lock_shared());
  server().resume();
  ASSERT_TRUE(testing::server_ran(client_options(server()), "evalsha", 1))
      << "the acquire never landed";
  EXPECT_TRUE(testing::eventually([&] { return client().command("DBSIZE").integer() == 0; }, 2s))
      << "the timed-out acquire holds a read lock for its whole lease";
}

TEST_F(SharedMutexTest, AWaiterCanBeCancelledFromAnotherThread) {
  Client other(client_options(server()));
  SharedMutex holder(other, "rw", LockOptions{}.ttl(30s));
  SharedMutex waiter(client(), "rw", LockOptions{}.ttl(30s), an_hour);
  ASSERT_TRUE(holder.try_lock());
  {
    SharedMutex warm(client(), "warm", LockOptions{}.ttl(30s), an_hour);
    std::shared_lock guard(warm);  // the server caches the read script too
  }
  client().command("CONFIG", "RESETSTAT");
  auto reading = std::async(std::launch::async, [&] { return waiter.try_lock_shared_for(20s); });
  auto writing = std::async(std::launch::async, [&] {
    try {
      waiter.lock();
      return false;
    } catch (const Error& error) {
      return error.code() == Errc::cancelled;
    }
  });
  // Each waiter attempts, subscribes and attempts again before it sleeps.
  ASSERT_TRUE(testing::eventually([&] { return command_calls(client()).of("evalsha") >= 4; }))
      << "the waiters never went to sleep";
  const auto start = Clock::now();
  waiter.cancel_waits();
  EXPECT_FALSE(reading.get());
  EXPECT_TRUE(writing.get());
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(SharedMutexTest, ARedissonReaderSharesWithUsAndKeepsOurWriterOut) {
  // A Java reader as Redisson leaves it: its field, its timeout key, and
  // the hash's expiry.
  const std::string java = "0a9e7f3c-2f7b-4c51-9d7e-5a1c3b6d8e21:42";
  client().command("HSET", "rw", "mode", "read", java, "1");
  client().command("SET", timeout_key("rw", java, 1), "1", "PX", "20000");
  client().command("PEXPIRE", "rw", "20000");
  SharedMutex ours(client(), "rw", LockOptions{}.ttl(5s));
  EXPECT_FALSE(ours.try_lock());
  ASSERT_TRUE(ours.try_lock_shared());
  ours.unlock_shared();
  // The Java reader's lease is live: the hash stays, for as long as it.
  EXPECT_EQ(fields_of("rw"), sorted({java + "=1", "mode=read"}));
  EXPECT_GT(client().command("PTTL", "rw").integer(), 15000);
}

// A ReentrantMutex (or a Redisson RLock) on the same name keeps its hold in
// a hash without a "mode" field. That hash is held: neither a reader nor a
// writer may move in beside it, and the holder's release must find its
// hash as it left it.
TEST_F(SharedMutexTest, AReentrantHoldOnTheNameKeepsReadersAndWritersOut) {
  Client other(client_options(server()));
  ReentrantMutex reentrant(other, "rw", LockOptions{}.ttl(20s));
  ASSERT_TRUE(reentrant.try_lock());
  SharedMutex ours(client(), "rw", LockOptions{}.ttl(5s));
  EXPECT_FALSE(ours.try_lock_shared()) << "a read lock granted beside a reentrant hold";
  EXPECT_FALSE(ours.try_lock()) << "a write lock granted beside a reentrant hold";
  EXPECT_EQ(fields_of("rw"), sorted({reentrant.owner_id() + "=1"}));
  EXPECT_EQ(reentrant.release(), Release::released);
  ASSERT_TRUE(ours.try_lock_shared());
  ours.unlock_shared();
}

TEST_F(SharedMutexTest, ReleasingANestedReadHoldLeavesTheOtherHoldsLeaseAlone) {
  // Two read holds of one thread on one name, through two objects: one
  // owner to Redis, with a lease per hold. Giving back the short one must
  // end the short one's lease, not the long one's.
  SharedMutex short_hold(client(), "rw", LockOptions{}.ttl(1s).auto_renew(false));
  SharedMutex long_hold(client(), "rw", LockOptions{}.ttl(60s).auto_renew(false));
  ASSERT_TRUE(short_hold.try_lock_shared());
  const auto short_taken = Clock::now();
  ASSERT_TRUE(long_hold.try_lock_shared());
  // The long hold's record ends 60 s after its acquire was sent: no later
  // than this.
  const auto long_record_ends = Clock::now() + 60s;
  const auto expect_server_keeps_long_lease = [&](const char* when) {
    const auto claimed =
        std::chrono::duration_cast<std::chrono::milliseconds>(long_record_ends - Clock::now());
    const long long pttl = client().command("PTTL", "rw").integer();
    EXPECT_GE(pttl, (claimed - 50ms).count())
        << when << ": the long hold's record has " << claimed.count() << " ms left";
  };
  expect_server_keeps_long_lease("with both held");
  short_hold.unlock_shared();
  expect_server_keeps_long_lease("after the short hold's release");
  // Past the short hold's lease the long one still holds the lock.
  std::this_thread::sleep_until(short_taken + 1500ms);
  expect_server_keeps_long_lease("past the short hold's lease");
  EXPECT_EQ(client().command("HEXISTS", "rw", long_hold.owner_id()).integer(), 1);
  Client other(client_options(server()));
  SharedMutex writer(other, "rw");
  EXPECT_FALSE(writer.try_lock());
  EXPECT_EQ(long_hold.release_shared(), Release::released);
}

TEST_F(SharedMutexTest, AnExtendedReadHoldOutlivesTheWriteHoldItWasDowngradedFrom) {
  // Write, read, lengthen the read hold, give the write hold back: the hash
  // must live as long as the read hold's record says, not the writer's lease.
  SharedMutex lock(client(), "rw", LockOptions{}.ttl(1s).auto_renew(false));
  lock.lock();
  lock.lock_shared();
  ASSERT_TRUE(lock.extend_shared(60s));
  const auto extended = Clock::now();
  lock.unlock();
  EXPECT_GE(client().command("PTTL", "rw").integer(), 59000);
  EXPECT_GE(lock.validity_shared(), 59s);
  // Past the writer's old lease the read hold still keeps writers out.
  std::this_thread::sleep_until(extended + 1500ms);
  EXPECT_EQ(client().command("HEXISTS", "rw", lock.owner_id()).integer(), 1);
  Client other(client_options(server()));
  SharedMutex writer(other, "rw");
  EXPECT_FALSE(writer.try_lock());
  EXPECT_EQ(lock.release_shared(), Release::released);
}

}  // namespace
}  // namespace distlock
