// Tests for tools/distlock.cpp, the command-line tool: each runs the built
// binary (DISTLOCK_CLI_PATH) as a subprocess against its own redis-server
// and looks at exit statuses, stderr, files the command wrote and the keys.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distlock/fair_mutex.hpp"
#include "distlock/inspect.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/test_certs.hpp"
#include "support/tool_process.hpp"

extern char** environ;

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::eventually;
using testing::read_file;
using testing::Tool;
using testing::tool_path;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// A minimal JSON syntax check: true if text is one JSON value.
class JsonChecker {
 public:
  static bool valid(const std::string& text) {
    JsonChecker c{text};
    c.space();
    if (!c.value()) return false;
    c.space();
    return c.at_ == text.size();
  }

 private:
  explicit JsonChecker(const std::string& text) : text_(text) {}
  void space() {
    while (at_ < text_.size() && std::strchr(" \t\r\n", text_[at_]) != nullptr) ++at_;
  }
  bool eat(char c) {
    space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (text_.compare(at_, n, word) != 0) return false;
    at_ += n;
    return true;
  }
  bool string() {
    if (!eat('"')) return false;
    while (at_ < text_.size() && text_[at_] != '"') {
      if (static_cast<unsigned char>(text_[at_]) < 0x20) return false;
      at_ += text_[at_] == '\\' ? 2 : 1;
    }
    return eat('"');
  }
  bool number() {
    const std::size_t start = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) ++at_;
    return at_ > start && text_[at_ - 1] != '-';
  }
  bool value() {
    space();
    if (at_ >= text_.size()) return false;
    switch (text_[at_]) {
      case '{': {
        ++at_;
        if (eat('}')) return true;
        do {
          if (!string() || !eat(':') || !value()) return false;
        } while (eat(','));
        return eat('}');
      }
      case '[': {
        ++at_;
        if (eat(']')) return true;
        do {
          if (!value()) return false;
        } while (eat(','));
        return eat(']');
      }
      case '"': return string();
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number();
    }
  }

  const std::string& text_;
  std::size_t at_ = 0;
};

class Cli : public testing::RedisClientTest {
 protected:
  void SetUp() override {
    RedisClientTest::SetUp();
    if (HasFatalFailure()) return;
    std::string pattern = (std::filesystem::temp_directory_path() / "distlock-cli-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    tools_.clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    RedisClientTest::TearDown();
  }

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(server_->port()); }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }

  /// This process's environment less any Redis URL, plus DISTLOCK_URL of
  /// the test's server.
  std::vector<std::string> environment() const {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("DISTLOCK_", 0) == 0 || entry.rfind("REDIS_URL=", 0) == 0) continue;
      env.push_back(entry);
    }
    env.push_back("DISTLOCK_URL=" + url());
    return env;
  }

  /// Starts the tool; it is killed, if still running, at the end of the test.
  Tool& start(const std::vector<std::string>& args) {
    tools_.push_back(std::make_unique<Tool>(args, dir_, environment()));
    return *tools_.back();
  }

  /// Runs the tool to its end (10 s at most) and returns it.
  Tool& run(const std::vector<std::string>& args) {
    Tool& tool = start(args);
    EXPECT_TRUE(tool.wait()) << "distlock did not exit within 10 s";
    return tool;
  }

  bool exists(const std::string& key) { return client().command("EXISTS", key).integer() == 1; }

  std::string dir_;
  std::vector<std::unique_ptr<Tool>> tools_;
};

// A shell snippet that waits (10 s at most) for a file to appear.
std::string wait_for_file(const std::string& file) {
  return "i=0; while [ ! -e '" + file + "' ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done";
}

TEST_F(Cli, OfThreeConcurrentRunsOneRunsTheCommandAndTheOthersExit75AtOnce) {
  const std::string job = "echo run >> '" + path("runs") + "'; " + wait_for_file(path("go"));
  std::vector<Tool*> runs;
  for (int i = 0; i < 3; ++i) runs.push_back(&start({"run", "nightly", "--", "sh", "-c", job}));

  const auto refused_runs = [&] {
    int n = 0;
    for (Tool* t : runs) n += t->exited() ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(eventually([&] { return refused_runs() >= 2; }));
  int refused = 0;
  for (Tool* t : runs) {
    if (!t->exited()) continue;  // the one running the command
    ++refused;
    EXPECT_EQ(t->status(), 75);
    EXPECT_LT(t->took(), 3s) << "a refused run must not wait";
    const std::vector<std::string> err = lines_of(t->err());
    ASSERT_EQ(err.size(), 1u) << t->err();
    EXPECT_NE(err[0].find("nightly is held by someone else"), std::string::npos) << err[0];
  }
  EXPECT_EQ(refused, 2);
  std::ofstream(path("go")).put('\n');
  for (Tool* t : runs) EXPECT_TRUE(t->wait());
  EXPECT_EQ(lines_of(read_file(path("runs"))).size(), 1u);
  for (Tool* t : runs) EXPECT_TRUE(t->status() == 0 || t->status() == 75);
  EXPECT_FALSE(exists("nightly")) << "released when the command exited";
}

TEST_F(Cli, WithWaitConcurrentRunsRunOneAfterAnother) {
  const std::string log = path("log");
  const std::string job =
      "echo start >> '" + log + "'; sleep 0.2; echo end >> '" + log + "'; exit 3";
  std::vector<Tool*> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(&start({"run", "--wait", "5s", "nightly", "--", "sh", "-c", job}));
  }
  for (Tool* t : runs) EXPECT_EQ(t->status(), 3) << t->err();  // the command's own status
  EXPECT_EQ(lines_of(read_file(log)),
            (std::vector<std::string>{"start", "end", "start", "end", "start", "end"}));
}

TEST_F(Cli, AJobLongerThanThreeLeasesKeepsItsLock) {
  // The command itself tries to take its own lock after 4 leases' time.
  const std::string job = "sleep 1.2; '" + std::string(tool_path) +
                          "' run -q nightly -- true; echo $? > '" + path("probe") + "'";
  Tool& t = run({"run", "--ttl", "300ms", "nightly", "--", "sh", "-c", job});
  EXPECT_EQ(t.status(), 0) << t.err();
  EXPECT_EQ(read_file(path("probe")), "75\n");
  EXPECT_EQ(t.err(), "");
}

// The cron case: a run on another machine that starts a second after a
// short job ended is refused while --hold-at-least lasts, not run again.
TEST_F(Cli, HoldAtLeastKeepsTheLockAfterAShortCommandSoALateRunIsRefused) {
  for (const char* layout : {"--fencing", "--reentrant"}) {
    const std::string log = path(std::string("runs") + layout);
    const std::string job = "echo run >> '" + log + "'";
    const Clock::time_point started = Clock::now();
    Tool& first = run({"run", "--hold-at-least", "2s", layout, "nightly", "--", "sh", "-c", job});
    EXPECT_EQ(first.status(), 0) << layout << ": " << first.err();
    EXPECT_EQ(first.err(), "") << layout;
    EXPECT_LT(first.took(), 1500ms) << layout << ": the tool does not wait out the hold itself";
    const long long left = client().command("PTTL", "nightly").integer();
    EXPECT_GT(left, 0) << layout;
    EXPECT_LE(left, 2000) << layout;

    Tool& late = run({"run", "-q", layout, "nightly", "--", "sh", "-c", job});
    EXPECT_EQ(late.status(), 75) << layout << ": " << late.err();
    EXPECT_EQ(lines_of(read_file(log)).size(), 1u) << layout;

    ASSERT_TRUE(eventually([&] { return !exists("nightly"); })) << layout;
    EXPECT_GE(Clock::now() - started, 2s) << layout;
    Tool& next = run({"run", "-q", layout, "nightly", "--", "sh", "-c", job});
    EXPECT_EQ(next.status(), 0) << layout << ": " << next.err();
    EXPECT_EQ(lines_of(read_file(log)).size(), 2u) << layout;
    EXPECT_FALSE(exists("nightly")) << layout << ": a run past the hold releases at its end";
  }
}

// A command that records its pid once its trap is set (a test that sees the
// pid file may signal it), and what it was told, until told to stop.
std::string obedient_job(const std::string& dir) {
  return "trap \"echo term >> '" + dir + "/got'; exit 0\" TERM; echo $$ > '" + dir +
         "/pid'; while :; do sleep 0.02; done";
}

TEST_F(Cli, ALostLeaseStopsTheCommandAndExitsWithTheLostStatus) {
  Tool& t = start({"run", "--ttl", "500ms", "nightly", "--", "sh", "-c", obedient_job(dir_)});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  client().command("DEL", "nightly");  // from another connection: the lease is gone
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 76) << "the command exited 0, but the lock was lost";
  EXPECT_EQ(read_file(path("got")), "term\n");
  const std::vector<std::string> err = lines_of(t.err());
  ASSERT_EQ(err.size(), 1u) << t.err();
  EXPECT_NE(err[0].find("lost the lock on nightly: the key was deleted"), std::string::npos);
}

TEST_F(Cli, APausedServerLetsTheLeaseRunOutAndStopsTheCommand) {
  Tool& t = start({"run", "--ttl", "400ms", "--command-timeout", "200ms", "nightly", "--", "sh",
                   "-c", obedient_job(dir_)});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  client().command("CLIENT", "PAUSE", "1500");
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 76) << t.err();
  EXPECT_EQ(read_file(path("got")), "term\n");
  EXPECT_NE(t.err().find("ran out without a renewal"), std::string::npos) << t.err();
}

// A wait that Redis leaves unanswered until --wait runs out is an outage
// (69), and its message blames no command timeout: none was reached.
TEST_F(Cli, AWaitRedisLeavesUnansweredIsAnOutageThatBlamesNoCommandTimeout) {
  server_->pause();
  Tool& t = run({"run", "--wait", "600ms", "--command-timeout", "5s", "nightly", "--", "true"});
  server_->resume();
  EXPECT_EQ(t.status(), 69) << t.err();
  EXPECT_NE(t.err().find("did not answer"), std::string::npos) << t.err();
  EXPECT_EQ(t.err().find("--command-timeout"), std::string::npos) << t.err();
  EXPECT_FALSE(exists("nightly"));
}

TEST_F(Cli, ACommandThatIgnoresSigtermIsKilledAfterTheGrace) {
  const std::string job =
      "trap '' TERM; echo $$ > '" + path("pid") + "'; while :; do sleep 0.02; done";
  Tool& t = start({"run", "--ttl", "500ms", "--grace", "200ms", "nightly", "--", "sh", "-c", job});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  client().command("DEL", "nightly");
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 76);
  EXPECT_NE(t.err().find("sent SIGKILL"), std::string::npos) << t.err();
}

TEST_F(Cli, OnLostKillSendsSigkillAtOnce) {
  const std::string job =
      "trap '' TERM; echo $$ > '" + path("pid") + "'; while :; do sleep 0.02; done";
  Tool& t = start({"run", "--ttl", "500ms", "--on-lost", "kill", "nightly", "--", "sh", "-c", job});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  client().command("DEL", "nightly");
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 76);
  EXPECT_NE(t.err().find("with SIGKILL"), std::string::npos) << t.err();
}

TEST_F(Cli, MaxHoldEndsTheLeaseAndStopsTheCommand) {
  Tool& t = start({"run", "--ttl", "300ms", "--max-hold", "600ms", "nightly", "--", "sh", "-c",
                   obedient_job(dir_)});
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 76);
  EXPECT_EQ(read_file(path("got")), "term\n");
  EXPECT_NE(t.err().find("--max-hold 600ms was reached"), std::string::npos) << t.err();
}

TEST_F(Cli, SignalsAreForwardedToTheCommandAndTheLockIsReleasedAfterIt) {
  const std::string got = path("got");
  const std::string job = "trap \"echo hup >> '" + got + "'\" HUP; trap \"echo int >> '" + got +
                          "'\" INT; trap \"echo term >> '" + got + "'; exit 7\" TERM; echo $$ > '" +
                          path("pid") + "'; while :; do sleep 0.02; done";
  Tool& t = start({"run", "nightly", "--", "sh", "-c", job});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  t.signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return read_file(got) == "hup\n"; })) << read_file(got);
  t.signal(SIGINT);
  ASSERT_TRUE(eventually([&] { return read_file(got) == "hup\nint\n"; })) << read_file(got);
  EXPECT_TRUE(exists("nightly"));
  t.signal(SIGTERM);
  ASSERT_TRUE(t.wait(5s));
  EXPECT_EQ(t.status(), 7) << t.err();
  EXPECT_EQ(read_file(got), "hup\nint\nterm\n");
  EXPECT_FALSE(exists("nightly"));
}

TEST_F(Cli, ASignalWhileWaitingStopsTheWaitAtOnce) {
  Mutex holder(client(), "nightly");
  ASSERT_TRUE(holder.try_lock());
  Tool& t = start({"run", "--wait", "forever", "nightly", "--", "touch", path("ran")});
  // Waiting: subscribed to the release channel.
  ASSERT_TRUE(eventually([&] {
    return client().command("PUBSUB", "NUMSUB", "{nightly}:released")[1].integer() == 1;
  }));
  t.signal(SIGTERM);
  ASSERT_TRUE(t.wait(3s));
  EXPECT_EQ(t.status(), 128 + SIGTERM);
  EXPECT_FALSE(std::filesystem::exists(path("ran")));
  EXPECT_EQ(holder.release(), Release::released);
}

TEST_F(Cli, KillingDistlockStopsTheCommandAndLeavesOnlyALeaseThatExpires) {
  Tool& t = start({"run", "--ttl", "500ms", "nightly", "--", "sh", "-c", obedient_job(dir_)});
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(path("pid")); }));
  t.signal(SIGKILL);
  ASSERT_TRUE(t.wait(3s));
  EXPECT_TRUE(eventually([&] { return read_file(path("got")) == "term\n"; }))
      << "the command was not told that distlock died";
  EXPECT_TRUE(eventually([&] { return !exists("nightly"); }, 3s)) << "the lease never expired";
}

TEST_F(Cli, TheCommandInheritsNoneOfDistlocksRedisConnections) {
  const std::string job = "ls -l /proc/self/fd/ > '" + path("fds") + "'";
  ASSERT_EQ(run({"run", "nightly", "--", "sh", "-c", job}).status(), 0);
  const std::string fds = read_file(path("fds"));
  EXPECT_NE(fds.find(path("fds")), std::string::npos) << fds;  // the listing works
  EXPECT_EQ(fds.find("socket:"), std::string::npos) << fds;
}

TEST_F(Cli, FencingPassesRisingFencesToTheCommand) {
  const std::string job =
      "echo $DISTLOCK_FENCE $DISTLOCK_NAME ${#DISTLOCK_TOKEN} >> '" + path("env") + "'";
  EXPECT_EQ(run({"run", "--fencing", "nightly", "--", "sh", "-c", job}).status(), 0);
  EXPECT_EQ(run({"run", "--fencing", "nightly", "--", "sh", "-c", job}).status(), 0);
  EXPECT_EQ(run({"run", "--fencing", "--reentrant", "nightly", "--", "sh", "-c", job}).status(), 0);
  EXPECT_EQ(run({"run", "nightly", "--", "sh", "-c", job}).status(), 0);
  EXPECT_EQ(lines_of(read_file(path("env"))),
            (std::vector<std::string>{"1 nightly 8", "2 nightly 8", "3 nightly 8", "nightly 8"}));
}

TEST_F(Cli, StatusDescribesEachLayoutAndItsJsonParses) {
  Mutex lease(client(), "lease", LockOptions{}.fencing(true));
  ASSERT_TRUE(lease.try_lock());
  ReentrantMutex reentrant(client(), "reentrant");
  ASSERT_TRUE(reentrant.try_lock());
  SharedMutex rw(client(), "rw");
  ASSERT_TRUE(rw.try_lock_shared());

  Tool& l = run({"status", "--json", "lease"});
  EXPECT_EQ(l.status(), 0);
  EXPECT_TRUE(JsonChecker::valid(l.out())) << l.out();
  EXPECT_NE(l.out().find("\"held\":true,\"kind\":\"lease\""), std::string::npos) << l.out();
  EXPECT_NE(l.out().find("\"id\":\"" + lease.token().substr(0, 8) + "\""), std::string::npos);
  EXPECT_NE(l.out().find("\"fence\":1}"), std::string::npos) << l.out();
  EXPECT_NE(l.out().find("\"exclusive\":true"), std::string::npos) << l.out();

  Tool& r = run({"status", "--json", "reentrant"});
  EXPECT_EQ(r.status(), 0);
  EXPECT_TRUE(JsonChecker::valid(r.out())) << r.out();
  EXPECT_NE(r.out().find("\"kind\":\"reentrant\""), std::string::npos) << r.out();
  EXPECT_NE(r.out().find("\"id\":\"" + reentrant.owner_id().substr(0, 8) + "\",\"holds\":1"),
            std::string::npos)
      << r.out();

  Tool& s = run({"status", "--json", "rw"});
  EXPECT_EQ(s.status(), 0);
  EXPECT_TRUE(JsonChecker::valid(s.out())) << s.out();
  EXPECT_NE(s.out().find("\"kind\":\"rwlock\""), std::string::npos) << s.out();
  EXPECT_NE(s.out().find("\"mode\":\"read\""), std::string::npos) << s.out();
  EXPECT_NE(s.out().find("\"holds\":1,\"exclusive\":false"), std::string::npos) << s.out();

  Tool& free = run({"status", "--json", "free\"name"});
  EXPECT_EQ(free.status(), 1);
  EXPECT_TRUE(JsonChecker::valid(free.out())) << free.out();
  EXPECT_NE(free.out().find("\"held\":false"), std::string::npos) << free.out();

  Tool& text = run({"status", "lease"});
  EXPECT_EQ(text.status(), 0);
  EXPECT_NE(text.out().find("state:   held"), std::string::npos) << text.out();
}

TEST_F(Cli, BadInputGivesOneLineAndItsDocumentedStatus) {
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string says;
  };
  testing::RedisServer down;
  const std::string down_url = "redis://127.0.0.1:" + std::to_string(down.port());
  down.kill();
  const std::vector<Case> cases{
      {{"run", "nightly"}, 64, "no command given"},
      {{"run", "--ttl", "30sec", "nightly", "--", "true"}, 64, "bad duration '30sec' for --ttl"},
      {{"run", "--wait", "1.5s", "nightly", "--", "true"}, 64, "bad duration '1.5s' for --wait"},
      {{"run", "--url", "http://x", "nightly", "--", "true"}, 64, "bad Redis URL"},
      {{"run", "--url", down_url, "nightly", "--", "true"}, 69, "cannot reach Redis"},
      {{"status", "--url", down_url, "nightly"}, 69, "cannot reach Redis"},
      {{"run", "--on-lost", "stop", "nightly", "--", "true"}, 64, "bad --on-lost"},
      {{"run", "--shared", "--fencing", "nightly", "--", "true"}, 64, "--fencing"},
      {{"run", "--hold-at-least", "0s", "nightly", "--", "true"}, 64, "must be positive"},
      {{"run", "--hold-at-least", "1.5s", "nightly", "--", "true"},
       64,
       "bad duration '1.5s' for --hold-at-least"},
      {{"run", "--hold-at-least", "5s", "--max-hold", "2s", "nightly", "--", "true"},
       64,
       "must not exceed --max-hold"},
      {{"run", "--shared", "--hold-at-least", "1s", "nightly", "--", "true"}, 64, "--shared"},
      {{"run", "--fair", "--reentrant", "nightly", "--", "true"}, 64, "exclude each other"},
      {{"run", "--semaphore", "2", "--fencing", "nightly", "--", "true"}, 64, "--semaphore"},
      {{"run", "--semaphore", "0", "nightly", "--", "true"}, 64, "--semaphore"},
      {{"run", "nightly", "--", path("missing")}, 127, "cannot run"},
      {{"release", "--force", "nightly"}, 64, "without --yes"},
      {{"frobnicate"}, 64, "distlock: "},
  };
  for (const Case& c : cases) {
    Tool& t = run(c.args);
    std::string label;
    for (const std::string& a : c.args) label += a + " ";
    EXPECT_EQ(t.status(), c.status) << label << ": " << t.err();
    const std::vector<std::string> err = lines_of(t.err());
    ASSERT_EQ(err.size(), 1u) << label << ": " << t.err();
    EXPECT_NE(err[0].find(c.says), std::string::npos) << label << ": " << err[0];
  }
}

TEST_F(Cli, HelpAndVersion) {
  Tool& v = run({"--version"});
  EXPECT_EQ(v.status(), 0);
  EXPECT_EQ(v.out().rfind("distlock ", 0), 0u) << v.out();
  for (const char* sub : {"run", "status", "release", "wait"}) {
    Tool& h = run({sub, "--help"});
    EXPECT_EQ(h.status(), 0) << sub;
    EXPECT_NE(h.out().find("Exit status:"), std::string::npos) << sub;
  }
}

TEST_F(Cli, ReleaseForceDeletesTheLockAndWakesItsWaiter) {
  Mutex holder(client(), "nightly");
  ASSERT_TRUE(holder.try_lock());
  Tool& waiter = start({"run", "--wait", "5s", "nightly", "--", "true"});
  Tool& r = run({"release", "--force", "--yes", "nightly"});
  EXPECT_EQ(r.status(), 0) << r.err();
  EXPECT_NE(r.out().find("deleted nightly"), std::string::npos) << r.out();
  EXPECT_EQ(waiter.status(), 0) << waiter.err();
  EXPECT_EQ(holder.release(), Release::expired);
  EXPECT_EQ(run({"release", "--force", "--yes", "nightly"}).status(), 1);
  client().command("SET", "plain", "value");
  EXPECT_EQ(run({"release", "--force", "--yes", "plain"}).status(), 65);
  EXPECT_TRUE(exists("plain"));
}

// The tool and the library tell a lock from application data by the same
// rule: `status` says what inspect() says, and on a key that is no lock
// `status`, `release` and `wait` exit 65 naming what it holds, as
// force_unlock() refuses it, deleting nothing.
TEST_F(Cli, StatusAndReleaseAgreeWithTheLibraryOnWhatIsALock) {
  client().command("SET", "user:42", R"({"name":"ann"})");
  client().command("SET", "cache:1", "value", "PX", "60000");
  client().command("HSET", "session:9", "user", "42");
  client().command("HSET", "profile:7", "name", "bob", "visits", "3");
  client().command("PEXPIRE", "profile:7", "60000");
  client().command("RPUSH", "queue", "job");
  Mutex mutex(client(), "m");
  ReentrantMutex reentrant(client(), "r");
  SharedMutex reader(client(), "sr");
  SharedMutex writer(client(), "sw");
  ASSERT_TRUE(mutex.try_lock());
  ASSERT_TRUE(reentrant.try_lock());
  ASSERT_TRUE(reader.try_lock_shared());
  ASSERT_TRUE(writer.try_lock());
  const auto tool_kind = [](LockKind kind) -> std::string {
    switch (kind) {
      case LockKind::read:
      case LockKind::write: return "\"rwlock\"";
      case LockKind::none: return "null";
      default: return std::string("\"") + to_string(kind) + "\"";
    }
  };
  for (const char* key : {"user:42", "session:9", "profile:7", "queue"}) {
    const LockStatus library = inspect(client(), key);
    ASSERT_EQ(library.kind, LockKind::other) << key;
    Tool& status = run({"status", "--json", key});
    EXPECT_EQ(status.status(), 65) << key << ": " << status.out();
    EXPECT_TRUE(JsonChecker::valid(status.out())) << status.out();
    EXPECT_NE(status.out().find("\"held\":false,\"kind\":\"other\""), std::string::npos)
        << status.out();
    EXPECT_NE(status.out().find("\"holds\":\"" + library.holds + "\""), std::string::npos)
        << status.out();
    Tool& release = run({"release", "--force", "--yes", key});
    EXPECT_EQ(release.status(), 65) << key;
    EXPECT_NE(release.err().find("key '" + std::string(key) + "' is " + library.holds +
                                 ", not a lock; not deleted"),
              std::string::npos)
        << release.err();
    EXPECT_TRUE(exists(key)) << key;
  }
  Tool& wait = run({"wait", "--timeout", "5s", "user:42"});
  EXPECT_EQ(wait.status(), 65) << wait.err();
  for (const char* key : {"cache:1", "m", "r", "sr", "sw"}) {
    const LockStatus library = inspect(client(), key);
    ASSERT_TRUE(library.held) << key;
    Tool& status = run({"status", "--json", key});
    EXPECT_EQ(status.status(), 0) << key << ": " << status.out();
    EXPECT_NE(status.out().find("\"held\":true,\"kind\":" + tool_kind(library.kind)),
              std::string::npos)
        << status.out();
    EXPECT_EQ(run({"release", "--force", "--yes", key}).status(), 0) << key;
    EXPECT_FALSE(exists(key)) << key;
  }
}

TEST_F(Cli, WaitReturnsWhenTheLockIsFreedOr75AfterItsTimeout) {
  Mutex holder(client(), "nightly");
  ASSERT_TRUE(holder.try_lock());
  EXPECT_EQ(run({"wait", "--timeout", "200ms", "nightly"}).status(), 75);
  Tool& w = start({"wait", "nightly"});
  EXPECT_FALSE(w.wait(300ms));
  EXPECT_EQ(holder.release(), Release::released);
  ASSERT_TRUE(w.wait(5s));
  EXPECT_EQ(w.status(), 0);
  EXPECT_EQ(run({"wait", "nightly"}).status(), 0);
}

TEST_F(Cli, SharedRunsBesideReadersButNotBesideAWriter) {
  SharedMutex rw(client(), "catalog");
  ASSERT_TRUE(rw.try_lock_shared());
  EXPECT_EQ(run({"run", "--shared", "catalog", "--", "true"}).status(), 0);
  // A Mutex finds the read-write lock's hash where it keeps a string: refused
  // as a wrong type at once, with or without --wait, never taken for busy.
  Tool& plain = run({"run", "catalog", "--", "true"});
  EXPECT_EQ(plain.status(), 69);
  EXPECT_NE(plain.err().find("WRONGTYPE catalog holds a hash"), std::string::npos) << plain.err();
  rw.unlock_shared();
  ASSERT_TRUE(rw.try_lock());
  EXPECT_EQ(run({"run", "--shared", "--conflict-exit-code", "9", "catalog", "--", "true"}).status(),
            9);
}

TEST_F(Cli, ReentrantRunsInRedissonsLayout) {
  ReentrantMutex other(client(), "tree");
  ASSERT_TRUE(other.try_lock());
  EXPECT_EQ(run({"run", "--reentrant", "tree", "--", "true"}).status(), 75);
  other.unlock();
  const std::string job =
      "'" + std::string(tool_path) + "' status --json tree > '" + path("status") + "'";
  EXPECT_EQ(run({"run", "--reentrant", "tree", "--", "sh", "-c", job}).status(), 0);
  EXPECT_NE(read_file(path("status")).find("\"kind\":\"reentrant\""), std::string::npos);
  EXPECT_FALSE(exists("tree"));
}

// --fair: runs that wait do so in one line, and keep their places however
// long they wait (one wait each, not a wait given up and begun again);
// one that gives up leaves the queue.
TEST_F(Cli, FairRunsTakeTheLockInTheOrderTheyCame) {
  const std::string queue = "redisson_lock_queue:{turns}";
  FairMutex holder(client(), "turns");
  ASSERT_TRUE(holder.try_lock());
  const std::string log = path("order");
  std::vector<Tool*> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(&start({"run", "--fair", "--wait", "30s", "turns", "--", "sh", "-c",
                           "echo " + std::to_string(i) + " >> '" + log + "'"}));
    ASSERT_TRUE(eventually([&] { return client().command("LLEN", queue).integer() == i + 1; }));
    // Apart in time, so that a run whose wait began again (as one in
    // slices would, at a slice's end) would come back behind the later ones.
    if (i == 0) std::this_thread::sleep_for(300ms);
  }
  const Reply arrived = client().command("LRANGE", queue, "0", "-1");
  for (const auto until = Clock::now() + 1500ms; Clock::now() < until;) {
    const Reply now = client().command("LRANGE", queue, "0", "-1");
    ASSERT_EQ(now.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) ASSERT_EQ(now[i].str(), arrived[i].str()) << i;
    std::this_thread::sleep_for(50ms);
  }
  holder.unlock();
  for (Tool* t : runs) {
    ASSERT_TRUE(t->wait(20s));
    EXPECT_EQ(t->status(), 0) << t->err();
  }
  EXPECT_EQ(read_file(log), "0\n1\n2\n");
  ASSERT_TRUE(holder.try_lock());
  EXPECT_EQ(run({"run", "--fair", "-q", "--wait", "300ms", "turns", "--", "true"}).status(), 75);
  EXPECT_EQ(client().command("EXISTS", queue, "redisson_lock_timeout:{turns}").integer(), 0);
}

// --semaphore N: a run takes one of N permits, or waits for one.
TEST_F(Cli, SemaphoreRunsAtMostNCommandsAtOnce) {
  Semaphore slots(client(), "slots", 2);
  Permit first = slots.try_acquire();
  Permit second = slots.try_acquire();
  ASSERT_TRUE(first && second);
  Tool& full = run({"run", "--semaphore", "2", "slots", "--", "touch", path("ran")});
  EXPECT_EQ(full.status(), 75);
  EXPECT_NE(full.err().find("all 2 permits of slots are held"), std::string::npos) << full.err();
  EXPECT_FALSE(std::filesystem::exists(path("ran")));
  Tool& waiting = start({"run", "--semaphore", "2", "--wait", "20s", "slots", "--", "sh", "-c",
                         "echo $DISTLOCK_TOKEN > '" + path("token") + "'"});
  EXPECT_FALSE(waiting.wait(300ms));
  EXPECT_EQ(second.release(), Release::released);
  ASSERT_TRUE(waiting.wait(20s));
  EXPECT_EQ(waiting.status(), 0) << waiting.err();
  EXPECT_EQ(read_file(path("token")).size(), 9u);  // the permit's id, as status shows ids
  EXPECT_EQ(slots.held(), 1u);                     // given back when the command ended
}

// The tool over TLS: rediss:// (or --tls) with the CA to trust; a server
// it cannot verify is a Redis failure (69) that says why; TLS options
// without TLS are a usage error (64).
TEST_F(Cli, RunsOverTlsWithTheCaGivenAndRefusesAnUnverifiedServer) {
  testing::TestPki pki(dir_);
  testing::RedisServerOptions options;
  options.tls = testing::RedisServerTls{pki.server.cert, pki.server.key, pki.ca.file()};
  testing::RedisServer tls_server(options);
  const std::string tls_url = "rediss://127.0.0.1:" + std::to_string(tls_server.port());
  const std::string plain_url = "redis://127.0.0.1:" + std::to_string(tls_server.port());

  Tool& ran = run({"run", "--url", tls_url, "--tls-ca-file", pki.ca.file(), "job", "--", "sh", "-c",
                   "echo ran > '" + path("ran") + "'"});
  EXPECT_EQ(ran.status(), 0) << ran.err();
  EXPECT_EQ(read_file(path("ran")), "ran\n");
  Tool& flag = run({"status", "--url", plain_url, "--tls", "--tls-ca-file", pki.ca.file(), "job"});
  EXPECT_EQ(flag.status(), 1) << flag.err();  // reached it: the lock is free

  Tool& unverified = run({"run", "--url", tls_url, "job", "--", "true"});
  EXPECT_EQ(unverified.status(), 69);
  EXPECT_NE(unverified.err().find("certificate verify failed"), std::string::npos)
      << unverified.err();
  Tool& no_tls =
      run({"run", "--url", plain_url, "--tls-ca-file", pki.ca.file(), "job", "--", "true"});
  EXPECT_EQ(no_tls.status(), 64);
  EXPECT_NE(no_tls.err().find("need TLS"), std::string::npos) << no_tls.err();
}

// A user with no password would connect as the default user (AUTH goes only
// with a password): a usage error (64) that says so, and the job never runs.
TEST_F(Cli, AUserWithoutAPasswordIsAUsageError) {
  Tool& alone = run({"run", "--url", url(), "--user", "app", "job", "--", "sh", "-c",
                     "echo ran > '" + path("ran") + "'"});
  EXPECT_EQ(alone.status(), 64) << alone.err();
  EXPECT_NE(alone.err().find("without a password"), std::string::npos) << alone.err();
  EXPECT_FALSE(std::ifstream(path("ran")).good());
}

}  // namespace
}  // namespace distlock
