// Tests for mutex.hpp, and for the lease behaviour Mutex shares with
// SimpleMutex (typed tests run both), against real redis-servers.
#include "distlock/mutex.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distlock/simple_mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::command_calls;

template <class Lock>
class LeaseLockTest : public testing::RedisClientTest {};

using LeaseLocks = ::testing::Types<Mutex, SimpleMutex>;
struct LeaseLockName {
  template <class Lock>
  static std::string GetName(int) {
    return std::is_same_v<Lock, Mutex> ? "Mutex" : "SimpleMutex";
  }
};
TYPED_TEST_SUITE(LeaseLockTest, LeaseLocks, LeaseLockName);

TYPED_TEST(LeaseLockTest, StoresTokenWithLeaseAsPlainStringKey) {
  TypeParam lock(this->client(), "wire", LockOptions{}.ttl(10s));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(this->get("wire"), lock.token());
  EXPECT_EQ(lock.token().size(), 32u);
  EXPECT_EQ(this->client().command("TYPE", "wire").str(), "string");
  const long long pttl = this->client().command("PTTL", "wire").integer();
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  EXPECT_EQ(lock.release(), Release::released);
  EXPECT_EQ(this->client().command("EXISTS", "wire").integer(), 0);
}

TYPED_TEST(LeaseLockTest, KeyPrefixIsPrependedToTheName) {
  TypeParam lock(this->client(), "job", LockOptions{}.key_prefix("locks:"));
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.key(), "locks:job");
  EXPECT_EQ(this->get("locks:job"), lock.token());
}

TYPED_TEST(LeaseLockTest, SecondHolderIsRefusedUntilRelease) {
  TypeParam a(this->client(), "k");
  TypeParam b(this->client(), "k");
  ASSERT_TRUE(a.try_lock());
  EXPECT_FALSE(b.try_lock());
  EXPECT_FALSE(b.owns_lock());
  a.unlock();
  EXPECT_TRUE(b.try_lock());
  EXPECT_NE(a.token(), b.token());
}

TYPED_TEST(LeaseLockTest, EveryAcquisitionGetsAFreshToken) {
  TypeParam lock(this->client(), "k");
  ASSERT_TRUE(lock.try_lock());
  const std::string first = lock.token();
  lock.unlock();
  ASSERT_TRUE(lock.try_lock());
  EXPECT_NE(lock.token(), first);
}

TYPED_TEST(LeaseLockTest, WorksWithStandardGuards) {
  TypeParam a(this->client(), "a");
  TypeParam b(this->client(), "b");
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
  EXPECT_EQ(this->client().command("EXISTS", "a", "b").integer(), 0);
}

TYPED_TEST(LeaseLockTest, LockOnAFreeLockCostsOneRoundTrip) {
  TypeParam lock(this->client(), "k");
  this->client().command("CONFIG", "RESETSTAT");
  lock.lock();
  const testing::CommandCalls calls = command_calls(this->client());
  EXPECT_EQ(calls.total_except("config|resetstat"), 1) << calls.text;
  EXPECT_EQ(calls.of("set"), 1) << calls.text;
}

TYPED_TEST(LeaseLockTest, LockingTwiceFromTheHoldingThreadThrowsInsteadOfDeadlocking) {
  TypeParam lock(this->client(), "k");
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

TYPED_TEST(LeaseLockTest, ExpiryHandsTheLockOn) {
  TypeParam first(this->client(), "k", LockOptions{}.ttl(100ms));
  TypeParam second(this->client(), "k");
  ASSERT_TRUE(first.try_lock());
  const auto start = Clock::now();
  ASSERT_TRUE(second.try_lock_for(3s));
  EXPECT_GE(Clock::now() - start, 80ms);
}

TYPED_TEST(LeaseLockTest, ReleaseAfterExpiryLeavesTheSuccessorsLockAlone) {
  TypeParam first(this->client(), "k", LockOptions{}.ttl(50ms));
  TypeParam second(this->client(), "k");
  ASSERT_TRUE(first.try_lock());
  ASSERT_TRUE(second.try_lock_for(3s));
  EXPECT_EQ(first.release(), Release::not_owner);
  EXPECT_EQ(this->get("k"), second.token());
  EXPECT_FALSE(first.owns_lock());
}

TYPED_TEST(LeaseLockTest, ReleaseAfterExpiryWithNoSuccessorSaysExpired) {
  TypeParam lock(this->client(), "k", LockOptions{}.ttl(30ms));
  ASSERT_TRUE(lock.try_lock());
  while (this->client().command("EXISTS", "k").integer() == 1) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(lock.release(), Release::expired);
}

TYPED_TEST(LeaseLockTest, UnlockAfterExpiryLeavesTheSuccessorsLockAlone) {
  TypeParam first(this->client(), "k", LockOptions{}.ttl(50ms));
  TypeParam second(this->client(), "k");
  ASSERT_TRUE(first.try_lock());
  ASSERT_TRUE(second.try_lock_for(3s));
  first.unlock();
  EXPECT_EQ(this->get("k"), second.token());
}

TYPED_TEST(LeaseLockTest, ExtendBeforeLossLengthensTheLease) {
  TypeParam lock(this->client(), "k", LockOptions{}.ttl(1s));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.extend(20s));
  EXPECT_GT(this->client().command("PTTL", "k").integer(), 15000);
  EXPECT_GT(lock.validity(), 15s);
  EXPECT_TRUE(lock.owns_lock());
}

TYPED_TEST(LeaseLockTest, ExtendAfterLossFailsAndChangesNothing) {
  TypeParam first(this->client(), "k", LockOptions{}.ttl(50ms));
  TypeParam second(this->client(), "k", LockOptions{}.ttl(5s));
  ASSERT_TRUE(first.try_lock());
  ASSERT_TRUE(second.try_lock_for(3s));
  EXPECT_FALSE(first.extend(60s));
  EXPECT_FALSE(first.owns_lock());
  EXPECT_LE(this->client().command("PTTL", "k").integer(), 5000);
  EXPECT_EQ(this->get("k"), second.token());
}

TYPED_TEST(LeaseLockTest, ValidityCountsDownFromTheAcquire) {
  TypeParam lock(this->client(), "k", LockOptions{}.ttl(2s));
  EXPECT_EQ(lock.validity(), 0ms);
  ASSERT_TRUE(lock.try_lock());
  EXPECT_LE(lock.validity(), 2s);
  EXPECT_GT(lock.validity(), 1500ms);
}

TYPED_TEST(LeaseLockTest, TimeoutRulesWhileHeld) {
  TypeParam holder(this->client(), "k", LockOptions{}.ttl(30s));
  TypeParam waiter(this->client(), "k");
  ASSERT_TRUE(holder.try_lock());
  struct Case {
    const char* what;
    std::function<bool()> call;
    std::chrono::milliseconds at_least, at_most;
  };
  const std::vector<Case> cases = {
      {"negative for", [&] { return waiter.try_lock_for(-5s); }, 0ms, 150ms},
      {"zero for", [&] { return waiter.try_lock_for(0ms); }, 0ms, 150ms},
      {"finite for", [&] { return waiter.try_lock_for(200ms); }, 190ms, 400ms},
      {"past until", [&] { return waiter.try_lock_until(Clock::now() - 1s); }, 0ms, 150ms},
      {"finite until", [&] { return waiter.try_lock_until(Clock::now() + 200ms); }, 190ms, 400ms},
      {"system clock until",
       [&] { return waiter.try_lock_until(std::chrono::system_clock::now() + 200ms); }, 190ms,
       400ms},
      {"past system clock until",
       [&] { return waiter.try_lock_until(std::chrono::system_clock::now() - 1h); }, 0ms, 150ms},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    EXPECT_FALSE(c.call()) << c.what;
    const auto took = Clock::now() - start;
    EXPECT_GE(took, c.at_least) << c.what;
    EXPECT_LE(took, c.at_most) << c.what;
  }
}

TYPED_TEST(LeaseLockTest, TimeoutRulesWhenFree) {
  TypeParam lock(this->client(), "k");
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

TYPED_TEST(LeaseLockTest, RejectsBadNamesAndLeases) {
  Client& c = this->client();
  EXPECT_THROW(TypeParam(c, ""), InvalidArgument);
  EXPECT_THROW(TypeParam(c, std::string(max_name_size + 1, 'x')), InvalidArgument);
  EXPECT_NO_THROW(TypeParam(c, std::string(max_name_size, 'x')));
  EXPECT_THROW(TypeParam(c, std::string(max_name_size - 2, 'x'), LockOptions{}.key_prefix("abc")),
               InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(0ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(-1s), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(500us), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(max_ttl + 1ms), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::hours::max()), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::milliseconds(9223372036854775LL)), InvalidArgument);
  EXPECT_THROW(LockOptions{}.ttl(std::chrono::duration<double>(std::nan(""))), InvalidArgument);
  EXPECT_NO_THROW(LockOptions{}.ttl(max_ttl));
  EXPECT_EQ(c.command("DBSIZE").integer(), 0);  // nothing was sent
}

TYPED_TEST(LeaseLockTest, MisuseOfAnUnheldLockIsAClearError) {
  TypeParam lock(this->client(), "k");
  EXPECT_THROW(lock.release(), NotHeldError);
  EXPECT_THROW(static_cast<void>(lock.extend(1s)), NotHeldError);
  EXPECT_NO_THROW(lock.unlock());
  EXPECT_TRUE(lock.token().empty());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_THROW(static_cast<void>(lock.extend(0ms)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(lock.extend(max_ttl + 1ms)), InvalidArgument);
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_THROW(static_cast<void>(lock.fence()), InvalidArgument);  // fencing is off
}

TYPED_TEST(LeaseLockTest, ExcludesThreadsFromACriticalSection) {
  constexpr int threads = 4;
  constexpr int rounds = 25;
  std::vector<std::thread> workers;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      try {
        TypeParam lock(this->client(), "counter-lock", LockOptions{}.ttl(10s));
        for (int i = 0; i < rounds; ++i) {
          std::lock_guard guard(lock);
          testing::unsafe_increment(this->client(), "counter");
        }
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(this->get("counter"), std::to_string(threads * rounds));
}

TYPED_TEST(LeaseLockTest, ThreadsMayShareOneLockObject) {
  TypeParam lock(this->client(), "shared-lock", LockOptions{}.ttl(10s));
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::lock_guard guard(lock);
        testing::unsafe_increment(this->client(), "counter");
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(this->get("counter"), "60");
}

TYPED_TEST(LeaseLockTest, ASharedObjectWaitsForItsHolderEvenAfterTheLeaseRanOut) {
  // Thread A's lease runs out in Redis while A still holds the object. B,
  // locking through the same object, waits for A's unlock as with a shared
  // std::mutex, so A's unlock cannot release B's lock.
  TypeParam lock(this->client(), "k", LockOptions{}.ttl(50ms));
  ASSERT_TRUE(lock.try_lock());
  const std::string a_token = lock.token();
  while (this->client().command("EXISTS", "k").integer() == 1) std::this_thread::sleep_for(5ms);
  std::atomic<bool> b_got{false};
  std::thread b([&] {
    if (lock.try_lock_for(5s)) b_got = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(b_got);  // the key is free in Redis, but A still holds the object
  EXPECT_EQ(lock.token(), a_token);
  lock.unlock();  // A's
  b.join();
  EXPECT_TRUE(b_got);
  EXPECT_EQ(this->get("k"), lock.token());  // B's lease, untouched by A's unlock
  EXPECT_NE(lock.token(), a_token);
}

TYPED_TEST(LeaseLockTest, ExcludesProcessesFromACriticalSection) {
  constexpr int processes = 3;
  constexpr int rounds = 20;
  const ClientOptions where = client_options(this->server());
  const int failed_children = testing::run_in_children(processes, [&] {
    Client own(where);  // a child never touches its parent's connections
    TypeParam lock(own, "counter-lock", LockOptions{}.ttl(10s));
    for (int i = 0; i < rounds; ++i) {
      std::lock_guard guard(lock);
      testing::unsafe_increment(own, "counter");
    }
  });
  EXPECT_EQ(failed_children, 0);
  EXPECT_EQ(this->get("counter"), std::to_string(processes * rounds));
}

TYPED_TEST(LeaseLockTest, FencesRiseStrictlyAcrossHoldersAndProcesses) {
  // Children first (a process must not fork once its watchdog thread runs):
  // each appends its fences inside the lock, so the list is in holder order.
  const ClientOptions where = client_options(this->server());
  const int failed_children = testing::run_in_children(3, [&] {
    Client own(where);
    TypeParam child_lock(own, "fenced", LockOptions{}.fencing(true));
    for (int i = 0; i < 10; ++i) {
      std::lock_guard guard(child_lock);
      own.command("RPUSH", "fences", std::to_string(child_lock.fence()));
    }
  });
  EXPECT_EQ(failed_children, 0);
  const Reply fences = this->client().command("LRANGE", "fences", "0", "-1");
  ASSERT_EQ(fences.size(), 30u);
  long long last = 0;
  for (std::size_t i = 0; i < fences.size(); ++i) {
    const long long fence = std::stoll(std::string(fences[i].str()));
    EXPECT_GT(fence, last);
    last = fence;
  }
  // And this process's holders come after all of them.
  TypeParam lock(this->client(), "fenced", LockOptions{}.fencing(true));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(lock.try_lock());
    EXPECT_GT(lock.fence(), last);
    last = lock.fence();
    lock.unlock();
  }
  EXPECT_THROW(static_cast<void>(lock.fence()), NotHeldError);
}

TYPED_TEST(LeaseLockTest, FenceCounterSharesTheLocksHashSlot) {
  TypeParam plain(this->client(), "plain", LockOptions{}.fencing(true));
  ASSERT_TRUE(plain.try_lock());
  EXPECT_EQ(this->get("{plain}:fence"), std::to_string(plain.fence()));
  TypeParam tagged(this->client(), "{user:7}:lock", LockOptions{}.fencing(true));
  ASSERT_TRUE(tagged.try_lock());
  EXPECT_EQ(this->get("{user:7}:lock:fence"), std::to_string(tagged.fence()));
}

TYPED_TEST(LeaseLockTest, WrongTypeIsAnErrorNotALoss) {
  TypeParam lock(this->client(), "k");
  ASSERT_TRUE(lock.try_lock());
  this->client().command("DEL", "k");
  this->client().command("HSET", "k", "field", "value");
  try {
    static_cast<void>(lock.release());
    FAIL() << "release on a hash did not throw";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::wrongtype);
  }
  EXPECT_EQ(this->client().command("TYPE", "k").str(), "hash");  // untouched
}

TYPED_TEST(LeaseLockTest, FencedAcquireFailingOnWrongTypeLeavesNoLock) {
  this->client().command("HSET", "{k}:fence", "field", "value");
  TypeParam lock(this->client(), "k", LockOptions{}.fencing(true));
  try {
    static_cast<void>(lock.try_lock());
    FAIL() << "acquire with a broken fence counter did not throw";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::wrongtype);
  }
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(this->client().command("EXISTS", "k").integer(), 0);
}

TYPED_TEST(LeaseLockTest, SurvivesScriptFlushMidRun) {
  TypeParam lock(this->client(), "k", LockOptions{}.fencing(true));
  ASSERT_TRUE(lock.try_lock());
  this->client().command("SCRIPT", "FLUSH");
  ASSERT_TRUE(lock.extend(5s));
  this->client().command("SCRIPT", "FLUSH");
  EXPECT_EQ(lock.release(), Release::released);
  this->client().command("SCRIPT", "FLUSH");
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.release(), Release::released);
}

TYPED_TEST(LeaseLockTest, CallsAgainstAStoppedServerReturnByTheirDeadline) {
  ClientOptions where = client_options(this->server());
  where.command_timeout = 1000ms;
  Client client(where);
  TypeParam lock(client, "k");
  TypeParam other(client, "other");
  ASSERT_TRUE(lock.try_lock());
  this->server().pause();
  auto start = Clock::now();
  // The attempt is cut at the caller's deadline, unanswered: an outage,
  // TimeoutError, not the busy lock's false. The cleanup of the ambiguous
  // SET may take its own 10 ms floor; the rest is slack for a loaded
  // machine, still far below the command timeout the call would otherwise
  // wait out.
  EXPECT_THROW(static_cast<void>(other.try_lock_for(100ms)), TimeoutError);
  EXPECT_LT(Clock::now() - start, 100ms + 10ms + 390ms);
  start = Clock::now();
  EXPECT_THROW(static_cast<void>(other.try_lock()), TimeoutError);
  EXPECT_LT(Clock::now() - start, 2 * where.command_timeout + 300ms);
  start = Clock::now();
  // noexcept: the lease will run out by itself. It may first wait for a
  // renewal of the lease in flight (the reconnects above have it
  // revalidated), one command timeout at most, then its own release's.
  lock.unlock();
  EXPECT_LT(Clock::now() - start, 2 * where.command_timeout + 300ms);
  EXPECT_FALSE(lock.owns_lock());
  this->server().resume();
}

TYPED_TEST(LeaseLockTest, NextCallReconnectsAfterServerRestart) {
  TypeParam lock(this->client(), "k");
  ASSERT_TRUE(lock.try_lock());
  this->server().restart();  // no persistence: the lease is gone with the data
  TypeParam other(this->client(), "k");
  EXPECT_TRUE(other.try_lock());
  // The reconnect has the first lease revalidated in the background: it
  // may be reported lost before the release, or found another's by it.
  const Release outcome = lock.release();
  EXPECT_TRUE(outcome == Release::not_owner || outcome == Release::lost) << to_string(outcome);
}

class MutexTest : public LeaseLockTest<Mutex> {};

TEST_F(MutexTest, TimedOutAcquireLeavesNoLockBehind) {
  // The server is stopped, so the SET waits in its socket and the caller
  // gives up first. Once the server runs again it applies the SET after the
  // caller gave up (a CLIENT PAUSE would not do: the server drops a closed
  // client's queued commands), so only the undo can take the key away.
  // (SimpleMutex's undo reads before it writes, so it can only remove a SET
  // that had already landed.)
  Mutex lock(client(), "k");
  {
    Mutex warm(client(), "warm");  // the server caches the release script the undo runs
    std::lock_guard guard(warm);
  }
  client().command("CONFIG", "RESETSTAT");
  server().pause();
  EXPECT_THROW(static_cast<void>(lock.try_lock_for(100ms)), TimeoutError);
  EXPECT_FALSE(lock.owns_lock());
  server().resume();
  ASSERT_TRUE(testing::server_ran(client_options(server()), "set", 1)) << "the SET never landed";
  EXPECT_TRUE(
      testing::eventually([&] { return client().command("EXISTS", "k").integer() == 0; }, 2s))
      << "the timed-out SET holds the lock for its whole lease";
}

TEST_F(MutexTest, OomFailsTheAcquireButReleaseStillWorks) {
  Mutex held(client(), "held");
  ASSERT_TRUE(held.try_lock());
  testing::expect_oom_refuses_acquire<Mutex>(client());
  testing::expect_oom_refuses_acquire<Mutex>(client(), LockOptions{}.fencing(true));
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_EQ(client().command("EXISTS", "held").integer(), 0);
}

}  // namespace
}  // namespace distlock
