// The async cycle (distlock/asio.hpp: async_try_lock, then async_release)
// against the blocking one (try_lock, then unlock) in turns (paired.hpp),
// on one server, each with a lock of its own (a Mutex, a ReentrantMutex).
// The async cycle runs on an io_context that this thread runs until both
// calls completed, so the ratio counts everything the async path adds:
// the link's strand, socket waits and command timer, the completion
// posts. The event-loop floors (event_loop.hpp) split that: what the same
// commands, raw, cost on an event loop against blocking, with and without
// a command timer, and the async Mutex's cycle over the timed one.
#include <benchmark/benchmark.h>

#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include "bench_support.hpp"
#include "counters.hpp"
#include "distlock/asio.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "event_loop.hpp"
#include "paired.hpp"

namespace distlock::bench {
namespace {

// async_try_lock(lock) and async_release of its hold, run on `io` until
// both completed, as a cycle for run_paired().
template <class Lock>
auto async_cycle(benchmark::State& state, asio::io_context& io, Lock& lock) {
  return [&state, &io, &lock] {
    bool released = false;
    std::error_code failed;
    async_try_lock(lock, asio::bind_executor(io, [&](std::error_code ec, AsyncHold<Lock> hold) {
                     if (ec || !hold) {
                       failed = ec ? ec : make_error_code(Errc::lock_lost);
                       return;
                     }
                     auto held = std::make_shared<AsyncHold<Lock>>(std::move(hold));
                     async_release(*held, asio::bind_executor(
                                              io, [&, held](std::error_code rc, Release outcome) {
                                                released = !rc && outcome == Release::released;
                                              }));
                   }));
    io.restart();
    io.run();
    if (!released) state.SkipWithError(failed ? failed.message().c_str() : "not released");
    return released;
  };
}

template <class Lock>
void paired_async_cycle(benchmark::State& state) {
  Client client(server_options());
  Lock sync_lock(client, "bench:sync");
  Lock async_lock(client, "bench:async");
  asio::io_context io;
  run_paired(state, async_cycle(state, io, async_lock), lock_unlock_cycle(state, sync_lock));
}

void BM_Paired_Async_Mutex_LockUnlock(benchmark::State& state) { paired_async_cycle<Mutex>(state); }
BENCHMARK(BM_Paired_Async_Mutex_LockUnlock)->UseManualTime();

// The same for a ReentrantMutex: Redisson's scripts, an async owner of
// its own against the thread's.
void BM_Paired_Async_ReentrantMutex_LockUnlock(benchmark::State& state) {
  paired_async_cycle<ReentrantMutex>(state);
}
BENCHMARK(BM_Paired_Async_ReentrantMutex_LockUnlock)->UseManualTime();

// The event-loop floors: Mutex's commands, raw, on an event loop (with a
// command timer or without) against the same, blocking.
void paired_event_loop_floor(benchmark::State& state, bool timed) {
  const MutexCommands commands;
  const RawConnection blocking = raw_connect(server_options());
  const RawConnection looped = raw_connect(server_options());
  asio::io_context io;
  EventLoopCommands loop(io, looped.get(), timed);
  run_paired(
      state, loop.cycle(state, commands.acquire, REDIS_REPLY_STATUS, commands.release),
      raw_cycle(state, blocking.get(), commands.acquire, REDIS_REPLY_STATUS, commands.release));
}
void BM_Paired_EventLoop_SameCommands(benchmark::State& state) {
  paired_event_loop_floor(state, false);
}
BENCHMARK(BM_Paired_EventLoop_SameCommands)->UseManualTime();
void BM_Paired_EventLoop_SameCommands_Timed(benchmark::State& state) {
  paired_event_loop_floor(state, true);
}
BENCHMARK(BM_Paired_EventLoop_SameCommands_Timed)->UseManualTime();

// The async Mutex's cycle over the timed event-loop floor: what distlock's
// async path adds to what any event loop with a command timeout does.
void BM_Paired_Async_Mutex_LockUnlock_OverTheEventLoop(benchmark::State& state) {
  const MutexCommands commands;
  Client client(server_options());
  Mutex lock(client, "bench:async");
  asio::io_context io;
  const RawConnection looped = raw_connect(server_options());
  asio::io_context floor_io;
  EventLoopCommands loop(floor_io, looped.get(), true);
  run_paired(state, async_cycle(state, io, lock),
             loop.cycle(state, commands.acquire, REDIS_REPLY_STATUS, commands.release));
}
BENCHMARK(BM_Paired_Async_Mutex_LockUnlock_OverTheEventLoop)->UseManualTime();

// The same cycles one after another rather than in turns, with the
// per-cycle counters (counters.hpp): BM_Async_Mutex_LockUnlock against
// BM_Mutex_LockUnlock and against the timed event-loop floor, in the
// ratio table; allocs and mutexes per cycle say where the async path's
// own share goes.
void BM_Async_Mutex_LockUnlock(benchmark::State& state) {
  Client client(server_options());
  Mutex lock(client, "bench:async");
  asio::io_context io;
  const auto cycle = async_cycle(state, io, lock);
  const CycleCounters counters;
  for (auto _ : state) {
    if (!cycle()) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Async_Mutex_LockUnlock)->UseRealTime();

void BM_EventLoop_SameCommands_Timed(benchmark::State& state) {
  const MutexCommands commands;
  const RawConnection looped = raw_connect(server_options());
  asio::io_context io;
  EventLoopCommands loop(io, looped.get(), true);
  const auto cycle = loop.cycle(state, commands.acquire, REDIS_REPLY_STATUS, commands.release);
  const CycleCounters counters;
  for (auto _ : state) {
    if (!cycle()) break;
  }
  counters.report(state);
}
BENCHMARK(BM_EventLoop_SameCommands_Timed)->UseRealTime();

// A field of /proc/self/status ("Threads", "VmRSS" in kB).
long proc_status(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string name;
  long value = 0;
  while (status >> name) {
    if (name == field + ":") {
      status >> value;
      return value;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

long long set_calls(Client& client) {
  const std::string stats(client.command("INFO", "commandstats").str());
  const std::string::size_type at = stats.find("cmdstat_set:calls=");
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 18));
}

void BM_Async_Waiters10000(benchmark::State& state) {
  constexpr int count = 10000;
  Client client(server_options());
  Mutex holder(client, "bench:waiters");
  Mutex shared(client, "bench:waiters");
  asio::io_context io;
  for (auto _ : state) {
    client.command("CONFIG", "RESETSTAT");
    if (!holder.try_lock()) return state.SkipWithError("bench:waiters is held");
    const long threads_before = proc_status("Threads");
    const long rss_before = proc_status("VmRSS");
    int ended = 0;
    int failed = 0;
    for (int i = 0; i < count; ++i) {
      async_lock(shared, asio::bind_executor(io, [&](std::error_code ec, AsyncHold<Mutex> hold) {
                   if (ec || !hold) {
                     ++failed;
                     ++ended;
                     return;
                   }
                   auto held = std::make_shared<AsyncHold<Mutex>>(std::move(hold));
                   async_release(*held, asio::bind_executor(
                                            io, [&, held](std::error_code, Release) { ++ended; }));
                 }));
    }
    // Each has tried twice (before and after subscribing) and sleeps.
    io.restart();
    while (set_calls(client) < 2 * count) io.run_for(std::chrono::milliseconds(5));
    io.poll();
    state.counters["threads_before"] = static_cast<double>(threads_before);
    state.counters["threads_waiting"] = static_cast<double>(proc_status("Threads"));
    state.counters["rss_bytes_per_waiter"] =
        static_cast<double>(proc_status("VmRSS") - rss_before) * 1024.0 / count;
    const auto begun = std::chrono::steady_clock::now();
    holder.unlock();
    io.restart();
    io.run();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count() / count);
    state.counters["attempts_per_waiter"] = static_cast<double>(set_calls(client)) / count;
    if (failed > 0 || ended != count) state.SkipWithError("a waiter failed");
  }
}
BENCHMARK(BM_Async_Waiters10000)->UseManualTime()->Iterations(1);

}  // namespace
}  // namespace distlock::bench
