// Scale: what the costs that grow with the number of leases, waiters and
// lock objects come to at 10,000 leases, 1,000 waiters and a stream of
// lock objects made and dropped.
//
// - BM_Watchdog_Renew10000*: one watchdog round over 10,000 held leases of
//   one lock type, against BM_Raw_Pexpire10000_Pipelined (10,000 plain
//   PEXPIREs in one pipeline). A read hold and a permit need more than
//   one command per lease in their layout: BM_Raw_ReadLayoutRenew10000_-
//   and BM_Raw_PermitLayoutRenew10000_Pipelined are their own floors, and
//   SimpleMutex, which renews with WATCH and MULTI/EXEC for want of Lua,
//   has BM_Raw_WatchLayoutRenew10000_Pipelined.
// - BM_Wake1000: 1,000 threads of one Client each wait in lock() on a name
//   of its own; the names are released one at a time and each release's
//   waiter is timed from the release call to its lock() returning. Median
//   and p99 of those wake latencies, and the memory each waiter costs.
// - BM_Construct_*: lock objects made and destroyed (no server round trip:
//   the reads/writes counters stay at zero).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "counters.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"

namespace distlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int many_leases = 10000;

std::string numbered(const char* stem, int i) { return stem + std::to_string(i); }

// One watchdog round over 10,000 leases, each taken by take(i) and kept by
// the returned object until the benchmark ends.
template <class Take>
void renew_round(benchmark::State& state, Take take) {
  ClientOptions options = server_options();
  options.pool_size = 2;
  Client client(options);
  std::vector<decltype(take(client, 0))> held;
  held.reserve(many_leases);
  for (int i = 0; i < many_leases; ++i) {
    held.push_back(take(client, i));
    if (!held.back()) {
      state.SkipWithError("lease was not free");
      return;
    }
  }
  const CycleCounters counters;
  for (auto _ : state) client.watchdog().renew_all_now();
  counters.report(state);
  state.counters["leases"] = static_cast<double>(client.watchdog().size());
}

// A held lock object, or null when its lease was not free.
template <class Lock, class Acquire>
std::unique_ptr<Lock> taken(Client& client, const std::string& name, Acquire acquire) {
  auto lock = std::make_unique<Lock>(client, name);
  if (!acquire(*lock)) lock.reset();
  return lock;
}

void BM_Watchdog_Renew10000(benchmark::State& state) {
  renew_round(state, [](Client& client, int i) {
    return taken<Mutex>(client, numbered("bench:scale:m:", i),
                        [](Mutex& lock) { return lock.try_lock(); });
  });
}
BENCHMARK(BM_Watchdog_Renew10000)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Watchdog_Renew10000_Simple(benchmark::State& state) {
  renew_round(state, [](Client& client, int i) {
    return taken<SimpleMutex>(client, numbered("bench:scale:s:", i),
                              [](SimpleMutex& lock) { return lock.try_lock(); });
  });
}
BENCHMARK(BM_Watchdog_Renew10000_Simple)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Watchdog_Renew10000_Reentrant(benchmark::State& state) {
  renew_round(state, [](Client& client, int i) {
    return taken<ReentrantMutex>(client, numbered("bench:scale:r:", i),
                                 [](ReentrantMutex& lock) { return lock.try_lock(); });
  });
}
BENCHMARK(BM_Watchdog_Renew10000_Reentrant)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Watchdog_Renew10000_SharedRead(benchmark::State& state) {
  renew_round(state, [](Client& client, int i) {
    return taken<SharedMutex>(client, numbered("bench:scale:rw:", i),
                              [](SharedMutex& lock) { return lock.try_lock_shared(); });
  });
}
BENCHMARK(BM_Watchdog_Renew10000_SharedRead)->UseRealTime()->Unit(benchmark::kMillisecond);

// 10,000 permits of one Semaphore.
void BM_Watchdog_Renew10000_Permits(benchmark::State& state) {
  ClientOptions options = server_options();
  options.pool_size = 2;
  Client client(options);
  Semaphore semaphore(client, "bench:scale:sem", many_leases);
  std::vector<Permit> held;
  held.reserve(many_leases);
  for (int i = 0; i < many_leases; ++i) {
    held.push_back(semaphore.try_acquire());
    if (!held.back()) {
      state.SkipWithError("no permit was free");
      return;
    }
  }
  const CycleCounters counters;
  for (auto _ : state) client.watchdog().renew_all_now();
  counters.report(state);
  state.counters["leases"] = static_cast<double>(client.watchdog().size());
}
BENCHMARK(BM_Watchdog_Renew10000_Permits)->UseRealTime()->Unit(benchmark::kMillisecond);

// The floor: 10,000 plain PEXPIREs sent as one pipeline.
void BM_Raw_Pexpire10000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> pexpires;
  pexpires.reserve(many_leases);
  for (int i = 0; i < many_leases; ++i) {
    const std::string key = numbered("bench:scale:raw:", i);
    RawCommand{"SET", key, "tok", "PX", "30000"}.append(redis.get());
    pexpires.push_back(RawCommand{"PEXPIRE", key, "30000"});
  }
  if (!read_replies(redis.get(), many_leases, REDIS_REPLY_STATUS, state)) return;
  const CycleCounters counters;
  for (auto _ : state) {
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), many_leases, REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_Pexpire10000_Pipelined)->UseRealTime()->Unit(benchmark::kMillisecond);

// The floor of a read hold's renewal in Redisson's layout (as
// BM_Raw_ReadLayoutRenew1000_Pipelined): per lease, read the owner's field,
// lengthen its timeout key, lengthen the hash. 30,000 plain commands in
// one pipeline.
void BM_Raw_ReadLayoutRenew10000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> reads;
  std::vector<RawCommand> pexpires;
  reads.reserve(many_leases);
  pexpires.reserve(2 * many_leases);
  for (int i = 0; i < many_leases; ++i) {
    const std::string hash = "{" + numbered("bench:scale:raw-read:", i) + "}";
    const std::string timeout = hash + ":owner:rwlock_timeout:1";
    RawCommand{"HSET", hash, "mode", "read", "owner", "1"}.append(redis.get());
    RawCommand{"SET", timeout, "1", "PX", "30000"}.append(redis.get());
    reads.push_back(RawCommand{"HGET", hash, "owner"});
    pexpires.push_back(RawCommand{"PEXPIRE", timeout, "30000", "GT"});
    pexpires.push_back(RawCommand{"PEXPIRE", hash, "30000", "GT"});
  }
  for (int i = 0; i < many_leases; ++i) {
    if (!read_replies(redis.get(), 1, REDIS_REPLY_INTEGER, state) ||
        !read_replies(redis.get(), 1, REDIS_REPLY_STATUS, state)) {
      return;
    }
  }
  const CycleCounters counters;
  for (auto _ : state) {
    for (const RawCommand& read : reads) read.append(redis.get());
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), many_leases, REDIS_REPLY_STRING, state)) break;
    if (!read_replies(redis.get(), 2 * many_leases, REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_ReadLayoutRenew10000_Pipelined)->UseRealTime()->Unit(benchmark::kMillisecond);

// The floor of a permit's renewal in the Semaphore's layout: per permit,
// read its score (is it still live?) and move it to now + lease in the
// sorted set; then lengthen the set once. 20,001 plain commands in one
// pipeline, on one sorted set of 10,000 members, as in
// BM_Watchdog_Renew10000_Permits.
void BM_Raw_PermitLayoutRenew10000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const char* const key = "bench:scale:raw-sem";
  std::vector<std::string> ids;
  ids.reserve(many_leases);
  const auto score_in = [](std::chrono::milliseconds lease) {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return std::to_string((now + lease).count());
  };
  std::string score = score_in(std::chrono::milliseconds(30000));
  for (int i = 0; i < many_leases; ++i) {
    ids.push_back(numbered("permit-", i));
    RawCommand{"ZADD", key, score, ids.back()}.append(redis.get());
  }
  if (!read_replies(redis.get(), many_leases, REDIS_REPLY_INTEGER, state)) return;
  const RawCommand pexpire{"PEXPIRE", key, "30000", "GT"};
  const CycleCounters counters;
  for (auto _ : state) {
    score = score_in(std::chrono::milliseconds(30000));
    for (const std::string& id : ids) {
      // Formatted from argv, as RawCommand and the watchdog's calls are.
      const char* zscore[] = {"ZSCORE", key, id.c_str()};
      const std::size_t zscore_lengths[] = {6, std::strlen(key), id.size()};
      redisAppendCommandArgv(redis.get(), 3, zscore, zscore_lengths);
      const char* zadd[] = {"ZADD", key, score.c_str(), id.c_str()};
      const std::size_t zadd_lengths[] = {4, std::strlen(key), score.size(), id.size()};
      redisAppendCommandArgv(redis.get(), 4, zadd, zadd_lengths);
    }
    pexpire.append(redis.get());
    bool ok = true;
    for (int i = 0; i < many_leases && ok; ++i) {
      ok = read_replies(redis.get(), 1, REDIS_REPLY_STRING, state) &&
           read_replies(redis.get(), 1, REDIS_REPLY_INTEGER, state);
    }
    if (!ok || !read_replies(redis.get(), 1, REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_PermitLayoutRenew10000_Pipelined)->UseRealTime()->Unit(benchmark::kMillisecond);

// The floor of SimpleMutex's renewal, which keeps its promise of no Lua:
// per chunk of 100 leases (its watch_size), WATCH the keys, MGET them,
// then MULTI, PEXPIRE <ttl> GT each, EXEC. 10,000 leases are 100 such
// chunks, 10,400 commands, all sent as one pipeline: the server's work
// for the layout, without the round trip per chunk the renewer needs to
// see the values before it lengthens.
void BM_Raw_WatchLayoutRenew10000_Pipelined(benchmark::State& state) {
  constexpr int chunk = 100;
  const RawConnection redis = raw_connect(server_options());
  std::vector<std::string> keys;
  std::vector<RawCommand> pexpires;
  keys.reserve(many_leases);
  pexpires.reserve(many_leases);
  for (int i = 0; i < many_leases; ++i) {
    keys.push_back(numbered("bench:scale:raw-watch:", i));
    RawCommand{"SET", keys.back(), "tok", "PX", "30000"}.append(redis.get());
    pexpires.push_back(RawCommand{"PEXPIRE", keys.back(), "30000", "GT"});
  }
  if (!read_replies(redis.get(), many_leases, REDIS_REPLY_STATUS, state)) return;
  // Each chunk's keys as argv, behind a slot for the command's name.
  std::vector<std::vector<const char*>> chunk_argv;
  std::vector<std::vector<std::size_t>> chunk_lengths;
  for (int first = 0; first < many_leases; first += chunk) {
    chunk_argv.push_back({nullptr});
    chunk_lengths.push_back({0});
    for (int i = first; i < first + chunk; ++i) {
      chunk_argv.back().push_back(keys[static_cast<std::size_t>(i)].c_str());
      chunk_lengths.back().push_back(keys[static_cast<std::size_t>(i)].size());
    }
  }
  const auto append_keyed = [&](const char* command, std::size_t n) {
    chunk_argv[n][0] = command;
    chunk_lengths[n][0] = std::strlen(command);
    redisAppendCommandArgv(redis.get(), static_cast<int>(chunk_argv[n].size()),
                           chunk_argv[n].data(), chunk_lengths[n].data());
  };
  const RawCommand multi{"MULTI"};
  const RawCommand exec{"EXEC"};
  const CycleCounters counters;
  for (auto _ : state) {
    for (std::size_t n = 0; n < chunk_argv.size(); ++n) {
      append_keyed("WATCH", n);
      append_keyed("MGET", n);
      multi.append(redis.get());
      for (std::size_t i = n * chunk; i < (n + 1) * chunk; ++i) pexpires[i].append(redis.get());
      exec.append(redis.get());
    }
    bool ok = true;
    for (std::size_t n = 0; n < chunk_argv.size() && ok; ++n) {
      ok = read_replies(redis.get(), 1, REDIS_REPLY_STATUS, state) &&          // WATCH
           read_replies(redis.get(), 1, REDIS_REPLY_ARRAY, state) &&           // MGET
           read_replies(redis.get(), chunk + 1, REDIS_REPLY_STATUS, state) &&  // MULTI, QUEUED
           read_replies(redis.get(), 1, REDIS_REPLY_ARRAY, state);             // EXEC
    }
    if (!ok) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_WatchLayoutRenew10000_Pipelined)->UseRealTime()->Unit(benchmark::kMillisecond);

// Resident memory of the process, in bytes (VmRSS).
double resident_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::strtod(line + 6, nullptr);
  }
  std::fclose(status);
  return kib * 1024;
}

constexpr int waiters = 1000;

// Counts the release channels the server has subscribers on.
std::size_t subscribed_channels(redisContext* redis) {
  auto* reply = static_cast<redisReply*>(redisCommand(redis, "PUBSUB CHANNELS %s", "*scale:w:*"));
  if (reply == nullptr) return 0;
  const std::size_t count = reply->type == REDIS_REPLY_ARRAY ? reply->elements : 0;
  freeReplyObject(reply);
  return count;
}

void BM_Wake1000(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  Client holders(server_options());
  ClientOptions waiting_options = server_options();
  waiting_options.pool_size = 16;
  waiting_options.pool_wait_timeout = std::chrono::seconds(30);
  std::vector<double> latencies;
  double bytes_per_waiter = 0;
  double allocs_per_waiter = 0;
  for (auto _ : state) {
    Client client(waiting_options);
    const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(60));
    std::vector<std::unique_ptr<Mutex>> held;
    std::vector<std::unique_ptr<Mutex>> mine;
    for (int i = 0; i < waiters; ++i) {
      const std::string name = numbered("bench:scale:w:", i);
      held.push_back(std::make_unique<Mutex>(holders, name, options));
      if (!held.back()->try_lock()) {
        state.SkipWithError("name was not free");
        return;
      }
    }
    client.notifier();  // started before the count: it is per Client, not per waiter
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<Clock::time_point> woke(waiters);
    int done = 0;
    bool failed = false;
    const double rss_before = resident_bytes();
    const std::uint64_t allocs_before = process_counts().mallocs;
    std::vector<std::thread> threads;
    threads.reserve(waiters);
    for (int i = 0; i < waiters; ++i) {
      mine.push_back(std::make_unique<Mutex>(client, numbered("bench:scale:w:", i), options));
      threads.emplace_back([&, i] {
        bool ok = true;
        try {
          mine[static_cast<std::size_t>(i)]->lock();
        } catch (...) {
          ok = false;
        }
        const Clock::time_point at = Clock::now();
        if (ok) mine[static_cast<std::size_t>(i)]->unlock();
        std::lock_guard guard(mutex);
        woke[static_cast<std::size_t>(i)] = at;
        failed = failed || !ok;
        ++done;
        changed.notify_all();
      });
    }
    // Every waiter subscribed, or 60 s.
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
    while (subscribed_channels(redis.get()) < waiters && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Each has had its attempt after subscribing and is asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    bytes_per_waiter = (resident_bytes() - rss_before) / waiters;
    allocs_per_waiter = static_cast<double>(process_counts().mallocs - allocs_before) / waiters;
    latencies.clear();
    double total = 0;
    for (int i = 0; i < waiters; ++i) {
      const Clock::time_point released = Clock::now();
      held[static_cast<std::size_t>(i)]->unlock();
      std::unique_lock guard(mutex);
      changed.wait(guard, [&] { return done == i + 1 || failed; });
      if (failed) break;
      const double seconds =
          std::chrono::duration<double>(woke[static_cast<std::size_t>(i)] - released).count();
      latencies.push_back(seconds);
      total += seconds;
    }
    for (auto& unlocked : held) unlocked->unlock();
    for (std::thread& thread : threads) thread.join();
    if (failed) {
      state.SkipWithError("a waiter's lock() threw");
      return;
    }
    state.SetIterationTime(total / waiters);  // the mean wake latency
  }
  std::sort(latencies.begin(), latencies.end());
  if (latencies.empty()) return;
  const auto at = [&](double q) {
    return latencies[static_cast<std::size_t>(q * static_cast<double>(latencies.size() - 1))];
  };
  state.counters["median_us"] = at(0.5) * 1e6;
  state.counters["p99_us"] = at(0.99) * 1e6;
  state.counters["rss_per_waiter_B"] = bytes_per_waiter;
  state.counters["allocs_per_waiter"] = allocs_per_waiter;
}
BENCHMARK(BM_Wake1000)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);

// Lock objects made and dropped; reads/writes show that none talks to the
// server.
template <class Make>
void construct(benchmark::State& state, Make make) {
  Client client(server_options());
  const CycleCounters counters;
  for (auto _ : state) {
    auto lock = make(client);
    benchmark::DoNotOptimize(lock);
  }
  counters.report(state);
  state.SetItemsProcessed(state.iterations());
}

void BM_Construct_Mutex(benchmark::State& state) {
  construct(state, [](Client& client) { return Mutex(client, "bench:scale:construct"); });
}
BENCHMARK(BM_Construct_Mutex)->UseRealTime();

void BM_Construct_SimpleMutex(benchmark::State& state) {
  construct(state, [](Client& client) { return SimpleMutex(client, "bench:scale:construct"); });
}
BENCHMARK(BM_Construct_SimpleMutex)->UseRealTime();

void BM_Construct_ReentrantMutex(benchmark::State& state) {
  construct(state, [](Client& client) { return ReentrantMutex(client, "bench:scale:construct"); });
}
BENCHMARK(BM_Construct_ReentrantMutex)->UseRealTime();

void BM_Construct_SharedMutex(benchmark::State& state) {
  construct(state, [](Client& client) { return SharedMutex(client, "bench:scale:construct"); });
}
BENCHMARK(BM_Construct_SharedMutex)->UseRealTime();

void BM_Construct_Semaphore(benchmark::State& state) {
  construct(state, [](Client& client) { return Semaphore(client, "bench:scale:construct", 4); });
}
BENCHMARK(BM_Construct_Semaphore)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
