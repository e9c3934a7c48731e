// Connection options that point distlock at a test RedisServer.
#pragma once

#include <chrono>

#include "distlock/client.hpp"
#include "support/redis_server.hpp"

namespace distlock::testing {

/// Options for a TCP connection to server, with short timeouts so that a
/// test against a stopped server ends quickly.
inline ClientOptions client_options(const RedisServer& server) {
  ClientOptions options;
  options.host = server.host();
  options.port = server.port();
  options.connect_timeout = std::chrono::milliseconds(1000);
  options.command_timeout = std::chrono::milliseconds(1000);
  return options;
}

}  // namespace distlock::testing
