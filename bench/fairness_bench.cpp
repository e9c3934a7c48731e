// Who waits how long: eight threads, each with a Client of its own, take
// one name again and again for two seconds, holding it 5 ms and asking
// again as soon as they let go (tests/fairness_test.cpp runs the same with
// processes). Counters: Jain's fairness index of the grant counts (1: all
// got as many; 1/8: one got all), the fewest and most grants of a thread,
// and the waits over every grant (median, p99, max). A plain lease goes
// to whichever attempt lands first after a release, which is most often
// the holder's own next one; a FairMutex serves the threads in turn.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"

namespace distlock::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;

template <class Lock>
void fairness(benchmark::State& state) {
  constexpr int threads = 8;
  constexpr auto hold = std::chrono::milliseconds(5);
  constexpr auto run_for = std::chrono::seconds(2);
  std::vector<std::vector<double>> waits(threads);
  for (auto _ : state) {
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<std::unique_ptr<Lock>> locks;
    for (int i = 0; i < threads; ++i) {
      clients.push_back(std::make_unique<Client>(server_options()));
      locks.push_back(std::make_unique<Lock>(*clients.back(), "bench:fairness",
                                             LockOptions{}.ttl(std::chrono::seconds(10))));
    }
    const Clock::time_point start = Clock::now() + std::chrono::milliseconds(100);
    std::vector<std::thread> running;
    for (int i = 0; i < threads; ++i) {
      running.emplace_back([&, i] {
        Lock& lock = *locks[static_cast<std::size_t>(i)];
        std::vector<double>& mine = waits[static_cast<std::size_t>(i)];
        std::this_thread::sleep_until(start);
        while (Clock::now() < start + run_for) {
          const Clock::time_point asked = Clock::now();
          lock.lock();
          mine.push_back(Ms(Clock::now() - asked).count());
          std::this_thread::sleep_for(hold);
          lock.unlock();
        }
      });
    }
    for (std::thread& thread : running) thread.join();
  }
  double sum = 0;
  double squares = 0;
  std::size_t fewest = waits[0].size();
  std::size_t most = 0;
  std::vector<double> all;
  for (const std::vector<double>& mine : waits) {
    const auto grants = static_cast<double>(mine.size());
    sum += grants;
    squares += grants * grants;
    fewest = std::min(fewest, mine.size());
    most = std::max(most, mine.size());
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  state.counters["jain"] = squares == 0 ? 0 : sum * sum / (threads * squares);
  state.counters["grants_fewest"] = static_cast<double>(fewest);
  state.counters["grants_most"] = static_cast<double>(most);
  if (!all.empty()) {
    state.counters["wait_p50_ms"] = all[all.size() / 2];
    state.counters["wait_p99_ms"] = all[std::min(all.size() - 1, all.size() * 99 / 100)];
    state.counters["wait_max_ms"] = all.back();
  }
}

void BM_Fairness8_Mutex(benchmark::State& state) { fairness<Mutex>(state); }
BENCHMARK(BM_Fairness8_Mutex)->Iterations(1)->UseRealTime();
void BM_Fairness8_ReentrantMutex(benchmark::State& state) { fairness<ReentrantMutex>(state); }
BENCHMARK(BM_Fairness8_ReentrantMutex)->Iterations(1)->UseRealTime();
void BM_Fairness8_FairMutex(benchmark::State& state) { fairness<FairMutex>(state); }
BENCHMARK(BM_Fairness8_FairMutex)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
