// distlock_bench's entry point: runs the benchmarks, then prints each lock's
// time as a ratio of the raw round trips it needs, measured in the same run.
//
// Ratios use the median of --benchmark_repetitions when there are several,
// else the single run's time per iteration. A ratio is judged (ok or OVER)
// only against a target that holds on the machine it runs on (Judged).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_support.hpp"

namespace distlock::bench {
namespace {

// What a ratio's target is held against. Most hold on any machine. A
// layout row compares a lock whose Redis layout does more per lease than
// its floor (a hash of holders, a permit set, WATCH and MULTI): it is shown
// for scale, not judged; the row against its own layout's floor is. A
// redlock_servers row holds only with the five masters on a core the bench
// does not run on (DISTLOCK_BENCH_REDLOCK naming servers started with
// taskset -c 1): the masters the bench starts itself share its core, where
// sending to five at once costs what sending in turn does.
enum class Judged { always, layout, redlock_servers };

struct Ratio {
  const char* subject;
  const char* baseline;
  double target;  // the ratio the project holds itself to
  Judged judged = Judged::always;
};

// Every lock benchmark against its physical floor.
const std::vector<Ratio> ratios = {
    {"BM_Mutex_LockUnlock", "BM_Raw_SetNxPx_EvalshaDel", 1.05},
    {"BM_Mutex_LockUnlock", "BM_Raw_SetNxPx_EvalshaDelPublish", 1.05},
    {"BM_Mutex_LockGuard", "BM_Mutex_LockUnlock", 1.05},
    {"BM_Mutex_LockUnlock_Fenced", "BM_Raw_FencedAcquire_EvalshaDel", 1.05},
    {"BM_MultiMutex_LockUnlock_3Names", "BM_Raw_SetNxPx_EvalshaDel", 1.6},
    {"BM_MultiMutex_LockUnlock_3Names", "BM_Mutex_LockUnlock_3InTurn", 0.5},
    {"BM_SimpleMutex_LockUnlock", "BM_Raw_SetNxPx_Del", 1.8},
    {"BM_Mutex_LockUnlock_Replicas1", "BM_Raw_SetNxPx_Wait1_EvalshaDel", 1.1},
    {"BM_Mutex_Handoff", "BM_Raw_Handoff_PubSub", 1.3},
    {"BM_Mutex_Handoff_Idle2ms", "BM_Raw_Handoff_PubSub_Idle2ms", 1.3},
    {"BM_Mutex_Handoff", "BM_Mutex_Handoff_Polling50ms", 0.02},
    {"BM_Watchdog_Renew1000", "BM_Raw_Pexpire1000_Pipelined", 2.5},
    {"BM_Watchdog_Renew1000_Simple", "BM_Raw_Pexpire1000_Pipelined", 3.0, Judged::layout},
    {"BM_Watchdog_Renew1000_Reentrant", "BM_Raw_Pexpire1000_Pipelined", 3.0},
    {"BM_Watchdog_Renew1000_SharedRead", "BM_Raw_Pexpire1000_Pipelined", 3.0, Judged::layout},
    {"BM_Watchdog_Renew1000_SharedRead", "BM_Raw_ReadLayoutRenew1000_Pipelined", 1.5},
    {"BM_Watchdog_Renew10000", "BM_Raw_Pexpire10000_Pipelined", 3.0},
    {"BM_Watchdog_Renew10000_Simple", "BM_Raw_Pexpire10000_Pipelined", 3.0, Judged::layout},
    {"BM_Watchdog_Renew10000_Reentrant", "BM_Raw_Pexpire10000_Pipelined", 3.0},
    {"BM_Watchdog_Renew10000_SharedRead", "BM_Raw_Pexpire10000_Pipelined", 3.0, Judged::layout},
    {"BM_Watchdog_Renew10000_Permits", "BM_Raw_Pexpire10000_Pipelined", 3.0, Judged::layout},
    {"BM_Watchdog_Renew10000_SharedRead", "BM_Raw_ReadLayoutRenew10000_Pipelined", 1.5},
    {"BM_Watchdog_Renew10000_Permits", "BM_Raw_PermitLayoutRenew10000_Pipelined", 1.5},
    {"BM_Watchdog_Renew10000_Simple", "BM_Raw_WatchLayoutRenew10000_Pipelined", 1.5},
    {"BM_ReentrantMutex_LockUnlock", "BM_Raw_SetNxPx_EvalshaDel", 1.35},
    {"BM_ReentrantMutex_Reenter", "BM_ReentrantMutex_LockUnlock", 0.05},
    {"BM_FairMutex_LockUnlock", "BM_Raw_SetNxPx_EvalshaDel", 1.4},
    {"BM_FairMutex_Handoff_Idle2ms", "BM_Raw_Handoff_PubSub_Idle2ms", 1.5},
    {"BM_SharedMutex_LockUnlockShared", "BM_Raw_SetNxPx_EvalshaDel", 1.6},
    {"BM_SharedMutex_LockUnlock", "BM_Raw_SetNxPx_EvalshaDel", 1.6},
    {"BM_Redlock5_LockUnlock", "BM_Raw5_Parallel_SetNxPx_EvalshaDel", 1.3},
    {"BM_Redlock5_LockUnlock", "BM_Raw5_Sequential_SetNxPx_EvalshaDel", 0.6,
     Judged::redlock_servers},
    {"BM_Semaphore_AcquireRelease", "BM_Raw_SetNxPx_EvalshaDel", 1.3},
    {"BM_RateLimiter_TryAcquire", "BM_Raw_Evalsha_Noop", 1.2},
    {"BM_StripedMutex16_Contended8", "BM_Mutex_Contended8", 0.25},
    {"BM_Mutex_Contended/threads:2", "BM_Raw_Contended_PubSub/threads:2", 1.5},
    {"BM_Mutex_Contended/threads:4", "BM_Raw_Contended_PubSub/threads:4", 1.5},
    {"BM_Mutex_Contended/threads:8", "BM_Raw_Contended_PubSub/threads:8", 1.5},
    {"BM_Cluster_Mutex_LockUnlock", "BM_Raw_Cluster_SetNxPx_EvalshaDel", 1.1},
    {"BM_Cluster_Mutex_LockUnlock", "BM_Raw_Cluster_SetNxPx_EvalshaDelSpublish", 1.05},
    {"BM_Mutex_LockUnlock_Tls", "BM_Raw_Tls_SetNxPx_EvalshaDel", 1.1},
    {"BM_Async_Mutex_LockUnlock", "BM_Mutex_LockUnlock", 1.15},
    {"BM_Async_Mutex_LockUnlock", "BM_EventLoop_SameCommands_Timed", 1.15},
};

// The paired benchmarks (paired.hpp): each times a lock's cycle and its
// floor's in turns and reports their ratio itself.
struct Paired {
  const char* benchmark;
  const char* floor;  // what it takes turns with
  double target;      // 0 for a floor's own ratio, which has none
};
const std::vector<Paired> paired = {
    {"BM_Paired_Mutex_LockUnlock", "SET NX PX + EVALSHA compare-and-delete", 1.05},
    {"BM_Paired_Mutex_LockUnlock_SameCommands", "what Mutex sends, raw", 1.05},
    {"BM_Paired_Mutex_LockUnlock_Fenced", "EVALSHA fenced acquire + the same", 1.05},
    {"BM_Paired_Mutex_LockUnlock_Fenced_SameCommands", "what a fenced Mutex sends, raw", 1.05},
    {"BM_Paired_ReentrantMutex_LockUnlock", "SET NX PX + EVALSHA compare-and-delete", 1.35},
    {"BM_Paired_FairMutex_LockUnlock", "SET NX PX + EVALSHA compare-and-delete", 1.4},
    {"BM_Paired_Mutex_Handoff_Idle2ms", "raw pub/sub handoff, 2 ms idle", 1.3},
    {"BM_Paired_ReentrantMutex_Handoff_Idle2ms", "raw pub/sub handoff, 2 ms idle", 1.3},
    {"BM_Paired_FairMutex_Handoff_Idle2ms", "raw pub/sub handoff, 2 ms idle", 1.5},
    {"BM_Paired_Cluster_Mutex_LockUnlock", "SET NX PX + EVALSHA, at the owner", 1.1},
    {"BM_Paired_Cluster_Mutex_LockUnlock_SameCommands", "what Mutex sends, raw", 1.05},
    {"BM_Paired_Async_Mutex_LockUnlock", "try_lock + unlock, blocking", 1.15},
    {"BM_Paired_Async_ReentrantMutex_LockUnlock", "try_lock + unlock, blocking", 1.15},
    {"BM_Paired_Async_Mutex_LockUnlock_OverTheEventLoop", "what Mutex sends, event loop, timed",
     1.15},
    {"BM_Paired_EventLoop_SameCommands", "what Mutex sends, raw, blocking", 0},
    {"BM_Paired_EventLoop_SameCommands_Timed", "what Mutex sends, raw, blocking", 0},
};

// Prints as the console reporter does, and remembers each benchmark's time.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, so that logs and pipes stay plain text.
  RatioReporter() : ConsoleReporter(::isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      // A benchmark run at several thread counts is told apart by its count.
      std::string name = run.run_name.function_name;
      if (!run.run_name.threads.empty()) name += "/" + run.run_name.threads;
      const double ns = run.GetAdjustedRealTime() * unit_in_ns(run.time_unit);
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") medians_[name] = ns;
      } else {
        singles_[name].push_back(ns);
      }
      // A paired benchmark (paired.hpp) brings its own ratio: the median of
      // its repetitions' ratios, or its one run's.
      if (const auto ratio = run.counters.find("ratio"); ratio != run.counters.end()) {
        if (run.run_type != Run::RT_Aggregate || run.aggregate_name == "median") {
          paired_[name] = ratio->second.value;  // a median comes after its runs
        }
      }
    }
  }

  void print_ratios() const {
    const bool own_masters = std::getenv("DISTLOCK_BENCH_REDLOCK") != nullptr;
    std::printf("\n%-34s %-38s %10s %8s\n", "benchmark", "baseline", "ratio", "target");
    for (const Ratio& r : ratios) {
      const double subject = time_of(r.subject);
      const double baseline = time_of(r.baseline);
      if (subject <= 0 || baseline <= 0) continue;
      const double ratio = subject / baseline;
      if (r.judged == Judged::layout) {
        std::printf("%-34s %-38s %10.3f %8s %s\n", r.subject, r.baseline, ratio, "-",
                    "(its layout does more per lease: judged on its own floor)");
        continue;
      }
      const char* verdict = ratio <= r.target ? "ok" : "OVER";
      if (r.judged == Judged::redlock_servers && !own_masters) {
        verdict = "(not judged: the masters share the bench's core; see docs/performance.md)";
      }
      std::printf("%-34s %-38s %10.3f %8.2f %s\n", r.subject, r.baseline, ratio, r.target, verdict);
    }
    // Not a ratio with a target: what a new connection's handshake costs.
    const double tls = time_of("BM_Connect_Tls");
    const double plain = time_of("BM_Connect_Plain");
    if (tls > 0 && plain > 0) {
      std::printf(
          "\na new connection and its first reply: %.0f us plain, %.0f us over TLS "
          "(the handshake: %.0f us)\n",
          plain / 1e3, tls / 1e3, (tls - plain) / 1e3);
    }
    if (paired_.empty()) return;
    std::printf("\n%-48s %-38s %10s %8s\n", "paired, in turns", "floor", "ratio", "target");
    for (const Paired& p : paired) {
      const auto found = paired_.find(p.benchmark);
      if (found == paired_.end()) continue;
      const double ratio = found->second;
      if (p.target <= 0) {
        std::printf("%-48s %-38s %10.3f %8s\n", p.benchmark, p.floor, ratio, "floor");
        continue;
      }
      std::printf("%-48s %-38s %10.3f %8.2f %s\n", p.benchmark, p.floor, ratio, p.target,
                  ratio <= p.target ? "ok" : "OVER");
    }
  }

 private:
  static double unit_in_ns(benchmark::TimeUnit unit) {
    switch (unit) {
      case benchmark::kNanosecond: return 1;
      case benchmark::kMicrosecond: return 1e3;
      case benchmark::kMillisecond: return 1e6;
      case benchmark::kSecond: return 1e9;
    }
    return 1;
  }

  double time_of(const std::string& name) const {
    if (const auto m = medians_.find(name); m != medians_.end()) return m->second;
    const auto s = singles_.find(name);
    return s == singles_.end() || s->second.size() != 1 ? 0 : s->second.front();
  }

  std::map<std::string, double> medians_;
  std::map<std::string, double> paired_;
  std::map<std::string, std::vector<double>> singles_;
};

}  // namespace
}  // namespace distlock::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  distlock::bench::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
