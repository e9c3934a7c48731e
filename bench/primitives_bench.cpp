// Semaphore, RateLimiter and StripedMutex: a permit taken and given back
// against BM_Raw_SetNxPx_EvalshaDel, one rate-limiter call against a raw
// EVALSHA of a script that does nothing (BM_Raw_Evalsha_Noop), and 8
// threads each locking and unlocking through their own object, on one
// Mutex key (BM_Mutex_Contended8) or any of 16 stripes
// (BM_StripedMutex16_Contended8).
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "distlock/mutex.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/striped_mutex.hpp"

namespace distlock::bench {
namespace {

void BM_Raw_Evalsha_Noop(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const std::string sha = load_script("return 1");
  const RawCommand noop{"EVALSHA", sha, "1", "bench:noop"};
  for (auto _ : state) {
    if (!noop.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_Evalsha_Noop)->UseRealTime();

void BM_Semaphore_AcquireRelease(benchmark::State& state) {
  Client client(server_options());
  Semaphore semaphore(client, "bench:semaphore", 4);
  for (auto _ : state) {
    Permit permit = semaphore.try_acquire();
    if (!permit) {
      state.SkipWithError("no permit was free");
      break;
    }
  }
}
BENCHMARK(BM_Semaphore_AcquireRelease)->UseRealTime();

void BM_RateLimiter_TryAcquire(benchmark::State& state) {
  Client client(server_options());
  RateLimiter limiter(client, "bench:rate",
                      RateOptions{}.fixed_window(1'000'000'000, std::chrono::hours(1)));
  limiter.reset();
  for (auto _ : state) {
    if (!limiter.try_acquire().allowed) {
      state.SkipWithError("refused");
      break;
    }
  }
}
BENCHMARK(BM_RateLimiter_TryAcquire)->UseRealTime();

// One iteration: each of 8 threads locks and unlocks 25 times through its
// own lock object (one Client for all).
template <class Cycle>
void contended8(benchmark::State& state, Cycle cycle) {
  constexpr int threads = 8;
  constexpr int rounds = 25;
  Client client(server_options());
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (int i = 0; i < rounds; ++i) cycle(client);
      });
    }
    for (std::thread& worker : workers) worker.join();
  }
  state.SetItemsProcessed(state.iterations() * threads * rounds);
}

void BM_Mutex_Contended8(benchmark::State& state) {
  contended8(state, [](Client& client) {
    thread_local std::unique_ptr<Mutex> lock;
    if (!lock) lock = std::make_unique<Mutex>(client, "bench:contended");
    lock->lock();
    lock->unlock();
  });
}
BENCHMARK(BM_Mutex_Contended8)->UseRealTime()->Iterations(20);

void BM_StripedMutex16_Contended8(benchmark::State& state) {
  contended8(state, [](Client& client) {
    thread_local std::unique_ptr<StripedMutex> lock;
    if (!lock) lock = std::make_unique<StripedMutex>(client, "bench:striped", 16);
    auto taken = lock->try_lock_any_for(std::chrono::seconds(30));
    if (!taken) std::abort();
  });
}
BENCHMARK(BM_StripedMutex16_Contended8)->UseRealTime()->Iterations(20);

}  // namespace
}  // namespace distlock::bench
