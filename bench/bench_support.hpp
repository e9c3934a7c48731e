// What every benchmark in distlock_bench shares: the Redis server they run
// against, raw hiredis commands for the baselines, and the table of ratios
// printed after the run.
//
// By default the binary starts its own throwaway redis-server on loopback
// (it inherits the binary's CPU pinning) and stops it at exit; with
// DISTLOCK_BENCH_REDIS=host:port it uses that server instead.
#pragma once

#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/client.hpp"

namespace distlock::bench {

/// Where the benchmarks' server is; starts it on first use.
const ClientOptions& server_options();

/// A TLS-only server (tls_bench.cpp), with certificates made for the run,
/// and options that reach it trusting them; started on first use.
const ClientOptions& tls_server_options();

/// A master with one replica of its own (started on first use), for the
/// replica-acknowledgement benchmarks; always local.
const ClientOptions& replicated_master_options();

struct FreeContext {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
/// A raw hiredis connection, for the baselines.
using RawConnection = std::unique_ptr<redisContext, FreeContext>;
RawConnection raw_connect(const ConnectionOptions& options);

/// A command prepared once for hiredis's argv API, so the timed loop does
/// nothing but send it.
class RawCommand {
 public:
  RawCommand(std::initializer_list<std::string_view> args);
  /// Sends it, reads the reply and returns true if its type is expected;
  /// otherwise records the error on state.
  bool run(redisContext* context, int expected_type, benchmark::State& state) const;
  /// The same, reporting nothing (for threads other than the benchmark's).
  bool run(redisContext* context, int expected_type) const;
  /// Queues it without waiting (a pipeline; see read_replies).
  void append(redisContext* context) const;

 private:
  std::vector<std::string> storage_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lengths_;
};

/// Writes everything queued on context without reading a reply, so that
/// commands to several servers are all on their way before any reply is
/// awaited; false (and the error recorded on state) if the write failed.
bool flush(redisContext* context, benchmark::State& state);

/// The classic compare-and-delete, the cheapest safe release there is.
inline constexpr std::string_view compare_and_delete_lua =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

/// Reads `count` queued replies, checking each one's type.
bool read_replies(redisContext* context, int count, int expected_type, benchmark::State& state);

/// Compare-and-delete that also announces the release (KEYS[2] channel).
inline constexpr std::string_view compare_delete_publish_lua =
    "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) "
    "redis.call('publish', KEYS[2], '0') return 1 end return 0";

/// Loads a script on the benchmarks' server (or `where`) and returns its SHA-1.
std::string load_script(std::string_view source);
std::string load_script(std::string_view source, const ClientOptions& where);

}  // namespace distlock::bench
