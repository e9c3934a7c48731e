// GoogleTest glue for tests that need a real redis-server.
//
// Defines distlock::testing::require_redis_server(), the
// DISTLOCK_REQUIRE_REDIS_SERVER() macro for the top of SetUp() or a test
// body, and the distlock::testing::RedisTest fixture, which gives every test
// its own freshly started RedisServer. Without redis-server installed every
// such test fails.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "distlock/client.hpp"
#include "support/options.hpp"
#include "support/redis_server.hpp"

namespace distlock {
namespace testing {

// Every test that needs a server fails without one: a suite that skipped
// them would pass having tested nothing.
inline void require_redis_server() {
  if (RedisServer::available()) return;
  GTEST_FAIL() << "redis-server not found in $DISTLOCK_TEST_SERVER_BIN, on PATH or at "
                  "/usr/bin/redis-server; install it (e.g. apt-get install redis-server)";
}

}  // namespace testing
}  // namespace distlock

// Returns from the enclosing void function (SetUp() or a test body) when the
// test failed for lack of redis-server (GTEST_FAIL returns only from
// require_redis_server itself).
#define DISTLOCK_REQUIRE_REDIS_SERVER()             \
  do {                                              \
    ::distlock::testing::require_redis_server();    \
    if (::testing::Test::HasFatalFailure()) return; \
  } while (false)

namespace distlock {
namespace testing {

class RedisTest : public ::testing::Test {
 public:
  RedisServer& server() { return *server_; }

 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    server_ = std::make_unique<RedisServer>(server_options());
  }

  void TearDown() override { server_.reset(); }

  // Derived fixtures override this to start the server with other settings.
  virtual RedisServerOptions server_options() const { return {}; }

  std::unique_ptr<RedisServer> server_;
};

/// RedisTest plus a distlock Client connected to the server.
class RedisClientTest : public RedisTest {
 public:
  Client& client() { return *client_; }

  /// GET key, as "(nil)" when there is none.
  std::string get(const std::string& key) {
    const Reply value = client().command("GET", key);
    return value.is_nil() ? "(nil)" : std::string(value.str());
  }

 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = std::make_unique<Client>(client_options(server()));
  }

  void TearDown() override {
    client_.reset();
    RedisTest::TearDown();
  }

  std::unique_ptr<Client> client_;
};

}  // namespace testing
}  // namespace distlock
