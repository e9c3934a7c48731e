// The workload of the fault tests: forked contenders on a few lock names,
// each critical section a read-modify-write of a counter kept outside the
// lock, recorded for the oracle (support/oracle.hpp).
//
// Defines distlock::testing::WorkloadOptions, Shared (the memory the
// contenders and the test share, mapped before fork), run_workload() and
// the fenced store's script. The test forks `processes` children first, so
// that no thread of the test exists at fork; each child makes its own
// Clients and lock objects (a Client must not cross a fork) and runs
// `threads` threads until the test says stop. Meanwhile the test (the parent)
// starts its proxies, says go, and applies its faults. A section is:
//   acquire with try_lock_for (a deadline call: its overshoot is recorded),
//   stamp, read the counter, wait `hold`, write it plus one, stamp, release.
// For a read-write lock a share of sections are reads of a pair a writer
// writes in two steps (a read that sees two values is torn). With `fenced`
// the counter lives in a separate redis-server (the store) and the write is
// a script that refuses a fence lower than the highest it has seen. One
// contender can be told to stop itself (SIGSTOP) inside a section, so a test
// can hold it past its lease.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "support/oracle.hpp"
#include "support/sanitized.hpp"

namespace distlock::testing {

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process here.
inline std::int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

/// The fenced store's write: KEYS[1] the value, KEYS[2] the highest fence
/// seen; ARGV[1] the writer's fence, ARGV[2] the new value. Refuses (0) a
/// fence lower than the highest seen, else stores both (1).
inline constexpr std::string_view fenced_set_script = R"(
local highest = tonumber(redis.call('GET', KEYS[2]) or '-1')
local fence = tonumber(ARGV[1])
if fence < highest then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
)";

struct WorkloadOptions {
  LockOptions lock;  // every lock object's options
  int processes = 3;
  int threads = 2;
  int names = 2;
  std::chrono::milliseconds duration{1000};
  std::chrono::milliseconds try_for{200};  // each acquire's timeout
  std::chrono::microseconds hold{300};     // between the read and the write
  int long_hold_every = 0;                 // every Nth section holds long_hold
  std::chrono::milliseconds long_hold{0};  // (to span watchdog renewals)
  int read_percent = 0;                    // read-write locks: share of reads
  bool fenced = false;                     // writes go to the fenced store
  std::uint64_t seed = 1;
  std::size_t capacity = 1 << 16;  // sections recorded at most
  // Process 0, thread 0 stops itself (SIGSTOP) in its section number
  // `pause_in_section` (from 1; 0: never), after reading the counter.
  int pause_in_section = 0;
};

/// The memory the test and its contenders share, mapped before fork.
struct Shared {
  static constexpr int max_names = 8;
  static constexpr int max_roles = 4;

  std::atomic<int> go{0};
  std::atomic<int> stop{0};
  std::atomic<std::int64_t> counter[max_names]{};
  std::atomic<std::int64_t> pair_a[max_names]{};
  std::atomic<std::int64_t> pair_b[max_names]{};
  std::atomic<std::int64_t> deadline_calls{0};
  std::atomic<std::int64_t> worst_overshoot_ns{0};
  // Where the worst overshoot was (for a failure message): the call's
  // number in its thread, and when it began, in ns since go.
  std::atomic<std::int64_t> worst_call{0};
  std::atomic<std::int64_t> worst_call_began_ns{0};
  std::atomic<std::int64_t> go_ns{0};
  std::atomic<std::int64_t> errors{0};
  // Acquires that ended unanswered (TimeoutError: Redis silent until the
  // deadline or a command timeout): an outage's answer, counted apart.
  std::atomic<std::int64_t> unanswered{0};
  std::atomic<int> first_error_taken{0};
  char first_error[256]{};
  // The paused contender: when it stopped (0: not yet), its fence, and how
  // many sections others completed with a write the store accepted since.
  std::atomic<std::int64_t> paused_at_ns{0};
  std::atomic<std::int64_t> paused_fence{0};
  std::atomic<std::int64_t> written_since_pause{0};
  std::atomic<int> paused_lost_seen{0};
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> dropped{0};
  // Sections ended, by role and kind ([role][0] reads, [role][1] writes):
  // what the test watches while a run goes on until every role has shown.
  std::atomic<std::int64_t> ended[max_roles][2]{};
  // The records, in the same mapping after this header: `capacity` of
  // them, constructed one by one as they are written (the pages of a
  // long soak's room are touched only when used).
  std::size_t capacity = 0;
  Section* sections = nullptr;

  void error(const std::string& what) {
    errors.fetch_add(1);
    if (first_error_taken.exchange(1) == 0) {
      std::snprintf(first_error, sizeof(first_error), "%s", what.c_str());
    }
  }
  void record(const Section& section) {
    if (section.role >= 0 && section.role < max_roles) {
      ended[section.role][section.exclusive != 0 ? 1 : 0].fetch_add(1);
    }
    const std::uint64_t at = next.fetch_add(1);
    if (at < capacity) {
      new (&sections[at]) Section(section);
    } else {
      dropped.fetch_add(1);
    }
  }
  std::vector<Section> recorded() const {
    const std::uint64_t n = std::min<std::uint64_t>(next.load(), capacity);
    return std::vector<Section>(sections, sections + n);
  }
};

/// Shared memory for one workload with room for `capacity` sections,
/// unmapped on destruction.
class SharedMapping {
 public:
  explicit SharedMapping(std::size_t capacity) {
    const std::size_t header =
        (sizeof(Shared) + alignof(Section) - 1) / alignof(Section) * alignof(Section);
    size_ = header + capacity * sizeof(Section);
    void* memory =
        ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap of the workload's memory failed");
    shared_ = new (memory) Shared();
    shared_->capacity = capacity;
    shared_->sections = reinterpret_cast<Section*>(static_cast<char*>(memory) + header);
  }
  ~SharedMapping() {
    shared_->~Shared();
    ::munmap(shared_, size_);
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  Shared& operator*() const { return *shared_; }
  Shared* operator->() const { return shared_; }

 private:
  Shared* shared_;
  std::size_t size_ = 0;
};

/// The names the workload locks: "fault:<i>".
inline std::string lock_name(int i) { return "fault:" + std::to_string(i); }

/// What a contender needs of a lock type (see the kinds in fault_test.cpp):
///   using Lock;  static constexpr bool shared (has read holds);
///   make(clients, name, LockOptions) -> std::unique_ptr<Lock>;
///   acquire(lock, write, timeout) -> bool; release(lock, write);
///   fence(lock) (fenced runs only); lost(lock); role(lock) -> int (which
///   member of a mixed fleet the lock object is; 0 for a single lock type);
///   bounded(lock) (its acquire keeps the deadline bound: false for a peer).
/// `connect` makes the child's Clients (one per master) after fork; `store`
/// the options of the fenced store (used when fenced).
template <class Kind>
void contend(Shared& shared, const WorkloadOptions& options, int process,
             const std::function<std::vector<Client>()>& connect,
             const std::optional<ClientOptions>& store_options) {
  std::vector<Client> clients = connect();
  std::optional<Client> store;
  if (store_options) store.emplace(*store_options);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (shared.go.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto body = [&](int thread) {
    std::mt19937_64 random(options.seed * 1000003u + static_cast<std::uint64_t>(process) * 131u +
                           static_cast<std::uint64_t>(thread));
    std::vector<std::unique_ptr<typename Kind::Lock>> locks;
    for (int n = 0; n < options.names; ++n)
      locks.push_back(Kind::make(clients, lock_name(n), options.lock));
    int count = 0;
    std::int64_t calls = 0;
    while (shared.stop.load() == 0) {
      const int n = static_cast<int>(random() % static_cast<std::uint64_t>(options.names));
      const bool write = !Kind::shared || static_cast<int>(random() % 100) >= options.read_percent;
      auto& lock = *locks[static_cast<std::size_t>(n)];
      bool acquired = false;
      const std::int64_t called = monotonic_ns();
      try {
        acquired = Kind::acquire(lock, write, options.try_for);
      } catch (const distlock::TimeoutError& e) {
        if (e.code() == distlock::Errc::timed_out) {
          shared.unanswered.fetch_add(1);
        } else {
          shared.error(std::string("acquire: ") + e.what());
        }
      } catch (const std::exception& e) {
        shared.error(std::string("acquire: ") + e.what());
      }
      const std::int64_t returned = monotonic_ns();
      // The process the test stops is frozen by the test, calls and all:
      // its calls' overshoot measures the pause, not the lock. An emulated
      // peer's call is not distlock's to bound.
      const bool frozen = options.pause_in_section != 0 && process == 0;
      const std::int64_t over =
          returned - called - std::chrono::nanoseconds(options.try_for).count();
      if (!frozen && Kind::bounded(lock)) {
        shared.deadline_calls.fetch_add(1);
        std::int64_t worst = shared.worst_overshoot_ns.load();
        ++calls;
        while (over > worst && !shared.worst_overshoot_ns.compare_exchange_weak(worst, over)) {
        }
        if (over > worst) {
          shared.worst_call.store(calls);
          shared.worst_call_began_ns.store(called - shared.go_ns.load());
        }
      }
      if (!acquired) continue;
      ++count;
      Section section;
      section.process = process;
      section.thread = thread;
      section.name = n;
      section.exclusive = write ? 1 : 0;
      section.role = Kind::role(lock);
      section.start_ns = monotonic_ns();
      const bool pause_here = options.pause_in_section != 0 && process == 0 && thread == 0 &&
                              count == options.pause_in_section;
      auto hold = options.hold;
      if (options.long_hold_every > 0 && count % options.long_hold_every == 0) {
        hold = options.long_hold;
      }
      try {
        if (!write) {
          const std::int64_t a = shared.pair_a[n].load();
          std::this_thread::sleep_for(hold);
          section.torn = shared.pair_b[n].load() != a ? 1 : 0;
        } else if (options.fenced) {
          section.fence = Kind::fence(lock);
          const std::string value_key = "value:" + std::to_string(n);
          const Reply got = store->command("GET", value_key);
          const long long read = got.is_nil() ? 0 : std::stoll(std::string(got.str()));
          if (pause_here) {
            shared.paused_fence.store(section.fence);
            shared.paused_at_ns.store(monotonic_ns());
            ::raise(SIGSTOP);
            // Resumed: the watchdog's next round finds the lease gone.
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (!Kind::lost(lock) && std::chrono::steady_clock::now() < until) {
              std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
            section.lost_seen = Kind::lost(lock) ? 1 : 0;
            shared.paused_lost_seen.store(section.lost_seen);
          } else {
            std::this_thread::sleep_for(hold);
          }
          section.write_sent_ns = monotonic_ns();
          const Reply put = store->command("EVAL", fenced_set_script, "2", value_key,
                                           "fence:" + std::to_string(n),
                                           std::to_string(section.fence), std::to_string(read + 1));
          section.write_acked_ns = monotonic_ns();
          section.fenced = put.integer() == 1 ? 1 : 2;
          if (section.fenced == 1 && shared.paused_at_ns.load() != 0 && !pause_here &&
              section.fence > shared.paused_fence.load()) {
            shared.written_since_pause.fetch_add(1);
          }
        } else {
          const std::int64_t value = shared.counter[n].load();
          shared.pair_a[n].store(value + 1);
          if (pause_here) {
            shared.paused_at_ns.store(monotonic_ns());
            ::raise(SIGSTOP);
          } else {
            std::this_thread::sleep_for(hold);
          }
          shared.pair_b[n].store(value + 1);
          shared.counter[n].store(value + 1);
          section.wrote = 1;
          const std::int64_t paused = shared.paused_at_ns.load();
          if (paused != 0 && !pause_here && section.start_ns > paused) {
            shared.written_since_pause.fetch_add(1);
          }
        }
      } catch (const std::exception& e) {
        shared.error(std::string("section: ") + e.what());
      }
      section.end_ns = monotonic_ns();
      Kind::release(lock, write);
      shared.record(section);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) threads.emplace_back(body, t);
  for (auto& thread : threads) thread.join();
}

/// How the children ended.
struct Children {
  int crashed = 0;  // killed by a signal or exited non-zero
  int hung = 0;     // still running at the bound, then killed
};

/// Forks the contenders (call before this process starts any thread); each
/// runs contend<Kind> and exits. Returns their pids.
template <class Kind>
std::vector<pid_t> fork_contenders(Shared& shared, const WorkloadOptions& options,
                                   const std::function<std::vector<Client>()>& connect,
                                   const std::optional<ClientOptions>& store) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int p = 0; p < options.processes; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int status = 0;
      try {
        contend<Kind>(shared, options, p, connect, store);
      } catch (const std::exception& e) {
        shared.error(std::string("contender: ") + e.what());
        status = 1;
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    if (pid < 0) throw std::runtime_error("fork failed");
    pids.push_back(pid);
  }
  return pids;
}

/// Waits for every child until `limit`, then kills what is left.
inline Children reap(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  Children result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<pid_t> left = pids;
  while (!left.empty()) {
    for (auto it = left.begin(); it != left.end();) {
      int status = 0;
      const pid_t got = ::waitpid(*it, &status, WNOHANG);
      if (got == *it) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++result.crashed;
        it = left.erase(it);
      } else {
        ++it;
      }
    }
    if (left.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (const pid_t pid : left) {
        ::kill(pid, SIGKILL);
        ::kill(pid, SIGCONT);
        int status = 0;
        ::waitpid(pid, &status, 0);
        ++result.hung;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

/// The run's size: CI size unless DISTLOCK_SOAK_SECONDS=N asks for a soak
/// (N seconds per run, a random seed). Sanitized builds run smaller.
struct RunSize {
  std::chrono::milliseconds duration;
  std::uint64_t seed;
  bool soak;
  std::size_t capacity;  // sections the run has room to record
};

inline RunSize run_size(std::chrono::milliseconds ci_duration, std::uint64_t ci_seed) {
  if (const char* soak = std::getenv("DISTLOCK_SOAK_SECONDS"); soak != nullptr && *soak != '\0') {
    std::uint64_t seed = std::random_device{}();
    if (const char* fixed = std::getenv("DISTLOCK_SOAK_SEED"); fixed != nullptr && *fixed != '\0') {
      seed = std::strtoull(fixed, nullptr, 10);
    }
    return {std::chrono::seconds(std::max(1L, std::strtol(soak, nullptr, 10))), seed, true,
            std::size_t{1} << 22};
  }
  return {sanitized_build() ? ci_duration / 2 : ci_duration, ci_seed, false, std::size_t{1} << 16};
}

}  // namespace distlock::testing
