// Mutex's cycle against its floors in turns (paired.hpp): the plain cycle
// against SET NX PX + the compare-and-delete, the fenced one against the
// fenced acquire script + the same release, each pair on one server; and
// each against the very commands Mutex sends, raw (_SameCommands). Then
// ReentrantMutex's and FairMutex's against the plain floor.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "paired.hpp"

namespace distlock::bench {
namespace {

template <class Lock = Mutex>
void paired_lock_unlock(benchmark::State& state, const LockOptions& options,
                        const RawCommand& acquire, int acquired_type, const RawCommand& release) {
  Client client(server_options());
  Lock lock(client, "bench:lock", options);
  const RawConnection redis = raw_connect(server_options());
  run_paired(state, lock_unlock_cycle(state, lock),
             raw_cycle(state, redis.get(), acquire, acquired_type, release));
}

// Mutex's own names for the raw key's companions, as its scripts get them.
const std::string raw_channel = detail::companion_key("bench:raw", "released");
const std::string raw_fence = detail::companion_key("bench:raw", "fence");

// `Lock`'s cycle against the plain floor: SET NX PX + compare-and-delete.
template <class Lock>
void paired_against_plain_floor(benchmark::State& state) {
  const std::string sha = load_script(compare_and_delete_lua);
  paired_lock_unlock<Lock>(state, LockOptions{}, {"SET", "bench:raw", "tok", "NX", "PX", "30000"},
                           REDIS_REPLY_STATUS, {"EVALSHA", sha, "1", "bench:raw", "tok"});
}

void BM_Paired_Mutex_LockUnlock(benchmark::State& state) {
  paired_against_plain_floor<Mutex>(state);
}
BENCHMARK(BM_Paired_Mutex_LockUnlock)->UseManualTime();

// The same, against exactly what Mutex sends: its 32-character token and
// its own release script, which also announces the release on the lock's
// channel. The ratio is what the client adds; the one above also counts
// the announcement, the server's part of wake-on-release.
void BM_Paired_Mutex_LockUnlock_SameCommands(benchmark::State& state) {
  const std::string sha = load_script(scripts::release.source);
  const std::string token(32, 'f');
  paired_lock_unlock(state, LockOptions{}, {"SET", "bench:raw", token, "NX", "PX", "30000"},
                     REDIS_REPLY_STATUS, {"EVALSHA", sha, "2", "bench:raw", raw_channel, token});
}
BENCHMARK(BM_Paired_Mutex_LockUnlock_SameCommands)->UseManualTime();

void BM_Paired_Mutex_LockUnlock_Fenced(benchmark::State& state) {
  const std::string acquire_sha = load_script(scripts::acquire_fenced.source);
  const std::string release_sha = load_script(compare_and_delete_lua);
  paired_lock_unlock(state, LockOptions{}.fencing(true),
                     {"EVALSHA", acquire_sha, "2", "bench:raw", "bench:raw:fence", "tok", "30000"},
                     REDIS_REPLY_ARRAY, {"EVALSHA", release_sha, "1", "bench:raw", "tok"});
}
BENCHMARK(BM_Paired_Mutex_LockUnlock_Fenced)->UseManualTime();

void BM_Paired_Mutex_LockUnlock_Fenced_SameCommands(benchmark::State& state) {
  const std::string acquire_sha = load_script(scripts::acquire_fenced.source);
  const std::string release_sha = load_script(scripts::release.source);
  const std::string token(32, 'f');
  paired_lock_unlock(state, LockOptions{}.fencing(true),
                     {"EVALSHA", acquire_sha, "2", "bench:raw", raw_fence, token, "30000"},
                     REDIS_REPLY_ARRAY,
                     {"EVALSHA", release_sha, "2", "bench:raw", raw_channel, token});
}
BENCHMARK(BM_Paired_Mutex_LockUnlock_Fenced_SameCommands)->UseManualTime();

// The hash layouts' cycles against the plain floor: what their scripts cost
// beside SET NX PX (a hash field and a counter; the fair one also reads the
// server's clock and its empty queue), taken in turns like Mutex's.
void BM_Paired_ReentrantMutex_LockUnlock(benchmark::State& state) {
  paired_against_plain_floor<ReentrantMutex>(state);
}
BENCHMARK(BM_Paired_ReentrantMutex_LockUnlock)->UseManualTime();

void BM_Paired_FairMutex_LockUnlock(benchmark::State& state) {
  paired_against_plain_floor<FairMutex>(state);
}
BENCHMARK(BM_Paired_FairMutex_LockUnlock)->UseManualTime();

}  // namespace
}  // namespace distlock::bench
