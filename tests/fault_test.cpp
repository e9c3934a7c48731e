// The locks under faults: forked contenders (support/workload.hpp) run
// critical sections while the test faults the network (support/
// fault_proxy.hpp), the servers or a contender, and the oracle (support/
// oracle.hpp) judges the records. Per lock type where it applies (Mutex,
// SimpleMutex, ReentrantMutex, SharedMutex, Redlock over three masters):
//   - faults that keep the lock's state (latency and stalls shorter than the
//     lease, a server stopped shorter than the lease, the subscriber's or the
//     pool's (watchdog's) connections killed, CLIENT PAUSE, SCRIPT FLUSH):
//     no overlaps, no lost updates;
//   - the same over TLS for the faults on the wire and the connections
//     (latency, stalls, the subscriber's or the pool's connections killed):
//     TLS-only masters, the contenders speaking TLS through the proxies,
//     which delay, hold or cut the records anywhere in them;
//   - a holder stopped past its lease: without fencing the oracle sees the
//     overlap and the lost update (the control); with fencing the store
//     accepts no stale write, and the resumed holder sees lost() first;
//   - Redlock with a minority of masters stopped, killed, cut off or slow:
//     no overlaps; with a majority gone: no section, and no key left;
//   - a server restarted without persistence: no crash, no hang;
//   - mixed fleets, distlock beside peers emulated from other libraries'
//     layouts (support/peers.hpp) on one name, with and without faults that
//     keep the lock's state: no overlaps, no lost updates, no torn reads,
//     and nothing left in Redis;
//   - ReentrantMutex and SharedMutex, whose releases name the owner: an
//     undo or a release that reaches Redis after the owner's next grant,
//     on another connection, takes nothing from it, whichever thread sent
//     it (a destructor gives back every thread's holds);
// and under every fault: every try_lock_for returns by its deadline + 50 ms
// (200 ms under the sanitizers: support/sanitized.hpp),
// every contender exits, and no lock key outlives its lease.
//
// Sizes: a fixed seed and about a second per run in CI (half that under the
// sanitizers); DISTLOCK_SOAK_SECONDS=N runs each for N seconds with a random
// seed (DISTLOCK_SOAK_SEED=S replays one). Every run prints one line,
//   distlock-fault kind=... fault=... seed=... sections=... overlaps=...
// for a soak's summary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/fault_proxy.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/oracle.hpp"
#include "support/peers.hpp"
#include "support/sanitized.hpp"
#include "support/test_certs.hpp"
#include "support/workload.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using testing::FaultProxy;
using testing::RedisServer;
using testing::RedisServerOptions;
using testing::Shared;
using testing::WorkloadOptions;

using testing::deadline_slack;

// ---- the lock types, as a contender uses them ----------------------------

template <class L>
struct ExclusiveKind {
  using Lock = L;
  static constexpr bool shared = false;
  static constexpr std::size_t masters = 1;
  static std::unique_ptr<Lock> make(std::vector<Client>& clients, const std::string& name,
                                    const LockOptions& options) {
    return std::make_unique<Lock>(clients[0], name, options);
  }
  static bool acquire(Lock& lock, bool, milliseconds timeout) { return lock.try_lock_for(timeout); }
  static void release(Lock& lock, bool) { lock.unlock(); }
  static long long fence(Lock& lock) { return lock.fence(); }
  static bool lost(Lock& lock) { return lock.lost(); }
  static int role(const Lock&) { return 0; }
  static bool bounded(const Lock&) { return true; }
};

struct MutexKind : ExclusiveKind<Mutex> {
  static constexpr const char* name = "Mutex";
};
struct SimpleMutexKind : ExclusiveKind<SimpleMutex> {
  static constexpr const char* name = "SimpleMutex";
};
struct ReentrantKind : ExclusiveKind<ReentrantMutex> {
  static constexpr const char* name = "ReentrantMutex";
};
struct FairMutexKind : ExclusiveKind<FairMutex> {
  static constexpr const char* name = "FairMutex";
};
struct SharedKind : ExclusiveKind<SharedMutex> {
  static constexpr const char* name = "SharedMutex";
  static constexpr bool shared = true;
  static bool acquire(SharedMutex& lock, bool write, milliseconds timeout) {
    return write ? lock.try_lock_for(timeout) : lock.try_lock_shared_for(timeout);
  }
  static void release(SharedMutex& lock, bool write) {
    if (write) {
      lock.unlock();
    } else {
      lock.unlock_shared();
    }
  }
  static long long fence(SharedMutex&) { return 0; }
};
struct RedlockKind : ExclusiveKind<Redlock> {
  static constexpr const char* name = "Redlock";
  static constexpr std::size_t masters = 3;
  static std::unique_ptr<Redlock> make(std::vector<Client>& clients, const std::string& lock_name,
                                       const LockOptions& options) {
    std::vector<Client*> pointers;
    for (Client& client : clients) pointers.push_back(&client);
    // A node timeout sized to the faults (latency spikes add 80 ms to a
    // round trip), not the default tenth of the 400 ms lease: no renewal
    // can be answered within 40 ms while a spike lasts, so the lease would
    // hang on the short clear spells between spikes.
    return std::make_unique<Redlock>(pointers, lock_name,
                                     RedlockOptions(options).node_timeout(150ms));
  }
  static long long fence(Redlock&) { return 0; }
};

// ---- the rig: masters, a proxy before each, a fenced store --------------

struct Rig {
  std::vector<std::unique_ptr<RedisServer>> masters;
  std::vector<std::unique_ptr<FaultProxy>> proxies;  // started after the fork
  std::unique_ptr<RedisServer> store;

  void heal() {
    for (auto& proxy : proxies) proxy->heal();
    for (auto& master : masters) {
      if (master->running()) master->resume();
    }
  }
  // Sends a command to every running master, directly (not through its proxy).
  void to_masters(const std::vector<std::string>& argv, std::size_t count = 0) {
    if (count == 0) count = masters.size();
    for (std::size_t i = 0; i < count; ++i) {
      try {
        if (masters[i]->running()) masters[i]->command(argv);
      } catch (const std::exception&) {
        // A master that went away mid-command: the fault itself.
      }
    }
  }
};

// What the test does while the contenders run: given the rig, the shared
// memory, the contenders' pids and the run's end, it applies its faults.
using During = std::function<void(Rig&, Shared&, const std::vector<pid_t>&,
                                  std::chrono::steady_clock::time_point end)>;

// Applies a fault for `length` every `length + gap`, until `end`; heals at
// the end. A schedule, not a synchronisation: the sleeps pace the faults.
During every(milliseconds length, milliseconds gap, std::function<void(Rig&)> apply,
             std::function<void(Rig&)> undo) {
  return
      [=](Rig& rig, Shared&, const std::vector<pid_t>&, std::chrono::steady_clock::time_point end) {
        while (std::chrono::steady_clock::now() + length < end) {
          apply(rig);
          std::this_thread::sleep_for(length);
          undo(rig);
          std::this_thread::sleep_for(gap);
        }
      };
}

// 40 ms each way through every proxy for 250 ms, then 100 ms without.
During latency_spikes() {
  return every(
      250ms, 100ms,
      [](Rig& rig) {
        for (auto& p : rig.proxies) p->set_latency(FaultProxy::Direction::both, 40ms);
      },
      [](Rig& rig) {
        for (auto& p : rig.proxies) p->heal();
      });
}

// Every byte through every proxy held for 120 ms, then 150 ms without.
During stalls() {
  return every(
      120ms, 150ms,
      [](Rig& rig) {
        for (auto& p : rig.proxies) p->stall(FaultProxy::Direction::both);
      },
      [](Rig& rig) {
        for (auto& p : rig.proxies) p->release(FaultProxy::Direction::both);
      });
}

// CLIENT KILL TYPE `type` ("pubsub": the subscribers; "normal": the pool's
// and the watchdog's connections) on every master, every 100 ms.
During killing(const std::string& type) {
  return every(
      1ms, 100ms,
      [type](Rig& rig) {
        rig.to_masters({"CLIENT", "KILL", "TYPE", type});
      },
      [](Rig&) {});
}

During nothing() {
  return [](Rig&, Shared&, const std::vector<pid_t>&, std::chrono::steady_clock::time_point end) {
    std::this_thread::sleep_until(end);
  };
}

// What a run must show before it ends (a condition on the shared memory),
// and the longest it may go on to show it.
struct Until {
  std::function<bool(const Shared&)> shown;
  milliseconds longest{0};
};

// Until a section ended, for 20 s at most: what every run that judges
// sections must show. A fixed length only makes it likely: under the
// sanitizers, with every record through the proxy 40 ms late, the TLS
// handshakes outlasted each acquire of a half-second run (once in CI).
Until a_section_ended() {
  return Until{[](const Shared& shared) { return shared.next.load() > 0; }, 20s};
}

struct Outcome {
  testing::Verdict verdict;
  testing::Children children;
  double seconds = 0;  // how long the contenders ran
  std::int64_t deadline_calls = 0;
  double worst_overshoot_ms = 0;
  // How far past its deadline a call may return, whatever the fault.
  std::chrono::milliseconds overshoot_allowed = deadline_slack;
  std::int64_t errors = 0;
  std::string first_error;
  std::int64_t unanswered = 0;       // acquires that ended in TimeoutError (not errors)
  std::int64_t dropped = 0;          // sections with no room left to record
  std::int64_t worst_call = 0;       // the worst overshoot's call number in its thread
  double worst_call_began_ms = 0;    // and when it began, after go
  std::size_t keys_at_end = 0;       // lock keys left when the contenders ended
  bool keys_without_expiry = false;  // one of them had no expiry
  bool keys_gone = true;             // none left after their leases
  std::size_t live_keys = 0;         // lock keys on the masters left running (before_heal)
  int paused_lost_seen = 0;
  std::vector<testing::Section> sections;
  // Every key but the fence counters, once the lock keys left were gone.
  std::vector<std::string> keys_left;
};

std::string describe(const Outcome& o) {
  return "sections=" + std::to_string(o.verdict.sections) +
         " overlaps=" + std::to_string(o.verdict.overlaps) + " (first: " + o.verdict.first_overlap +
         ") lost_updates=" + std::to_string(o.verdict.lost_updates) +
         " errors=" + std::to_string(o.errors) + " (first: " + o.first_error +
         ") unanswered=" + std::to_string(o.unanswered) +
         " worst_overshoot_ms=" + std::to_string(o.worst_overshoot_ms) + " (allowed " +
         std::to_string(o.overshoot_allowed.count()) + "; call " + std::to_string(o.worst_call) +
         " of its thread, begun " + std::to_string(o.worst_call_began_ms) + " ms after go)" +
         " crashed=" + std::to_string(o.children.crashed) +
         " hung=" + std::to_string(o.children.hung);
}

// The keys matching `pattern` on one server, but the fence counters.
std::vector<std::string> keys_but_fences(RedisServer& server, const std::string& pattern) {
  std::vector<std::string> keys;
  if (!server.running()) return keys;
  const std::string all = server.command({"KEYS", pattern});
  std::size_t at = 0;
  while (at < all.size()) {
    std::size_t end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    const std::string key = all.substr(at, end - at);
    if (!key.empty() && key.find("fence") == std::string::npos) keys.push_back(key);
    at = end + 1;
  }
  return keys;
}

// The lock keys on one server: every key at a lock's name but the fence
// counters.
std::vector<std::string> lock_keys(RedisServer& server) {
  return keys_but_fences(server, "fault:*");
}

template <class Kind>
class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    start_rig();
  }

  // Starts the masters, a proxy before each, and the fenced store. With
  // `pki`, the masters speak TLS only (the admin commands go through their
  // unix sockets), and the contenders do, trusting its CA: the proxy
  // forwards the records as bytes, and cuts or delays them anywhere.
  void start_rig(const testing::TestPki* pki = nullptr) {
    RedisServerOptions master;
    if (pki != nullptr) {
      master.tls = testing::RedisServerTls{pki->server.cert, pki->server.key, pki->ca.file()};
      tls_.enabled = true;
      tls_.ca_file = pki->ca.file();
    }
    for (std::size_t i = 0; i < Kind::masters; ++i) {
      rig_.masters.push_back(std::make_unique<RedisServer>(master));
      rig_.proxies.push_back(std::make_unique<FaultProxy>(rig_.masters.back()->host(),
                                                          rig_.masters.back()->port(), false));
    }
    rig_.store = std::make_unique<RedisServer>();
  }

 public:
  // The lease every run uses unless it says otherwise: renewed by the
  // watchdog, so long sections span renewals.
  static LockOptions lease() { return LockOptions{}.ttl(400ms).auto_renew(true); }

  // The CI size: three processes of two threads on two names, about a
  // second.
  static WorkloadOptions workload(milliseconds ci_duration = 1000ms, std::uint64_t seed = 1) {
    const testing::RunSize size = testing::run_size(ci_duration, seed);
    WorkloadOptions options;
    options.duration = size.duration;
    options.seed = size.seed;
    options.capacity = size.capacity;
    // Fewer contenders under the sanitizers: their threads cost several
    // times more, and the deadline bound must measure the lock, not a
    // starved scheduler.
    if (testing::sanitized_build()) options.processes = 2;
    // Every eighth section holds longer than the lease: only the watchdog's
    // renewals keep it, and a renewal lost to a fault shows as an overlap.
    options.long_hold_every = 8;
    options.long_hold = 600ms;
    options.read_percent = Kind::shared ? 50 : 0;
    return options;
  }

  // Runs the workload under `during`. `before_heal` looks at the rig after
  // the contenders ended and before the faults are undone. With `until`,
  // the run goes on past its duration, under the same faults, half a second
  // at a time, until `until.shown` holds or `until.longest` has passed in
  // all: how soon a contender that polls gets in is the scheduler's
  // business; that it does is the test's.
  Outcome run(const std::string& fault, WorkloadOptions options, LockOptions lock, During during,
              std::function<void(Rig&, Outcome&)> before_heal = {}, Until until = {}) {
    testing::SharedMapping shared(options.capacity);
    std::vector<ClientOptions> where;
    for (auto& proxy : rig_.proxies) {
      ClientOptions o;
      o.host = proxy->host();
      o.port = proxy->port();
      o.connect_timeout = 1000ms;
      o.command_timeout = 1000ms;
      o.tls = tls_;
      where.push_back(o);
    }
    std::optional<ClientOptions> store;
    if (options.fenced) store = testing::client_options(*rig_.store);
    auto connect = [where] {
      std::vector<Client> clients;
      for (const ClientOptions& o : where) clients.emplace_back(o);
      return clients;
    };
    options.lock = lock;
    const std::vector<pid_t> pids =
        testing::fork_contenders<Kind>(*shared, options, connect, store);
    for (auto& proxy : rig_.proxies) proxy->start();
    const auto began = std::chrono::steady_clock::now();
    shared->go_ns.store(testing::monotonic_ns());
    shared->go.store(1);
    during(rig_, *shared, pids, began + options.duration);
    if (until.shown) {
      const auto last = began + until.longest;
      while (!until.shown(*shared) && std::chrono::steady_clock::now() < last) {
        during(rig_, *shared, pids, std::min(std::chrono::steady_clock::now() + 500ms, last));
      }
    }
    shared->stop.store(1);
    Outcome outcome;
    outcome.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    outcome.children = testing::reap(pids, options.duration + 20s);
    if (before_heal) before_heal(rig_, outcome);
    rig_.heal();

    std::vector<std::int64_t> counters;
    std::vector<std::int64_t> fenced;
    for (int n = 0; n < options.names; ++n) {
      counters.push_back(shared->counter[n].load());
      if (options.fenced) {
        const std::string value = rig_.store->command({"GET", "value:" + std::to_string(n)});
        fenced.push_back(value == "(nil)" ? 0 : std::stoll(value));
      }
    }
    outcome.sections = shared->recorded();
    outcome.verdict = testing::judge(outcome.sections, counters, fenced);
    outcome.deadline_calls = shared->deadline_calls.load();
    outcome.worst_overshoot_ms = static_cast<double>(shared->worst_overshoot_ns.load()) / 1e6;
    outcome.errors = shared->errors.load();
    outcome.unanswered = shared->unanswered.load();
    outcome.dropped = static_cast<std::int64_t>(shared->dropped.load());
    outcome.worst_call = shared->worst_call.load();
    outcome.worst_call_began_ms = static_cast<double>(shared->worst_call_began_ns.load()) / 1e6;
    outcome.first_error = shared->first_error;
    outcome.paused_lost_seen = shared->paused_lost_seen.load();

    // Every lock key left must be a lease running out; none may outlive it.
    for (auto& master : rig_.masters) {
      for (const std::string& key : lock_keys(*master)) {
        ++outcome.keys_at_end;
        // -1: no expiry; -2: it ran out since the scan, as a lease does.
        const std::string pttl = master->command({"PTTL", key});
        if (std::stoll(pttl) == -1) outcome.keys_without_expiry = true;
      }
    }
    if (outcome.keys_at_end > 0) {
      outcome.keys_gone = testing::eventually(
          [&] {
            for (auto& master : rig_.masters) {
              if (!lock_keys(*master).empty()) return false;
            }
            return true;
          },
          lock.ttl() + 2s);
    }
    // Then whatever is still there, a lock's companions too ("{name}:...:
    // rwlock_timeout:n", "redisson_unlock_latch:{name}:..."): nothing, for
    // the tests that want nothing left behind. (A grant that landed after
    // its call gave up is a lease running out: its undo, written behind it,
    // may not have left the process before it exited.)
    for (auto& master : rig_.masters) {
      for (std::string& key : keys_but_fences(*master, "*")) {
        outcome.keys_left.push_back(std::move(key));
      }
    }
    std::printf(
        "distlock-fault kind=%s fault=%s seed=%llu seconds=%.1f processes=%d threads=%d "
        "names=%d sections=%lld overlaps=%lld lost_updates=%lld torn_reads=%lld "
        "fenced_accepted=%lld fenced_refused=%lld stale_accepted=%lld errors=%lld "
        "unanswered=%lld deadline_calls=%lld worst_overshoot_ms=%.1f keys_at_end=%zu dropped=%lld "
        "crashed=%d "
        "hung=%d\n",
        Kind::name, fault.c_str(), static_cast<unsigned long long>(options.seed), outcome.seconds,
        options.processes, options.threads, options.names,
        static_cast<long long>(outcome.verdict.sections),
        static_cast<long long>(outcome.verdict.overlaps),
        static_cast<long long>(outcome.verdict.lost_updates),
        static_cast<long long>(outcome.verdict.torn_reads),
        static_cast<long long>(outcome.verdict.fenced_accepted),
        static_cast<long long>(outcome.verdict.fenced_refused),
        static_cast<long long>(outcome.verdict.stale_accepted),
        static_cast<long long>(outcome.errors), static_cast<long long>(outcome.unanswered),
        static_cast<long long>(outcome.deadline_calls), outcome.worst_overshoot_ms,
        outcome.keys_at_end, static_cast<long long>(outcome.dropped), outcome.children.crashed,
        outcome.children.hung);
    std::fflush(stdout);
    return outcome;
  }

  // What holds under every fault: every contender ended by itself, every
  // deadline call returned in time, no key outlived its lease.
  static void expect_survived(const Outcome& o) {
    EXPECT_EQ(o.children.crashed, 0) << describe(o);
    EXPECT_EQ(o.children.hung, 0) << describe(o);
    EXPECT_EQ(o.dropped, 0) << "the record ran out of room: the oracle saw only part of the run";
    EXPECT_GT(o.deadline_calls, 0) << describe(o);
    EXPECT_LE(o.worst_overshoot_ms, static_cast<double>(o.overshoot_allowed.count()))
        << describe(o);
    EXPECT_FALSE(o.keys_without_expiry) << describe(o);
    EXPECT_TRUE(o.keys_gone) << describe(o);
  }

  // What holds under a fault that keeps the lock's state, besides.
  static void expect_safe(const Outcome& o) {
    expect_survived(o);
    EXPECT_GT(o.verdict.sections, 0) << describe(o);
    EXPECT_EQ(o.verdict.overlaps, 0) << describe(o);
    EXPECT_EQ(o.verdict.lost_updates, 0) << describe(o);
    EXPECT_EQ(o.verdict.torn_reads, 0) << describe(o);
  }

  // `quiet`: the fault breaks no connection, so no call may throw either
  // (a slow or paused server is a late answer, not an error).
  void state_keeping(const std::string& fault, During during, bool quiet = false) {
    const Outcome o = run(fault, workload(), lease(), std::move(during), {}, a_section_ended());
    expect_safe(o);
    if (quiet) {
      EXPECT_EQ(o.errors, 0) << describe(o);
    }
  }

  Rig rig_;
  TlsOptions tls_;  // the contenders' own, to the masters
};

struct KindName {
  template <class Kind>
  static std::string GetName(int) {
    return Kind::name;
  }
};

using Kinds = ::testing::Types<MutexKind, SimpleMutexKind, ReentrantKind, SharedKind, RedlockKind>;
TYPED_TEST_SUITE(FaultTest, Kinds, KindName);

// ---- faults that keep the lock's state -----------------------------------

TYPED_TEST(FaultTest, NoFaultNoOverlapsNoLostUpdates) {
  const Outcome o =
      this->run("none", this->workload(), this->lease(), nothing(), {}, a_section_ended());
  this->expect_safe(o);
  EXPECT_EQ(o.errors, 0) << describe(o);
}

TYPED_TEST(FaultTest, LatencySpikesShorterThanTheLeaseKeepItSafe) {
  this->state_keeping("latency", latency_spikes(), true);
}

TYPED_TEST(FaultTest, StallsShorterThanTheLeaseKeepItSafe) {
  this->state_keeping("stall", stalls(), true);
}

TYPED_TEST(FaultTest, ServerStoppedShorterThanTheLeaseKeepsItSafe) {
  this->state_keeping("server-stop",
                      every(
                          120ms, 150ms,
                          [](Rig& rig) {
                            for (auto& m : rig.masters) m->pause();
                          },
                          [](Rig& rig) {
                            for (auto& m : rig.masters) m->resume();
                          }),
                      true);
}

TYPED_TEST(FaultTest, SubscriberConnectionKilledKeepsItSafe) {
  this->state_keeping("kill-subscriber", killing("pubsub"));
}

TYPED_TEST(FaultTest, PoolAndWatchdogConnectionsKilledKeepItSafe) {
  this->state_keeping("kill-normal", killing("normal"));
}

TYPED_TEST(FaultTest, ClientPauseShorterThanTheLeaseKeepsItSafe) {
  this->state_keeping("client-pause",
                      every(
                          150ms, 150ms,
                          [](Rig& rig) {
                            rig.to_masters({"CLIENT", "PAUSE", "120"});
                          },
                          [](Rig&) {}),
                      true);
}

TYPED_TEST(FaultTest, ScriptFlushKeepsItSafe) {
  this->state_keeping("script-flush",
                      every(
                          1ms, 100ms,
                          [](Rig& rig) {
                            rig.to_masters({"SCRIPT", "FLUSH"});
                          },
                          [](Rig&) {}),
                      true);
}

TYPED_TEST(FaultTest, DebugSleepShorterThanTheLeaseKeepsItSafe) {
  // DEBUG SLEEP blocks each master for 100 ms (the call returns when it
  // ends), then 150 ms of service. The masters sleep one after another, so
  // a Redlock's renewals keep finding one silent: before renewals put a
  // lost key back and waited out undecided rounds, its leases came to stand
  // on two masters and were lost when one of those slept (overlaps in 2 of
  // 3 ten-second runs).
  this->state_keeping("debug-sleep",
                      every(
                          1ms, 150ms,
                          [](Rig& rig) {
                            rig.to_masters({"DEBUG", "SLEEP", "0.1"});
                          },
                          [](Rig&) {}),
                      true);
}

// maxmemory 1 with noeviction for 150 ms in every 400: acquires are
// refused with a clear error (OOM), holders keep their leases (renewals
// touch existing keys), nothing is left behind, and no section overlaps.
TYPED_TEST(FaultTest, OutOfMemoryRefusesAcquiresAndKeepsHeldLeases) {
  const Outcome o =
      this->run("oom", this->workload(), this->lease(),
                every(
                    150ms, 250ms,
                    [](Rig& rig) {
                      rig.to_masters({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
                      rig.to_masters({"CONFIG", "SET", "maxmemory", "1"});
                    },
                    [](Rig& rig) {
                      rig.to_masters({"CONFIG", "SET", "maxmemory", "0"});
                    }),
                {}, a_section_ended());
  this->expect_safe(o);
  if (o.errors > 0) {
    EXPECT_NE(o.first_error.find("OOM"), std::string::npos) << describe(o);
  }
}

// ---- the same over TLS ---------------------------------------------------

// The faults that keep the lock's state and touch the wire or the
// connections, with the masters TLS-only and the contenders speaking TLS
// through the proxies: a record delayed, held or cut off anywhere in it is
// a late reply or a broken connection, never a crash, a hang or a section
// beside another's. The same asserts as in the clear.
template <class Kind>
class TlsFaultTest : public FaultTest<Kind> {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    this->start_rig(&*pki_);
  }

  testing::TempPki pki_;
};
TYPED_TEST_SUITE(TlsFaultTest, Kinds, KindName);

TYPED_TEST(TlsFaultTest, LatencySpikesShorterThanTheLeaseKeepItSafe) {
  this->state_keeping("tls-latency", latency_spikes(), true);
}

TYPED_TEST(TlsFaultTest, StallsShorterThanTheLeaseKeepItSafe) {
  this->state_keeping("tls-stall", stalls(), true);
}

TYPED_TEST(TlsFaultTest, SubscriberConnectionKilledKeepsItSafe) {
  this->state_keeping("tls-kill-subscriber", killing("pubsub"));
}

TYPED_TEST(TlsFaultTest, PoolAndWatchdogConnectionsKilledKeepItSafe) {
  this->state_keeping("tls-kill-normal", killing("normal"));
}

// ---- a holder stopped past its lease -------------------------------------

// Stops contender 0 in its second section (after it read the counter), waits
// until others have written since, then resumes it.
During stop_a_holder(std::int64_t writes_before_resume) {
  return [=](Rig&, Shared& shared, const std::vector<pid_t>& pids,
             std::chrono::steady_clock::time_point end) {
    const bool stopped = testing::eventually(
        [&] {
          int status = 0;
          return ::waitpid(pids[0], &status, WNOHANG | WUNTRACED) == pids[0] && WIFSTOPPED(status);
        },
        10s);
    EXPECT_TRUE(stopped) << "contender 0 never stopped itself";
    EXPECT_TRUE(testing::eventually(
        [&] { return shared.written_since_pause.load() >= writes_before_resume; }, 10s))
        << "nobody wrote while contender 0 was stopped";
    ::kill(pids[0], SIGCONT);
    std::this_thread::sleep_until(end);
  };
}

template <class Kind>
WorkloadOptions stop_a_holder_workload() {
  WorkloadOptions options = FaultTest<Kind>::workload(800ms, 2);
  options.names = 1;
  options.read_percent = 0;
  options.long_hold_every = 0;
  options.pause_in_section = 2;
  return options;
}

// The control: without fencing, the oracle must see the stopped holder's
// section overlap the others' and its write lose theirs.
TYPED_TEST(FaultTest, AHolderStoppedPastItsLeaseOverlapsWithoutFencing) {
  const Outcome o = this->run("holder-stopped", stop_a_holder_workload<TypeParam>(),
                              LockOptions{}.ttl(300ms).auto_renew(true), stop_a_holder(2));
  this->expect_survived(o);
  EXPECT_GT(o.verdict.overlaps, 0) << describe(o);
  EXPECT_GT(o.verdict.lost_updates, 0) << describe(o);
}

template <class Kind>
class FencedFaultTest : public FaultTest<Kind> {};
using FencingKinds = ::testing::Types<MutexKind, SimpleMutexKind, ReentrantKind>;
TYPED_TEST_SUITE(FencedFaultTest, FencingKinds, KindName);

// With fencing the stopped holder's late write is refused, after it saw its
// lease lost; the store accepts no stale write and loses no update.
TYPED_TEST(FencedFaultTest, AHolderStoppedPastItsLeaseIsFencedOff) {
  WorkloadOptions options = stop_a_holder_workload<TypeParam>();
  options.fenced = true;
  const Outcome o =
      this->run("holder-stopped-fenced", options,
                LockOptions{}.ttl(300ms).auto_renew(true).fencing(true), stop_a_holder(1));
  this->expect_survived(o);
  EXPECT_GT(o.verdict.overlaps, 0) << describe(o);  // it did hold past its lease
  EXPECT_EQ(o.verdict.stale_accepted, 0) << describe(o);
  EXPECT_EQ(o.verdict.lost_updates, 0) << describe(o);
  EXPECT_GE(o.verdict.fenced_refused, 1) << describe(o);
  EXPECT_EQ(o.paused_lost_seen, 1) << "the resumed holder did not see lost() before writing";
  bool refused = false;
  for (const testing::Section& s : o.sections) {
    if (s.lost_seen == 1) refused = s.fenced == 2;
  }
  EXPECT_TRUE(refused) << "the stopped holder's late write was not refused";
}

// ---- a server restarted without persistence --------------------------------

// Kill -9 and restart master 0 on its port a third of the way in: the locks'
// state is gone (documented); nobody crashes or hangs, deadlines hold.
TYPED_TEST(FaultTest, AServerRestartedWithoutPersistenceIsSurvived) {
  const Outcome o = this->run(
      "restart", this->workload(), this->lease(),
      [](Rig& rig, Shared&, const std::vector<pid_t>&, std::chrono::steady_clock::time_point end) {
        std::this_thread::sleep_until(end - (end - std::chrono::steady_clock::now()) * 2 / 3);
        rig.masters[0]->restart();
        std::this_thread::sleep_until(end);
      },
      {}, a_section_ended());
  this->expect_survived(o);
  EXPECT_GT(o.verdict.sections, 0) << describe(o);
}

// ---- FairMutex: its queue under the faults that keep the lock's state ----

// A waiter's place and its wake-up (a release tells the front waiter
// alone) ride on the same connections as every other step: delayed,
// stalled or cut, they must never let two holders in.
class FairFaultTest : public FaultTest<FairMutexKind> {};

TEST_F(FairFaultTest, NoFaultNoOverlapsNoLostUpdates) {
  const Outcome o = run("none", workload(), lease(), nothing(), {}, a_section_ended());
  expect_safe(o);
  EXPECT_EQ(o.errors, 0) << describe(o);
}

TEST_F(FairFaultTest, LatencySpikesShorterThanTheLeaseKeepItSafe) {
  state_keeping("latency", latency_spikes(), true);
}

TEST_F(FairFaultTest, StallsShorterThanTheLeaseKeepItSafe) {
  state_keeping("stall", stalls(), true);
}

TEST_F(FairFaultTest, SubscriberConnectionKilledKeepsItSafe) {
  state_keeping("kill-subscriber", killing("pubsub"));
}

// ---- Redlock: a minority of masters faulted, then a majority ---------------

class RedlockFaultTest : public FaultTest<RedlockKind> {
 protected:
  // Faults master 0 (of three) for the whole run.
  void minority(const std::string& fault, std::function<void(Rig&)> apply) {
    expect_safe(run(fault, workload(), lease(),
                    [apply](Rig& rig, Shared&, const std::vector<pid_t>&,
                            std::chrono::steady_clock::time_point end) {
                      apply(rig);
                      std::this_thread::sleep_until(end);
                    }));
  }
};

TEST_F(RedlockFaultTest, AMinorityStoppedKeepsItSafe) {
  minority("minority-stopped", [](Rig& rig) { rig.masters[0]->pause(); });
}

TEST_F(RedlockFaultTest, AMinorityKilledKeepsItSafe) {
  minority("minority-killed", [](Rig& rig) { rig.masters[0]->kill(); });
}

TEST_F(RedlockFaultTest, AMinorityPartitionedKeepsItSafe) {
  minority("minority-partitioned", [](Rig& rig) { rig.proxies[0]->cut(FaultProxy::Cut::drop); });
}

TEST_F(RedlockFaultTest, AMinorityRefusingConnectionsKeepsItSafe) {
  minority("minority-refused", [](Rig& rig) { rig.proxies[0]->cut(FaultProxy::Cut::refuse); });
}

TEST_F(RedlockFaultTest, AMinoritySlowKeepsItSafe) {
  minority("minority-slow",
           [](Rig& rig) { rig.proxies[0]->set_latency(FaultProxy::Direction::both, 60ms); });
}

// Two of three masters stopped: no call may succeed, each returns by its
// deadline, and the live master is left with no key.
TEST_F(RedlockFaultTest, AMajorityGoneFailsEveryCallByItsDeadlineAndLeavesNoKey) {
  // Stopped before the contenders start, so that no call can find them up.
  rig_.masters[0]->pause();
  rig_.masters[1]->pause();
  const Outcome o = run(
      "majority-stopped", workload(), lease(), nothing(),
      [](Rig& rig, Outcome& outcome) { outcome.live_keys = lock_keys(*rig.masters[2]).size(); });
  expect_survived(o);
  EXPECT_EQ(o.verdict.sections, 0) << describe(o);
  EXPECT_EQ(o.live_keys, 0u) << describe(o);
}

// ---- no renewal for a released lease ---------------------------------------

// The server's own record (MONITOR on the master, not through the proxy) of
// a Mutex workload under latency spikes and SCRIPT FLUSH: every renewal
// (renew_batch) is judged against the releases the server ran before it.
// A Mutex token belongs to one acquire, so a renewal carrying a token whose
// release already ran is a renewal of a released lease.
class MutexRenewalFaultTest : public FaultTest<MutexKind> {};

TEST_F(MutexRenewalFaultTest, NoRenewalIsSentForAReleasedLease) {
  testing::Monitor monitor(testing::client_options(*rig_.masters[0]));
  std::atomic<int> round{0};
  const Outcome o = run("renewal-after-release", workload(), lease(),
                        every(
                            200ms, 100ms,
                            [&round](Rig& rig) {
                              for (auto& p : rig.proxies) {
                                p->set_latency(FaultProxy::Direction::both, 30ms);
                              }
                              if (round++ % 2 == 0) rig.to_masters({"SCRIPT", "FLUSH"});
                            },
                            [](Rig& rig) {
                              for (auto& p : rig.proxies) p->heal();
                            }),
                        {}, a_section_ended());
  expect_safe(o);
  const auto script_of = [](const std::vector<std::string>& args) -> const Script* {
    if (args.size() < 3) return nullptr;
    for (const Script* script : {&scripts::release, &scripts::renew_batch}) {
      if ((args[0] == "EVALSHA" || args[0] == "evalsha") && args[1] == script->sha1) return script;
      if ((args[0] == "EVAL" || args[0] == "eval") && args[1] == script->source) return script;
    }
    return nullptr;
  };
  std::set<std::string> released;
  std::int64_t releases = 0;
  std::int64_t renewals = 0;
  std::int64_t after_release = 0;
  std::string first;
  for (const std::string& line : monitor.lines()) {
    const std::vector<std::string> args = testing::monitor_args(line);
    const Script* script = script_of(args);
    if (script == nullptr) continue;
    const std::size_t keys = std::stoul(args[2]);
    const std::size_t argv = 3 + keys;
    if (script == &scripts::release && args.size() > argv) {
      ++releases;
      released.insert(args[argv]);
      continue;
    }
    for (std::size_t i = argv; i < args.size(); i += 2) {
      ++renewals;
      if (released.count(args[i]) != 0) {
        if (after_release++ == 0) first = line;
      }
    }
  }
  std::printf(
      "distlock-fault kind=Mutex fault=renewal-after-release releases=%lld renewals=%lld "
      "renewals_after_release=%lld\n",
      static_cast<long long>(releases), static_cast<long long>(renewals),
      static_cast<long long>(after_release));
  EXPECT_GT(releases, 0);
  EXPECT_GT(renewals, 0) << "no renewal ran: the check saw nothing";
  EXPECT_EQ(after_release, 0) << "first: " << first;
}

// ---- mixed fleets: distlock beside emulated peers ------------------------

// One lock name shared by distlock lock objects and emulated peers of other
// libraries (support/peers.hpp). Each thread of a contender takes one role,
// in turn (as many threads per process as roles, or a multiple: every
// process runs every role), and records it with its sections. With
// `Shared`, every role is a read-write lock and a share of the sections are
// reads; else every section is exclusive whoever holds it. Peers do not
// renew: their lease (5 s) outlasts their longest section. Only distlock's
// calls are held to the deadline bound: a peer polls, and its last poll
// ends when its reply comes, as the library it stands for does.
template <bool Shared, class... Roles>
struct FleetKind {
  static constexpr int roles = static_cast<int>(sizeof...(Roles));
  // A peer is made from (client, name, lease), distlock's from LockOptions.
  template <class One>
  static constexpr bool emulated = std::is_constructible_v<One, Client&, std::string, milliseconds>;
  struct Lock {
    int role = 0;
    std::tuple<std::unique_ptr<Roles>...> members;  // only the role's is made
  };
  static constexpr bool shared = Shared;
  static constexpr std::size_t masters = 1;
  static std::unique_ptr<Lock> make(std::vector<Client>& clients, const std::string& name,
                                    const LockOptions& options) {
    static std::atomic<int> threads{0};
    thread_local const int role = threads.fetch_add(1) % roles;
    auto lock = std::make_unique<Lock>();
    lock->role = role;
    for_role(*lock, [&](auto& member) {
      using One = typename std::decay_t<decltype(member)>::element_type;
      member = make_one<One>(clients[0], name, options);
    });
    return lock;
  }
  static bool acquire(Lock& lock, bool write, milliseconds timeout) {
    bool acquired = false;
    for_role(lock, [&](auto& member) {
      if constexpr (Shared) {
        if (!write) {
          acquired = member->try_lock_shared_for(timeout);
          return;
        }
      }
      acquired = member->try_lock_for(timeout);
    });
    return acquired;
  }
  static void release(Lock& lock, bool write) {
    for_role(lock, [&](auto& member) {
      if constexpr (Shared) {
        if (!write) {
          member->unlock_shared();
          return;
        }
      }
      member->unlock();
    });
  }
  static long long fence(Lock&) { return 0; }
  static bool lost(Lock&) { return false; }
  static int role(const Lock& lock) { return lock.role; }
  static bool bounded(Lock& lock) {
    bool bounded = true;
    for_role(lock, [&](auto& member) {
      using One = typename std::decay_t<decltype(member)>::element_type;
      bounded = !emulated<One>;
    });
    return bounded;
  }

 private:
  // Calls `f` with the role's member (its unique_ptr).
  template <class F>
  static void for_role(Lock& lock, F&& f) {
    for_role(lock, f, std::index_sequence_for<Roles...>{});
  }
  template <class F, std::size_t... I>
  static void for_role(Lock& lock, F& f, std::index_sequence<I...>) {
    ((static_cast<int>(I) == lock.role ? f(std::get<I>(lock.members)) : void()), ...);
  }
  template <class One>
  static std::unique_ptr<One> make_one(Client& client, const std::string& name,
                                       const LockOptions& options) {
    if constexpr (emulated<One>) {
      return std::make_unique<One>(client, name, milliseconds(5000));
    } else {
      return std::make_unique<One>(client, name, options);
    }
  }
};

// A string at the name: Mutex, SimpleMutex and redis-py's Lock.
// redis-py announces no release: distlock's waiters there learn of one
// only by their pause or the deadline, and may not get in at all.
struct StringFleetKind : FleetKind<false, Mutex, SimpleMutex, testing::RedisPyLockPeer> {
  static constexpr const char* name = "Mutex+SimpleMutex+redis-py";
  static constexpr bool every_role_hears_releases = false;
};
// A hash at the name: ReentrantMutex, SharedMutex's writer and Redisson's
// RLock (with its unlock latch). SharedMutex listens on redisson_rwlock:,
// the others announce on redisson_lock__channel: (as in Redisson, an RLock
// and an RReadWriteLock of one name do not wake each other).
struct HashFleetKind : FleetKind<false, ReentrantMutex, SharedMutex, testing::RedissonLockPeer> {
  static constexpr const char* name = "ReentrantMutex+SharedMutex+RLock";
  static constexpr bool every_role_hears_releases = false;
};
// A hash with a mode at the name: SharedMutex and Redisson's RReadWriteLock,
// readers and writers of both (with Redisson's per-read-hold timeout keys
// and its unlock latch).
struct ReadWriteFleetKind : FleetKind<true, SharedMutex, testing::RedissonReadWriteLockPeer> {
  static constexpr const char* name = "SharedMutex+RReadWriteLock";
  static constexpr bool every_role_hears_releases = true;
};

template <class Kind>
class FleetFaultTest : public FaultTest<Kind> {
 protected:
  // One name; every role in every process, twice over when there are two.
  //
  // Under the sanitizers, one process (its threads cost several times more
  // there): with two, the read-write fleet's eight threads once made a
  // distlock call 103 ms late with its subscribers killed (1 of 36 runs),
  // the deadline bound measuring the starved scheduler rather than the
  // lock (once with no fault at all, for the hash fleet, before a step
  // ending past the deadline ended the call). And two seconds' run there
  // (the CI size is halved): the slowest member needs them to show real
  // work.
  WorkloadOptions fleet() {
    WorkloadOptions options =
        FaultTest<Kind>::workload(testing::sanitized_build() ? 4000ms : 1000ms);
    if (testing::sanitized_build()) options.processes = 1;
    options.threads = Kind::roles == 2 ? 4 : Kind::roles;
    options.names = 1;
    return options;
  }
  // The fleet's run under `during`. Where every role hears the others'
  // releases, it goes on until each role has got in to write (and to read,
  // in a read-write fleet), for 30 s at most: a member that polls loses
  // most races to distlock's waiters, whom the release itself wakes, so a
  // fixed length only makes its entry likely. In two seconds under ASan the
  // read-write fleet's peer wrote 1 to 11 times (48 runs), and in one CI run
  // not at all.
  Outcome run_fleet(const std::string& fault, During during) {
    Until until;
    if (Kind::every_role_hears_releases) {
      until.longest = 30s;
      until.shown = [](const Shared& shared) {
        for (int role = 0; role < Kind::roles; ++role) {
          if (shared.ended[role][1].load() == 0) return false;
          if (Kind::shared && shared.ended[role][0].load() == 0) return false;
        }
        return true;
      };
    }
    return this->run(fault, fleet(), this->lease(), std::move(during), {}, std::move(until));
  }
  // What a fleet's run must show besides safety: the run did real work,
  // every role got in (where each hears the others' releases; for a
  // read-write fleet: to read and to write), and the contenders left
  // nothing in Redis (no lock, no timeout key, no latch) once they ended.
  void expect_fleet(const Outcome& o, bool quiet) {
    this->expect_safe(o);
    if (quiet) {
      EXPECT_EQ(o.errors, 0) << describe(o);
    }
    // Real work: the plain build's runs gave 20 to 87 sections, the
    // sanitized ones (one process, one second) 8 to 34.
    EXPECT_GE(o.verdict.sections, testing::sanitized_build() ? 5 : 10) << describe(o);
    for (int role = 0; role < Kind::roles; ++role) {
      std::int64_t reads = 0;
      std::int64_t writes = 0;
      for (const testing::Section& s : o.sections) {
        if (s.role == role) ++(s.exclusive ? writes : reads);
      }
      std::printf("distlock-fault fleet=%s role=%d reads=%lld writes=%lld\n", Kind::name, role,
                  static_cast<long long>(reads), static_cast<long long>(writes));
      if (!Kind::every_role_hears_releases) continue;
      EXPECT_GT(writes, 0) << "role " << role << " never wrote; " << describe(o);
      if (Kind::shared) {
        EXPECT_GT(reads, 0) << "role " << role << " never read; " << describe(o);
      }
    }
    std::string left;
    for (const std::string& key : o.keys_left) left += key + " ";
    EXPECT_TRUE(o.keys_left.empty()) << "left in Redis: " << left;
  }
};
// A fair queue beside the hash: FairMutex and Redisson's RFairLock wait
// in one line (a release tells the front waiter alone, on its own
// channel; the peer polls).
struct FairFleetKind : FleetKind<false, FairMutex, testing::RedissonFairLockPeer> {
  static constexpr const char* name = "FairMutex+RFairLock";
  static constexpr bool every_role_hears_releases = true;
};
using Fleets = ::testing::Types<StringFleetKind, HashFleetKind, ReadWriteFleetKind, FairFleetKind>;
TYPED_TEST_SUITE(FleetFaultTest, Fleets, KindName);

TYPED_TEST(FleetFaultTest, AMixedFleetOnOneNameNeverOverlaps) {
  this->expect_fleet(this->run_fleet("fleet", nothing()), true);
}

TYPED_TEST(FleetFaultTest, AMixedFleetUnderScriptFlushNeverOverlaps) {
  auto flush = [](Rig& rig) { rig.to_masters({"SCRIPT", "FLUSH"}); };
  this->expect_fleet(this->run_fleet("fleet-script-flush", every(1ms, 100ms, flush, [](Rig&) {})),
                     true);
}

// Every member, distlock's and the peers' alike, talks through the proxy.
TYPED_TEST(FleetFaultTest, AMixedFleetUnderLatencySpikesNeverOverlaps) {
  this->expect_fleet(this->run_fleet("fleet-latency", latency_spikes()), true);
}

// distlock's waiters lose their subscription to the release channel (the
// peers poll); a waiter resubscribes and looks again.
TYPED_TEST(FleetFaultTest, AMixedFleetWithItsSubscribersKilledNeverOverlaps) {
  this->expect_fleet(this->run_fleet("fleet-kill-subscriber", killing("pubsub")), false);
}

// ---- a script reloaded after SCRIPT FLUSH, within the caller's deadline ----

// A lock whose acquire is a script meets NOSCRIPT after SCRIPT FLUSH and
// sends the script again by EVAL: two round trips in one step. With 80 ms
// each way on the wire, the EVALSHA's NOSCRIPT comes back 160 ms into a
// 200 ms try_lock_for; the EVAL may have only the 40 ms left, not a reply
// timeout of its own. Whatever the call answers, it answers by the
// deadline, and leaves no key once its undo has landed.
// A server, a FaultProxy in front of it, and a Client through the proxy
// whose commands time out after `command_timeout`.
class ProxiedServerTest : public ::testing::Test {
 protected:
  explicit ProxiedServerTest(milliseconds command_timeout) : command_timeout_(command_timeout) {}

  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    server_ = std::make_unique<RedisServer>();
    proxy_ = std::make_unique<FaultProxy>(server_->host(), server_->port());
    ClientOptions o;
    o.host = proxy_->host();
    o.port = proxy_->port();
    o.command_timeout = command_timeout_;
    client_ = std::make_unique<Client>(o);
  }

  const milliseconds command_timeout_;
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> client_;
};

class ScriptReloadTest : public ProxiedServerTest {
 protected:
  ScriptReloadTest() : ProxiedServerTest(2000ms) {}

  // Warms the connection and the script cache with one acquire and release
  // through `lock`, flushes the scripts, slows the wire, and times
  // acquire(200 ms).
  template <class Acquire, class Release>
  void expect_within_deadline(Acquire acquire, Release release) {
    ASSERT_TRUE(acquire(0ms));
    release();
    server_->command({"SCRIPT", "FLUSH"});
    proxy_->set_latency(FaultProxy::Direction::both, 80ms);
    const auto start = std::chrono::steady_clock::now();
    bool acquired = false;
    std::string error;
    try {
      acquired = acquire(200ms);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - start;
    // The lock is free: taken, or (the EVAL after NOSCRIPT unanswered in
    // time) an unanswered call, never a busy lock's false nor another error.
    EXPECT_TRUE(acquired || error.find("did not answer") != std::string::npos)
        << (error.empty() ? "false: taken for a busy lock" : error);
    EXPECT_LE(took, 200ms + deadline_slack)
        << "returned " << std::chrono::duration_cast<milliseconds>(took - 200ms).count()
        << " ms past its deadline";
    proxy_->heal();
    if (acquired) release();
    EXPECT_TRUE(testing::eventually([&] { return lock_keys_of("script:*").empty(); }, 5s))
        << "a key outlived the call";
  }

  std::vector<std::string> lock_keys_of(const std::string& pattern) {
    const std::string all = server_->command({"KEYS", pattern});
    std::vector<std::string> keys;
    std::size_t at = 0;
    while (at < all.size()) {
      std::size_t end = all.find('\n', at);
      if (end == std::string::npos) end = all.size();
      const std::string key = all.substr(at, end - at);
      if (!key.empty() && key.find("fence") == std::string::npos) keys.push_back(key);
      at = end + 1;
    }
    return keys;
  }
};

TEST_F(ScriptReloadTest, ReentrantMutexReturnsByItsDeadline) {
  ReentrantMutex lock(*client_, "script:r", LockOptions{}.ttl(10s));
  expect_within_deadline([&](milliseconds d) { return lock.try_lock_for(d); },
                         [&] { lock.unlock(); });
}

TEST_F(ScriptReloadTest, SharedMutexWriterReturnsByItsDeadline) {
  SharedMutex lock(*client_, "script:w", LockOptions{}.ttl(10s));
  expect_within_deadline([&](milliseconds d) { return lock.try_lock_for(d); },
                         [&] { lock.unlock(); });
}

TEST_F(ScriptReloadTest, SharedMutexReaderReturnsByItsDeadline) {
  SharedMutex lock(*client_, "script:s", LockOptions{}.ttl(10s));
  expect_within_deadline([&](milliseconds d) { return lock.try_lock_shared_for(d); },
                         [&] { lock.unlock_shared(); });
}

TEST_F(ScriptReloadTest, FencedMutexReturnsByItsDeadline) {
  Mutex lock(*client_, "script:m", LockOptions{}.ttl(10s).fencing(true));
  expect_within_deadline([&](milliseconds d) { return lock.try_lock_for(d); },
                         [&] { lock.unlock(); });
}

// ---- an ambiguous acquire's undo, landing after the owner's next grant ----

// An acquire whose reply never came is undone by a release written behind
// it on its connection; the hash-field locks release by owner id, and the
// owner is the thread. The thread's next attempt goes out on another
// connection, which the network may deliver first: if that one is granted,
// the old undo must not take the new hold. The order is forced with the
// proxy: the first connection's replies and then its undo are held, the
// second connection passes freely.
class LateUndoTest : public ProxiedServerTest {
 protected:
  LateUndoTest() : ProxiedServerTest(5000ms) {}

  // `acquire(timeout)` takes the lock at "late" for the calling thread,
  // `field()` names the hash field it then holds; `holder` the fields
  // another owner holds it by at first.
  template <class Acquire, class Field>
  void expect_kept(Acquire acquire, Field field, const std::vector<std::string>& holder) {
    const std::string key = "late";
    const ClientOptions direct = testing::client_options(*server_);
    client_->command("PING");  // the connection the first attempt will borrow
    std::vector<std::string> hset = {"HSET", key};
    hset.insert(hset.end(), holder.begin(), holder.end());
    server_->command(hset);
    server_->command({"PEXPIRE", key, "60000"});
    server_->command({"CONFIG", "RESETSTAT"});

    // The first attempt reaches Redis and is refused; its reply is held,
    // and once it has run, so is whatever else that connection sends.
    proxy_->hold_open(FaultProxy::Direction::to_client);
    proxy_->sync();
    std::thread holder_of_undo([&] {
      EXPECT_TRUE(testing::server_ran(direct, "evalsha", 1));
      proxy_->hold_open(FaultProxy::Direction::to_server);
      proxy_->sync();
    });
    // Unanswered by the deadline (TimeoutError); the undo is written behind.
    EXPECT_THROW(static_cast<void>(acquire(2000ms)), TimeoutError);
    holder_of_undo.join();

    // The lock is free; the next attempt, on a new connection, gets it.
    server_->command({"DEL", key});
    ASSERT_TRUE(acquire(2000ms));
    const std::string mine = field();

    // Then the first connection's undo lands.
    proxy_->release(FaultProxy::Direction::to_server);
    ASSERT_TRUE(testing::server_ran(direct, "eval", 1)) << "the undo never ran";
    proxy_->heal();

    EXPECT_EQ(server_->command({"HEXISTS", key, mine}), "1")
        << "the late undo took the hold granted after it";
    Client elsewhere(direct);
    ReentrantMutex rival(elsewhere, key);
    EXPECT_FALSE(rival.try_lock()) << "another owner got in beside the holder";
  }
};

// The same for a release whose reply never came: it may land after the
// lease ran out and the owner took the lock again.
TEST_F(LateUndoTest, ALateReleaseLeavesTheNextHoldAlone) {
  const ClientOptions direct = testing::client_options(*server_);
  ClientOptions quick;
  quick.host = proxy_->host();
  quick.port = proxy_->port();
  quick.command_timeout = 300ms;
  Client client(quick);
  ReentrantMutex lock(client, "late", LockOptions{}.ttl(30s));
  ASSERT_TRUE(lock.try_lock_for(2000ms));
  lock.unlock();  // and Redis has the release script, for the late one
  ASSERT_TRUE(lock.try_lock_for(2000ms));

  // The release goes out and is held on the wire; the call gives up.
  proxy_->hold_open(FaultProxy::Direction::both);
  proxy_->sync();
  EXPECT_THROW(lock.release(), TimeoutError);

  // The lease runs out (here: at once); the owner takes the lock again, on
  // a new connection.
  server_->command({"DEL", "late"});
  ASSERT_TRUE(lock.try_lock_for(2000ms));
  const std::string mine = lock.owner_id();

  // Then the old release lands.
  server_->command({"CONFIG", "RESETSTAT"});
  proxy_->release(FaultProxy::Direction::to_server);
  ASSERT_TRUE(testing::server_ran(direct, "evalsha", 1)) << "the release never ran";
  proxy_->heal();

  EXPECT_EQ(server_->command({"HEXISTS", "late", mine}), "1")
      << "the late release took the hold granted after it";
  Client elsewhere(direct);
  ReentrantMutex rival(elsewhere, "late");
  EXPECT_FALSE(rival.try_lock()) << "another owner got in beside the holder";
  lock.unlock();
}

// The same for a release that a thread other than the owner sends: a lock
// object's destructor gives back every thread's holds. The late release
// names the owner thread's id, so that thread's next hold must be by
// another.
template <class Lock, class Field>
void expect_kept_after_release_elsewhere(RedisServer& server, FaultProxy& proxy, Field field) {
  const ClientOptions direct = testing::client_options(server);
  ClientOptions quick;
  quick.host = proxy.host();
  quick.port = proxy.port();
  quick.command_timeout = 300ms;
  Client client(quick);
  auto first = std::make_unique<Lock>(client, "late", LockOptions{}.ttl(30s));
  std::promise<void> taken, go_on, taken_again, done;
  std::future<void> taken_seen = taken.get_future();
  std::future<void> go_on_seen = go_on.get_future();
  std::future<void> taken_again_seen = taken_again.get_future();
  std::future<void> done_seen = done.get_future();
  std::string mine;
  std::thread owner([&] {
    bool ok = first->try_lock_for(2000ms);
    first->unlock();  // and Redis has the release script, for the late one
    ok = ok && first->try_lock_for(2000ms);
    EXPECT_TRUE(ok);
    taken.set_value();
    go_on_seen.wait();
    // The lease ran out; the owner takes the lock again, on a new connection.
    Lock second(client, "late", LockOptions{}.ttl(30s));
    EXPECT_TRUE(second.try_lock_for(2000ms));
    mine = field(second);
    taken_again.set_value();
    done_seen.wait();
    second.unlock();
  });
  taken_seen.wait();

  // This thread destroys the lock object: its release of the owner's hold
  // is held on the wire, and the destructor gives up.
  proxy.hold_open(FaultProxy::Direction::both);
  proxy.sync();
  first.reset();
  server.command({"DEL", "late"});
  go_on.set_value();
  taken_again_seen.wait();

  // Then the old release lands.
  server.command({"CONFIG", "RESETSTAT"});
  proxy.release(FaultProxy::Direction::to_server);
  EXPECT_TRUE(testing::server_ran(direct, "evalsha", 1)) << "the release never ran";
  proxy.heal();

  EXPECT_EQ(server.command({"HEXISTS", "late", mine}), "1")
      << "the late release took the hold granted after it";
  Client elsewhere(direct);
  Lock rival(elsewhere, "late");
  EXPECT_FALSE(rival.try_lock()) << "another owner got in beside the holder";
  done.set_value();
  owner.join();
}

TEST_F(LateUndoTest, ReentrantMutexKeepsTheHoldAfterALateReleaseFromAnotherThread) {
  expect_kept_after_release_elsewhere<ReentrantMutex>(
      *server_, *proxy_, [](const ReentrantMutex& lock) { return lock.owner_id(); });
}

TEST_F(LateUndoTest, SharedMutexWriterKeepsTheHoldAfterALateReleaseFromAnotherThread) {
  expect_kept_after_release_elsewhere<SharedMutex>(
      *server_, *proxy_, [](const SharedMutex& lock) { return lock.owner_id() + ":write"; });
}

TEST_F(LateUndoTest, ReentrantMutexKeepsTheHoldGrantedAfterIt) {
  ReentrantMutex lock(*client_, "late", LockOptions{}.ttl(30s));
  expect_kept([&](milliseconds d) { return lock.try_lock_for(d); }, [&] { return lock.owner_id(); },
              {"other:1", "1"});
  lock.unlock();
}

TEST_F(LateUndoTest, SharedMutexWriterKeepsTheHoldGrantedAfterIt) {
  SharedMutex lock(*client_, "late", LockOptions{}.ttl(30s));
  expect_kept([&](milliseconds d) { return lock.try_lock_for(d); },
              [&] { return lock.owner_id() + ":write"; }, {"mode", "write", "other:1:write", "1"});
  lock.unlock();
}

}  // namespace
}  // namespace distlock
