// Tests for semaphore.hpp against real redis-servers: never more than N
// holders (processes and threads), permits as server-timed leases (a killed
// holder's comes back, renewal keeps one, a lost one is reported), batched
// renewal, resize, the count kept on the server (adopted from the first
// acquire, refused to an object of another count, outlived by no permit),
// waking on release, the Lockable view and bad input.
#include "distlock/semaphore.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"
#include "support/sanitized.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::command_calls;
using testing::eventually;

// Under the sanitizers every step is several times slower: smaller runs.
constexpr int scale = testing::sanitized_build() ? 2 : 1;

class SemaphoreTest : public testing::RedisClientTest {
 protected:
  long long zcard(const std::string& key) { return client().command("ZCARD", key).integer(); }
  long long score(const std::string& key, const std::string& id) {
    return std::stoll(std::string(client().command("ZSCORE", key, id).str()));
  }
  bool exists(const std::string& key) { return client().command("EXISTS", key).integer() == 1; }
  // The PTTLs of the permits' set and of its count key, in one script. The
  // count's is read first: where the clock runs on within a script (before
  // Redis 7), the set's read later can only look shorter, never longer.
  std::pair<long long, long long> pttls(const std::string& key) {
    const Reply both = client().command("EVAL",
                                        "local count = redis.call('pttl', KEYS[2]) "
                                        "return {redis.call('pttl', KEYS[1]), count}",
                                        "2", key, "{" + key + "}:permits");
    return {both[0].integer(), both[1].integer()};
  }
};

// The oracle: counts holders inside, and records a violation when more
// than `limit` are in at once. Runs while a permit is held.
void inside(Client& client, long long limit) {
  const long long now = client.command("INCR", "inside").integer();
  if (now > limit) client.command("INCR", "violations");
  client.command("EVAL",
                 "if tonumber(redis.call('get', KEYS[1]) or 0) < tonumber(ARGV[1]) then "
                 "redis.call('set', KEYS[1], ARGV[1]) end",
                 "1", "most", std::to_string(now));
  std::this_thread::sleep_for(1ms);
  client.command("DECR", "inside");
}

TEST_F(SemaphoreTest, NeverMoreThanNHoldersAcrossProcesses) {
  const ClientOptions where = client_options(server());
  const int failed = testing::run_in_children(5, [&] {
    Client own(where);
    Semaphore exports(own, "exports", 3);
    for (int i = 0; i < 15 / scale; ++i) {
      Permit permit = exports.acquire();
      inside(own, 3);
    }
  });
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(get("violations"), "(nil)");
  EXPECT_GE(std::stoll(get("most")), 2);  // the permits were really shared
  EXPECT_EQ(zcard("exports"), 0);
}

TEST_F(SemaphoreTest, NeverMoreThanNHoldersAmongThreadsOfOneObject) {
  Semaphore exports(client(), "exports", 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10 / scale; ++i) {
        Permit permit = exports.acquire();
        inside(client(), 2);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(get("violations"), "(nil)");
  EXPECT_EQ(get("most"), "2");
}

TEST_F(SemaphoreTest, APermitIsAnIdInASortedSetScoredByItsServerTimeExpiry) {
  Semaphore exports(client(), "exports", 2, LockOptions{}.ttl(10s));
  Permit permit = exports.try_acquire();
  ASSERT_TRUE(permit);
  EXPECT_EQ(permit.id().size(), 32u);
  const Reply time = client().command("TIME");
  const long long now_ms =
      std::stoll(std::string(time[0].str())) * 1000 + std::stoll(std::string(time[1].str())) / 1000;
  const long long expiry =
      std::stoll(std::string(client().command("ZSCORE", "exports", permit.id()).str()));
  EXPECT_GT(expiry, now_ms + 9000);
  EXPECT_LE(expiry, now_ms + 10000);
  EXPECT_GT(client().command("PTTL", "exports").integer(), 9000);  // never without expiry
  EXPECT_EQ(permit.release(), Release::released);
  EXPECT_FALSE(permit);
  EXPECT_EQ(client().command("EXISTS", "exports").integer(), 0);
}

TEST_F(SemaphoreTest, AcquireSendsNoClientTime) {
  Connection monitor(client_options(server()));
  monitor.command("MONITOR");
  Semaphore exports(client(), "exports", 7, LockOptions{}.ttl(5s));
  Permit permit = exports.try_acquire();
  ASSERT_TRUE(permit);
  for (;;) {
    const std::string line(monitor.read_reply().str());
    if (line.find("\"EVALSHA\"") == std::string::npos) continue;
    // Keys, then the permit id, the lease and the count: nothing else.
    EXPECT_NE(
        line.find("\"2\" \"exports\" \"{exports}:permits\" \"" + permit.id() + "\" \"5000\" \"7\""),
        std::string::npos)
        << line;
    EXPECT_EQ(line.substr(line.size() - 10), "\"5000\" \"7\"") << line;  // and last
    break;
  }
}

// A Semaphore made and dropped per request costs no round trip.
TEST_F(SemaphoreTest, MakingAndDroppingSemaphoresSendsNothing) {
  client().command("CONFIG", "RESETSTAT");
  for (int i = 0; i < 100; ++i) {
    Semaphore semaphore(client(), "s" + std::to_string(i), 3);
    ASSERT_EQ(semaphore.key(), "s" + std::to_string(i));
  }
  const testing::CommandCalls calls = command_calls(client());
  EXPECT_EQ(calls.total_except("config|resetstat"), 0) << calls.text;
}

TEST_F(SemaphoreTest, AKilledHoldersPermitComesBackWhenItsLeaseEnds) {
  // A long-held permit keeps the set alive: the dead holder's permit must
  // be pruned from it, not just vanish with the key.
  Semaphore exports(client(), "exports", 2, LockOptions{}.ttl(1500ms).auto_renew(true));
  Semaphore steady(client(), "exports", 2, LockOptions{}.ttl(60s));
  Permit kept = steady.acquire();
  const ClientOptions where = client_options(server());
  const pid_t child = ::fork();
  if (child == 0) {
    Client own(where);
    Semaphore mine(own, "exports", 2, LockOptions{}.ttl(1500ms).auto_renew(true));
    Permit permit = mine.acquire();
    for (;;) ::pause();  // renewing until killed
  }
  ASSERT_GT(child, 0);
  ASSERT_TRUE(eventually([&] { return zcard("exports") == 2; }));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(exports.try_acquire());  // its lease still runs
  const Clock::time_point start = Clock::now();
  Permit permit = exports.try_acquire_for(10s);
  EXPECT_TRUE(permit);
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST_F(SemaphoreTest, RenewalKeepsAPermitPastItsTtl) {
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(300ms).auto_renew(true));
  Permit permit = exports.acquire();
  const Clock::time_point end = Clock::now() + 1200ms;  // four leases
  while (Clock::now() < end) {
    ASSERT_FALSE(permit.lost());
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(exports.try_acquire());
  EXPECT_EQ(client().command("ZSCORE", "exports", permit.id()).is_nil(), false);
  EXPECT_EQ(permit.release(), Release::released);
}

TEST_F(SemaphoreTest, OneRenewalCallRenewsEveryHeldPermit) {
  Semaphore exports(client(), "exports", 5, LockOptions{}.ttl(10s).auto_renew(true));
  std::vector<Permit> permits;
  for (int i = 0; i < 4; ++i) permits.push_back(exports.acquire());
  client().watchdog().renew_all_now();  // loads the script
  client().command("CONFIG", "RESETSTAT");
  client().watchdog().renew_all_now();
  EXPECT_EQ(command_calls(client()).of("evalsha"), 1);
  for (const Permit& permit : permits) EXPECT_FALSE(permit.lost());
}

TEST_F(SemaphoreTest, ALostPermitIsReported) {
  std::promise<LeaseInfo> told;
  Semaphore exports(client(), "exports", 2,
                    LockOptions{}.ttl(5s).auto_renew(true).on_lost(
                        [&](const LeaseInfo& info) { told.set_value(info); }));
  Permit permit = exports.acquire();
  client().command("ZREM", "exports", permit.id());
  client().watchdog().renew_all_now();
  EXPECT_TRUE(permit.lost());
  auto heard = told.get_future();
  ASSERT_EQ(heard.wait_for(5s), std::future_status::ready);
  const LeaseInfo info = heard.get();
  EXPECT_EQ(info.key, "exports");
  EXPECT_EQ(info.token, permit.id());
  EXPECT_EQ(info.reason, LostReason::taken);
  EXPECT_EQ(permit.release(), Release::lost);
}

TEST_F(SemaphoreTest, ResizeUpAndDownKeepsHolders) {
  Semaphore exports(client(), "exports", 2);
  Semaphore other(client(), "exports", 2);
  Permit a = exports.acquire();
  Permit b = exports.acquire();
  EXPECT_FALSE(exports.try_acquire());
  exports.resize(3);
  EXPECT_EQ(other.permits(), 3u);  // the stored count wins for everyone
  Permit c = other.try_acquire();
  ASSERT_TRUE(c);
  exports.resize(1);
  EXPECT_EQ(exports.available(), 0u);
  EXPECT_EQ(exports.held(), 3u);  // nobody lost a permit
  EXPECT_EQ(a.release(), Release::released);
  EXPECT_EQ(b.release(), Release::released);
  EXPECT_FALSE(other.try_acquire());  // 1 held, count 1
  EXPECT_EQ(c.release(), Release::released);
  EXPECT_TRUE(other.try_acquire());
  exports.resize(0);
  EXPECT_FALSE(other.try_acquire());
  client().command("DEL", "{exports}:permits");
  EXPECT_EQ(exports.permits(), 2u);
}

// The count is the name's, not each object's: the first acquire stores
// ("adopts") its object's count, and while a permit under it is live an
// object made with another count is refused, at once and clearly, rather
// than let in under a count of its own.
TEST_F(SemaphoreTest, AnObjectOfAnotherCountIsRefusedWhileTheAdoptedCountIsInForce) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(60s));
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s));
  Permit first = two.acquire();
  EXPECT_EQ(get("{exports}:permits"), "2");
  try {
    Permit taken = four.try_acquire();
    ADD_FAILURE() << "a permit under a count of 4 while 2 is in force";
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    for (const char* word : {"exports", " 2", " 4", "resize()"}) {
      EXPECT_NE(what.find(word), std::string::npos) << word << " not in: " << what;
    }
  }
  // Neither waited on nor retried as a busy semaphore: every form refuses
  // at once.
  const Clock::time_point start = Clock::now();
  EXPECT_THROW(four.try_acquire_for(30s), InvalidArgument);
  EXPECT_THROW(four.try_acquire_until(std::chrono::system_clock::now() + 30s), InvalidArgument);
  auto blocking = std::async(std::launch::async, [&] {
    try {
      Permit permit = four.acquire();
      return std::string("acquired");
    } catch (const InvalidArgument&) {
      return std::string("refused");
    } catch (const std::exception& error) {
      return std::string(error.what());
    }
  });
  if (blocking.wait_for(10s) != std::future_status::ready) four.cancel_waits();
  EXPECT_EQ(blocking.get(), "refused");
  EXPECT_LT(Clock::now() - start, 5s);
  // The refusals added no permit and deleted nothing.
  EXPECT_EQ(zcard("exports"), 1);
  EXPECT_EQ(get("{exports}:permits"), "2");
  // Every object reports the count in force.
  EXPECT_EQ(four.permits(), 2u);
  EXPECT_EQ(four.available(), 1u);
  EXPECT_EQ(four.held(), 1u);
  Permit second = two.try_acquire();
  ASSERT_TRUE(second);
  EXPECT_FALSE(two.try_acquire());
  EXPECT_THROW(four.try_acquire(), InvalidArgument);
  EXPECT_EQ(zcard("exports"), 2);
}

TEST_F(SemaphoreTest, NeverMoreHoldersThanTheAdoptedCountWhenObjectsDisagree) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(60s));
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s));
  Permit anchor = two.acquire();  // keeps 2 in force; one place is left
  std::atomic<int> refused{0};
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10 / scale; ++i) {
        Permit permit = two.acquire();
        inside(client(), 1);
      }
    });
    threads.emplace_back([&] {
      for (int i = 0; i < 10 / scale; ++i) {
        try {
          if (Permit permit = four.try_acquire_for(1s)) {
            ++granted;
            inside(client(), 1);
          }
        } catch (const InvalidArgument&) {
          ++refused;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(get("violations"), "(nil)");
  EXPECT_EQ(granted.load(), 0);
  EXPECT_EQ(refused.load(), 3 * (10 / scale));
  EXPECT_EQ(zcard("exports"), 1);
}

TEST_F(SemaphoreTest, TheAdoptedCountGoesWithTheLastLivePermit) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(300ms));
  Permit lapsed = two.acquire();
  const auto [set_pttl, count_pttl] = pttls("exports");
  EXPECT_GT(set_pttl, 0);
  EXPECT_GE(count_pttl, set_pttl);  // never a permit without its count
  // Not given back: the lease runs out on the server, and the count with it.
  EXPECT_TRUE(eventually([&] { return !exists("{exports}:permits"); }));
  EXPECT_EQ(lapsed.release(), Release::expired);
  // The next acquire adopts its own count.
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s));
  Permit permit = four.try_acquire();
  ASSERT_TRUE(permit);
  EXPECT_EQ(get("{exports}:permits"), "4");
  // Given back, the last live permit takes the count with it.
  EXPECT_EQ(permit.release(), Release::released);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
  // A count whose permits have all run out is not in force, though its key
  // may outlive them (a set's expiry only ever lengthens).
  Permit ended = four.try_acquire();
  ASSERT_TRUE(ended);
  client().command("ZADD", "exports", "XX", "1", ended.id());
  EXPECT_EQ(two.permits(), 2u);
  Permit adopted = two.try_acquire();
  ASSERT_TRUE(adopted);
  EXPECT_EQ(get("{exports}:permits"), "2");
}

TEST_F(SemaphoreTest, TheAdoptedCountLivesAsLongAsARenewedPermit) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(300ms).auto_renew(true));
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s));
  Permit permit = two.acquire();
  const long long first = score("exports", permit.id());
  // The Watchdog's renewals carry the permit past two more leases.
  ASSERT_TRUE(eventually([&] { return score("exports", permit.id()) > first + 600; }));
  ASSERT_FALSE(permit.lost());
  const auto [set_pttl, count_pttl] = pttls("exports");
  EXPECT_GT(set_pttl, 0);
  EXPECT_GE(count_pttl, set_pttl);
  EXPECT_EQ(get("{exports}:permits"), "2");
  EXPECT_THROW(four.try_acquire(), InvalidArgument);
  // So does an extend.
  ASSERT_TRUE(permit.extend(60s));
  const auto [extended_set, extended_count] = pttls("exports");
  EXPECT_GT(extended_set, 50000);
  EXPECT_GE(extended_count, extended_set);
  EXPECT_EQ(permit.release(), Release::released);
  EXPECT_FALSE(exists("{exports}:permits"));
}

TEST_F(SemaphoreTest, AResizedCountWinsOverEveryObjectsOwn) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(60s));
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s).auto_renew(true));
  Permit first = two.acquire();  // adopts 2
  four.resize(3);                // configuration: no expiry, no mismatch
  Permit second = four.try_acquire();
  ASSERT_TRUE(second);
  Permit third = two.try_acquire();
  ASSERT_TRUE(third);
  EXPECT_FALSE(four.try_acquire());
  EXPECT_FALSE(two.try_acquire());
  EXPECT_EQ(two.permits(), 3u);
  EXPECT_EQ(four.permits(), 3u);
  client().watchdog().renew_all_now();
  EXPECT_EQ(client().command("PTTL", "{exports}:permits").integer(), -1);  // grants and
  EXPECT_EQ(first.release(), Release::released);                           // renewals leave it
  EXPECT_EQ(second.release(), Release::released);
  EXPECT_EQ(third.release(), Release::released);
  EXPECT_EQ(get("{exports}:permits"), "3");  // and it outlives them
  // Deleted, the name goes back to adoption.
  client().command("DEL", "{exports}:permits");
  Permit fourth = four.try_acquire();
  ASSERT_TRUE(fourth);
  EXPECT_EQ(get("{exports}:permits"), "4");
  EXPECT_THROW(two.try_acquire(), InvalidArgument);
}

TEST_F(SemaphoreTest, TheErrorCodeFormsReportAMismatchedCount) {
  Semaphore two(client(), "exports", 2, LockOptions{}.ttl(60s));
  Semaphore four(client(), "exports", 4, LockOptions{}.ttl(60s));
  Permit held = two.acquire();
  const Clock::time_point start = Clock::now();
  std::error_code ec;
  EXPECT_FALSE(four.try_acquire_for(30s, ec));
  EXPECT_EQ(ec, Errc::invalid_argument) << ec.message();
  PermitLock one(four);
  EXPECT_FALSE(one.try_lock(ec));
  EXPECT_EQ(ec, Errc::invalid_argument) << ec.message();
  EXPECT_FALSE(one.try_lock_for(30s, ec));
  EXPECT_EQ(ec, Errc::invalid_argument) << ec.message();
  EXPECT_FALSE(one.try_lock_until(Clock::now() + 30s, ec));
  EXPECT_EQ(ec, Errc::invalid_argument) << ec.message();
  EXPECT_FALSE(one.owns_lock());
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(zcard("exports"), 1);
}

TEST_F(SemaphoreTest, AWaiterIsWokenByAReleaseWithoutPolling) {
  // The holder's lease is a minute, so only the release can wake the waiter.
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(60s));
  Permit held = exports.acquire();
  auto waiting = std::async(std::launch::async, [&] { return exports.try_acquire_for(30s); });
  ASSERT_TRUE(
      eventually([&] { return detail::NotifierProbe::channel_count(client().notifier()) == 1; }));
  client().command("CONFIG", "RESETSTAT");
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  EXPECT_LE(command_calls(client()).of("evalsha"), 1);  // at most the attempt after subscribing
  const Clock::time_point released = Clock::now();
  EXPECT_EQ(held.release(), Release::released);
  Permit permit = waiting.get();
  EXPECT_TRUE(permit);
  EXPECT_LT(Clock::now() - released, 5s);
}

TEST_F(SemaphoreTest, TryAcquireForReturnsEmptyByItsDeadline) {
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(60s));
  Permit held = exports.acquire();
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(exports.try_acquire_for(150ms));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 150ms + 500ms);
  EXPECT_FALSE(exports.try_acquire_until(std::chrono::system_clock::now() - 1s));
  EXPECT_FALSE(exports.try_acquire_for(-1s));
}

TEST_F(SemaphoreTest, CancelWaitsEndsEveryWaitingAcquireOfTheObject) {
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(60s));
  Permit held = exports.acquire();
  PermitLock one(exports);
  auto timed = std::async(std::launch::async, [&] { return exports.try_acquire_for(30s); });
  auto blocking = std::async(std::launch::async, [&] {
    try {
      Permit permit = exports.acquire();
      return std::string("acquired");
    } catch (const Error& error) {
      return std::string(error.code() == Errc::cancelled ? "cancelled" : error.what());
    }
  });
  auto locking = std::async(std::launch::async, [&] { return one.try_lock_for(30s); });
  // A cancel reaches only acquires already under way: cancel until all
  // three have ended (each within a few ms of its start).
  const Clock::time_point start = Clock::now();
  const auto ended = [](auto& future) { return future.wait_for(0s) == std::future_status::ready; };
  ASSERT_TRUE(eventually([&] {
    exports.cancel_waits();
    return ended(timed) && ended(blocking) && ended(locking);
  })) << "an acquire was not cancelled";
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_FALSE(timed.get());
  EXPECT_EQ(blocking.get(), "cancelled");
  EXPECT_FALSE(locking.get());
  EXPECT_EQ(zcard("exports"), 1);  // only the holder's
  EXPECT_EQ(held.release(), Release::released);
  EXPECT_TRUE(exports.try_acquire_for(1s));  // later acquires are unaffected
}

TEST_F(SemaphoreTest, TryAcquireUntilWithAnErrorCodeThrowsNothing) {
  // A deadline on the system clock, as on the steady clock: busy is an
  // empty Permit with ec clear, a cancel sets Errc::cancelled, a free
  // permit is taken.
  using System = std::chrono::system_clock;
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(60s));
  Permit held = exports.acquire();
  std::error_code ec = Errc::io_error;  // cleared by a busy answer
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(exports.try_acquire_until(System::now() + 150ms, ec));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_GE(Clock::now() - start, 100ms);  // waited (the clocks' translation aside)
  auto cancelled = std::async(std::launch::async, [&] {
    std::error_code code;
    const bool taken = static_cast<bool>(exports.try_acquire_until(System::now() + 30s, code));
    return std::make_pair(taken, code);
  });
  ASSERT_TRUE(eventually([&] {
    exports.cancel_waits();
    return cancelled.wait_for(0s) == std::future_status::ready;
  })) << "the wait was not cancelled";
  const auto [taken, code] = cancelled.get();
  EXPECT_FALSE(taken);
  EXPECT_EQ(code, Errc::cancelled) << code.message();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_EQ(held.release(), Release::released);
  Permit permit = exports.try_acquire_until(System::now() + 5s, ec);
  EXPECT_TRUE(permit);
  EXPECT_FALSE(ec) << ec.message();
}

TEST_F(SemaphoreTest, TryAcquireForWithAFewMillisecondsLeftOnAStoppedServerIsAnOutage) {
  // With the server stopped, each attempt's reply wait is cut to the 3 to
  // 5 ms left. A socket timeout runs on the kernel's tick (4 ms at HZ=250)
  // and may fire up to a tick early. Either way the answer is the outage's,
  // TimeoutError (timed_out), never a taken permit's or a busy one's, and
  // never another error.
  Semaphore exports(client(), "exports", 1, LockOptions{}.ttl(60s));
  ASSERT_TRUE(exports.try_acquire());  // the scripts are loaded
  server().pause();
  int outages = 0;
  std::string other;
  for (int n = 0; n < 60 / scale; ++n) {
    try {
      EXPECT_FALSE(exports.try_acquire_for(std::chrono::milliseconds(3 + n % 3)));
    } catch (const TimeoutError& e) {
      if (e.code() == Errc::timed_out) ++outages;
    } catch (const std::exception& e) {
      other = e.what();
    }
  }
  server().resume();
  EXPECT_EQ(outages, 60 / scale) << "last other error: " << other;
  // Every ambiguous attempt was undone behind itself once the server read it.
  EXPECT_TRUE(eventually([&] { return zcard("exports") == 0; }));
}

TEST_F(SemaphoreTest, APermitLockWorksWithTheStandardGuards) {
  Semaphore exports(client(), "exports", 1);
  PermitLock one(exports);
  PermitLock two(exports);
  {
    std::unique_lock lock(one, 2s);
    ASSERT_TRUE(lock.owns_lock());
    EXPECT_EQ(one.id().size(), 32u);
    EXPECT_FALSE(two.try_lock());
    EXPECT_THROW(static_cast<void>(one.fence()), InvalidArgument);
  }
  {
    std::lock_guard guard(two);
    EXPECT_TRUE(two.owns_lock());
  }
  EXPECT_EQ(exports.available(), 1u);
}

TEST_F(SemaphoreTest, AvailableCountsOnlyLivePermits) {
  Semaphore exports(client(), "exports", 3, LockOptions{}.ttl(100ms));
  EXPECT_EQ(exports.available(), 3u);
  Permit a = exports.acquire();
  Permit b = exports.acquire();
  EXPECT_EQ(exports.available(), 1u);
  EXPECT_EQ(exports.held(), 2u);
  // No renewal: the leases run out on the server, and count as free.
  EXPECT_TRUE(eventually([&] { return exports.available() == 3; }));
  EXPECT_EQ(a.release(), Release::expired);
}

TEST_F(SemaphoreTest, BadInputIsRefused) {
  EXPECT_THROW(Semaphore(client(), "s", 0), InvalidArgument);
  EXPECT_THROW(Semaphore(client(), "s", 1'000'000'001), InvalidArgument);
  EXPECT_THROW(Semaphore(client(), "", 1), InvalidArgument);
  EXPECT_THROW(Semaphore(client(), "s", 1, LockOptions{}.fencing(true)), InvalidArgument);
  Semaphore exports(client(), "s", 1);
  EXPECT_THROW(exports.resize(1'000'000'001), InvalidArgument);
  Permit none;
  EXPECT_FALSE(none);
  EXPECT_THROW(static_cast<void>(none.release()), NotHeldError);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

}  // namespace
}  // namespace distlock
