// Tests for tests/support/fault_proxy.hpp: each fault does what it says,
// against a real redis-server, seen from a raw socket on the client side and
// from the server's own state on the other.
#include "support/fault_proxy.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/faults.hpp"
#include "support/fixture.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::FaultProxy;
using testing::RedisServer;
using Clock = std::chrono::steady_clock;
using Direction = FaultProxy::Direction;

// A client socket that speaks raw RESP, so a test sees exactly which bytes
// came back and when, and what happened to the connection.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    connect_error_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 ? 0 : errno;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  int connect_error() const { return connect_error_; }

  // Closes as a client does that drops a connection with replies unread:
  // the kernel ends it with an RST, not a FIN.
  void reset() {
    const linger abort{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
    ::close(fd_);
    fd_ = -1;
  }

  // Whether the kernel took the bytes (not whether anyone read them).
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // What arrives within `limit` (at least `want` bytes, or whatever came
  // before the limit); "" on nothing; nullopt once the connection is closed
  // or reset.
  std::optional<std::string> read(std::size_t want, std::chrono::milliseconds limit) {
    std::string got;
    const auto deadline = Clock::now() + limit;
    while (got.size() < want) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd fd{fd_, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left)) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return std::nullopt;
      got.append(buffer, static_cast<std::size_t>(n));
    }
    return got;
  }

 private:
  int fd_ = -1;
  int connect_error_ = 0;
};

std::string resp(std::initializer_list<std::string> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& arg : args) {
    out += "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
  }
  return out;
}

class FaultProxyTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
  }
  void TearDown() override {
    proxy_.reset();
    RedisTest::TearDown();
  }
  FaultProxy& proxy() { return *proxy_; }
  std::string get(const std::string& key) { return server().command({"GET", key}); }

  std::unique_ptr<FaultProxy> proxy_;
};

TEST_F(FaultProxyTest, ForwardsCommandsBothWays) {
  RawClient client(proxy().port());
  client.send(resp({"SET", "k", "v"}));
  EXPECT_EQ(client.read(5, 5s), "+OK\r\n");
  EXPECT_EQ(get("k"), "v");
  EXPECT_EQ(proxy().accepted(), 1u);
  // Counted just after the send that the client may already have read.
  EXPECT_TRUE(testing::eventually([&] { return proxy().bytes_to_client() == 5u; }));
  EXPECT_EQ(proxy().bytes_to_server(), resp({"SET", "k", "v"}).size());
}

TEST_F(FaultProxyTest, LatencyDelaysEachDirectionByAtLeastItsAmount) {
  RawClient client(proxy().port());
  for (const Direction direction : {Direction::to_server, Direction::to_client}) {
    proxy().set_latency(direction, 150ms);
    const auto start = Clock::now();
    client.send(resp({"PING"}));
    EXPECT_EQ(client.read(7, 5s), "+PONG\r\n");
    EXPECT_GE(Clock::now() - start, 150ms);  // a floor the proxy enforces
    proxy().set_latency(Direction::both, 0ms);
  }
  // Latency to the server: the command is not applied before it is due.
  proxy().set_latency(Direction::to_server, 300ms);
  client.send(resp({"SET", "late", "1"}));
  EXPECT_EQ(get("late"), "(nil)");
  EXPECT_EQ(client.read(5, 5s), "+OK\r\n");
  EXPECT_EQ(get("late"), "1");
}

// TCP delivers what was sent before an RST, and the receiver reads it before
// the reset (a client that drops a connection owing replies resets it, right
// behind the command it queued last): a proxy that dropped those bytes would
// lose commands no network loses.
TEST_F(FaultProxyTest, BytesSentBeforeAResetStillReachTheServer) {
  proxy().set_latency(Direction::to_server, 100ms);
  RawClient client(proxy().port());
  ASSERT_TRUE(client.send(resp({"SET", "sent-before-reset", "1"})));
  ASSERT_TRUE(testing::eventually([&] { return proxy().open_connections() == 1u; }));
  client.reset();
  EXPECT_TRUE(testing::eventually([&] { return get("sent-before-reset") == "1"; }, 5s));
  EXPECT_TRUE(testing::eventually([&] { return proxy().open_connections() == 0u; }, 5s));
}

// The same when a reply is still on its way to the client that reset: the
// reply cannot be delivered, but the commands behind it still are.
TEST_F(FaultProxyTest, AReplyToAResetClientDoesNotDropTheCommandsBehindIt) {
  proxy().set_latency(Direction::to_client, 100ms);
  RawClient client(proxy().port());
  ASSERT_TRUE(client.send(resp({"PING"})));
  // Through to the server: its PONG is due at the client 100 ms from now.
  ASSERT_TRUE(testing::eventually([&] { return proxy().bytes_to_server() > 0u; }));
  proxy().set_latency(Direction::to_server, 300ms);
  ASSERT_TRUE(client.send(resp({"SET", "behind-the-reply", "1"})));
  client.reset();
  EXPECT_TRUE(testing::eventually([&] { return get("behind-the-reply") == "1"; }, 5s));
  EXPECT_TRUE(testing::eventually([&] { return proxy().open_connections() == 0u; }, 5s));
}

TEST_F(FaultProxyTest, StallToServerHoldsTheCommandUntilReleased) {
  RawClient client(proxy().port());
  client.send(resp({"PING"}));
  ASSERT_EQ(client.read(7, 5s), "+PONG\r\n");
  proxy().stall(Direction::to_server);
  client.send(resp({"SET", "k", "held"}));
  EXPECT_EQ(client.read(1, 200ms), "");
  EXPECT_EQ(get("k"), "(nil)");
  proxy().release(Direction::to_server);
  EXPECT_EQ(client.read(5, 5s), "+OK\r\n");
  EXPECT_EQ(get("k"), "held");
}

TEST_F(FaultProxyTest, StallToClientAppliesTheCommandAndHoldsTheReply) {
  RawClient client(proxy().port());
  proxy().stall(Direction::to_client);
  client.send(resp({"SET", "k", "applied"}));
  EXPECT_TRUE(testing::eventually([&] { return get("k") == "applied"; }));
  EXPECT_EQ(client.read(1, 200ms), "");
  proxy().release(Direction::to_client);
  EXPECT_EQ(client.read(5, 5s), "+OK\r\n");
}

TEST_F(FaultProxyTest, BlackholeToServerDropsCommandsAndResetsWhenLifted) {
  RawClient client(proxy().port());
  proxy().blackhole(Direction::to_server, true);
  client.send(resp({"SET", "k", "lost"}));
  EXPECT_EQ(client.read(1, 200ms), "");
  EXPECT_EQ(get("k"), "(nil)");
  EXPECT_EQ(proxy().bytes_to_server(), 0u);
  proxy().blackhole(Direction::to_server, false);
  EXPECT_EQ(client.read(1, 5s), std::nullopt);  // its stream is broken: reset
  RawClient fresh(proxy().port());
  fresh.send(resp({"PING"}));
  EXPECT_EQ(fresh.read(7, 5s), "+PONG\r\n");
}

TEST_F(FaultProxyTest, BlackholeToClientAppliesCommandsAndDropsReplies) {
  RawClient client(proxy().port());
  proxy().blackhole(Direction::to_client, true);
  client.send(resp({"SET", "k", "applied"}));
  EXPECT_TRUE(testing::eventually([&] { return get("k") == "applied"; }));
  EXPECT_EQ(client.read(1, 200ms), "");
  EXPECT_EQ(proxy().bytes_to_client(), 0u);
}

TEST_F(FaultProxyTest, ResetAllResetsEveryOpenConnection) {
  RawClient a(proxy().port());
  RawClient b(proxy().port());
  a.send(resp({"PING"}));
  b.send(resp({"PING"}));
  ASSERT_EQ(a.read(7, 5s), "+PONG\r\n");
  ASSERT_EQ(b.read(7, 5s), "+PONG\r\n");
  proxy().reset_all();
  EXPECT_EQ(a.read(1, 5s), std::nullopt);
  EXPECT_EQ(b.read(1, 5s), std::nullopt);
  EXPECT_TRUE(testing::eventually([&] { return proxy().open_connections() == 0; }));
  RawClient fresh(proxy().port());
  fresh.send(resp({"PING"}));
  EXPECT_EQ(fresh.read(7, 5s), "+PONG\r\n");
}

TEST_F(FaultProxyTest, CutRefuseResetsOpenConnectionsAndRefusesNewOnesUntilRestored) {
  RawClient open(proxy().port());
  open.send(resp({"PING"}));
  ASSERT_EQ(open.read(7, 5s), "+PONG\r\n");
  proxy().cut(FaultProxy::Cut::refuse);
  EXPECT_EQ(open.read(1, 5s), std::nullopt);
  RawClient refused(proxy().port());
  EXPECT_EQ(refused.connect_error(), ECONNREFUSED);
  proxy().restore();
  RawClient fresh(proxy().port());
  ASSERT_EQ(fresh.connect_error(), 0);
  fresh.send(resp({"PING"}));
  EXPECT_EQ(fresh.read(7, 5s), "+PONG\r\n");
}

TEST_F(FaultProxyTest, CutDropPassesNothingEitherWayUntilRestored) {
  RawClient open(proxy().port());
  open.send(resp({"PING"}));
  ASSERT_EQ(open.read(7, 5s), "+PONG\r\n");
  proxy().cut(FaultProxy::Cut::drop);
  open.send(resp({"SET", "k", "open"}));
  RawClient fresh(proxy().port());
  ASSERT_EQ(fresh.connect_error(), 0);  // accepted, but nothing is heard
  fresh.send(resp({"SET", "k", "fresh"}));
  EXPECT_EQ(open.read(1, 200ms), "");
  EXPECT_EQ(fresh.read(1, 10ms), "");
  EXPECT_EQ(get("k"), "(nil)");
  proxy().restore();
  // Both lost bytes: they are reset; a new connection works.
  EXPECT_EQ(open.read(1, 5s), std::nullopt);
  EXPECT_EQ(fresh.read(1, 5s), std::nullopt);
  RawClient after(proxy().port());
  after.send(resp({"PING"}));
  EXPECT_EQ(after.read(7, 5s), "+PONG\r\n");
}

TEST_F(FaultProxyTest, AServerGoneAwayResetsNewConnections) {
  server().kill();
  RawClient client(proxy().port());
  client.send(resp({"PING"}));
  EXPECT_EQ(client.read(1, 5s), std::nullopt);
}

// A stopped server with a full accept backlog leaves a connect to it
// hanging; the proxy must go on applying faults (and serving other links).
TEST_F(FaultProxyTest, AConnectToAStoppedServerWithAFullBacklogNeverBlocksTheProxy) {
  testing::RedisServerOptions options;
  options.config_lines = {"tcp-backlog 1"};
  RedisServer stopped(options);
  FaultProxy proxy(stopped.host(), stopped.port());
  stopped.pause();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(std::make_unique<RawClient>(proxy.port()));
  EXPECT_TRUE(testing::eventually([&] { return proxy.accepted() == clients.size(); }));
  auto change = std::async(std::launch::async, [&] {
    proxy.set_latency(Direction::both, std::chrono::milliseconds(1));
  });
  EXPECT_EQ(change.wait_for(5s), std::future_status::ready) << "the proxy thread is blocked";
  stopped.resume();  // lets a blocked connect end, so the test ends either way
  change.get();
  clients.front()->send(resp({"PING"}));
  EXPECT_EQ(clients.front()->read(7, 5s), "+PONG\r\n");
}

}  // namespace
}  // namespace distlock
