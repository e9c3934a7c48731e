// Tests for detail/wire/link.hpp against real redis-servers (plain and TLS)
// and the hostile server, driven by poll() as an event loop would.
#include "distlock/detail/wire/link.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/fixture.hpp"
#include "support/hostile_server.hpp"
#include "support/options.hpp"
#include "support/test_certs.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using detail::Link;
using detail::LinkAnswer;
using testing::client_options;
using testing::HostileServer;
using testing::RedisServer;
using testing::RedisServerOptions;
using Clock = std::chrono::steady_clock;

// What a sink was told, in order.
struct Told {
  std::vector<std::string> replies;  // each reply's text (an integer's decimal)
  std::vector<std::exception_ptr> failures;
  std::size_t count() const { return replies.size() + failures.size(); }
};

Link::Sink record(Told& told) {
  return [&told](LinkAnswer answer) {
    if (answer.failure) {
      told.failures.push_back(answer.failure);
    } else if (answer.reply->is_integer()) {
      told.replies.push_back(std::to_string(answer.reply->integer()));
    } else if (answer.reply->is_nil()) {
      told.replies.push_back("(nil)");
    } else {
      told.replies.emplace_back(answer.reply->str());
    }
  };
}

// Runs the link as an event loop would (write while the socket takes it,
// read when it is readable, check the command timeout) until `done` holds;
// false if it did not within 10 s. (Whether a write had to wait for the
// socket is the kernel's to say, not asserted: a TSan run wrote 16 MB at
// once.)
template <class Done>
bool drive(Link& link, Done done) {
  bool written = link.flush();
  const auto give_up = Clock::now() + 10s;
  while (!done()) {
    if (Clock::now() > give_up) return false;
    pollfd watch{link.fd(), static_cast<short>(POLLIN | (written ? 0 : POLLOUT)), 0};
    ::poll(&watch, 1, 10);
    if ((watch.revents & POLLOUT) != 0) written = link.flush();
    if ((watch.revents & (POLLIN | POLLHUP | POLLERR)) != 0) written = link.read();
    link.check_timeout(Clock::now());
  }
  return true;
}

std::string what(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    return error.what();
  }
}

template <class Expected>
bool is(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Expected&) {
    return true;
  } catch (...) {
    return false;
  }
}

class LinkTest : public testing::RedisTest {
 protected:
  ConnectionOptions options() { return client_options(server()); }
};

TEST_F(LinkTest, PipelinedRepliesReachTheirSinksInOrder) {
  Link link(options());
  Told told;
  for (int i = 0; i < 1000; ++i) link.send({"INCR", "n"}, record(told));
  EXPECT_EQ(link.in_flight(), 1000u);
  ASSERT_TRUE(drive(link, [&] { return told.count() == 1000; }));
  ASSERT_TRUE(told.failures.empty()) << what(told.failures.front());
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(told.replies[static_cast<std::size_t>(i)], std::to_string(i + 1));
  EXPECT_EQ(link.in_flight(), 0u);
  EXPECT_FALSE(link.broken());
}

TEST_F(LinkTest, AForgottenStepIsDroppedAndWhatFollowsRunsAfterIt) {
  Link link(options());
  Told forgotten;
  Told after;
  const Link::Ticket set = link.send({"SET", "k", "first"}, record(forgotten));
  link.forget(set);
  link.send({"GET", "k"}, record(after));
  link.send({"SET", "k", "second"}, record(after));
  ASSERT_TRUE(drive(link, [&] { return after.count() == 2; }));
  EXPECT_EQ(forgotten.count(), 0u);
  EXPECT_EQ(after.replies, (std::vector<std::string>{"first", "OK"}));
  EXPECT_EQ(link.in_flight(), 0u);
}

TEST_F(LinkTest, AnErrorReplyIsAnAnswerAndTheLinkStaysUsable) {
  Link link(options());
  Told told;
  link.send({"RPUSH", "list", "a"}, record(told));
  link.send({"INCR", "list"}, record(told));
  link.send({"PING"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 3; }));
  ASSERT_EQ(told.replies.size(), 3u);
  EXPECT_EQ(told.replies[1].rfind("WRONGTYPE", 0), 0u) << told.replies[1];
  EXPECT_EQ(told.replies[2], "PONG");
  EXPECT_FALSE(link.broken());
}

// A script loaded into the server's cache (its SHA-1 as the server
// computes it), then flushed from it by the first step a test sends. A
// link keeps a pointer to a script it may send again: it lives here.
struct FlushedScript {
  FlushedScript(const ConnectionOptions& options, std::string_view source)
      : sha1(Connection(options).command("SCRIPT", "LOAD", source).str()), script{source, sha1} {}
  void flush_first(Link& link, Told& told) const { link.send({"SCRIPT", "FLUSH"}, record(told)); }

  const std::string sha1;
  const Script script;
};

TEST_F(LinkTest, AScriptTheServerLostIsSentAgainByEvalForAWaitingSink) {
  const FlushedScript incrby(options(), "return redis.call('INCRBY', KEYS[1], ARGV[1])");
  Link link(options());
  Told told;
  incrby.flush_first(link, told);
  link.send_script(incrby.script, {"n"}, {"5"}, record(told));
  link.send({"INCR", "n"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 3; }));
  ASSERT_TRUE(told.failures.empty()) << what(told.failures.front());
  // The INCR was answered before the script's EVAL, sent after the NOSCRIPT.
  EXPECT_EQ(told.replies, (std::vector<std::string>{"OK", "1", "6"}));
}

TEST_F(LinkTest, AForgottenScriptTheServerLostIsNotSentAgain) {
  const FlushedScript set(options(), "return redis.call('SET', KEYS[1], ARGV[1])");
  Link link(options());
  Told told;
  Told forgotten;
  set.flush_first(link, told);
  link.forget(link.send_script(set.script, {"k"}, {"taken"}, record(forgotten)));
  // What a caller that gave up writes behind its step: an undo, here a DEL
  // that runs after it. Were the script sent again, it would run after
  // the undo and leave the key behind.
  link.send({"DEL", "k"}, record(told));
  link.send({"PING"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 3; }));
  // Another round trip: an EVAL sent again would have been answered by now.
  link.send({"EXISTS", "k"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 4; }));
  EXPECT_EQ(forgotten.count(), 0u);
  EXPECT_EQ(told.replies.back(), "0");
  EXPECT_EQ(link.in_flight(), 0u);
}

TEST_F(LinkTest, AStepLargerThanTheSocketTakesIsWrittenAsItDrains) {
  Link link(options());
  Told told;
  const std::string value(32 * 1024 * 1024, 'v');
  link.send({"SET", "big", value}, record(told));
  link.send({"STRLEN", "big"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 2; }));
  ASSERT_TRUE(told.failures.empty()) << what(told.failures.front());
  EXPECT_EQ(told.replies, (std::vector<std::string>{"OK", std::to_string(value.size())}));
}

TEST_F(LinkTest, AServerThatGoesAwayFailsEveryWaitingStepOnce) {
  Link link(options());
  ASSERT_TRUE(link.flush());
  server().pause();
  Told told;
  for (int i = 0; i < 3; ++i) link.send({"INCR", "n"}, record(told));
  ASSERT_TRUE(link.flush());
  server().kill();
  ASSERT_TRUE(drive(link, [&] { return told.count() == 3; }));
  ASSERT_EQ(told.failures.size(), 3u);
  EXPECT_TRUE(is<ConnectionError>(told.failures[0])) << what(told.failures[0]);
  EXPECT_TRUE(link.broken());
  EXPECT_EQ(link.in_flight(), 0u);
  EXPECT_THROW(link.send({"PING"}, record(told)), ConnectionError);
  EXPECT_EQ(told.count(), 3u);
}

TEST_F(LinkTest, NoReplyWithinTheCommandTimeoutBreaksTheLink) {
  ConnectionOptions slow = options();
  slow.command_timeout = 200ms;
  Link link(slow);
  Told told;
  server().pause();
  const auto sent = Clock::now();
  link.send({"PING"}, record(told));
  link.send({"PING"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 2; }));
  EXPECT_GE(Clock::now() - sent, slow.command_timeout);
  ASSERT_EQ(told.failures.size(), 2u);
  EXPECT_TRUE(is<TimeoutError>(told.failures[0])) << what(told.failures[0]);
  EXPECT_NE(what(told.failures[0]).find("no reply within 200 ms"), std::string::npos);
  EXPECT_TRUE(link.broken());
  server().resume();
}

// A step the server may take long to answer (a WAIT) is given its own
// time, and the steps queued behind it, which the server runs only after
// it, as long: none of them breaks the link at the command timeout.
TEST_F(LinkTest, AStepGivenLongerHoldsOffTheTimeoutOfTheStepsBehindIt) {
  ConnectionOptions quick = options();
  quick.command_timeout = 200ms;
  Link link(quick);
  Told told;
  // No replica: WAIT for one blocks the connection for its full time.
  link.send({"WAIT", "1", "600"}, record(told), 1500ms);
  // Behind it, a step given only the command timeout, which its own wait
  // exceeds once the first is counted in, yet not due before the first.
  link.send({"WAIT", "1", "300"}, record(told));
  link.send({"PING"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 3; }));
  ASSERT_TRUE(told.failures.empty()) << what(told.failures.front());
  EXPECT_EQ(told.replies, (std::vector<std::string>{"0", "0", "PONG"}));
  EXPECT_FALSE(link.broken());
}

class HostileLinkTest : public LinkTest {};

// Replies a real server never sends a RESP2 connection: a push frame before
// the real reply, and garbage. Either would shift every later reply onto
// the wrong step: the link breaks instead, and every step hears why.
TEST_F(HostileLinkTest, AReplyNoCommandAskedForBreaksTheLink) {
  for (const HostileServer::Act act :
       {HostileServer::Act::push_first, HostileServer::Act::replace}) {
    HostileServer hostile(server().host(), server().port());
    HostileServer::Script script;
    script.verb = "ECHO";
    script.act = act;
    script.bytes = std::string("\x01\xff garbage\r\n", 12);
    hostile.script(script);
    ConnectionOptions through = options();
    through.host = hostile.host();
    through.port = hostile.port();
    Link link(through);
    Told told;
    link.send({"ECHO", "mine"}, record(told));
    link.send({"ECHO", "next"}, record(told));
    ASSERT_TRUE(drive(link, [&] { return told.count() == 2; }));
    ASSERT_EQ(told.failures.size(), 2u) << "replies: " << told.replies.size();
    EXPECT_TRUE(is<ConnectionError>(told.failures[1])) << what(told.failures[1]);
    EXPECT_GE(hostile.hits(), 1u);
    EXPECT_TRUE(link.broken());
  }
}

// TLS: a record the socket does not take at once is written by the next
// flush(), from the same bytes (OpenSSL asks for that), while replies are
// read through OpenSSL's buffer.
class TlsLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    std::string pattern =
        (std::filesystem::temp_directory_path() / "distlock-link-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    pki_ = std::make_unique<testing::TestPki>(dir_);
    RedisServerOptions server_options;
    server_options.tls =
        testing::RedisServerTls{pki_->server.cert, pki_->server.key, pki_->ca.file(), "no"};
    server_ = std::make_unique<RedisServer>(server_options);
  }
  void TearDown() override {
    server_.reset();
    pki_.reset();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  ConnectionOptions options() const {
    ConnectionOptions options = client_options(*server_);
    options.tls.enabled = true;
    options.tls.ca_file = pki_->ca.file();
    return options;
  }

  std::string dir_;
  std::unique_ptr<testing::TestPki> pki_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(TlsLinkTest, LargeStepsAndPipelinesGoThroughTls) {
  Link link(options());
  Told told;
  const std::string value(16 * 1024 * 1024, 't');
  link.send({"SET", "big", value}, record(told));
  for (int i = 0; i < 500; ++i) link.send({"INCR", "n"}, record(told));
  link.send({"STRLEN", "big"}, record(told));
  ASSERT_TRUE(drive(link, [&] { return told.count() == 502; }));
  ASSERT_TRUE(told.failures.empty()) << what(told.failures.front());
  EXPECT_EQ(told.replies.front(), "OK");
  EXPECT_EQ(told.replies[500], "500");
  EXPECT_EQ(told.replies.back(), std::to_string(value.size()));
}

}  // namespace
}  // namespace distlock
