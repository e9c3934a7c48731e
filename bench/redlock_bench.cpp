// Redlock over five masters on a free lock, and the raw hiredis round trips
// it needs: SET NX PX and a compare-and-delete EVALSHA on each of the five,
// one master after another (what a naive client does) and all five at once
// (the floor a fan-out can reach). The /masters:N variants do the same on
// the first N of the five, for the cycle's growth with the number of
// masters.
//
// By default the binary starts five throwaway redis-servers on loopback
// (they inherit its CPU pinning) and stops them at exit; with
// DISTLOCK_BENCH_REDLOCK=host:port,host:port,... it uses those instead.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/redlock.hpp"
#include "support/redis_server.hpp"

namespace distlock::bench {
namespace {

constexpr std::size_t masters_count = 5;

// Where the five masters are; started on first use.
const std::vector<ClientOptions>& masters_options() {
  // Killed by their destructors at exit.
  static std::vector<std::unique_ptr<testing::RedisServer>> own_servers;
  static const std::vector<ClientOptions> options = [] {
    std::vector<ClientOptions> out;
    if (const char* where = std::getenv("DISTLOCK_BENCH_REDLOCK"); where && *where) {
      std::string_view list = where;
      while (!list.empty()) {
        const auto comma = list.find(',');
        out.push_back(ClientOptions::from_uri("redis://" + std::string(list.substr(0, comma))));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
      return out;
    }
    for (std::size_t i = 0; i < masters_count; ++i) {
      own_servers.push_back(std::make_unique<testing::RedisServer>());
      ClientOptions o;
      o.host = own_servers.back()->host();
      o.port = own_servers.back()->port();
      out.push_back(o);
    }
    return out;
  }();
  return options;
}

bool have_five(benchmark::State& state) {
  if (masters_options().size() == masters_count) return true;
  state.SkipWithError("DISTLOCK_BENCH_REDLOCK must name exactly five servers");
  return false;
}

std::vector<RawConnection> raw_connect_all() {
  std::vector<RawConnection> out;
  for (const ClientOptions& options : masters_options()) out.push_back(raw_connect(options));
  return out;
}

// Loads the script on every master; they all name it by the same SHA-1.
std::string load_on_all(std::string_view source) {
  std::string sha;
  for (const ClientOptions& options : masters_options()) {
    Connection connection(options);
    sha = std::string(connection.command("SCRIPT", "LOAD", source).str());
  }
  return sha;
}

void BM_Redlock5_LockUnlock(benchmark::State& state) {
  if (!have_five(state)) return;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Client*> masters;
  for (const ClientOptions& options : masters_options()) {
    clients.push_back(std::make_unique<Client>(options));
    masters.push_back(clients.back().get());
  }
  Redlock lock(masters, "bench:redlock");
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_Redlock5_LockUnlock)->UseRealTime();

void BM_Raw5_Sequential_SetNxPx_EvalshaDel(benchmark::State& state) {
  if (!have_five(state)) return;
  const std::vector<RawConnection> redis = raw_connect_all();
  const std::string sha = load_on_all(compare_and_delete_lua);
  const RawCommand set{"SET", "bench:raw5", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:raw5", "tok"};
  const auto round = [&] {
    for (const RawConnection& master : redis) {
      if (!set.run(master.get(), REDIS_REPLY_STATUS, state)) return false;
      if (!release.run(master.get(), REDIS_REPLY_INTEGER, state)) return false;
    }
    return true;
  };
  for (auto _ : state) {
    if (!round()) break;
  }
}
BENCHMARK(BM_Raw5_Sequential_SetNxPx_EvalshaDel)->UseRealTime();

void BM_Raw5_Parallel_SetNxPx_EvalshaDel(benchmark::State& state) {
  if (!have_five(state)) return;
  const std::vector<RawConnection> redis = raw_connect_all();
  const std::string sha = load_on_all(compare_and_delete_lua);
  const RawCommand set{"SET", "bench:raw5", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:raw5", "tok"};
  // Every command is written before any reply is read, as a fan-out does.
  const auto fan_out = [&](const RawCommand& command, int expected_type) {
    for (const RawConnection& master : redis) command.append(master.get());
    for (const RawConnection& master : redis) {
      if (!flush(master.get(), state)) return false;
    }
    for (const RawConnection& master : redis) {
      if (!read_replies(master.get(), 1, expected_type, state)) return false;
    }
    return true;
  };
  for (auto _ : state) {
    if (!fan_out(set, REDIS_REPLY_STATUS) || !fan_out(release, REDIS_REPLY_INTEGER)) break;
  }
}
BENCHMARK(BM_Raw5_Parallel_SetNxPx_EvalshaDel)->UseRealTime();

// The cycle over the first state.range(0) masters.
void BM_Redlock_LockUnlock(benchmark::State& state) {
  if (!have_five(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Client*> masters;
  for (std::size_t i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<Client>(masters_options()[i]));
    masters.push_back(clients.back().get());
  }
  Redlock lock(masters, "bench:redlock");
  for (auto _ : state) {
    if (!lock.try_lock()) {
      state.SkipWithError("lock was not free");
      break;
    }
    lock.unlock();
  }
}
BENCHMARK(BM_Redlock_LockUnlock)->ArgName("masters")->DenseRange(1, 5)->UseRealTime();

void BM_RawN_Sequential_SetNxPx_EvalshaDel(benchmark::State& state) {
  if (!have_five(state)) return;
  std::vector<RawConnection> redis = raw_connect_all();
  redis.resize(static_cast<std::size_t>(state.range(0)));
  const std::string sha = load_on_all(compare_and_delete_lua);
  const RawCommand set{"SET", "bench:rawn", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:rawn", "tok"};
  for (auto _ : state) {
    for (const RawConnection& master : redis) {
      if (!set.run(master.get(), REDIS_REPLY_STATUS, state)) return;
      if (!release.run(master.get(), REDIS_REPLY_INTEGER, state)) return;
    }
  }
}
BENCHMARK(BM_RawN_Sequential_SetNxPx_EvalshaDel)
    ->ArgName("masters")
    ->DenseRange(1, 5)
    ->UseRealTime();

void BM_RawN_Parallel_SetNxPx_EvalshaDel(benchmark::State& state) {
  if (!have_five(state)) return;
  std::vector<RawConnection> redis = raw_connect_all();
  redis.resize(static_cast<std::size_t>(state.range(0)));
  const std::string sha = load_on_all(compare_and_delete_lua);
  const RawCommand set{"SET", "bench:rawn", "tok", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "1", "bench:rawn", "tok"};
  const auto fan_out = [&](const RawCommand& command, int expected_type) {
    for (const RawConnection& master : redis) command.append(master.get());
    for (const RawConnection& master : redis) {
      if (!flush(master.get(), state)) return false;
    }
    for (const RawConnection& master : redis) {
      if (!read_replies(master.get(), 1, expected_type, state)) return false;
    }
    return true;
  };
  for (auto _ : state) {
    if (!fan_out(set, REDIS_REPLY_STATUS) || !fan_out(release, REDIS_REPLY_INTEGER)) break;
  }
}
BENCHMARK(BM_RawN_Parallel_SetNxPx_EvalshaDel)->ArgName("masters")->DenseRange(1, 5)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
