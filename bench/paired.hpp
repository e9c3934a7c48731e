// Paired measurement: a lock's cycle and its raw floor's cycle taken in
// turns within one benchmark, so that both sides of every pair see the
// same machine at the same moment.
//
// The separate benchmarks (BM_Mutex_LockUnlock, then, seconds later,
// BM_Raw_SetNxPx_EvalshaDel) are what the ratio table divides; on a shared
// guest the floor itself moves between runs by as much as the few per cent
// a lock adds to it, so that ratio says as much about the moment as about
// the lock. Taken in turns, drift falls on both sides alike: the counters
// give each side's time per cycle and their ratio, which distlock_bench
// prints in a table of its own.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>

#include "bench_support.hpp"

namespace distlock::bench {

/// The counters of a paired run: each side's time per cycle and their
/// ratio.
inline void report_pair(benchmark::State& state, std::chrono::duration<double> lock_total,
                        std::chrono::duration<double> floor_total) {
  if (floor_total.count() <= 0) return;
  state.counters["lock_us"] =
      benchmark::Counter(lock_total.count() * 1e6, benchmark::Counter::kAvgIterations);
  state.counters["floor_us"] =
      benchmark::Counter(floor_total.count() * 1e6, benchmark::Counter::kAvgIterations);
  state.counters["ratio"] = benchmark::Counter(lock_total / floor_total);
}

/// Runs `lock_cycle` and `floor_cycle` in turns, the one that goes first
/// alternating, and times each. The benchmark's time is the lock's
/// (register it with UseManualTime()); its counters are lock_us and
/// floor_us per cycle and ratio, the run's lock time over its floor time.
/// A cycle that fails returns false, having recorded why on `state`.
template <class LockCycle, class FloorCycle>
void run_paired(benchmark::State& state, LockCycle lock_cycle, FloorCycle floor_cycle) {
  using Clock = std::chrono::steady_clock;
  using Seconds = std::chrono::duration<double>;
  Seconds lock_total{0};
  Seconds floor_total{0};
  bool lock_first = true;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    if (!(lock_first ? lock_cycle() : floor_cycle())) break;
    const Clock::time_point middle = Clock::now();
    if (!(lock_first ? floor_cycle() : lock_cycle())) break;
    const Clock::time_point end = Clock::now();
    const Seconds lock = lock_first ? middle - start : end - middle;
    const Seconds floor = lock_first ? end - middle : middle - start;
    lock_total += lock;
    floor_total += floor;
    state.SetIterationTime(lock.count());
    lock_first = !lock_first;
  }
  report_pair(state, lock_total, floor_total);
}

/// The same for cycles that time themselves (a handoff's start is not its
/// call's): each returns its duration, or nothing if it failed, having
/// recorded why on `state`.
template <class LockCycle, class FloorCycle>
void run_paired_timed(benchmark::State& state, LockCycle lock_cycle, FloorCycle floor_cycle) {
  using Seconds = std::chrono::duration<double>;
  Seconds lock_total{0};
  Seconds floor_total{0};
  bool lock_first = true;
  for (auto _ : state) {
    const auto first = lock_first ? lock_cycle() : floor_cycle();
    if (!first) break;
    const auto second = lock_first ? floor_cycle() : lock_cycle();
    if (!second) break;
    const Seconds lock = lock_first ? *first : *second;
    lock_total += lock;
    floor_total += lock_first ? *second : *first;
    state.SetIterationTime(lock.count());
    lock_first = !lock_first;
  }
  report_pair(state, lock_total, floor_total);
}

/// One try_lock() + unlock() of `lock`, as a cycle for run_paired(); false,
/// with the error on `state`, if the lock was not free.
template <class Lock>
auto lock_unlock_cycle(benchmark::State& state, Lock& lock) {
  return [&state, &lock] {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      return false;
    }
    lock.unlock();
    return true;
  };
}

/// `acquire` (answered `acquired_type`) then `release` (an integer), raw on
/// `redis`, as a cycle for run_paired().
inline auto raw_cycle(benchmark::State& state, redisContext* redis, const RawCommand& acquire,
                      int acquired_type, const RawCommand& release) {
  return [&state, redis, &acquire, acquired_type, &release] {
    return acquire.run(redis, acquired_type, state) &&
           release.run(redis, REDIS_REPLY_INTEGER, state);
  };
}

}  // namespace distlock::bench
