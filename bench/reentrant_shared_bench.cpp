// ReentrantMutex, FairMutex and SharedMutex on a free lock (one acquire
// script and one release script each, to be read against
// BM_Raw_SetNxPx_EvalshaDel), and the re-entry that must cost no round trip
// at all.
#include <benchmark/benchmark.h>

#include "bench_support.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"

namespace distlock::bench {
namespace {

void BM_ReentrantMutex_LockUnlock(benchmark::State& state) {
  Client client(server_options());
  ReentrantMutex lock(client, "bench:reentrant");
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_ReentrantMutex_LockUnlock)->UseRealTime();

// lock() and unlock() by the thread that already holds the lock.
void BM_ReentrantMutex_Reenter(benchmark::State& state) {
  Client client(server_options());
  ReentrantMutex lock(client, "bench:reentrant");
  lock.lock();
  for (auto _ : state) {
    lock.lock();
    lock.unlock();
  }
  lock.unlock();
}
BENCHMARK(BM_ReentrantMutex_Reenter)->UseRealTime();

// The fair scripts also read the server's clock and the (empty) queue.
void BM_FairMutex_LockUnlock(benchmark::State& state) {
  Client client(server_options());
  FairMutex lock(client, "bench:fair");
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_FairMutex_LockUnlock)->UseRealTime();

void BM_SharedMutex_LockUnlockShared(benchmark::State& state) {
  Client client(server_options());
  SharedMutex lock(client, "bench:rw");
  for (auto _ : state) {
    if (!lock.try_lock_shared()) {
      state.SkipWithError("lock was write-held");
      break;
    }
    lock.unlock_shared();
  }
}
BENCHMARK(BM_SharedMutex_LockUnlockShared)->UseRealTime();

void BM_SharedMutex_LockUnlock(benchmark::State& state) {
  Client client(server_options());
  SharedMutex lock(client, "bench:rw");
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_SharedMutex_LockUnlock)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
