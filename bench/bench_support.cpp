// The shared pieces of distlock_bench: the server it runs against and the
// raw hiredis commands of the baselines.
#include "bench_support.hpp"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "distlock/detail/wire/connection.hpp"
#include "support/redis_server.hpp"
#include "support/replicated_server.hpp"

namespace distlock::bench {

const ClientOptions& server_options() {
  // Started once, on first use, and killed by its destructor at exit.
  static std::unique_ptr<testing::RedisServer> own_server;
  static const ClientOptions options = [] {
    ClientOptions o;
    if (const char* where = std::getenv("DISTLOCK_BENCH_REDIS"); where && *where) {
      o = ClientOptions::from_uri(std::string("redis://") + where);
    } else {
      own_server = std::make_unique<testing::RedisServer>();
      o.host = own_server->host();
      o.port = own_server->port();
    }
    return o;
  }();
  return options;
}

const ClientOptions& replicated_master_options() {
  static std::unique_ptr<testing::ReplicatedServer> servers;
  static const ClientOptions options = [] {
    servers = std::make_unique<testing::ReplicatedServer>(1);
    ClientOptions o;
    o.host = servers->master().host();
    o.port = servers->master().port();
    return o;
  }();
  return options;
}

RawConnection raw_connect(const ConnectionOptions& options) {
  RawConnection context(redisConnect(options.host.c_str(), options.port));
  if (!context || context->err != 0) {
    throw std::runtime_error("cannot connect to " + options.endpoint());
  }
  return context;
}

RawCommand::RawCommand(std::initializer_list<std::string_view> args)
    : storage_(args.begin(), args.end()) {
  for (const std::string& arg : storage_) {
    argv_.push_back(arg.data());
    lengths_.push_back(arg.size());
  }
}

bool RawCommand::run(redisContext* context, int expected_type, benchmark::State& state) const {
  // hiredis takes `const char**`; it never writes through it.
  auto* reply = static_cast<redisReply*>(redisCommandArgv(context, static_cast<int>(argv_.size()),
                                                          const_cast<const char**>(argv_.data()),
                                                          lengths_.data()));
  if (reply == nullptr) {
    state.SkipWithError(context->errstr);
    return false;
  }
  const bool as_expected = reply->type == expected_type;
  if (!as_expected) {
    state.SkipWithError(reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply type");
  }
  freeReplyObject(reply);
  return as_expected;
}

bool RawCommand::run(redisContext* context, int expected_type) const {
  auto* reply = static_cast<redisReply*>(redisCommandArgv(context, static_cast<int>(argv_.size()),
                                                          const_cast<const char**>(argv_.data()),
                                                          lengths_.data()));
  const bool as_expected = reply != nullptr && reply->type == expected_type;
  if (reply != nullptr) freeReplyObject(reply);
  return as_expected;
}

void RawCommand::append(redisContext* context) const {
  redisAppendCommandArgv(context, static_cast<int>(argv_.size()),
                         const_cast<const char**>(argv_.data()), lengths_.data());
}

bool flush(redisContext* context, benchmark::State& state) {
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context, &done) != REDIS_OK) {
      state.SkipWithError(context->errstr);
      return false;
    }
  }
  return true;
}

bool read_replies(redisContext* context, int count, int expected_type, benchmark::State& state) {
  bool all_expected = true;
  for (int i = 0; i < count; ++i) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) != REDIS_OK) {
      state.SkipWithError(context->errstr);
      return false;
    }
    auto* reply = static_cast<redisReply*>(raw);
    all_expected = all_expected && reply->type == expected_type;
    freeReplyObject(reply);
  }
  if (!all_expected) state.SkipWithError("unexpected reply type in pipeline");
  return all_expected;
}

std::string load_script(std::string_view source) { return load_script(source, server_options()); }

std::string load_script(std::string_view source, const ClientOptions& where) {
  Connection connection(where);
  return std::string(connection.command("SCRIPT", "LOAD", source).str());
}

}  // namespace distlock::bench
