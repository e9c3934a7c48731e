// Per-cycle counters for distlock_bench: what one iteration of a benchmark
// costs the client besides time.
//
//   allocs/cycle    malloc/calloc/realloc calls, all threads (hiredis's own
//                   reply objects and buffers count too, as in the raw
//                   baselines); new/cycle is the part asked for by C++ code
//   mutexes/cycle   pthread_mutex_lock calls through the dynamic linker,
//                   all threads (see alloc_counter.cpp)
//   reads/cycle,    read- and write-class system calls of the whole process
//   writes/cycle    as the kernel counts them (syscr/syscw of /proc/self/io;
//                   hiredis reads its socket with read(2), and distlock's
//                   Connection writes with write(2), as raw hiredis does)
//
// Other system calls (poll, futex, getrandom) are not in these counters;
// `strace -c -f` over a run with a fixed iteration count shows them.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>

namespace distlock::bench {

struct ProcessCounts {
  std::uint64_t mallocs = 0;
  std::uint64_t news = 0;
  std::uint64_t mutex_locks = 0;
};
/// Counts since the process started (alloc_counter.cpp).
ProcessCounts process_counts() noexcept;

/// Read- and write-class system calls so far, from /proc/self/io; zero
/// when it cannot be read.
inline void io_syscalls(std::uint64_t& reads, std::uint64_t& writes) noexcept {
  reads = writes = 0;
  std::FILE* io = std::fopen("/proc/self/io", "r");
  if (io == nullptr) return;
  char line[128];
  while (std::fgets(line, sizeof line, io) != nullptr) {
    unsigned long long value = 0;
    if (std::sscanf(line, "syscr: %llu", &value) == 1) reads = value;
    if (std::sscanf(line, "syscw: %llu", &value) == 1) writes = value;
  }
  std::fclose(io);
}

/// Snapshot at construction; report() sets the per-cycle counters of the
/// benchmark from the difference. Make it just before the timed loop and
/// report right after it.
class CycleCounters {
 public:
  CycleCounters() noexcept {
    io_syscalls(reads_, writes_);
    start_ = process_counts();
  }

  void report(benchmark::State& state) const {
    // Counts first, the file after: neither snapshot's own allocations fall
    // between them. Its one or two reads do, negligible over thousands of
    // iterations.
    const ProcessCounts end = process_counts();
    std::uint64_t reads = 0;
    std::uint64_t writes = 0;
    io_syscalls(reads, writes);
    const auto per_cycle = [](std::uint64_t count) {
      return benchmark::Counter(static_cast<double>(count), benchmark::Counter::kAvgIterations);
    };
    state.counters["allocs"] = per_cycle(end.mallocs - start_.mallocs);
    state.counters["new"] = per_cycle(end.news - start_.news);
    state.counters["mutexes"] = per_cycle(end.mutex_locks - start_.mutex_locks);
    state.counters["reads"] = per_cycle(reads - reads_);
    state.counters["writes"] = per_cycle(writes - writes_);
  }

 private:
  ProcessCounts start_;
  std::uint64_t reads_ = 0;
  std::uint64_t writes_ = 0;
};

}  // namespace distlock::bench
