// Tests for client.hpp: the connection pool and script calls.
#include "distlock/client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distlock/events.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using Clock = std::chrono::steady_clock;

class ClientTest : public testing::RedisTest {};

TEST_F(ClientTest, RunsCommandsFromManyThreadsOnABoundedPool) {
  ClientOptions options = client_options(server());
  options.pool_size = 3;
  Client client(options);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) client.command("INCR", "counter");
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(client.command("GET", "counter").str(), "1600");
  // connected_clients counts this INFO's own connection too.
  const std::string info(client.command("INFO", "clients").str());
  EXPECT_NE(info.find("connected_clients:"), std::string::npos);
  int connected = std::stoi(info.substr(info.find("connected_clients:") + 18));
  EXPECT_LE(connected, 3);
}

TEST_F(ClientTest, PoolExhaustionWaitsThenTimesOutClearly) {
  ClientOptions options = client_options(server());
  options.pool_size = 1;
  options.pool_wait_timeout = 100ms;
  Client client(options);
  auto held = client.borrow();
  const auto start = Clock::now();
  try {
    client.borrow();
    FAIL() << "borrowed past the pool size";
  } catch (const TimeoutError& error) {
    EXPECT_EQ(error.code(), Errc::pool_exhausted);
    EXPECT_NE(std::string(error.what()).find("pooled connections"), std::string::npos);
  }
  EXPECT_GE(Clock::now() - start, 100ms);
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST_F(ClientTest, WaitingBorrowerGetsTheReturnedConnection) {
  ClientOptions options = client_options(server());
  options.pool_size = 1;
  options.pool_wait_timeout = 5000ms;
  Client client(options);
  std::atomic<bool> got{false};
  std::thread waiter;
  {
    auto held = client.borrow();
    waiter = std::thread([&] {
      auto mine = client.borrow();
      got = mine->command("PING").str() == "PONG";
    });
  }
  waiter.join();
  EXPECT_TRUE(got);
}

TEST_F(ClientTest, ReconnectsAfterServerRestart) {
  Client client(client_options(server()));
  client.command("SET", "k", "before");
  server().restart();
  // The idle pooled connection is found closed on borrow and replaced.
  EXPECT_TRUE(client.command("GET", "k").is_nil());
  client.command("SET", "k", "after");
  EXPECT_EQ(client.command("GET", "k").str(), "after");
}

TEST_F(ClientTest, CallInFlightWhenServerDiesFailsAndTheNextReconnects) {
  ClientOptions options = client_options(server());
  options.command_timeout = 200ms;
  Client client(options);
  client.command("PING");
  server().pause();
  EXPECT_THROW(client.command("PING"), TimeoutError);
  server().resume();
  EXPECT_EQ(client.command("PING").str(), "PONG");
}

// Defect: with an event hook, the first call on a new connection after
// one broke asked INFO server before its own command; against a silent
// server it failed with "INFO: no reply", a command the caller never sent.
// The identity check now follows the caller's command.
TEST_F(ClientTest, AnErrorNamesTheCommandTheCallSentNotTheIdentityCheck) {
  ClientOptions options = client_options(server());
  options.command_timeout = 200ms;
  std::atomic<int> switches{0};
  options.on_event = [&switches](const LockEvent& event) {
    if (event.type == LockEventType::master_switched) ++switches;
  };
  Client client(options);
  client.command("PING");
  server().pause();
  EXPECT_THROW(client.command("SET", "k", "v"), TimeoutError);  // breaks the connection
  std::string message;
  try {
    client.command("GET", "k");  // on a new connection, to the same silent server
  } catch (const TimeoutError& error) {
    message = error.what();
  }
  server().resume();
  EXPECT_NE(message.find("GET"), std::string::npos) << message;
  EXPECT_EQ(message.find("INFO"), std::string::npos) << message;
  EXPECT_EQ(client.command("PING").str(), "PONG");
  EXPECT_EQ(switches.load(), 0);  // the same server process
}

TEST_F(ClientTest, ConnectFailureDoesNotLeakPoolSlots) {
  ClientOptions options = client_options(server());
  options.pool_size = 1;
  options.pool_wait_timeout = 50ms;
  Client client(options);
  server().kill();
  for (int i = 0; i < 3; ++i) {
    try {
      client.command("PING");
      ADD_FAILURE() << "dead server answered";
    } catch (const ConnectionError& error) {
      EXPECT_EQ(error.code(), Errc::connect_failed);  // never pool_exhausted
    }
  }
  server().restart();
  EXPECT_EQ(client.command("PING").str(), "PONG");
}

TEST_F(ClientTest, ClientIdsAreRandomPerInstance) {
  Client a(client_options(server()));
  Client b(client_options(server()));
  EXPECT_EQ(a.id().size(), 32u);
  EXPECT_NE(a.id(), b.id());
}

TEST_F(ClientTest, WriteToAConnectionTheServerClosedIsAnErrorNotSigpipe) {
  Client client(client_options(server()));
  auto connection = client.borrow();
  connection->command("PING");
  server().command({"CLIENT", "KILL", "TYPE", "normal"});
  // The first write may still land in the socket buffer; the ones after the
  // peer's reset would raise SIGPIPE, which must not end the process.
  bool failed = false;
  for (int i = 0; i < 5 && !failed; ++i) {
    try {
      connection->command("PING");
    } catch (const ConnectionError&) {
      failed = true;
    }
  }
  EXPECT_TRUE(failed);
}

// A pooled connection is lent again until max_connection_age, then closed
// instead: on its return when it aged while lent, on the next borrow when
// it aged idle in the pool. The pool does not count it any more.
TEST_F(ClientTest, PooledConnectionsAreReplacedPastMaxConnectionAge) {
  ClientOptions options = client_options(server());
  options.pool_size = 1;
  options.max_connection_age = 300ms;
  Client client(options);
  const auto id_of = [](Client::Borrowed& connection) {
    return connection->command("CLIENT", "ID").integer();
  };
  // Asked by the harness's own connection: the pool is not touched.
  const auto is_open = [&](long long id) {
    return !server().command({"CLIENT", "LIST", "ID", std::to_string(id)}).empty();
  };
  long long first = 0;
  {
    auto lent = client.borrow();
    first = id_of(lent);
  }
  {
    auto lent = client.borrow();
    // Young, it was lent again (asked only while the machine kept up).
    if (!lent->aged()) {
      EXPECT_EQ(id_of(lent), first);
    }
    // Aged while lent: closed when it comes back.
    ASSERT_TRUE(testing::eventually([&] { return lent->aged(); }));
  }
  EXPECT_TRUE(testing::eventually([&] { return !is_open(first); })) << "the aged one stayed open";
  long long second = 0;
  bool returned_young = false;
  {
    auto lent = client.borrow();
    second = id_of(lent);
    returned_young = !lent->aged();
  }
  EXPECT_NE(second, first);
  // Aged while idle in the pool (the age is the time that must pass here):
  // not lent again.
  std::this_thread::sleep_for(options.max_connection_age);
  auto lent = client.borrow();
  if (returned_young) {
    EXPECT_NE(id_of(lent), second);
  }
}

TEST(ClientOptionsTest, RejectsBadPoolSettings) {
  ClientOptions options;
  options.pool_size = 0;
  EXPECT_THROW(Client{options}, InvalidArgument);
  options = {};
  options.pool_wait_timeout = -1ms;
  EXPECT_THROW(Client{options}, InvalidArgument);
}

TEST(ClientOptionsTest, MakingAClientConnectsNothing) {
  ClientOptions options;
  options.port = 1;  // nothing listens there
  EXPECT_NO_THROW(Client{options});
}

}  // namespace
}  // namespace distlock
