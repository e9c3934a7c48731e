// The command-line tool over Redis Cluster and Sentinel: every subcommand
// finds a name wherever the cluster keeps it (a multi-host --url, or
// --cluster with one seed) or wherever the Sentinels say the master is
// (--sentinel), as the library's ClusterClient and SentinelClient do.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distlock/cluster_client.hpp"
#include "distlock/mutex.hpp"
#include "distlock/sentinel_client.hpp"
#include "support/cluster_suite.hpp"
#include "support/eventually.hpp"
#include "support/sentinel_group.hpp"
#include "support/tool_process.hpp"

extern char** environ;

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::Tool;

// A temporary folder for the tools' output, and the tools run in it.
class ToolRuns {
 public:
  ToolRuns() {
    std::string pattern = (std::filesystem::temp_directory_path() / "distlock-cli-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
  }
  ~ToolRuns() {
    tools_.clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  ToolRuns(const ToolRuns&) = delete;
  ToolRuns& operator=(const ToolRuns&) = delete;

  /// Runs the tool to its end (10 s at most), with no Redis URL in its
  /// environment: the arguments say where.
  Tool& run(const std::vector<std::string>& args) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("DISTLOCK_", 0) == 0 || entry.rfind("REDIS_URL=", 0) == 0) continue;
      env.push_back(entry);
    }
    tools_.push_back(std::make_unique<Tool>(args, dir_, env));
    EXPECT_TRUE(tools_.back()->wait()) << "distlock did not exit within 10 s";
    return *tools_.back();
  }

  std::string write(const std::string& file, const std::string& text) const {
    const std::string path = dir_ + "/" + file;
    std::ofstream(path) << text << "\n";
    return path;
  }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<Tool>> tools_;
};

std::string joined(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& host : hosts) out += (out.empty() ? "" : ",") + host;
  return out;
}

// ---------------------------------------------------------------- cluster

class ClusterCli : public testing::ClusterSuite {
 protected:
  std::string seeds_url() const { return "redis://" + joined(cluster_->seed_list()); }
  // One seed only: a node that does not own the names the tests use.
  std::string seed_url(std::size_t master) const {
    return "redis://" + cluster_->seed_list().at(master);
  }
  ToolRuns tools_;
};

// Names on each master, through a seed list and through --cluster with one
// seed that owns none of them: run holds the name (a second run is refused
// while --hold-at-least keeps it), status finds its holder and fence, wait
// times out and then returns once release has deleted it at its owner.
TEST_F(ClusterCli, EverySubcommandFindsANameOnWhicheverNodeOwnsIt) {
  for (std::size_t master = 0; master < 3; ++master) {
    const std::string name = name_on(master, "cli-jobs");
    const std::size_t other = (master + 1) % 3;
    for (const std::vector<std::string>& where :
         {std::vector<std::string>{"--url", seeds_url()},
          std::vector<std::string>{"--cluster", "--url", seed_url(other)}}) {
      auto with = [&](std::vector<std::string> args) {
        args.insert(args.begin() + 1, where.begin(), where.end());
        return args;
      };
      Tool& first = tools_.run(with({"run", "--fencing", "--hold-at-least", "30s", name, "--", "sh",
                                     "-c", "echo fence=$DISTLOCK_FENCE"}));
      ASSERT_EQ(first.status(), 0) << first.err();
      EXPECT_NE(first.out().find("fence="), std::string::npos);
      EXPECT_GT(pttl_at(master, name), 20'000) << "the lease is at the owner, held on";

      Tool& second = tools_.run(with({"run", name, "--", "true"}));
      EXPECT_EQ(second.status(), 75) << second.err();

      Tool& status = tools_.run(with({"status", "--json", name}));
      EXPECT_EQ(status.status(), 0) << status.err();
      EXPECT_NE(status.out().find("\"held\":true"), std::string::npos) << status.out();
      EXPECT_NE(status.out().find("\"kind\":\"lease\""), std::string::npos) << status.out();
      EXPECT_EQ(status.out().find("\"fence\":null"), std::string::npos) << status.out();

      Tool& busy = tools_.run(with({"wait", "--timeout", "100ms", name}));
      EXPECT_EQ(busy.status(), 75) << busy.err();

      Tool& release = tools_.run(with({"release", "--force", "--yes", name}));
      EXPECT_EQ(release.status(), 0) << release.err();
      EXPECT_EQ(pttl_at(master, name), -2) << "deleted at the node that owns it";

      Tool& free = tools_.run(with({"wait", "--timeout", "5s", name}));
      EXPECT_EQ(free.status(), 0) << free.err();
    }
  }
}

TEST_F(ClusterCli, ReentrantAndSharedRunOnAClusterToo) {
  const std::string name = name_on(2, "cli-redisson");
  Tool& reentrant = tools_.run({"run", "--reentrant", "--url", seeds_url(), name, "--", "true"});
  EXPECT_EQ(reentrant.status(), 0) << reentrant.err();
  Tool& shared = tools_.run({"run", "--shared", "--url", seeds_url(), name, "--", "true"});
  EXPECT_EQ(shared.status(), 0) << shared.err();
  EXPECT_EQ(pttl_at(2, name), -2) << "both released";
}

// A release waiter of the library's, asleep behind a long lease, is woken
// by the tool's release at once: the release is announced by SPUBLISH on
// the name's shard, where cluster waiters listen.
TEST_F(ClusterCli, ReleaseWakesALibraryWaiterOnTheNamesShard) {
  const std::string name = name_on(1, "cli-wake");
  Mutex holder(client(), name, LockOptions{}.ttl(60s));
  ASSERT_TRUE(holder.try_lock());
  Mutex waiter(client(), name, LockOptions{}.ttl(5s));
  std::atomic<bool> acquired{false};
  Waiter<Mutex> waiting{waiter, std::thread([&] { acquired = waiter.try_lock_for(20s); })};
  ASSERT_TRUE(subscribed_at(1, "{" + name + "}:released"));
  Tool& release = tools_.run({"release", "--force", "--yes", "--url", seeds_url(), name});
  EXPECT_EQ(release.status(), 0) << release.err();
  waiting.thread.join();
  EXPECT_TRUE(acquired) << "woken by the release, not left to the 60 s lease";
  if (acquired) waiter.unlock();
}

// A key that is no lock is left alone on a cluster as on one server.
TEST_F(ClusterCli, AKeyThatIsNoLockIsLeftAlone) {
  const std::string name = name_on(0, "cli-user");
  client().command("SET", name, "application data");
  Tool& release = tools_.run({"release", "--force", "--yes", "--url", seeds_url(), name});
  EXPECT_EQ(release.status(), 65) << release.err();
  EXPECT_EQ(client().command("GET", name).str(), "application data");
  client().command("DEL", name);
}

// Without --cluster, one node's URL is a plain server: a name another node
// owns is refused with what to do instead, not a bare MOVED.
TEST_F(ClusterCli, OneNodeWithoutClusterSaysToGiveCluster) {
  const std::string name = name_on(1, "cli-moved");
  Tool& status = tools_.run({"status", "--url", seed_url(0), name});
  EXPECT_EQ(status.status(), 69);
  EXPECT_NE(status.err().find("MOVED"), std::string::npos) << status.err();
  EXPECT_NE(status.err().find("give --cluster"), std::string::npos) << status.err();
}

TEST_F(ClusterCli, OptionsThatCannotWorkTogetherAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"status", "--url", seeds_url() + "/2", "x"}, "only db 0"},
           {{"status", "--url", "redis://127.0.0.1:1,,127.0.0.1:2", "x"}, "an empty host"},
           {{"status", "--cluster", "--sentinel", "m", "--url", seeds_url(), "x"}, "exclude"},
           {{"status", "--sentinel-user", "u", "--url", seeds_url(), "x"}, "need --sentinel"},
           {{"status", "--cluster", "--url", "unix:///tmp/none.sock", "x"}, "over TCP"},
       }) {
    Tool& tool = tools_.run(c.args);
    EXPECT_EQ(tool.status(), 64) << c.args[2] << " " << c.args[3] << ": " << tool.err();
    EXPECT_NE(tool.err().find(c.says), std::string::npos) << tool.err();
  }
}

// ---------------------------------------------------------------- sentinel

std::string sentinels_url(const testing::SentinelGroup& group, const std::string& auth = {}) {
  return "redis://" + auth + joined(group.sentinel_addresses());
}

// The tool finds the master through the Sentinels, and follows it after a
// failover: a lease taken before is found, and deleted, on the new master.
TEST(SentinelCli, EverySubcommandFollowsTheMasterTheSentinelsName) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  testing::SentinelGroup group;
  ToolRuns tools;
  const std::vector<std::string> where{"--sentinel", testing::SentinelGroup::master_name, "--url",
                                       sentinels_url(group)};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin() + 1, where.begin(), where.end());
    return args;
  };
  Tool& run = tools.run(with({"run", "--fencing", "--hold-at-least", "60s", "cli-job", "--", "sh",
                              "-c", "echo fence=$DISTLOCK_FENCE"}));
  ASSERT_EQ(run.status(), 0) << run.err();
  EXPECT_EQ(run.out(), "fence=1\n");
  ASSERT_TRUE(testing::eventually([&] {
    return group.replica(0).command({"PTTL", "cli-job"}) != "-2" &&
           group.replica(1).command({"PTTL", "cli-job"}) != "-2";
  })) << "the lease reached both replicas";

  group.failover();
  Tool& status = tools.run(with({"status", "--json", "cli-job"}));
  EXPECT_EQ(status.status(), 0) << status.err();
  EXPECT_NE(status.out().find("\"held\":true"), std::string::npos) << status.out();
  EXPECT_NE(status.out().find("\"fence\":1"), std::string::npos) << status.out();

  Tool& refused = tools.run(with({"run", "cli-job", "--", "true"}));
  EXPECT_EQ(refused.status(), 75) << refused.err();
  Tool& release = tools.run(with({"release", "--force", "--yes", "cli-job"}));
  EXPECT_EQ(release.status(), 0) << release.err();
  Tool& free = tools.run(with({"wait", "--timeout", "5s", "cli-job"}));
  EXPECT_EQ(free.status(), 0) << free.err();
}

// The URL's password is the data nodes'; the Sentinels' comes from its own
// file. Without it the Sentinels refuse, and the tool says so (69).
TEST(SentinelCli, TheSentinelsPasswordIsKeptApartFromTheMasters) {
  DISTLOCK_REQUIRE_REDIS_SERVER();
  testing::SentinelGroup group("data-secret", "sentinel-secret");
  ToolRuns tools;
  const std::string file = tools.write("sentinel-password", "sentinel-secret");
  const std::string url = sentinels_url(group, ":data-secret@");
  Tool& run = tools.run({"run", "--sentinel", testing::SentinelGroup::master_name, "--url", url,
                         "--sentinel-password-file", file, "cli-secret", "--", "true"});
  EXPECT_EQ(run.status(), 0) << run.err();

  Tool& refused = tools.run({"run", "--sentinel", testing::SentinelGroup::master_name, "--url", url,
                             "cli-secret", "--", "true"});
  EXPECT_EQ(refused.status(), 69) << refused.err();
  EXPECT_NE(refused.err().find("sentinel"), std::string::npos) << refused.err();

  Tool& unknown = tools.run({"status", "--sentinel", "no-such-master", "--url", url,
                             "--sentinel-password-file", file, "cli-secret"});
  EXPECT_EQ(unknown.status(), 64) << unknown.err();
  EXPECT_NE(unknown.err().find("no-such-master"), std::string::npos) << unknown.err();
}

}  // namespace
}  // namespace distlock
