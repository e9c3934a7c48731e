// Tests for detail/runtime/watchdog.hpp: renewal while held, batched rounds, the lost-lease
// signal, and silence after unlock, against real redis-servers.
#include "distlock/detail/runtime/watchdog.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distlock/detail/runtime/renewal_schedule.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::command_calls;

// Records the lost-lease callback's calls.
struct LostLog {
  std::mutex mutex;
  std::vector<LeaseInfo> lost;
  std::vector<Clock::time_point> when;
  LostCallback callback() {
    return [this](const LeaseInfo& info) {
      std::lock_guard guard(mutex);
      lost.push_back(info);
      when.push_back(Clock::now());
    };
  }
  std::size_t count() {
    std::lock_guard guard(mutex);
    return lost.size();
  }
  bool wait_for_one(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (count() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    return count() > 0;
  }
};

class WatchdogTest : public testing::RedisClientTest {
 protected:
  // While the lease is not reported lost, the server's lease of `key` must
  // cover what `lock` says is left of it. The record is read first, so the
  // time between the two reads is allowed for.
  template <class Lock>
  void expect_server_lease_covers_record(const Lock& lock, const std::string& key, int iteration) {
    const auto before = Clock::now();
    const std::chrono::milliseconds claimed = lock.validity();
    const long long pttl = client().command("PTTL", key).integer();
    const auto between =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - before);
    ASSERT_FALSE(lock.lost()) << "iteration " << iteration;
    EXPECT_GE(pttl, (claimed - between - 50ms).count())
        << "iteration " << iteration << ": validity() says " << claimed.count() << " ms";
  }

  // A renewal that read the old lease before extend() and reaches the
  // server after it must not set the key back to the old lease while the
  // record counts the new one.
  template <class Lock>
  void extend_races_renewals() {
    Lock lock(client(), "k", LockOptions{}.ttl(1s).auto_renew(true));
    ASSERT_TRUE(lock.try_lock());
    const int ran = testing::extend_against_renewal_rounds(
        lock, 60s, 1s, [&] { client().watchdog().renew_all_now(); },
        [&](int i) { expect_server_lease_covers_record(lock, "k", i); });
    if (!HasFailure()) {
      EXPECT_GE(ran, 100);  // enough rounds to have met the race
    }
    EXPECT_EQ(lock.release(), Release::released);
  }
};

// Renewals borrow pooled connections; with a short max_connection_age those
// are replaced again and again while the lease is held, and it is kept.
TEST_F(WatchdogTest, RenewalsKeepTheLeaseWhileTheirConnectionsAreReplaced) {
  ClientOptions options = testing::client_options(server());
  options.pool_size = 1;
  options.max_connection_age = 50ms;
  Client aging(options);
  const auto connections_made = [&] {
    const Reply info = client().command("INFO", "stats");
    return std::stoll(
        std::string(detail::server_info_field(info.str(), "total_connections_received")));
  };
  Mutex lock(aging, "k", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  const long long before = connections_made();
  // Each renewal (about every 100 ms) is on a connection made for it; ten
  // of them outlast the 300 ms lease several times over.
  ASSERT_TRUE(testing::eventually([&] { return connections_made() >= before + 10; }, 20s));
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(get("k"), lock.token());
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(WatchdogTest, DefaultLeaseIsRenewedAndAnExplicitOneIsNot) {
  EXPECT_TRUE(LockOptions{}.auto_renew());
  EXPECT_FALSE(LockOptions{}.ttl(5s).auto_renew());
  EXPECT_TRUE(LockOptions{}.ttl(5s).auto_renew(true).auto_renew());
  EXPECT_FALSE(LockOptions{}.auto_renew(false).auto_renew());
  Mutex renewed(client(), "a");
  Mutex plain(client(), "b", LockOptions{}.ttl(5s));
  ASSERT_TRUE(renewed.try_lock());
  ASSERT_TRUE(plain.try_lock());
  EXPECT_EQ(client().watchdog().size(), 1u);
  renewed.unlock();
  EXPECT_EQ(client().watchdog().size(), 0u);
}

TEST_F(WatchdogTest, RenewedHolderKeepsTheLockForTenLeasesAgainstCompetitors) {
  const auto ttl = 300ms;
  Mutex holder(client(), "k", LockOptions{}.ttl(ttl).auto_renew(true));
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> stop{false};
  std::atomic<int> stolen{0};
  std::vector<std::thread> competitors;
  for (int i = 0; i < 3; ++i) {
    competitors.emplace_back([&] {
      Mutex competitor(client(), "k", LockOptions{}.ttl(ttl));
      while (!stop) {
        if (competitor.try_lock_for(100ms)) {
          ++stolen;
          competitor.unlock();
        }
      }
    });
  }
  std::this_thread::sleep_for(10 * ttl);
  stop = true;
  for (auto& c : competitors) c.join();
  EXPECT_EQ(stolen, 0);
  EXPECT_FALSE(holder.lost());
  EXPECT_GT(holder.validity(), 0ms);
  EXPECT_EQ(holder.release(), Release::released);
}

TEST_F(WatchdogTest, ARoundOfManyLeasesIsBatchedNotOneCallPerLease) {
  constexpr int leases = 1000;
  std::vector<std::unique_ptr<Mutex>> locks;
  for (int i = 0; i < leases; ++i) {
    locks.push_back(std::make_unique<Mutex>(client(), "lease:" + std::to_string(i)));
    ASSERT_TRUE(locks.back()->try_lock());
  }
  client().command("PEXPIRE", "lease:0", "5000");  // shortened: a renewal must restore it
  client().command("CONFIG", "RESETSTAT");
  client().watchdog().renew_all_now();
  const testing::CommandCalls calls = command_calls(client());
  EXPECT_LE(calls.of("evalsha") + calls.of("eval"),
            static_cast<long long>((leases + Watchdog::batch_size - 1) / Watchdog::batch_size))
      << calls.text;
  EXPECT_GT(client().command("PTTL", "lease:0").integer(), 25000);
  locks.clear();  // releases all
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
  EXPECT_EQ(client().watchdog().size(), 0u);
}

TEST_F(WatchdogTest, ARoundOfSimpleMutexLeasesIsOneRoundTripPerChunkAndOnlyLengthens) {
  constexpr int leases = 250;  // three chunks of WATCH, the last one short
  std::vector<std::unique_ptr<SimpleMutex>> locks;
  for (int i = 0; i < leases; ++i) {
    locks.push_back(std::make_unique<SimpleMutex>(client(), "lease:" + std::to_string(i)));
    ASSERT_TRUE(locks.back()->try_lock());
  }
  client().command("PEXPIRE", "lease:0", "5000");                // shortened: a renewal restores it
  client().command("PEXPIRE", "lease:120", "600000");            // longer, as after extend(): kept
  client().command("SET", "lease:240", "other", "PX", "30000");  // taken: reported lost
  client().command("CONFIG", "RESETSTAT");
  client().watchdog().renew_all_now();
  const testing::CommandCalls calls = command_calls(client());
  constexpr long long chunks = 3;
  EXPECT_EQ(calls.of("watch"), chunks) << calls.text;
  EXPECT_EQ(calls.of("exec"), chunks) << calls.text;
  EXPECT_EQ(calls.of("pttl"), 0) << calls.text;       // GT decides, not a read
  EXPECT_EQ(calls.of("mget"), chunks) << calls.text;  // one read per chunk, not one per lease
  EXPECT_EQ(calls.of("get"), 0) << calls.text;
  EXPECT_EQ(calls.of("pexpire"), leases - 1) << calls.text;
  EXPECT_GT(client().command("PTTL", "lease:0").integer(), 25000);
  EXPECT_GT(client().command("PTTL", "lease:120").integer(), 500000);
  EXPECT_TRUE(locks[240]->lost());
  EXPECT_EQ(get("lease:240"), "other");
  EXPECT_FALSE(locks[239]->lost());
  locks.clear();  // releases all but the lost one
  EXPECT_EQ(client().command("DBSIZE").integer(), 1);
  EXPECT_EQ(client().watchdog().size(), 0u);
}

// A server before Redis 7 has no PEXPIRE ... GT; the renewer then compares
// each PTTL with the lease itself. Redis 7 is made to look older by telling
// the renewer so.
TEST_F(WatchdogTest, SimpleMutexRenewalWithoutGtStillOnlyLengthens) {
  auto renewer = std::make_shared<detail::TransactionalLease::Renewer>(client().site_for(""),
                                                                       /*server_has_gt=*/false);
  std::vector<std::unique_ptr<detail::LeaseState>> states;
  for (const char* key : {"short", "long", "taken"}) {
    client().command("SET", key, std::string("tok-") + key, "PX", "10000");
    states.push_back(std::make_unique<detail::LeaseState>(key, std::string("tok-") + key, 30s,
                                                          Clock::now(), nullptr, renewer));
  }
  client().command("PEXPIRE", "long", "600000");
  client().command("SET", "taken", "other", "PX", "10000");
  std::vector<detail::LeaseState*> leases;
  for (const auto& state : states) leases.push_back(state.get());
  std::vector<detail::Renewed> outcomes(leases.size(), detail::Renewed::unknown);
  renewer->renew(leases, outcomes, Clock::now() + 5s);
  EXPECT_EQ(outcomes[0], detail::Renewed::yes);
  EXPECT_EQ(outcomes[1], detail::Renewed::yes);
  EXPECT_EQ(outcomes[2], detail::Renewed::gone);
  EXPECT_GT(client().command("PTTL", "short").integer(), 25000);
  EXPECT_GT(client().command("PTTL", "long").integer(), 500000);
  EXPECT_LE(client().command("PTTL", "taken").integer(), 10000);
  EXPECT_EQ(get("taken"), "other");
}

TEST_F(WatchdogTest, NoRenewalIsEverSentForAReleasedLease) {
  // Leases live across their renewal deadlines (a 60 ms lease is due every
  // 20 ms; holds last 0-44 ms), so holders unlock while renewals are due or
  // in flight. MONITOR lists every release and every renewal with its
  // token, in the server's order: no renewal may carry a released token.
  testing::Monitor monitor(testing::client_options(server()));
  constexpr int threads = 4;
  constexpr int cycles = 30;
  std::vector<std::thread> holders;
  std::atomic<int> refused{0};
  for (int t = 0; t < threads; ++t) {
    holders.emplace_back([&, t] {
      Mutex lock(client(), "k" + std::to_string(t), LockOptions{}.ttl(60ms).auto_renew(true));
      for (int i = 0; i < cycles; ++i) {
        if (!lock.try_lock()) {
          ++refused;
          continue;
        }
        // The workload under the lock, not a synchronisation.
        std::this_thread::sleep_for(std::chrono::milliseconds((i * 7 + t * 13) % 45));
        lock.unlock();
      }
    });
  }
  for (auto& holder : holders) holder.join();
  EXPECT_EQ(refused, 0);
  // Past a renewal period after the last release: a renewal still
  // scheduled for a released lease would be sent by now.
  ASSERT_TRUE(testing::eventually([&] { return client().watchdog().size() == 0; }));
  std::this_thread::sleep_for(100ms);

  std::set<std::string> released;
  int renewals = 0;
  int late = 0;
  std::string first_late;
  for (const std::string& line : monitor.lines()) {
    const std::vector<std::string> args = testing::monitor_args(line);
    if (args.size() < 3 || (args[0] != "EVALSHA" && args[0] != "EVAL")) continue;
    const bool release = args.size() == 6 && args[4].find(":released") != std::string::npos;
    if (release) {
      released.insert(args[5]);
    } else if (args[1] == scripts::renew_batch.sha1) {
      ++renewals;
      for (std::size_t i = 3; i < args.size(); ++i) {
        if (released.count(args[i]) != 0) {
          if (late++ == 0) first_late = line;
        }
      }
    }
  }
  EXPECT_GT(released.size(), 0u);
  EXPECT_GT(renewals, 0) << "no renewal fell due: the test cannot see a late one";
  EXPECT_EQ(late, 0) << "renewals of released leases, the first: " << first_late;
}

TEST_F(WatchdogTest, LeaseTakenByAnotherTokenIsReportedLostAndLeftAlone) {
  LostLog log;
  Mutex lock(client(), "k", LockOptions{}.ttl(300ms).auto_renew(true).on_lost(log.callback()));
  ASSERT_TRUE(lock.try_lock());
  client().command("SET", "k", "somebody-else");
  ASSERT_TRUE(log.wait_for_one(2s));
  EXPECT_EQ(log.lost[0].reason, LostReason::taken);
  EXPECT_EQ(log.lost[0].name(), "k");
  EXPECT_EQ(log.lost[0].token, lock.token());
  EXPECT_TRUE(lock.lost());
  EXPECT_EQ(lock.validity(), 0ms);
  EXPECT_FALSE(lock.extend(10s));  // never silently re-acquired
  EXPECT_EQ(get("k"), "somebody-else");
  EXPECT_FALSE(lock.owns_lock());
}

TEST_F(WatchdogTest, RevalidateReReadsThePickedLeasesAtOnce) {
  // Renewals every 10 s; only revalidate() settles these within the wait.
  LostLog log;
  const LockOptions options = LockOptions{}.ttl(30s).auto_renew(true).on_lost(log.callback());
  Mutex gone(client(), "revalidate:gone", options);
  Mutex kept(client(), "revalidate:kept", options);
  Mutex unpicked(client(), "revalidate:unpicked", options);
  ASSERT_TRUE(gone.try_lock());
  ASSERT_TRUE(kept.try_lock());
  ASSERT_TRUE(unpicked.try_lock());
  // As after a failover to a replica that missed one key, and cut another's lease.
  client().command("DEL", "revalidate:gone");
  client().command("DEL", "revalidate:unpicked");
  client().command("PEXPIRE", "revalidate:kept", "5000");
  client().watchdog().revalidate(
      [&](const detail::LeaseState& lease) { return lease.key != "revalidate:unpicked"; });
  ASSERT_TRUE(log.wait_for_one(2s));
  EXPECT_EQ(log.lost[0].name(), "revalidate:gone");
  EXPECT_EQ(log.lost[0].reason, LostReason::taken);
  EXPECT_TRUE(gone.lost());
  EXPECT_FALSE(kept.lost());
  EXPECT_GT(client().command("PTTL", "revalidate:kept").integer(), 25000);
  EXPECT_FALSE(unpicked.lost());  // not picked: believed until its renewal
}

// A lease of fixed ttl is kept by the Watchdog for revalidation only: a
// revalidation reports the one whose key is gone lost, keeps the other
// without lengthening it (on the server or in validity()), and one that
// simply runs out is not "lost".
TEST_F(WatchdogTest, FixedTtlLeasesAreRevalidatedButNeverRenewed) {
  LostLog log;
  const LockOptions fixed = LockOptions{}.ttl(30s).on_lost(log.callback());
  Mutex gone(client(), "fixed:gone", fixed);
  Mutex kept(client(), "fixed:kept", fixed);
  SimpleMutex simple(client(), "fixed:simple", fixed);
  ReentrantMutex reentrant(client(), "fixed:reentrant", fixed);
  Mutex brief(client(), "fixed:brief", LockOptions{}.ttl(200ms).on_lost(log.callback()));
  ASSERT_TRUE(gone.try_lock());
  ASSERT_TRUE(kept.try_lock());
  ASSERT_TRUE(simple.try_lock());
  ASSERT_TRUE(reentrant.try_lock());
  ASSERT_TRUE(brief.try_lock());
  EXPECT_EQ(client().watchdog().size(), 0u);  // none is renewed
  client().command("DEL", "fixed:gone");
  client().command("PEXPIRE", "fixed:kept", "20000");  // as a replica that lags a little
  client().watchdog().revalidate();
  ASSERT_TRUE(log.wait_for_one(2s));
  EXPECT_EQ(log.lost[0].name(), "fixed:gone");
  EXPECT_EQ(log.lost[0].reason, LostReason::taken);
  EXPECT_TRUE(gone.lost());
  EXPECT_EQ(gone.release(), Release::lost);
  client().watchdog().renew_all_now();  // the revalidation round is over
  EXPECT_FALSE(kept.lost());
  EXPECT_FALSE(simple.lost());
  EXPECT_FALSE(reentrant.lost());
  EXPECT_LE(kept.validity(), 30s);
  // "Renewed" to the time the holder still counts on: at most the 30 s it
  // was granted, at least the 20 s the server had.
  const long long pttl = client().command("PTTL", "fixed:kept").integer();
  EXPECT_LE(pttl, 30000);
  EXPECT_GT(pttl, 19000);
  EXPECT_LE(client().command("PTTL", "fixed:simple").integer(), 30000);
  EXPECT_LE(client().command("PTTL", "fixed:reentrant").integer(), 30000);
  // Running out is what a fixed lease does: not reported lost.
  const auto deadline = Clock::now() + 5s;
  while (brief.validity() > 0ms && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  while (client().command("EXISTS", "fixed:brief").integer() == 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  client().watchdog().renew_all_now();
  EXPECT_FALSE(brief.lost());
  EXPECT_EQ(log.count(), 1u);
  EXPECT_EQ(brief.release(), Release::expired);
  EXPECT_EQ(kept.release(), Release::released);
  EXPECT_EQ(simple.release(), Release::released);
  EXPECT_EQ(reentrant.release(), Release::released);
}

TEST_F(WatchdogTest, ReleaseOfALostLeaseReportsLostAndDeletesNothing) {
  Mutex lock(client(), "k", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  client().command("SET", "k", "somebody-else");
  const auto deadline = Clock::now() + 2s;
  while (!lock.lost() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(lock.lost());
  client().command("CONFIG", "RESETSTAT");
  EXPECT_EQ(lock.release(), Release::lost);
  EXPECT_EQ(command_calls(client()).of("evalsha"), 0);
  EXPECT_EQ(get("k"), "somebody-else");
}

TEST_F(WatchdogTest, ClientPauseLongerThanTheLeaseIsReportedByItsExpiry) {
  LostLog log;
  const auto ttl = 600ms;
  Mutex lock(client(), "k", LockOptions{}.ttl(ttl).auto_renew(true).on_lost(log.callback()));
  ASSERT_TRUE(lock.try_lock());
  std::this_thread::sleep_for(50ms);
  const auto paused = Clock::now();
  client().command("CLIENT", "PAUSE", "2000", "WRITE");
  ASSERT_TRUE(log.wait_for_one(3s));
  // The last confirmed renewal was sent before the pause, so the lease ends
  // no later than pause + ttl; the report must come by then (plus the
  // watchdog's wake-up slack).
  EXPECT_LE(log.when[0] - paused, ttl + 50ms);
  EXPECT_EQ(log.lost[0].reason, LostReason::expired);
  EXPECT_TRUE(lock.lost());
  EXPECT_EQ(lock.release(), Release::lost);
  client().command("CLIENT", "UNPAUSE");
}

TEST_F(WatchdogTest, UnreachableServerIsReportedByTheLeasesExpiry) {
  LostLog log;
  const auto ttl = 500ms;
  Mutex lock(client(), "k", LockOptions{}.ttl(ttl).auto_renew(true).on_lost(log.callback()));
  ASSERT_TRUE(lock.try_lock());
  const auto stopped = Clock::now();
  server().pause();
  const bool reported = log.wait_for_one(3s);
  server().resume();
  ASSERT_TRUE(reported);
  EXPECT_LE(log.when[0] - stopped, ttl + 50ms);
  EXPECT_TRUE(lock.lost());
}

// The loss watch async holders use (distlock/asio.hpp: run_locked): a
// watcher is told once, when the Watchdog reports the loss, and one that
// comes after the report at once.
TEST(LossWatchTest, WatchersAreToldOnceAndLateOnesAtOnce) {
  auto lease =
      std::make_shared<detail::LeaseState>("k", "token", 30s, Clock::now(), nullptr, nullptr);
  int early = 0;
  int late = 0;
  lease->watch_loss([&] { ++early; });
  EXPECT_EQ(early, 0);
  lease->lost = true;  // as the Watchdog sets it,
  lease->tell_loss();  // then tells
  EXPECT_EQ(early, 1);
  lease->tell_loss();
  EXPECT_EQ(early, 1);  // once
  lease->watch_loss([&] { ++late; });
  EXPECT_EQ(late, 1);  // after the report: at once
}

// The schedule alone (no server): an unconfirmed renewal is tried again a
// retry interval (ttl / 10) after it was sent, not after it ended. A
// Redlock's renewal waits up to its node timeout (ttl / 10 by default), so
// counted from its end the next try came two node timeouts after the last
// one's start; under latency spikes a short window of fast replies between
// them then held no whole try, and the lease ran out unrenewed (the TLS
// fault suite's overlaps).
TEST(RenewalScheduleTest, AnUnconfirmedRenewalIsRetriedAnIntervalAfterItWasSent) {
  const auto ttl = 400ms;
  const auto sent = Clock::now();
  auto lease = std::make_shared<detail::LeaseState>("k", "token", ttl, sent, nullptr, nullptr);
  detail::RenewalEntry entry = detail::first_entry(*lease, Clock::time_point::max(), true);
  entry.lease = lease;
  const auto expires = lease->expires();
  // When the next try falls due, in microseconds after the last was sent.
  const auto retried = [&](Clock::duration answered) {
    detail::reschedule(entry, false, sent, sent + answered);
    return std::chrono::duration_cast<std::chrono::microseconds>(entry.next_renewal - sent).count();
  };

  // Waited out a timeout as long as the interval: tried again at once.
  EXPECT_EQ(retried(40ms), 40000);
  // Took longer still (a slow connect): at once, not later.
  EXPECT_EQ(retried(55ms), 55000);
  // Failed at once (refused): the interval is still kept between tries.
  EXPECT_EQ(retried(1ms), 40000);
  // Long leases wait 100 ms at most.
  lease->ttl = 10s;
  EXPECT_EQ(retried(1ms), 100000);
  // None of it touches the lease's validity.
  EXPECT_TRUE(lease->expires() == expires);
}

TEST_F(WatchdogTest, RenewalCapLetsTheLeaseRunOut) {
  LostLog log;
  Mutex lock(client(), "k",
             LockOptions{}.ttl(200ms).auto_renew(true).max_hold(500ms).on_lost(log.callback()));
  ASSERT_TRUE(lock.try_lock());
  const auto start = Clock::now();
  ASSERT_TRUE(log.wait_for_one(3s));
  EXPECT_GE(log.when[0] - start, 500ms);
  EXPECT_LE(log.when[0] - start, 500ms + 200ms + 100ms);
  EXPECT_EQ(log.lost[0].reason, LostReason::expired);
  const auto gone_by = Clock::now() + 2s;
  while (client().command("EXISTS", "k").integer() == 1 && Clock::now() < gone_by) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(WatchdogTest, ACallbackThatThrowsDoesNotStopTheWatchdog) {
  Mutex thrower(client(), "a",
                LockOptions{}.ttl(300ms).auto_renew(true).on_lost(
                    [](const LeaseInfo&) { throw std::runtime_error("boom"); }));
  Mutex keeper(client(), "b", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(thrower.try_lock());
  ASSERT_TRUE(keeper.try_lock());
  client().command("SET", "a", "other");
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(thrower.lost());
  EXPECT_FALSE(keeper.lost());
  EXPECT_EQ(get("b"), keeper.token());
}

TEST_F(WatchdogTest, SimpleMutexLeasesAreRenewedWithoutScripts) {
  SimpleMutex lock(client(), "k", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  client().command("CONFIG", "RESETSTAT");
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(get("k"), lock.token());
  const testing::CommandCalls calls = command_calls(client());
  EXPECT_GE(calls.of("pexpire"), 2);
  EXPECT_EQ(calls.of("evalsha"), 0);
  EXPECT_EQ(lock.release(), Release::released);
}

TEST_F(WatchdogTest, ExtendChangesTheLeaseTheWatchdogKeeps) {
  Mutex lock(client(), "k", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.extend(20s));
  client().watchdog().renew_all_now();
  EXPECT_GT(client().command("PTTL", "k").integer(), 15000);
}

TEST_F(WatchdogTest, KilledHolderProcessFreesTheLockWithinItsLease) {
  const auto ttl = 1s;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const ClientOptions where = testing::client_options(server());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Client own(where);
    Mutex lock(own, "k", LockOptions{}.ttl(ttl).auto_renew(true));
    lock.lock();
    const char byte = 1;
    static_cast<void>(::write(ready[1], &byte, 1));
    for (;;) ::pause();  // renewed by the watchdog until killed
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  std::this_thread::sleep_for(2 * ttl);  // held past its lease: renewals work
  ASSERT_EQ(client().command("EXISTS", "k").integer(), 1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killed = Clock::now();
  Mutex waiter(client(), "k", LockOptions{}.ttl(5s));
  ASSERT_TRUE(waiter.try_lock_for(5s));
  EXPECT_LE(Clock::now() - killed, ttl + ttl / 3 + 200ms);
}

TEST_F(WatchdogTest, ExtendRacingRenewalsNeverLeavesTheServerLeaseShortOfTheRecord) {
  extend_races_renewals<Mutex>();
}

TEST_F(WatchdogTest, ReentrantExtendRacingRenewalsNeverLeavesTheServerLeaseShortOfTheRecord) {
  extend_races_renewals<ReentrantMutex>();
}

TEST_F(WatchdogTest, UnlockWhileARenewalFindsTheLeaseGoneWaitsItOutSafely) {
  Mutex lock(client(), "k", LockOptions{}.ttl(2s).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  client().watchdog().renew_all_now();  // the watchdog's connection is open, its script loaded
  client().command("DEL", "k");         // the next renewal finds the lease gone...
  client().command("CLIENT", "PAUSE", "300", "WRITE");  // ...once the pause lets it run
  auto round = std::async(std::launch::async, [&] { client().watchdog().renew_all_now(); });
  const auto blocked = [&] {
    const std::string info(client().command("INFO", "clients").str());
    return info.find("blocked_clients:0") == std::string::npos;
  };
  const auto deadline = Clock::now() + 2s;
  while (!blocked() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(blocked()) << "the renewal never reached the paused server";
  // The renewal is in flight: release() waits for it, and it comes back
  // with the lease gone.
  const Release released = lock.release();
  round.get();
  EXPECT_TRUE(released == Release::lost || released == Release::expired) << to_string(released);
  EXPECT_FALSE(lock.owns_lock());
  EXPECT_EQ(client().watchdog().size(), 0u);
  EXPECT_EQ(client().command("EXISTS", "k").integer(), 0);
}

TEST_F(WatchdogTest, UnlockRacingRenewalsThatFindLeasesGoneThousandsOfTimes) {
  // Threads take short auto-renewed leases, have another connection delete
  // them, and give them back while renewal rounds run back to back: many
  // unlocks meet a renewal in flight that comes back with the lease gone.
  constexpr int threads = 4;
  constexpr int locks_per_thread = 8;
  constexpr int cycles_per_thread = 300;  // of locks_per_thread unlocks each
  Client deleter(testing::client_options(server()));
  std::atomic<bool> stop{false};
  std::atomic<int> unlocks{0};
  std::atomic<int> found_lost{0};
  std::atomic<int> unexpected{0};
  std::thread renewer([&] {
    while (!stop) client().watchdog().renew_all_now();
  });
  const auto deadline = Clock::now() + 3s;
  const auto hold_and_give_back = [&](int t) {
    std::vector<std::unique_ptr<Mutex>> locks;
    for (int i = 0; i < locks_per_thread; ++i) {
      locks.push_back(
          std::make_unique<Mutex>(client(), "stress:" + std::to_string(t) + ":" + std::to_string(i),
                                  LockOptions{}.ttl(300ms).auto_renew(true)));
    }
    std::vector<std::string_view> del{"DEL"};
    for (const auto& lock : locks) del.push_back(lock->key());
    for (int cycle = 0; cycle < cycles_per_thread && Clock::now() < deadline; ++cycle) {
      for (auto& lock : locks) {
        if (!lock->try_lock()) ++unexpected;
      }
      deleter.borrow()->command_argv(del);
      for (std::size_t i = 0; i < locks.size(); ++i) {
        if (!locks[i]->owns_lock()) continue;
        if ((static_cast<std::size_t>(cycle) + i) % 2 == 0) {
          locks[i]->unlock();
        } else {
          try {
            const Release released = locks[i]->release();
            if (released == Release::lost) ++found_lost;
            if (released != Release::lost && released != Release::expired) ++unexpected;
          } catch (const Error&) {
            ++unexpected;
          }
        }
        ++unlocks;
      }
    }
  };
  std::vector<std::thread> holders;
  for (int t = 0; t < threads; ++t) {
    holders.emplace_back([&, t] {
      try {
        hold_and_give_back(t);
      } catch (const std::exception&) {
        ++unexpected;  // Redis failed: not what this test is about, but not a pass
      }
    });
  }
  for (auto& holder : holders) holder.join();
  stop = true;
  renewer.join();
  EXPECT_EQ(unexpected, 0);
  EXPECT_GE(unlocks, 1000);
  EXPECT_GT(found_lost, 0) << "no renewal found a lease gone before its unlock";
  EXPECT_EQ(client().watchdog().size(), 0u);
  EXPECT_EQ(client().command("DBSIZE").integer(), 0);
}

}  // namespace
}  // namespace distlock
