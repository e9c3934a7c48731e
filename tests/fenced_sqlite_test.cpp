// Tests for examples/fenced_sqlite.cpp: the built program
// (DISTLOCK_FENCED_SQLITE_PATH) runs against its own redis-server, must exit
// 0 (the stalled worker's late write refused, no sale lost) and say so.
#include <gtest/gtest.h>

#include <string>

#include "support/fixture.hpp"
#include "support/run_example.hpp"

#ifndef DISTLOCK_FENCED_SQLITE_PATH
#error "DISTLOCK_FENCED_SQLITE_PATH must name the built fenced_sqlite example"
#endif

namespace distlock {
namespace {

class FencedSqlite : public testing::RedisTest {};

TEST_F(FencedSqlite, TheStalledWorkersLateWriteIsRefusedAndNoSaleIsLost) {
  const testing::ExampleRun run =
      testing::run_example(DISTLOCK_FENCED_SQLITE_PATH,
                           "redis://127.0.0.1:" + std::to_string(server().port()), server().dir());
  ASSERT_EQ(run.status, 0) << run.out;
  EXPECT_NE(run.out.find("late write with fence 1 refused"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("no sale lost"), std::string::npos) << run.out;
  EXPECT_EQ(server().command({"EXISTS", "stock:1"}), "0");
}

}  // namespace
}  // namespace distlock
