// Mutex and SimpleMutex on a free lock: one acquire and one release each,
// to be read against BM_Raw_SetNxPx_EvalshaDel and BM_Raw_SetNxPx_Del. And
// MultiMutex over three names, against the same floor (one script each
// way) and against three Mutexes taken one after another.
#include <benchmark/benchmark.h>

#include <chrono>
#include <mutex>

#include "bench_support.hpp"
#include "counters.hpp"
#include "distlock/multi_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/simple_mutex.hpp"

namespace distlock::bench {
namespace {

// try_lock() and unlock() of a free `lock`, again and again.
template <class Lock>
void cycle(benchmark::State& state, Lock& lock) {
  const CycleCounters counters;
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
  counters.report(state);
}

template <class Lock>
void lock_unlock(benchmark::State& state, const LockOptions& options,
                 const ClientOptions& where = server_options()) {
  Client client(where);
  Lock lock(client, "bench:lock", options);
  cycle(state, lock);
}

void BM_Mutex_LockUnlock(benchmark::State& state) { lock_unlock<Mutex>(state, LockOptions{}); }
BENCHMARK(BM_Mutex_LockUnlock)->UseRealTime();

// Over TLS, against BM_Raw_Tls_SetNxPx_EvalshaDel (tls_bench.cpp).
void BM_Mutex_LockUnlock_Tls(benchmark::State& state) {
  lock_unlock<Mutex>(state, LockOptions{}, tls_server_options());
}
BENCHMARK(BM_Mutex_LockUnlock_Tls)->UseRealTime();

void BM_MultiMutex_LockUnlock_3Names(benchmark::State& state) {
  Client client(server_options());
  MultiMutex lock(client, {"bench:a", "bench:b", "bench:c"});
  cycle(state, lock);
}
BENCHMARK(BM_MultiMutex_LockUnlock_3Names)->UseRealTime();

void BM_Mutex_LockUnlock_3InTurn(benchmark::State& state) {
  Client client(server_options());
  Mutex a(client, "bench:a");
  Mutex b(client, "bench:b");
  Mutex c(client, "bench:c");
  for (auto _ : state) {
    if (!a.try_lock() || !b.try_lock() || !c.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    c.unlock();
    b.unlock();
    a.unlock();
  }
}
BENCHMARK(BM_Mutex_LockUnlock_3InTurn)->UseRealTime();

void BM_Mutex_LockUnlock_Fenced(benchmark::State& state) {
  lock_unlock<Mutex>(state, LockOptions{}.fencing(true));
}
BENCHMARK(BM_Mutex_LockUnlock_Fenced)->UseRealTime();

void BM_Mutex_LockUnlock_Replicas1(benchmark::State& state) {
  Client client(replicated_master_options());
  Mutex lock(client, "bench:lock",
             LockOptions{}.ttl(std::chrono::seconds(30)).replicas(1, std::chrono::seconds(1)));
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_Mutex_LockUnlock_Replicas1)->UseRealTime();

void BM_SimpleMutex_LockUnlock(benchmark::State& state) {
  lock_unlock<SimpleMutex>(state, LockOptions{});
}
BENCHMARK(BM_SimpleMutex_LockUnlock)->UseRealTime();

void BM_Mutex_LockGuard(benchmark::State& state) {
  Client client(server_options());
  Mutex lock(client, "bench:lock");
  for (auto _ : state) {
    std::lock_guard guard(lock);
  }
}
BENCHMARK(BM_Mutex_LockGuard)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
