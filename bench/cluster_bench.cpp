// Mutex on a free lock against the same two commands sent raw to the
// node that owns the lock's slot: what the cluster routing (slot lookup,
// MOVED/ASK handling) adds to a lock and release.
//
// The cluster is a throwaway one of 3 masters started on first use
// (support/redis_cluster.hpp, which does not depend on GoogleTest), or the
// one named by DISTLOCK_BENCH_CLUSTER=host:port,host:port,...
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "bench_support.hpp"
#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/detail/wire/sharded_scripts.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "paired.hpp"
#include "support/redis_cluster.hpp"

namespace distlock::bench {
namespace {

constexpr const char* lock_name = "bench:cluster:lock";

const ClusterOptions& cluster_options() {
  static std::unique_ptr<testing::RedisCluster> own_cluster;
  static const ClusterOptions options = [] {
    if (const char* where = std::getenv("DISTLOCK_BENCH_CLUSTER"); where && *where) {
      return ClusterOptions::from_uri(std::string("redis://") + where);
    }
    own_cluster = std::make_unique<testing::RedisCluster>(3);
    return ClusterOptions(own_cluster->seed_list());
  }();
  return options;
}

/// The node that owns `key`'s slot, as the cluster says now.
ClientOptions owner_of(const std::string& key) {
  ClusterClient cluster(cluster_options());
  const ConnectionOptions where = detail::parse_seed(cluster.node_of(detail::key_slot(key)));
  ClientOptions options;
  options.host = where.host;
  options.port = where.port;
  return options;
}

void BM_Cluster_Mutex_LockUnlock(benchmark::State& state) {
  ClusterClient cluster(cluster_options());
  Mutex lock(cluster, lock_name);
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_Cluster_Mutex_LockUnlock)->UseRealTime();

// SET NX PX and the compare-and-delete, on one connection to the slot's
// owner: what a cluster-aware client that already knows the owner sends.
void BM_Raw_Cluster_SetNxPx_EvalshaDel(benchmark::State& state) {
  const std::string key = std::string(lock_name) + ":raw";
  const ClientOptions owner = owner_of(key);
  const RawConnection redis = raw_connect(owner);
  const std::string sha = load_script(compare_and_delete_lua, owner);
  const RawCommand set{"SET", key, "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", key, "tok"};
  for (auto _ : state) {
    if (!set.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_Cluster_SetNxPx_EvalshaDel)->UseRealTime();

// What Mutex sends, byte for byte in size, raw: SET NX PX with a
// 32-digit token, then its own release script (sharded twin: it SPUBLISHes
// on the lock's channel, a second key of the same slot). Against this, the
// ratio is what the client adds; against the one above, also what the
// release's announcement costs the server.
void BM_Raw_Cluster_SetNxPx_EvalshaDelSpublish(benchmark::State& state) {
  const std::string key = std::string(lock_name) + ":raw-spublish";
  const std::string channel = detail::companion_key(key, "released");
  const std::string token(32, 'f');
  const ClientOptions owner = owner_of(key);
  const RawConnection redis = raw_connect(owner);
  const std::string sha = load_script(detail::with_sharded_publish(scripts::release).source, owner);
  const RawCommand set{"SET", key, token, "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "2", key, channel, token};
  for (auto _ : state) {
    if (!set.run(redis.get(), REDIS_REPLY_STATUS, state)) break;
    if (!release.run(redis.get(), REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_Cluster_SetNxPx_EvalshaDelSpublish)->UseRealTime();

// The cycle and its floors in turns (paired.hpp), the raw key in the
// lock's slot so that both sides talk to the same node: the plain SET NX
// PX + compare-and-delete, and (_SameCommands) exactly what Mutex
// sends, its token and its SPUBLISH release.
void paired_cluster(benchmark::State& state, const std::string& token,
                    std::string_view release_source, bool with_channel) {
  const std::string key = std::string("{") + lock_name + "}:raw";
  const std::string channel = detail::companion_key(key, "released");
  const ClientOptions owner = owner_of(key);
  const RawConnection redis = raw_connect(owner);
  const std::string sha = load_script(release_source, owner);
  const RawCommand set{"SET", key, token, "NX", "PX", "30000"};
  const RawCommand release = with_channel ? RawCommand{"EVALSHA", sha, "2", key, channel, token}
                                          : RawCommand{"EVALSHA", sha, "1", key, token};
  ClusterClient cluster(cluster_options());
  Mutex lock(cluster, lock_name);
  run_paired(state, lock_unlock_cycle(state, lock),
             raw_cycle(state, redis.get(), set, REDIS_REPLY_STATUS, release));
}

void BM_Paired_Cluster_Mutex_LockUnlock(benchmark::State& state) {
  paired_cluster(state, "tok", compare_and_delete_lua, false);
}
BENCHMARK(BM_Paired_Cluster_Mutex_LockUnlock)->UseManualTime();

void BM_Paired_Cluster_Mutex_LockUnlock_SameCommands(benchmark::State& state) {
  paired_cluster(state, std::string(32, 'f'), detail::with_sharded_publish(scripts::release).source,
                 true);
}
BENCHMARK(BM_Paired_Cluster_Mutex_LockUnlock_SameCommands)->UseManualTime();

}  // namespace
}  // namespace distlock::bench
