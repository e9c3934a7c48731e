// The TLS server of the benchmarks, the raw floor of Mutex over TLS
// (BM_Mutex_LockUnlock_Tls, in mutex_bench.cpp): the same two commands on
// one blocking OpenSSL connection, replies parsed by hiredis's reader, so
// the ratio is what distlock adds, not what TLS costs. And the price of a
// new connection: TCP and the TLS handshake against TCP alone.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bench_support.hpp"
#include "counters.hpp"
#include "distlock/detail/wire/command_format.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "support/redis_server.hpp"
#include "support/test_certs.hpp"

namespace distlock::bench {

const ClientOptions& tls_server_options() {
  static std::string folder;
  static std::unique_ptr<testing::TestPki> pki;
  static std::unique_ptr<testing::RedisServer> server;
  static const ClientOptions options = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "distlock-bench-tls-XXXXXX").string();
    folder = ::mkdtemp(pattern.data());
    pki = std::make_unique<testing::TestPki>(folder);
    testing::RedisServerOptions server_options;
    server_options.tls = testing::RedisServerTls{pki->server.cert, pki->server.key, pki->ca.file()};
    server = std::make_unique<testing::RedisServer>(server_options);
    ClientOptions o;
    o.host = server->host();
    o.port = server->port();
    o.tls.enabled = true;
    o.tls.ca_file = pki->ca.file();
    return o;
  }();
  return options;
}

namespace {

// The floor's connection: blocking TCP, OpenSSL verifying as distlock does,
// commands formatted into one buffer, replies read by hiredis's reader.
class RawTls {
 public:
  explicit RawTls(const ClientOptions& options) {
    context_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(context_, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_load_verify_locations(context_, options.tls.ca_file.c_str(), nullptr);
    SSL_CTX_set_read_ahead(context_, 1);  // as distlock reads: a record in one read(2)
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(options.port));
    ::inet_pton(AF_INET, options.host.c_str(), &address.sin_addr);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("raw TLS: connect failed");
    }
    ssl_ = SSL_new(context_);
    SSL_set_fd(ssl_, fd_);
    SSL_set1_host(ssl_, options.host.c_str());
    if (SSL_connect(ssl_) != 1) throw std::runtime_error("raw TLS: handshake failed");
    reader_ = redisReaderCreate();
  }
  ~RawTls() {
    redisReaderFree(reader_);
    SSL_free(ssl_);
    ::close(fd_);
    SSL_CTX_free(context_);
  }
  RawTls(const RawTls&) = delete;
  RawTls& operator=(const RawTls&) = delete;

  // Sends argv and reads its reply; false (the benchmark skipped) unless
  // the reply is of `expected_type`.
  bool run(detail::Args argv, int expected_type, benchmark::State& state) {
    out_.clear();
    detail::append_command(argv, out_);
    if (SSL_write(ssl_, out_.data(), static_cast<int>(out_.size())) <= 0) {
      state.SkipWithError("raw TLS: write failed");
      return false;
    }
    void* reply = nullptr;
    while (redisReaderGetReply(reader_, &reply) == REDIS_OK && reply == nullptr) {
      char buffer[16 * 1024];
      const int n = SSL_read(ssl_, buffer, sizeof buffer);
      if (n <= 0) break;
      redisReaderFeed(reader_, buffer, static_cast<std::size_t>(n));
    }
    if (reply == nullptr) {
      state.SkipWithError("raw TLS: no reply");
      return false;
    }
    const bool as_expected = static_cast<redisReply*>(reply)->type == expected_type;
    if (!as_expected) state.SkipWithError("raw TLS: unexpected reply");
    freeReplyObject(reply);
    return as_expected;
  }

 private:
  SSL_CTX* context_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  redisReader* reader_ = nullptr;
  std::string out_;
};

void BM_Raw_Tls_SetNxPx_EvalshaDel(benchmark::State& state) {
  const ClientOptions& options = tls_server_options();
  const std::string sha = load_script(compare_and_delete_lua, options);
  RawTls redis(options);
  const std::string_view set[] = {"SET", "bench:raw", "tok", "NX", "PX", "30000"};
  const std::string_view release[] = {"EVALSHA", sha, "1", "bench:raw", "tok"};
  const CycleCounters counters;
  for (auto _ : state) {
    if (!redis.run(detail::Args(set, 6), REDIS_REPLY_STATUS, state)) break;
    if (!redis.run(detail::Args(release, 5), REDIS_REPLY_INTEGER, state)) break;
  }
  counters.report(state);
}
BENCHMARK(BM_Raw_Tls_SetNxPx_EvalshaDel)->UseRealTime();

// A new connection and its first reply (PING), plain and over TLS: the
// difference is the handshake's price, paid once per pooled connection.
void connect_ping(benchmark::State& state, const ConnectionOptions& options) {
  for (auto _ : state) {
    Connection connection(options);
    benchmark::DoNotOptimize(connection.command("PING"));
  }
}

void BM_Connect_Plain(benchmark::State& state) { connect_ping(state, server_options()); }
BENCHMARK(BM_Connect_Plain)->UseRealTime();

void BM_Connect_Tls(benchmark::State& state) { connect_ping(state, tls_server_options()); }
BENCHMARK(BM_Connect_Tls)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
