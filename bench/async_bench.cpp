// The async cycle (distlock/asio.hpp: async_try_lock, then async_release)
// against the blocking one (try_lock, then unlock) in turns (paired.hpp),
// on one server, each with a Mutex of its own. The async cycle runs on an
// io_context that this thread runs until both calls completed, so the
// ratio counts everything the async path adds: the link's strand and
// socket waits, the completion posts, and the release's round trip through
// the backend's connector thread.
#include <benchmark/benchmark.h>

#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>

#include <memory>
#include <system_error>

#include "bench_support.hpp"
#include "distlock/asio.hpp"
#include "distlock/mutex.hpp"
#include "paired.hpp"

namespace distlock::bench {
namespace {

void BM_Paired_Async_Mutex_LockUnlock(benchmark::State& state) {
  Client client(server_options());
  Mutex sync_lock(client, "bench:sync");
  Mutex async_lock(client, "bench:async");
  asio::io_context io;
  const auto async_cycle = [&] {
    bool released = false;
    std::error_code failed;
    async_try_lock(
        async_lock, asio::bind_executor(io, [&](std::error_code ec, AsyncHold<Mutex> hold) {
          if (ec || !hold) {
            failed = ec ? ec : make_error_code(Errc::lock_lost);
            return;
          }
          auto held = std::make_shared<AsyncHold<Mutex>>(std::move(hold));
          async_release(*held,
                        asio::bind_executor(io, [&, held](std::error_code rc, Release outcome) {
                          released = !rc && outcome == Release::released;
                        }));
        }));
    io.restart();
    io.run();
    if (!released) state.SkipWithError(failed ? failed.message().c_str() : "not released");
    return released;
  };
  run_paired(state, async_cycle, lock_unlock_cycle(state, sync_lock));
}
BENCHMARK(BM_Paired_Async_Mutex_LockUnlock)->UseManualTime();

}  // namespace
}  // namespace distlock::bench
