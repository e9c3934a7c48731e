// Contention: 2, 4 or 8 threads take turns at one lock name as fast as they
// can. Each thread locks and unlocks through its own Mutex (all on one
// Client), against the same dance in raw hiredis: each thread subscribed on
// a connection of its own, retrying SET NX PX on its command connection at
// every release message, and releasing with one script that deletes and
// publishes. An iteration is one lock and one unlock by one thread; the
// time is wall time per iteration of each thread, so the two read as a ratio
// at one thread count.
//
// BM_Mutex_Contended8 (primitives_bench.cpp) is the older shape of the same
// measurement: 8 threads started per iteration, on default LockOptions like
// these.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "distlock/mutex.hpp"

namespace distlock::bench {
namespace {

// One Client for every thread of every run: a lock object keeps a handle to
// it, so a thread's Mutex never outlives what it was made from.
Client& shared_client() {
  static Client client(server_options());
  return client;
}

void BM_Mutex_Contended(benchmark::State& state) {
  Mutex lock(shared_client(), "bench:contended-threads");
  for (auto _ : state) {
    lock.lock();
    lock.unlock();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Mutex_Contended)->UseRealTime()->Iterations(500)->Threads(2)->Threads(4)->Threads(8);

void BM_Raw_Contended_PubSub(benchmark::State& state) {
  const ClientOptions& where = server_options();
  static const std::string sha = load_script(compare_delete_publish_lua);
  const std::string token = "raw-" + std::to_string(state.thread_index());
  const RawConnection commands = raw_connect(where);
  const RawConnection subscriber = raw_connect(where);
  const RawCommand take{"SET", "bench:raw-contended", token, "NX", "PX", "30000"};
  const RawCommand release{
      "EVALSHA", sha, "2", "bench:raw-contended", "bench:raw-contended-channel", token};
  // Subscribed before any attempt: a release after a refused SET is always
  // in this connection's stream (a stale one only costs a retry).
  const RawCommand subscribe{"SUBSCRIBE", "bench:raw-contended-channel"};
  if (!subscribe.run(subscriber.get(), REDIS_REPLY_ARRAY, state)) return;
  for (auto _ : state) {
    for (;;) {
      if (take.run(commands.get(), REDIS_REPLY_STATUS)) break;  // a refusal is a nil reply
      if (commands->err != 0) {
        state.SkipWithError(commands->errstr);
        return;
      }
      void* message = nullptr;
      if (redisGetReply(subscriber.get(), &message) != REDIS_OK) {
        state.SkipWithError("subscriber connection failed");
        return;
      }
      freeReplyObject(message);
    }
    if (!release.run(commands.get(), REDIS_REPLY_INTEGER, state)) return;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Raw_Contended_PubSub)
    ->UseRealTime()
    ->Iterations(500)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8);

}  // namespace
}  // namespace distlock::bench
