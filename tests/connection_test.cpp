// Tests for connection.hpp and reply.hpp against real redis-servers.
#include "distlock/connection.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::RedisServer;
using testing::RedisServerOptions;
using Clock = std::chrono::steady_clock;

class ConnectionTest : public testing::RedisTest {
 protected:
  ConnectionOptions options() { return client_options(server()); }
};

// Runs command on a fresh connection and returns the kind of the ServerError
// it throws; fails the test if it does not throw one.
template <class... Arg>
ServerErrorKind server_error_kind(Connection& connection, const Arg&... args) {
  try {
    connection.command(args...);
  } catch (const ServerError& error) {
    EXPECT_EQ(error.code(), Errc::server_error);
    return error.kind();
  }
  ADD_FAILURE() << "no ServerError thrown";
  return ServerErrorKind::other;
}

TEST_F(ConnectionTest, PingAndTypedReplies) {
  Connection connection(options());
  EXPECT_TRUE(connection.command("PING").is_string());
  EXPECT_EQ(connection.command("PING").str(), "PONG");
  EXPECT_TRUE(connection.command("SET", "k", "v").is_ok());
  EXPECT_EQ(connection.command("GET", "k").str(), "v");
  EXPECT_TRUE(connection.command("GET", "missing").is_nil());
  EXPECT_EQ(connection.command("INCR", "n").integer(), 1);
  connection.command("RPUSH", "list", "a", "b");
  const Reply list = connection.command("LRANGE", "list", "0", "-1");
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].str(), "a");
  EXPECT_EQ(list[1].str(), "b");
}

TEST_F(ConnectionTest, BinaryKeysAndValuesRoundTripIntact) {
  Connection connection(options());
  const std::string key("lock\0name\r\n", 11);
  const std::string value("\0\xff\x01 token", 10);
  connection.command("SET", key, value);
  EXPECT_EQ(connection.command("GET", key).str(), value);
  EXPECT_TRUE(connection.command("GET", std::string("lock")).is_nil());
  EXPECT_EQ(connection.command("STRLEN", key).integer(), 10);
}

TEST_F(ConnectionTest, PipelineReadsRepliesInOrder) {
  Connection connection(options());
  for (int i = 0; i < 100; ++i) connection.append("INCR", "counter");
  EXPECT_EQ(connection.pending(), 100u);
  for (long long i = 1; i <= 100; ++i) EXPECT_EQ(connection.read_reply().integer(), i);
  EXPECT_EQ(connection.pending(), 0u);
}

TEST_F(ConnectionTest, PipelineReturnsErrorRepliesWithoutThrowing) {
  Connection connection(options());
  connection.command("HSET", "hash", "f", "v");
  connection.append("GET", "hash");
  connection.append("PING");
  EXPECT_TRUE(connection.read_reply().is_error());
  EXPECT_EQ(connection.read_reply().str(), "PONG");
  EXPECT_FALSE(connection.broken());
}

TEST_F(ConnectionTest, RefusedConnectionThrowsConnectFailed) {
  ConnectionOptions where = options();
  server().kill();
  try {
    Connection connection(where);
    FAIL() << "connected to a dead server";
  } catch (const ConnectionError& error) {
    EXPECT_EQ(error.code(), Errc::connect_failed);
    EXPECT_NE(std::string(error.what()).find(std::to_string(where.port)), std::string::npos);
  }
}

TEST_F(ConnectionTest, CommandTimesOutAgainstStoppedServerWithinBudget) {
  ConnectionOptions where = options();
  where.command_timeout = 200ms;
  Connection connection(where);
  connection.command("PING");
  server().pause();
  const auto start = Clock::now();
  EXPECT_THROW(connection.command("PING"), TimeoutError);
  const auto elapsed = Clock::now() - start;
  server().resume();
  EXPECT_LT(elapsed, where.command_timeout + 100ms);
  EXPECT_GE(elapsed, where.command_timeout - 10ms);
  EXPECT_TRUE(connection.broken());
}

TEST_F(ConnectionTest, TimeoutErrorCarriesTimedOutCode) {
  ConnectionOptions where = options();
  where.command_timeout = 50ms;
  Connection connection(where);
  server().pause();
  try {
    connection.command("PING");
    ADD_FAILURE() << "no timeout";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.code(), Errc::timed_out);
  }
  server().resume();
}

TEST_F(ConnectionTest, ServerClosingTheConnectionIsAnIoError) {
  Connection connection(options());
  connection.command("PING");
  server().kill();
  try {
    connection.command("PING");
    ADD_FAILURE() << "no error from a dead server";
  } catch (const ConnectionError& error) {
    EXPECT_EQ(error.code(), Errc::io_error);
  }
  EXPECT_TRUE(connection.broken());
}

TEST_F(ConnectionTest, StaleAfterServerKillsIt) {
  Connection connection(options());
  Connection admin(options());
  EXPECT_FALSE(connection.stale());
  admin.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
  const auto deadline = Clock::now() + 2s;
  while (!connection.stale() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(connection.stale());
}

TEST_F(ConnectionTest, WrongTypeIsMapped) {
  Connection connection(options());
  connection.command("HSET", "hash", "f", "v");
  EXPECT_EQ(server_error_kind(connection, "GET", "hash"), ServerErrorKind::wrongtype);
  EXPECT_FALSE(connection.broken());
  EXPECT_EQ(connection.command("PING").str(), "PONG");
}

TEST_F(ConnectionTest, NoScriptIsMapped) {
  Connection connection(options());
  const Reply sha = connection.command("SCRIPT", "LOAD", "return 1");
  connection.command("SCRIPT", "FLUSH");
  EXPECT_EQ(server_error_kind(connection, "EVALSHA", sha.str(), "0"), ServerErrorKind::noscript);
}

TEST_F(ConnectionTest, EvalFallsBackToEvalOnNoScriptAndCachesTheScript) {
  Connection connection(options());
  const std::string_view source = "return ARGV[1]";
  const Reply sha = connection.command("SCRIPT", "LOAD", source);
  const Script known{source, sha.str()};
  connection.command("SCRIPT", "FLUSH");
  EXPECT_EQ(connection.eval(known, {}, {"x"}).str(), "x");
  EXPECT_EQ(connection.command("SCRIPT", "EXISTS", sha.str())[0].integer(), 1);
  EXPECT_EQ(connection.eval(known, {}, {"y"}).str(), "y");
}

TEST_F(ConnectionTest, BusyIsMapped) {
  Connection connection(options());
  connection.command("CONFIG", "SET", "busy-reply-threshold", "10");
  Connection runner(options());
  runner.append("EVAL", "while true do end", "0");
  runner.flush();
  std::this_thread::sleep_for(50ms);  // let the script pass the threshold
  EXPECT_EQ(server_error_kind(connection, "PING"), ServerErrorKind::busy);
  connection.command("SCRIPT", "KILL");
}

TEST_F(ConnectionTest, NoReplicasIsMapped) {
  Connection connection(options());
  connection.command("CONFIG", "SET", "min-replicas-to-write", "1");
  EXPECT_EQ(server_error_kind(connection, "SET", "k", "v"), ServerErrorKind::noreplicas);
}

class OomConnectionTest : public ConnectionTest {
  RedisServerOptions server_options() const override {
    RedisServerOptions o;
    o.config_lines = {"maxmemory 1", "maxmemory-policy noeviction"};
    return o;
  }
};

TEST_F(OomConnectionTest, OomIsMapped) {
  Connection connection(options());
  EXPECT_EQ(server_error_kind(connection, "SET", "k", "v"), ServerErrorKind::oom);
  EXPECT_TRUE(connection.command("GET", "k").is_nil());  // reads still work
}

class AclConnectionTest : public ConnectionTest {
  RedisServerOptions server_options() const override {
    RedisServerOptions o;
    o.requirepass = "default-secret";
    o.config_lines = {"user alice on >alice-secret ~* &* +@all -set"};
    return o;
  }
};

TEST_F(AclConnectionTest, NoAuthIsMapped) {
  Connection connection(options());  // no credentials
  EXPECT_EQ(server_error_kind(connection, "GET", "k"), ServerErrorKind::noauth);
}

TEST_F(AclConnectionTest, WrongPasswordFailsTheConnectWithoutLeakingIt) {
  ConnectionOptions where = options();
  where.username = "alice";
  where.password = "not-the-password";
  try {
    Connection connection(where);
    FAIL() << "authenticated with a wrong password";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::wrongpass);
    EXPECT_EQ(std::string(error.what()).find("not-the-password"), std::string::npos);
  }
}

TEST_F(AclConnectionTest, AclUserAuthenticatesAndNoPermIsMapped) {
  ConnectionOptions where = options();
  where.username = "alice";
  where.password = "alice-secret";
  Connection connection(where);
  EXPECT_EQ(connection.command("ACL", "WHOAMI").str(), "alice");
  EXPECT_EQ(server_error_kind(connection, "SET", "k", "v"), ServerErrorKind::noperm);
}

TEST_F(AclConnectionTest, LegacyPasswordAuthenticates) {
  ConnectionOptions where = options();
  where.password = "default-secret";
  Connection connection(where);
  EXPECT_EQ(connection.command("ACL", "WHOAMI").str(), "default");
}

TEST_F(ConnectionTest, ReadOnlyIsMappedOnAReplica) {
  RedisServerOptions replica_options;
  replica_options.config_lines = {"replicaof 127.0.0.1 " + std::to_string(server().port())};
  RedisServer replica(replica_options);
  Connection connection(client_options(replica));
  EXPECT_EQ(server_error_kind(connection, "SET", "k", "v"), ServerErrorKind::readonly);
}

TEST_F(ConnectionTest, SelectsTheConfiguredDb) {
  ConnectionOptions where = options();
  where.db = 3;
  Connection connection(where);
  connection.command("SET", "k", "in-db-3");
  Connection db0(options());
  EXPECT_TRUE(db0.command("GET", "k").is_nil());
  db0.command("SELECT", "3");
  EXPECT_EQ(db0.command("GET", "k").str(), "in-db-3");
}

class UnixSocketConnectionTest : public ConnectionTest {
  RedisServerOptions server_options() const override {
    RedisServerOptions o;
    o.unix_socket = true;
    return o;
  }
};

TEST_F(UnixSocketConnectionTest, ConnectsOverUnixSocket) {
  ConnectionOptions where;
  where.unix_socket = server().unix_path();
  Connection connection(where);
  EXPECT_EQ(connection.command("PING").str(), "PONG");
}

TEST(ConnectionOptions, ParsesRedisUri) {
  const ConnectionOptions o = ConnectionOptions::from_uri("redis://alice:s3cret@db.local:6380/2");
  EXPECT_EQ(o.username, "alice");
  EXPECT_EQ(o.password, "s3cret");
  EXPECT_EQ(o.host, "db.local");
  EXPECT_EQ(o.port, 6380);
  EXPECT_EQ(o.db, 2);
  const ConnectionOptions plain = ConnectionOptions::from_uri("redis://localhost");
  EXPECT_EQ(plain.host, "localhost");
  EXPECT_EQ(plain.port, 6379);
  EXPECT_TRUE(plain.password.empty());
  const ConnectionOptions legacy = ConnectionOptions::from_uri("redis://:pw@h:1");
  EXPECT_TRUE(legacy.username.empty());
  EXPECT_EQ(legacy.password, "pw");
  const ConnectionOptions local = ConnectionOptions::from_uri("unix:///tmp/r.sock?db=4");
  EXPECT_EQ(local.unix_socket, "/tmp/r.sock");
  EXPECT_EQ(local.db, 4);
}

TEST(ConnectionOptions, RejectsBadUrisAndValues) {
  EXPECT_THROW(ConnectionOptions::from_uri("http://x"), InvalidArgument);
  EXPECT_THROW(ConnectionOptions::from_uri("redis://"), InvalidArgument);
  EXPECT_THROW(ConnectionOptions::from_uri("redis://h:notaport"), InvalidArgument);
  EXPECT_THROW(ConnectionOptions::from_uri("redis://h:70000"), InvalidArgument);
  EXPECT_THROW(ConnectionOptions::from_uri("unix://"), InvalidArgument);
  ConnectionOptions o;
  o.command_timeout = 0ms;
  EXPECT_THROW(o.validate(), InvalidArgument);
  o = {};
  o.connect_timeout = -5ms;
  EXPECT_THROW(o.validate(), InvalidArgument);
  o = {};
  o.db = -1;
  EXPECT_THROW(o.validate(), InvalidArgument);
  EXPECT_THROW(Connection{o}, InvalidArgument);
}

}  // namespace
}  // namespace distlock
