// The raw hiredis baselines: what the Redis round trips a lock needs cost by
// themselves, measured in the same run as the locks so results read as ratios.
#include <benchmark/benchmark.h>

#include "bench_support.hpp"
#include "counters.hpp"
#include "distlock/detail/wire/scripts.hpp"

namespace distlock::bench {
namespace {

void BM_Raw_Ping(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const RawCommand ping{"PING"};
  for (auto _ : state) {
    if (!ping.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
  }
}
BENCHMARK(BM_Raw_Ping)->UseRealTime();

void BM_Raw_SetNxPx_Del(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const RawCommand set{"SET", "bench:raw", "tok", "NX", "PX", "30000"};
  const RawCommand del{"DEL", "bench:raw"};
  const CycleCounters counters;
  for (auto _ : state) {
    if (!set.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
    if (!del.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_SetNxPx_Del)->UseRealTime();

void BM_Raw_SetNxPx_EvalshaDel(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const std::string sha = load_script(compare_and_delete_lua);
  const RawCommand set{"SET", "bench:raw", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:raw", "tok"};
  const CycleCounters counters;
  for (auto _ : state) {
    if (!set.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_SetNxPx_EvalshaDel)->UseRealTime();

// The same, with a release that also announces itself on the lock's
// channel as Mutex's does (wake-on-release): what the announcement costs.
void BM_Raw_SetNxPx_EvalshaDelPublish(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const std::string sha = load_script(compare_delete_publish_lua);
  const RawCommand set{"SET", "bench:raw", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "2", "bench:raw", "bench:raw-channel", "tok"};
  const CycleCounters counters;
  for (auto _ : state) {
    if (!set.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_SetNxPx_EvalshaDelPublish)->UseRealTime();

// The floor of a fenced Mutex: the acquire is a script (SET NX PX and INCR
// of the fence counter together), so its floor is that script by EVALSHA,
// then the same compare-and-delete.
void BM_Raw_FencedAcquire_EvalshaDel(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  const std::string acquire_sha = load_script(scripts::acquire_fenced.source);
  const std::string release_sha = load_script(compare_and_delete_lua);
  const RawCommand acquire{"EVALSHA",         acquire_sha, "2",    "bench:raw",
                           "bench:raw:fence", "tok",       "30000"};
  const RawCommand release{"EVALSHA", release_sha, "1", "bench:raw", "tok"};
  const CycleCounters counters;
  for (auto _ : state) {
    if (!acquire.run(redis.get(), REDIS_REPLY_ARRAY, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_FencedAcquire_EvalshaDel)->UseRealTime();

// Master + 1 replica: SET NX PX and WAIT 1 pipelined, then the release.
void BM_Raw_SetNxPx_Wait1_EvalshaDel(benchmark::State& state) {
  const RawConnection redis = raw_connect(replicated_master_options());
  const std::string sha = load_script(compare_and_delete_lua, replicated_master_options());
  const RawCommand set{"SET", "bench:raw", "tok", "NX", "PX", "30000"};
  const RawCommand wait{"WAIT", "1", "1000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:raw", "tok"};
  for (auto _ : state) {
    set.append(redis.get());
    wait.append(redis.get());
    if (!flush(redis.get(), state)) break;
    if (!read_replies(redis.get(), 1, REDIS_REPLY_STATUS, state)) break;
    if (!read_replies(redis.get(), 1, REDIS_REPLY_INTEGER, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_SetNxPx_Wait1_EvalshaDel)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
