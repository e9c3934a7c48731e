// Tests for examples/quick_start.cpp, the README's Quick start: the built
// program (DISTLOCK_QUICK_START_PATH) runs against its own redis-server and
// must exit 0, print what each part did and leave no lock behind but the
// nightly one, held on for its min_hold; with no Redis, exit 1 with a message.
#include <gtest/gtest.h>

#include <string>

#include "support/fixture.hpp"
#include "support/run_example.hpp"

#ifndef DISTLOCK_QUICK_START_PATH
#error "DISTLOCK_QUICK_START_PATH must name the built quick_start example"
#endif

namespace distlock {
namespace {

class QuickStart : public testing::RedisTest {};

TEST_F(QuickStart, RunsToTheEndAndLeavesOnlyTheNightlyLockHeldOn) {
  const testing::ExampleRun run =
      testing::run_example(DISTLOCK_QUICK_START_PATH,
                           "redis://127.0.0.1:" + std::to_string(server().port()), server().dir());
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_EQ(run.out,
            "nightly report: this process runs it tonight\n"
            "stock:42: 9 left (fence 1)\n"
            "catalog: rendered under a read lock\n"
            "catalog: rebuilt under the write lock\n"
            "stock:42: 8 left (fence 2)\n");
  for (const char* key : {"stock:42", "menu-tree", "catalog"}) {
    EXPECT_EQ(server().command({"EXISTS", key}), "0") << key;
  }
  // The nightly lock is held on until 5 min after its acquire (min_hold),
  // with an expiry: a late machine skips the job, and nothing stays for good.
  const long long pttl = std::stoll(server().command({"PTTL", "jobs:nightly-report"}));
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 5 * 60 * 1000);
  EXPECT_EQ(server().command({"GET", "{stock:42}:fence"}), "2");
}

// With no Redis where it points, the program says so and exits 1: the
// Quick start a newcomer copies must not end in std::terminate.
TEST_F(QuickStart, WithNoRedisThereItSaysSoAndExitsOne) {
  const int port = testing::detail::pick_free_port();  // nothing listens there
  const testing::ExampleRun run = testing::run_example(
      DISTLOCK_QUICK_START_PATH, "redis://127.0.0.1:" + std::to_string(port), server().dir());
  EXPECT_EQ(run.status, 1) << run.out;
  EXPECT_NE(run.out.find("quick_start: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << run.out;
}

}  // namespace
}  // namespace distlock
