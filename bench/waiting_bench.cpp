// Waiting and leases: how fast a waiter gets a released lock (with the
// notifier, with 50 ms polling, and the raw pub/sub floor; alone and in
// turns with the floor), and what one
// watchdog round over 1,000 leases costs against 1,000 pipelined PEXPIREs
// (and, for read holds, against the three commands per lease their layout
// needs).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "handoff.hpp"
#include "paired.hpp"

namespace distlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Calls of one command the server has run (INFO commandstats); -1 if the
// reply does not say.
long long command_calls(redisContext* context, std::string_view command) {
  auto* reply = static_cast<redisReply*>(redisCommand(context, "INFO commandstats"));
  long long calls = -1;
  if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
    const std::string_view text(reply->str, reply->len);
    const std::string field = "cmdstat_" + std::string(command) + ":calls=";
    if (const std::size_t at = text.find(field); at != std::string_view::npos) {
      calls = std::atoll(text.data() + at + field.size());
    }
  }
  freeReplyObject(reply);
  return calls;
}

// Until the server has answered the waiting Mutex's last step before it
// sleeps (the holder's PTTL and the key's TYPE, read in one round trip),
// asked without pause so that nothing on the machine idles, as nothing does
// in BM_Raw_Handoff_PubSub; at most 2 ms (counted in gave_up: should the
// waiter's steps change, the bench says so rather than measure another
// start unseen).
class UntilTypeRead {
 public:
  UntilTypeRead() : stats_(raw_connect(server_options())) {}
  void operator()() {
    const Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(2);
    long long now = seen_;
    while ((now = command_calls(stats_.get(), "type")) <= seen_) {
      if (Clock::now() >= give_up) {
        ++gave_up;
        break;
      }
    }
    seen_ = now;
  }

  long gave_up = 0;

 private:
  const RawConnection stats_;
  long long seen_ = command_calls(stats_.get(), "type");
};

// Handoff latency: from the holder's unlock() call to the waiter's return.
// `asleep` returns once the waiter sleeps on the lock (see Waiter::go).
template <class Lock, class Asleep>
void handoff(benchmark::State& state, Lock& holder, Lock& waiting, Asleep&& asleep) {
  Waiter<Lock> waiter(waiting);
  for (auto _ : state) {
    const Clock::duration took = lock_handoff(holder, waiter, asleep);
    state.SetIterationTime(std::chrono::duration<double>(took).count());
  }
}

template <class Lock>
void handoff(benchmark::State& state, Lock& holder, Lock& waiting) {
  handoff(state, holder, waiting, idle_2ms);
}

// The holder releases as soon as the waiter sleeps, from a busy machine: the
// same start as BM_Raw_Handoff_PubSub's.
void BM_Mutex_Handoff(benchmark::State& state) {
  Client client(server_options());
  const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(30));
  Mutex holder(client, "bench:handoff", options);
  Mutex waiting(client, "bench:handoff", options);
  UntilTypeRead asleep;
  handoff(state, holder, waiting, asleep);
  state.counters["gave_up"] = static_cast<double>(asleep.gave_up);
}
BENCHMARK(BM_Mutex_Handoff)->UseManualTime()->Iterations(2000);

// The holder idles 2 ms before each release: the same start as
// BM_Raw_Handoff_PubSub_Idle2ms's (the first handoff after a pause costs
// the raw floor twice what a busy one does).
template <class Lock>
void handoff_idle_2ms(benchmark::State& state) {
  HandoffLocks<Lock> locks;
  handoff(state, locks.holder, locks.waiting);
}

void BM_Mutex_Handoff_Idle2ms(benchmark::State& state) { handoff_idle_2ms<Mutex>(state); }
BENCHMARK(BM_Mutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

// A FairMutex's release tells the waiter at the front on its own channel.
void BM_FairMutex_Handoff_Idle2ms(benchmark::State& state) { handoff_idle_2ms<FairMutex>(state); }
BENCHMARK(BM_FairMutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

// The idle handoffs in turns with the raw floor's (paired.hpp), so that
// both see the machine at the same moment.
template <class Lock>
void paired_handoff_idle_2ms(benchmark::State& state) {
  HandoffLocks<Lock> locks;
  Waiter<Lock> waiter(locks.waiting);
  RawHandoff raw(state);
  run_paired_timed(
      state,
      [&]() -> std::optional<Clock::duration> {
        return lock_handoff(locks.holder, waiter, idle_2ms);
      },
      [&] { return raw.handoff(std::chrono::milliseconds(2)); });
}

void BM_Paired_Mutex_Handoff_Idle2ms(benchmark::State& state) {
  paired_handoff_idle_2ms<Mutex>(state);
}
BENCHMARK(BM_Paired_Mutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

// The hash layout's handoff: what FairMutex's costs beside it is its queue.
void BM_Paired_ReentrantMutex_Handoff_Idle2ms(benchmark::State& state) {
  paired_handoff_idle_2ms<ReentrantMutex>(state);
}
BENCHMARK(BM_Paired_ReentrantMutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

void BM_Paired_FairMutex_Handoff_Idle2ms(benchmark::State& state) {
  paired_handoff_idle_2ms<FairMutex>(state);
}
BENCHMARK(BM_Paired_FairMutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

void BM_Mutex_Handoff_Polling50ms(benchmark::State& state) {
  Client client(server_options());
  const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(30)).wake_on_release(false);
  const FixedInterval every_50ms(std::chrono::milliseconds(50));
  Mutex holder(client, "bench:handoff", options, every_50ms);
  Mutex waiting(client, "bench:handoff", options, every_50ms);
  handoff(state, holder, waiting);
}
BENCHMARK(BM_Mutex_Handoff_Polling50ms)->UseManualTime()->Iterations(20);

// The floor: the raw handoff (handoff.hpp), from the same busy or idle
// start as the Mutex's.
void raw_handoff(benchmark::State& state, std::chrono::milliseconds idle) {
  RawHandoff raw(state);
  for (auto _ : state) {
    const std::optional<Clock::duration> took = raw.handoff(idle);
    if (!took) break;
    state.SetIterationTime(std::chrono::duration<double>(*took).count());
  }
}

void BM_Raw_Handoff_PubSub(benchmark::State& state) {
  raw_handoff(state, std::chrono::milliseconds(0));
}
BENCHMARK(BM_Raw_Handoff_PubSub)->UseManualTime()->Iterations(2000);

void BM_Raw_Handoff_PubSub_Idle2ms(benchmark::State& state) {
  raw_handoff(state, std::chrono::milliseconds(2));
}
BENCHMARK(BM_Raw_Handoff_PubSub_Idle2ms)->UseManualTime()->Iterations(2000);

constexpr int leases = 1000;

// One watchdog round over 1,000 held leases of one lock type: batched
// renewal scripts (one transaction per batch for SimpleMutex). `take` takes
// one lease on a fresh lock object.
template <class Lock, class Take>
void watchdog_round(benchmark::State& state, Take take) {
  Client client(server_options());
  std::vector<std::unique_ptr<Lock>> held;
  for (int i = 0; i < leases; ++i) {
    held.push_back(std::make_unique<Lock>(client, "bench:lease:" + std::to_string(i)));
    if (!take(*held.back())) {
      state.SkipWithError("lease was not free");
      return;
    }
  }
  for (auto _ : state) client.watchdog().renew_all_now();
}

void BM_Watchdog_Renew1000(benchmark::State& state) {
  watchdog_round<Mutex>(state, [](Mutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000)->UseRealTime();

void BM_Watchdog_Renew1000_Simple(benchmark::State& state) {
  watchdog_round<SimpleMutex>(state, [](SimpleMutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000_Simple)->UseRealTime();

void BM_Watchdog_Renew1000_Reentrant(benchmark::State& state) {
  watchdog_round<ReentrantMutex>(state, [](ReentrantMutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000_Reentrant)->UseRealTime();

void BM_Watchdog_Renew1000_SharedRead(benchmark::State& state) {
  watchdog_round<SharedMutex>(state, [](SharedMutex& lock) { return lock.try_lock_shared(); });
}
BENCHMARK(BM_Watchdog_Renew1000_SharedRead)->UseRealTime();

// Its floor: 1,000 plain PEXPIREs sent as one pipeline.
void BM_Raw_Pexpire1000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> pexpires;
  for (int i = 0; i < leases; ++i) {
    const std::string key = "bench:raw-lease:" + std::to_string(i);
    RawCommand{"SET", key, "tok", "PX", "30000"}.run(redis.get(), REDIS_REPLY_STATUS, state);
    pexpires.push_back(RawCommand{"PEXPIRE", key, "30000"});
  }
  for (auto _ : state) {
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), leases, REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_Pexpire1000_Pipelined)->UseRealTime();

// The floor of a read hold's renewal in Redisson's layout, which no
// script can go under: per lease, read the owner's field, lengthen its
// timeout key and lengthen the hash. 3,000 plain commands in one pipeline.
void BM_Raw_ReadLayoutRenew1000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> pexpires;
  std::vector<RawCommand> reads;
  for (int i = 0; i < leases; ++i) {
    const std::string hash = "{bench:raw-read:" + std::to_string(i) + "}";
    const std::string timeout = hash + ":owner:rwlock_timeout:1";
    RawCommand{"HSET", hash, "mode", "read", "owner", "1"}.run(redis.get(), REDIS_REPLY_INTEGER,
                                                               state);
    RawCommand{"SET", timeout, "1", "PX", "30000"}.run(redis.get(), REDIS_REPLY_STATUS, state);
    pexpires.push_back(RawCommand{"PEXPIRE", timeout, "30000", "GT"});
    pexpires.push_back(RawCommand{"PEXPIRE", hash, "30000", "GT"});
    reads.push_back(RawCommand{"HGET", hash, "owner"});
  }
  for (auto _ : state) {
    for (const RawCommand& read : reads) read.append(redis.get());
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), leases, REDIS_REPLY_STRING, state)) break;
    if (!read_replies(redis.get(), 2 * leases, REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_ReadLayoutRenew1000_Pipelined)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
