// TLS against real TLS-only redis-servers (tls-port, port 0) whose
// certificates are made at test time (support/test_certs.hpp): commands
// and every lock type over TLS, wake-on-release and renewal over TLS,
// mutual TLS, and each way a handshake can fail as a clear error within
// the connect timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distlock/distlock.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/redis_server.hpp"
#include "support/test_certs.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::CertFiles;
using testing::RedisServer;
using testing::RedisServerOptions;
using testing::RedisServerTls;
using testing::TestPki;

// A folder for the certificates, removed at the end.
struct TempDir {
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "distlock-tls-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

std::unique_ptr<RedisServer> tls_server(const CertFiles& cert, const std::string& ca,
                                        const std::string& auth_clients = "no") {
  RedisServerOptions options;
  options.tls = RedisServerTls{cert.cert, cert.key, ca, auth_clients};
  return std::make_unique<RedisServer>(options);
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    pki_ = std::make_unique<TestPki>(dir_.path);
    server_ = tls_server(pki_->server, pki_->ca.file());
  }

  // Options that reach server_ over TLS, trusting the test CA.
  ClientOptions tls_options(const RedisServer& server) const {
    ClientOptions options = testing::client_options(server);
    options.tls.enabled = true;
    options.tls.ca_file = pki_->ca.file();
    return options;
  }
  ClientOptions tls_options() const { return tls_options(*server_); }

  // The error a connection with `options` ends in, and how long it took.
  template <class Expected>
  std::string connect_error(const ConnectionOptions& options, Clock::duration* took = nullptr) {
    const auto start = Clock::now();
    try {
      Connection connection(options);
      connection.command("PING");
    } catch (const Expected& error) {
      if (took != nullptr) *took = Clock::now() - start;
      return error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "another error: " << error.what();
      return error.what();
    }
    ADD_FAILURE() << "connected";
    return {};
  }

  TempDir dir_;
  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(TlsTest, RedissUriSetsTlsAndItsOptions) {
  const ClientOptions options = ClientOptions::from_uri(
      "rediss://:pw@cache.example.com:6380/2?ca_file=/etc/ca.pem&cert_file=/c.pem&key_file=/k.pem"
      "&server_name=redis.internal&pool_size=3");
  EXPECT_TRUE(options.tls.enabled);
  EXPECT_EQ(options.host, "cache.example.com");
  EXPECT_EQ(options.port, 6380);
  EXPECT_EQ(options.db, 2);
  EXPECT_EQ(options.tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(options.tls.cert_file, "/c.pem");
  EXPECT_EQ(options.tls.key_file, "/k.pem");
  EXPECT_EQ(options.tls.server_name, "redis.internal");
  EXPECT_FALSE(options.tls.insecure_skip_verify);
  EXPECT_EQ(options.pool_size, 3u);
  EXPECT_FALSE(ClientOptions::from_uri("redis://h").tls.enabled);
  EXPECT_TRUE(
      ConnectionOptions::from_uri("rediss://h?insecure_skip_verify=true").tls.insecure_skip_verify);
  // TLS options without TLS, and a verification switch that is not one.
  EXPECT_THROW(ClientOptions::from_uri("redis://h?ca_file=/ca.pem"), InvalidArgument);
  EXPECT_THROW(ClientOptions::from_uri("rediss://h?insecure_skip_verify=yes"), InvalidArgument);
  EXPECT_THROW(ClientOptions::from_uri("unix:///s.sock?ca_file=/ca.pem"), InvalidArgument);
}

TEST_F(TlsTest, CommandsLargeValuesAndPipelinesRoundTrip) {
  Connection connection(tls_options());
  EXPECT_TRUE(connection.tls());
  EXPECT_EQ(connection.command("PING").str(), "PONG");
  // Larger than a TLS record (16 KiB) and than one read.
  const std::string big(3 * 1024 * 1024 + 7, 'x');
  connection.command("SET", "big", big);
  EXPECT_EQ(connection.command("GET", "big").str(), big);
  for (int i = 0; i < 2000; ++i) connection.append("INCR", "n");
  connection.flush();
  for (int i = 1; i <= 2000; ++i) ASSERT_EQ(connection.read_reply().integer(), i);
  // The server saw it over TLS: the plaintext port is closed.
  EXPECT_EQ(connection.command("CONFIG", "GET", "port")[1].str(), "0");
}

TEST_F(TlsTest, EveryLockTypeWorksOverTls) {
  Client client(tls_options());
  {
    Mutex a(client, "m");
    Mutex b(client, "m");
    ASSERT_TRUE(a.try_lock());
    EXPECT_FALSE(b.try_lock());
    a.unlock();
    EXPECT_TRUE(b.try_lock());
    b.unlock();
  }
  {
    SimpleMutex a(client, "simple");
    ASSERT_TRUE(a.try_lock());
    EXPECT_FALSE(SimpleMutex(client, "simple").try_lock());
    a.unlock();
  }
  {
    ReentrantMutex a(client, "reentrant");
    ASSERT_TRUE(a.try_lock());
    ASSERT_TRUE(a.try_lock());
    a.unlock();
    a.unlock();
  }
  {
    SharedMutex readers(client, "rw");
    ASSERT_TRUE(readers.try_lock_shared());
    // Another thread: this one holding the read lock may not ask to write.
    std::thread([&] { EXPECT_FALSE(SharedMutex(client, "rw").try_lock()); }).join();
    readers.unlock_shared();
    std::thread([&] {
      SharedMutex writer(client, "rw");
      EXPECT_TRUE(writer.try_lock());
      writer.unlock();
    }).join();
  }
  {
    Semaphore exports(client, "exports", 1);
    Permit permit = exports.try_acquire();
    ASSERT_TRUE(permit);
    EXPECT_FALSE(exports.try_acquire());
  }
  {
    RateLimiter visits(client, "visits", RateOptions{}.fixed_window(2, 10s));
    EXPECT_TRUE(visits.try_acquire().allowed);
    EXPECT_TRUE(visits.try_acquire().allowed);
    EXPECT_FALSE(visits.try_acquire().allowed);
  }
  {
    StripedMutex mine(client, "s", 4);
    StripedMutex theirs(client, "s", 4);
    ASSERT_TRUE(mine.try_lock("a"));
    EXPECT_FALSE(theirs.try_lock("a"));
    mine.unlock("a");
  }
  {
    std::vector<std::unique_ptr<RedisServer>> more;
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<Client*> masters{&client};
    for (int i = 0; i < 2; ++i) {
      more.push_back(tls_server(pki_->server, pki_->ca.file()));
      clients.push_back(std::make_unique<Client>(tls_options(*more.back())));
      masters.push_back(clients.back().get());
    }
    Redlock a(masters, "red");
    Redlock b(masters, "red");
    ASSERT_TRUE(a.try_lock());
    EXPECT_FALSE(b.try_lock());
    a.unlock();
    EXPECT_TRUE(b.try_lock());
    b.unlock();
  }
  // Every lock released; only the rate window is left, to expire.
  EXPECT_EQ(client.command("DBSIZE").integer(), 1);
  EXPECT_GT(client.command("PTTL", "visits").integer(), 0);
}

// A waiter is woken by the release's message on its TLS subscriber
// connection: with 60 s left on the lease, nothing else would let it in
// before its 20 s deadline.
TEST_F(TlsTest, AReleaseWakesAWaiterOverTls) {
  Client client(tls_options());
  Mutex holder(client, "job", LockOptions{}.ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    Mutex mine(client, "job", LockOptions{}.ttl(60s));
    got = mine.try_lock_for(20s);
    if (got) mine.unlock();
  });
  // Released once the waiter is subscribed and asleep.
  const auto until = Clock::now() + 10s;
  while (client.command("PUBSUB", "NUMSUB", "{job}:released")[1].integer() == 0 &&
         Clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  holder.unlock();
  waiter.join();
  EXPECT_TRUE(got);
}

TEST_F(TlsTest, ARenewedLeaseOutlivesItsTtlOverTls) {
  Client client(tls_options());
  Mutex lock(client, "renewed", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  // Three leases long, waited for on the server's word.
  const auto until = Clock::now() + 900ms;
  while (Clock::now() < until) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(client.command("GET", "renewed").str(), lock.token());
  lock.unlock();
}

// A connection is checked before reuse for a server that closed it or sent
// something unasked. A TLS 1.3 server sends session tickets right after the
// handshake, which make the socket readable with no reply in them: a
// connection nobody has read from yet must not pass for a stale one.
TEST_F(TlsTest, SessionTicketsDoNotMakeAFreshConnectionStale) {
  Connection connection(tls_options());
  pollfd readable{connection.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&readable, 1, 5000), 1);  // the tickets have arrived
  EXPECT_FALSE(connection.stale());
  EXPECT_EQ(connection.command("PING").str(), "PONG");
  EXPECT_FALSE(connection.stale());
  // And a server that did close it is still noticed.
  server_->command({"CLIENT", "KILL", "TYPE", "normal"});
  const auto until = Clock::now() + 5s;
  while (!connection.stale() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(connection.stale());
}

TEST_F(TlsTest, IdlePooledConnectionsAreReusedNotReopened) {
  ClientOptions options = tls_options();
  options.pool_size = 1;
  Client client(options);
  const long long first = client.command("CLIENT", "ID").integer();
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(20ms);  // idle long enough to be checked
    EXPECT_EQ(client.command("CLIENT", "ID").integer(), first);
  }
}

TEST_F(TlsTest, MutualTlsAcceptsTheClientCertificateAndRefusesNone) {
  std::unique_ptr<RedisServer> strict = tls_server(pki_->server, pki_->ca.file(), "yes");
  ClientOptions with_cert = tls_options(*strict);
  with_cert.tls.cert_file = pki_->client.cert;
  with_cert.tls.key_file = pki_->client.key;
  Client client(with_cert);
  Mutex lock(client, "m");
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();

  Clock::duration took{};
  const std::string error = connect_error<ConnectionError>(tls_options(*strict), &took);
  EXPECT_NE(error.find(strict->host() + ":" + std::to_string(strict->port())), std::string::npos)
      << error;
  // Refused after the handshake (TLS 1.3), by an alert or, on Redis 7.2, a
  // reset: either way the error says what is missing.
  EXPECT_NE(error.find("client certificate and none was given"), std::string::npos) << error;
  EXPECT_LT(took, 1000ms + 500ms);
}

TEST_F(TlsTest, AServerCertificateFromAnUnknownCaIsRefused) {
  std::unique_ptr<RedisServer> stranger = tls_server(pki_->stranger, pki_->ca.file());
  const std::string error = connect_error<ConnectionError>(tls_options(*stranger));
  EXPECT_NE(error.find("certificate verify failed"), std::string::npos) << error;
  EXPECT_NE(error.find("local issuer"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(stranger->port())), std::string::npos) << error;
  // Only an explicit, loudly named switch lets it through.
  ClientOptions anything = tls_options(*stranger);
  anything.tls.insecure_skip_verify = true;
  EXPECT_EQ(Connection(anything).command("PING").str(), "PONG");
}

TEST_F(TlsTest, ACertificateForAnotherNameIsRefusedUnlessThatNameIsAsked) {
  std::unique_ptr<RedisServer> elsewhere = tls_server(pki_->elsewhere, pki_->ca.file());
  const std::string error = connect_error<ConnectionError>(tls_options(*elsewhere));
  EXPECT_NE(error.find("certificate verify failed"), std::string::npos) << error;
  EXPECT_NE(error.find("mismatch"), std::string::npos) << error;
  ClientOptions named = tls_options(*elsewhere);
  named.tls.server_name = "redis.example.com";
  EXPECT_EQ(Connection(named).command("PING").str(), "PONG");
}

TEST_F(TlsTest, AnExpiredServerCertificateIsRefused) {
  std::unique_ptr<RedisServer> expired = tls_server(pki_->expired, pki_->ca.file());
  const std::string error = connect_error<ConnectionError>(tls_options(*expired));
  EXPECT_NE(error.find("expired"), std::string::npos) << error;
}

TEST_F(TlsTest, LocalhostIsCheckedAsAName) {
  ClientOptions options = tls_options();
  options.host = "localhost";
  EXPECT_EQ(Connection(options).command("PING").str(), "PONG");
}

TEST_F(TlsTest, TlsToAPlaintextPortSaysSo) {
  RedisServer plain;
  ClientOptions options = tls_options(plain);
  options.connect_timeout = 300ms;
  // Redis reads a ClientHello as the start of an inline command and waits
  // for its end: the handshake runs out of time, and says what is likely.
  Clock::duration took{};
  const std::string error = connect_error<TimeoutError>(options, &took);
  EXPECT_NE(error.find("TLS handshake"), std::string::npos) << error;
  EXPECT_NE(error.find("plaintext"), std::string::npos) << error;
  EXPECT_LT(took, 300ms + 500ms);
}

TEST_F(TlsTest, PlaintextToATlsPortSaysSo) {
  ClientOptions options = testing::client_options(*server_);
  Clock::duration took{};
  const std::string error = connect_error<ConnectionError>(options, &took);
  EXPECT_NE(error.find("rediss://"), std::string::npos) << error;
  EXPECT_LT(took, 1000ms + 500ms);
}

// A listener that never answers: the handshake waits for the connect
// timeout, not for ever.
TEST_F(TlsTest, AHandshakeNobodyAnswersTimesOutByTheConnectTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ClientOptions options = tls_options();
  options.port = ntohs(address.sin_port);
  options.connect_timeout = 300ms;
  Clock::duration took{};
  const std::string error = connect_error<TimeoutError>(options, &took);
  ::close(listener);
  EXPECT_NE(error.find("TLS handshake"), std::string::npos) << error;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + 500ms);
}

TEST_F(TlsTest, MissingOrMismatchedFilesAreClearErrors) {
  ClientOptions options = tls_options();
  options.tls.ca_file = dir_.path + "/no-such-ca.pem";
  EXPECT_NE(connect_error<ConnectionError>(options).find("no-such-ca.pem"), std::string::npos);
  options = tls_options();
  options.tls.cert_file = pki_->client.cert;
  options.tls.key_file = pki_->server.key;  // another certificate's key
  const std::string error = connect_error<ConnectionError>(options);
  EXPECT_NE(error.find("server.key"), std::string::npos) << error;
  EXPECT_NE(error.find("mismatch"), std::string::npos) << error;
  options.tls.key_file.clear();
  EXPECT_THROW(Connection{options}, InvalidArgument);
}

}  // namespace
}  // namespace distlock
