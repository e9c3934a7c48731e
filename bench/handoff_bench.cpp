// The floors of the ways a lock library can hand a released lock to a
// waiting thread, in raw hiredis, to choose a design by (next to
// BM_Raw_Handoff_PubSub in waiting_bench.cpp, where the waiting thread reads
// the subscriber connection itself and sends its own SET NX PX):
// - BM_Raw_Handoff_RelayWakesTaker: a relay thread reads the subscriber
//   connection and wakes the waiting thread, which then sends SET NX PX
//   (distlock's shape);
// - BM_Raw_Handoff_RelayTakes: the relay thread sends SET NX PX itself on
//   the message and wakes the waiting thread with the answer.
// Measured from the release call to the moment the waiting thread knows
// it holds the lock.
#include <benchmark/benchmark.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "bench_support.hpp"

namespace distlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

template <bool relay_takes>
void relayed_handoff(benchmark::State& state) {
  const ClientOptions& where = server_options();
  const RawConnection holder = raw_connect(where);
  const RawConnection subscriber = raw_connect(where);
  const RawConnection taker = raw_connect(where);
  const std::string sha = load_script(compare_delete_publish_lua);
  const RawCommand take{"SET", "bench:raw-relay", "taker", "NX", "PX", "30000"};
  const RawCommand give_back{"DEL", "bench:raw-relay"};
  const RawCommand hold{"SET", "bench:raw-relay", "holder", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "2", "bench:raw-relay", "bench:raw-relay-channel",
                           "holder"};
  const RawCommand subscribe{"SUBSCRIBE", "bench:raw-relay-channel"};
  if (!subscribe.run(subscriber.get(), REDIS_REPLY_ARRAY, state)) return;

  std::mutex mutex;
  std::condition_variable changed;
  long messages = 0;  // read by the relay
  long seen = 0;      // taken up by the waiting thread
  long done = 0;
  bool ok = true;
  bool relay_took = false;
  bool stop = false;
  Clock::time_point taken_at{};
  std::thread relay([&] {
    for (;;) {
      void* message = nullptr;
      if (redisGetReply(subscriber.get(), &message) != REDIS_OK) return;  // closed at the end
      freeReplyObject(message);
      const bool took = relay_takes && take.run(taker.get(), REDIS_REPLY_STATUS);
      std::lock_guard guard(mutex);
      relay_took = took;
      ++messages;
      changed.notify_all();
    }
  });
  std::thread waiting([&] {
    std::unique_lock guard(mutex);
    for (;;) {
      changed.wait(guard, [&] { return stop || messages > seen; });
      if (stop) return;
      seen = messages;
      bool took = relay_took;
      if (!relay_takes) {
        guard.unlock();
        took = take.run(taker.get(), REDIS_REPLY_STATUS);
        guard.lock();
      }
      taken_at = Clock::now();
      ok = ok && took;
      ++done;
      changed.notify_all();
    }
  });
  long round = 0;
  for (auto _ : state) {
    if (!hold.run(holder.get(), REDIS_REPLY_STATUS, state)) break;
    ++round;
    const Clock::time_point released = Clock::now();
    if (!release.run(holder.get(), REDIS_REPLY_INTEGER, state)) break;
    std::unique_lock guard(mutex);
    changed.wait(guard, [&] { return done == round; });
    if (!ok) {
      state.SkipWithError("the waiting side did not get the lock");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(taken_at - released).count());
    guard.unlock();
    if (!give_back.run(holder.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  ::shutdown(subscriber->fd, SHUT_RDWR);  // ends the relay's blocking read
  relay.join();
  {
    std::lock_guard guard(mutex);
    stop = true;
  }
  changed.notify_all();
  waiting.join();
}

void BM_Raw_Handoff_RelayWakesTaker(benchmark::State& state) { relayed_handoff<false>(state); }
BENCHMARK(BM_Raw_Handoff_RelayWakesTaker)->UseManualTime()->Iterations(2000);

void BM_Raw_Handoff_RelayTakes(benchmark::State& state) { relayed_handoff<true>(state); }
BENCHMARK(BM_Raw_Handoff_RelayTakes)->UseManualTime()->Iterations(2000);

}  // namespace
}  // namespace distlock::bench
