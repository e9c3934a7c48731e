// Tests for detail/wire/connection.hpp and reply.hpp against real redis-servers.
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/command_format.hpp"
#include "distlock/sentinel_options.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

TEST_F(ConnectionTest, EmptyAndLargeArgumentsRoundTripIntact) {
  Connection connection(options());
  const std::string large(3 * 1024 * 1024 + 7, 'x');
  connection.command("SET", "empty", "");
  connection.command("SET", "large", large);
  EXPECT_EQ(connection.command("GET", "empty").str(), "");
  EXPECT_EQ(connection.command("STRLEN", "large").integer(), static_cast<long long>(large.size()));
  EXPECT_EQ(connection.command("GET", "large").str(), large);
  // A short command after a long one is not padded with what the long one left.
  EXPECT_EQ(connection.command("ECHO", "short").str(), "short");
}

// Commands are formatted by distlock, not by hiredis: byte for byte what
// hiredis's own formatting makes of the same arguments.
TEST(CommandFormat, MatchesHiredisFormattingByteForByte) {
  const std::string binary("a\0b\r\n\xff", 6);
  const std::string long_arg(100000, 'z');
  const std::vector<std::vector<std::string_view>> commands{
      {},
      {"PING"},
      {"SET", "key", ""},
      {"SET", binary, binary, "NX", "PX", "30000"},
      {"EVALSHA", "0123456789abcdef0123456789abcdef01234567", "2", "a", "b", "c", "d", "e", "f",
       "g", "h", "i", "j"},
      {"SET", "big", long_arg},
  };
  for (const std::vector<std::string_view>& argv : commands) {
    std::vector<const char*> pointers;
    std::vector<std::size_t> lengths;
    for (const std::string_view arg : argv) {
      pointers.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    char* raw = nullptr;
    const long long size = redisFormatCommandArgv(&raw, static_cast<int>(argv.size()),
                                                  pointers.data(), lengths.data());
    ASSERT_GT(size, 0);
    const std::string expected(raw, static_cast<std::size_t>(size));
    redisFreeCommand(raw);
    std::string formatted;
    detail::append_command(detail::Args(argv), formatted);
    EXPECT_EQ(formatted, expected) << argv.size() << " arguments";
    // Appended: a pipeline is its commands one after another.
    detail::append_command(detail::Args(argv), formatted);
    EXPECT_EQ(formatted, expected + expected) << argv.size() << " arguments";
  }
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

TEST_F(ConnectionTest, AWriteAStoppedServerCannotTakeTimesOut) {
  ConnectionOptions where = options();
  where.command_timeout = 200ms;
  Connection connection(where);
  connection.command("PING");
  server().pause();
  // More than the socket buffers on both sides hold: the write itself blocks.
  const std::string value(64 * 1024 * 1024, 'v');
  try {
    connection.command("SET", "big", value);
    ADD_FAILURE() << "a stopped server took 64 MB";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.code(), Errc::timed_out);
    EXPECT_NE(std::string(error.what()).find("SET"), std::string::npos) << error.what();
  }
  server().resume();
  EXPECT_TRUE(connection.broken());
}

// A reply that missed its deadline may still arrive; if the connection took
// another command, that late reply would be read as its answer. Here the
// deadline is cut short of the connection's own timeout (poll() keeps it,
// hiredis sees no error), the case a caller's deadline makes.
TEST_F(ConnectionTest, ABrokenConnectionRefusesTheNextCommand) {
  ConnectionOptions where = options();
  where.command_timeout = 2000ms;
  Connection connection(where);
  connection.set_timeout(100ms);
  EXPECT_THROW(connection.command("DEBUG", "SLEEP", "0.3"), TimeoutError);
  ASSERT_TRUE(connection.broken());
  connection.set_timeout(where.command_timeout);
  std::this_thread::sleep_for(400ms);  // the late +OK is in the socket now
  const std::size_t unanswered = connection.pending();
  try {
    const Reply reply = connection.command("ECHO", "after");
    ADD_FAILURE() << "a broken connection answered: " << reply.str();
  } catch (const ConnectionError& error) {
    EXPECT_EQ(error.code(), Errc::io_error);
    EXPECT_NE(std::string(error.what()).find("broke earlier"), std::string::npos) << error.what();
  }
  EXPECT_EQ(connection.pending(), unanswered) << "the refused command was queued";
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
  EXPECT_EQ(plain.db, 0);
  EXPECT_TRUE(plain.username.empty());
  EXPECT_TRUE(plain.password.empty());
  EXPECT_EQ(plain.connect_timeout, ConnectionOptions{}.connect_timeout);
  EXPECT_EQ(plain.command_timeout, ConnectionOptions{}.command_timeout);
  const ConnectionOptions legacy = ConnectionOptions::from_uri("redis://:pw@h:1");
  EXPECT_TRUE(legacy.username.empty());
  EXPECT_EQ(legacy.password, "pw");
  EXPECT_EQ(ConnectionOptions::from_uri("redis://10.0.0.7:7000/").host, "10.0.0.7");
  EXPECT_EQ(ConnectionOptions::from_uri("redis://10.0.0.7:7000/").db, 0);
  EXPECT_EQ(ConnectionOptions::from_uri("REDIS://h").host, "h");  // schemes ignore case
}

TEST(ConnectionOptions, ParsesBracketedIpv6Hosts) {
  const ConnectionOptions with_port = ConnectionOptions::from_uri("redis://[::1]:6380");
  EXPECT_EQ(with_port.host, "::1");
  EXPECT_EQ(with_port.port, 6380);
  EXPECT_EQ(with_port.endpoint(), "[::1]:6380");
  const ConnectionOptions no_port = ConnectionOptions::from_uri("redis://[::1]");
  EXPECT_EQ(no_port.host, "::1");
  EXPECT_EQ(no_port.port, 6379);
  const ConnectionOptions full =
      ConnectionOptions::from_uri("redis://u:p@[fe80::1:2]:7000/3?command_timeout=50");
  EXPECT_EQ(full.host, "fe80::1:2");
  EXPECT_EQ(full.port, 7000);
  EXPECT_EQ(full.db, 3);
  EXPECT_EQ(full.username, "u");
  EXPECT_EQ(full.password, "p");
  EXPECT_EQ(full.command_timeout, 50ms);
}

TEST(ConnectionOptions, PercentDecodesUserAndPassword) {
  const ConnectionOptions o = ConnectionOptions::from_uri("redis://al%69ce:p%40ss%2Fw%3a%25d@h");
  EXPECT_EQ(o.username, "alice");
  EXPECT_EQ(o.password, "p@ss/w:%d");
  EXPECT_EQ(o.host, "h");
  // Unencoded, the last '@' ends the credentials and the first ':' splits them.
  const ConnectionOptions raw = ConnectionOptions::from_uri("redis://bob:a:b@c/d?e@h:1/2");
  EXPECT_EQ(raw.username, "bob");
  EXPECT_EQ(raw.password, "a:b@c/d?e");
  EXPECT_EQ(raw.host, "h");
  EXPECT_EQ(raw.port, 1);
  EXPECT_EQ(raw.db, 2);
}

TEST(ConnectionOptions, ParsesTimeoutAndDbOptions) {
  const ConnectionOptions o =
      ConnectionOptions::from_uri("redis://h?connect_timeout=250&command_timeout=2s&db=5");
  EXPECT_EQ(o.connect_timeout, 250ms);
  EXPECT_EQ(o.command_timeout, 2s);
  EXPECT_EQ(o.db, 5);
  const ConnectionOptions units = ConnectionOptions::from_uri("redis://h:1/4?connect_timeout=75ms");
  EXPECT_EQ(units.connect_timeout, 75ms);
  EXPECT_EQ(units.db, 4);
  EXPECT_EQ(ConnectionOptions::from_uri("redis://h?").host, "h");
  EXPECT_EQ(ConnectionOptions::from_uri("redis://h?&db=1&").db, 1);
}

TEST(ConnectionOptions, ParsesUnixSocketUris) {
  const ConnectionOptions local = ConnectionOptions::from_uri("unix:///tmp/r.sock?db=4");
  EXPECT_EQ(local.unix_socket, "/tmp/r.sock");
  EXPECT_EQ(local.db, 4);
  EXPECT_EQ(local.endpoint(), "/tmp/r.sock");
  const ConnectionOptions timed =
      ConnectionOptions::from_uri("unix:///run/redis.sock?command_timeout=300&connect_timeout=1s");
  EXPECT_EQ(timed.unix_socket, "/run/redis.sock");
  EXPECT_EQ(timed.db, 0);
  EXPECT_EQ(timed.command_timeout, 300ms);
  EXPECT_EQ(timed.connect_timeout, 1s);
}

// The message of the InvalidArgument that from_uri throws for uri; fails
// the test if it throws nothing or something else.
template <class Options>
std::string uri_error(const std::string& uri) {
  try {
    Options::from_uri(uri);
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.code(), Errc::invalid_argument) << uri;
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << uri << ": not InvalidArgument: " << error.what();
    return {};
  }
  ADD_FAILURE() << uri << ": accepted";
  return {};
}

// The message of a refused URI must name the cause (needle) and, whatever
// the cause, never show the password.
#define EXPECT_URI_ERROR(Options, uri, needle)                                      \
  do {                                                                              \
    const std::string message = uri_error<Options>(uri);                            \
    EXPECT_NE(message.find(needle), std::string::npos) << (uri) << ": " << message; \
    EXPECT_EQ(message.find("hunter2"), std::string::npos) << message;               \
  } while (false)

TEST(ConnectionOptions, RejectsBadUrisWithClearMessages) {
  EXPECT_URI_ERROR(ConnectionOptions, "http://x", "must start with redis://, rediss:// or unix://");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://", "no host");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2@", "no host");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://:6379", "no host");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h:notaport", "bad port 'notaport'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h:70000", "bad port '70000'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h:0", "bad port '0'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h:", "empty port");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h/x", "bad db 'x'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h/-1", "bad db '-1'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h/1?db=2", "db given both");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?db=1&db=2", "option 'db' given twice");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h/0?timeout=5", "unknown option 'timeout'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?db", "'db' is not of the form name=value");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?connect_timeout=", "bad connect_timeout ''");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?command_timeout=5min",
                   "bad command_timeout '5min'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?command_timeout=9999h", "at most 365 days");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?command_timeout=-5", "bad command_timeout");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?command_timeout=0", "command_timeout must be");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?connect_timeout=0s", "connect_timeout must be");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?pool_size=4", "parse the URI with ClientOptions");
  EXPECT_URI_ERROR(ConnectionOptions, "unix://", "no socket path");
  EXPECT_URI_ERROR(ConnectionOptions, "unix://?db=1", "no socket path");
  EXPECT_URI_ERROR(ConnectionOptions, "unix://relative.sock", "must be absolute");
  EXPECT_URI_ERROR(ConnectionOptions, "unix:///s?db=x", "bad db 'x'");
  EXPECT_URI_ERROR(ConnectionOptions, "unix:///s?password=hunter2", "unknown option 'password'");
}

TEST(ConnectionOptions, RefusesUnbracketedIpv6) {
  EXPECT_URI_ERROR(ConnectionOptions, "redis://::1", "IPv6 address needs brackets");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://fe80::1:6379/0", "IPv6 address needs brackets");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://[::1", "without ']'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://[]:6379", "no host");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://[::1]6379", "after the IPv6 address");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://[::1]:", "empty port");
}

TEST(ConnectionOptions, TlsOptionsAreRefusedWithoutTlsAndNeverShowThePassword) {
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2@h?ca_file=/ca.pem",
                   "option 'ca_file' needs rediss://");
  EXPECT_URI_ERROR(ConnectionOptions, "rediss://u:hunter2@h?ca_file=", "option 'ca_file' is empty");
  EXPECT_URI_ERROR(ClientOptions, "rediss://u:hunter2@h?insecure_skip_verify=1",
                   "insecure_skip_verify must be true or false");
  EXPECT_URI_ERROR(ClientOptions, "rediss://u:hunter2@h?tls=yes", "unknown option 'tls'");
}

TEST(ConnectionOptions, BadCredentialsNeverShowThePassword) {
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2%zz@h", "bad %-escape in the password");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2%4@h", "bad %-escape in the password");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2%@h", "bad %-escape in the password");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u%g1:hunter2@h", "bad %-escape in the user name");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://hunter2@h", "a user name without a password");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2@h:bad", "bad port 'bad'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2@h?x=1", "unknown option 'x'");
  EXPECT_URI_ERROR(ConnectionOptions, "redis://u:hunter2@::1", "IPv6 address needs brackets");
}

TEST(ConnectionOptions, RejectsOutOfRangeValues) {
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

// A user alone would connect unauthenticated (AUTH goes only with a
// password), as the default user: refused, as the URI parser refuses it.
TEST(ConnectionOptions, RefusesAUserWithoutAPasswordOrAProvider) {
  ConnectionOptions o;
  o.username = "alice";
  EXPECT_THROW(o.validate(), InvalidArgument);
  EXPECT_THROW(Connection{o}, InvalidArgument);
  o.password = "pw";
  EXPECT_NO_THROW(o.validate());
  o.password.clear();
  o.credentials = [] { return std::string("token"); };
  EXPECT_NO_THROW(o.validate());
  SentinelOptions sentinel("mymaster", {"127.0.0.1:26379"});
  sentinel.sentinel_username = "watcher";
  EXPECT_THROW(sentinel.validate(), InvalidArgument);
  sentinel.sentinel_password = "pw";
  EXPECT_NO_THROW(sentinel.validate());
}

TEST(ClientOptionsUri, ParsesPoolOptionsBesideTheConnection) {
  const ClientOptions o = ClientOptions::from_uri(
      "redis://:pw@h:7000/1?pool_size=3&pool_wait_timeout=2s&max_waiters=50&command_timeout=300");
  EXPECT_EQ(o.host, "h");
  EXPECT_EQ(o.port, 7000);
  EXPECT_EQ(o.db, 1);
  EXPECT_EQ(o.password, "pw");
  EXPECT_EQ(o.pool_size, 3u);
  EXPECT_EQ(o.pool_wait_timeout, 2s);
  EXPECT_EQ(o.max_waiters, 50u);
  EXPECT_EQ(o.command_timeout, 300ms);
  const ClientOptions defaults = ClientOptions::from_uri("redis://[::1]:6380");
  EXPECT_EQ(defaults.host, "::1");
  EXPECT_EQ(defaults.port, 6380);
  EXPECT_EQ(defaults.pool_size, ClientOptions{}.pool_size);
  EXPECT_EQ(defaults.pool_wait_timeout, ClientOptions{}.pool_wait_timeout);
  EXPECT_EQ(defaults.max_waiters, ClientOptions{}.max_waiters);
  const ClientOptions local =
      ClientOptions::from_uri("unix:///tmp/r.sock?db=2&pool_size=1&pool_wait_timeout=0");
  EXPECT_EQ(local.unix_socket, "/tmp/r.sock");
  EXPECT_EQ(local.db, 2);
  EXPECT_EQ(local.pool_size, 1u);
  EXPECT_EQ(local.pool_wait_timeout, 0ms);
  EXPECT_EQ(ClientOptions::from_uri("redis://h?max_waiters=0").max_waiters, 0u);
}

TEST(ClientOptionsUri, ParsesMaxConnectionAge) {
  EXPECT_EQ(ClientOptions{}.max_connection_age, 0ms);  // off unless asked
  EXPECT_EQ(ClientOptions::from_uri("redis://h?max_connection_age=15s").max_connection_age, 15s);
  EXPECT_EQ(ClientOptions::from_uri("redis://h?max_connection_age=250").max_connection_age, 250ms);
  EXPECT_EQ(ClientOptions::from_uri("unix:///r.sock?max_connection_age=0").max_connection_age, 0ms);
  EXPECT_EQ(ClientOptions::from_uri("redis://h?max_connection_age=1h").max_connection_age, 1h);
  EXPECT_URI_ERROR(ClientOptions, "redis://h?max_connection_age=1d", "bad max_connection_age '1d'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?max_connection_age=-1s",
                   "bad max_connection_age '-1s'");
  // It is the pool's (and the Notifier's), not a lone Connection's.
  EXPECT_URI_ERROR(ConnectionOptions, "redis://h?max_connection_age=15s", "is the pool's");
  ConnectionOptions negative;
  negative.max_connection_age = -1ms;
  EXPECT_THROW(negative.validate(), InvalidArgument);
}

TEST(ClientOptionsUri, RejectsBadPoolOptionsNamingThem) {
  EXPECT_URI_ERROR(ClientOptions, "redis://h?pool_size=0", "bad pool_size '0'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?pool_size=-1", "bad pool_size '-1'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?pool_size=many", "bad pool_size 'many'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?max_waiters=1e3", "bad max_waiters '1e3'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?pool_wait_timeout=1.5s",
                   "bad pool_wait_timeout '1.5s'");
  EXPECT_URI_ERROR(ClientOptions, "redis://h?pool_size=2&pool_size=3", "given twice");
  EXPECT_URI_ERROR(ClientOptions, "redis://u:hunter2@h?poolsize=2", "unknown option 'poolsize'");
  EXPECT_URI_ERROR(ClientOptions, "redis://::1", "IPv6 address needs brackets");
  EXPECT_URI_ERROR(ClientOptions, "redis://h/0?timeout=5", "unknown option 'timeout'");
}

// The parsed options reach a real server: the decoded password
// authenticates, the db is selected, the unix socket is used.
TEST_F(AclConnectionTest, PercentEncodedUriPasswordAuthenticates) {
  const std::string at = "@127.0.0.1:" + std::to_string(server().port());
  Connection alice(ConnectionOptions::from_uri("redis://alice:alice%2dsecret" + at));
  EXPECT_EQ(alice.command("ACL", "WHOAMI").str(), "alice");
  Connection legacy(ConnectionOptions::from_uri("redis://:default%2Dsecret" + at + "/2"));
  EXPECT_EQ(legacy.command("ACL", "WHOAMI").str(), "default");
  EXPECT_NE(legacy.command("CLIENT", "INFO").str().find(" db=2 "), std::string::npos);
}

TEST_F(UnixSocketConnectionTest, UnixUriSelectsItsDb) {
  Connection connection(ConnectionOptions::from_uri("unix://" + server().unix_path() + "?db=3"));
  EXPECT_NE(connection.command("CLIENT", "INFO").str().find(" db=3 "), std::string::npos);
}

// The server also listens on ::1 when the host has IPv6 loopback ("-":
// optional, so the server starts either way).
class Ipv6ConnectionTest : public ConnectionTest {
  RedisServerOptions server_options() const override {
    RedisServerOptions o;
    o.config_lines = {"bind 127.0.0.1 -::1"};
    return o;
  }
};

TEST_F(Ipv6ConnectionTest, BracketedIpv6UriConnects) {
  if (!std::ifstream("/proc/net/if_inet6")) GTEST_SKIP() << "no IPv6 on this host";
  const std::string uri = "redis://[::1]:" + std::to_string(server().port());
  Connection connection(ConnectionOptions::from_uri(uri));
  EXPECT_EQ(connection.command("PING").str(), "PONG");
  EXPECT_NE(connection.command("CLIENT", "INFO").str().find("laddr=[::1]:"), std::string::npos);
}

}  // namespace
}  // namespace distlock
