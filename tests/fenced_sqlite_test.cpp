// Tests for examples/fenced_sqlite.cpp: the built program
// (DISTLOCK_FENCED_SQLITE_PATH) runs against its own redis-server, must exit
// 0 (the stalled worker's late write refused, no sale lost) and say so.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/faults.hpp"
#include "support/fixture.hpp"

#ifndef DISTLOCK_FENCED_SQLITE_PATH
#error "DISTLOCK_FENCED_SQLITE_PATH must name the built fenced_sqlite example"
#endif

extern char** environ;

namespace distlock {
namespace {

using namespace std::chrono_literals;

class FencedSqlite : public testing::RedisTest {};

TEST_F(FencedSqlite, TheStalledWorkersLateWriteIsRefusedAndNoSaleIsLost) {
  const std::string out_path = server().dir() + "/fenced_sqlite.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string program = DISTLOCK_FENCED_SQLITE_PATH;
  std::string uri = "redis://127.0.0.1:" + std::to_string(server().port());
  std::vector<char*> argv{program.data(), uri.data(), nullptr};
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(error, 0) << "posix_spawn(" << program << "): " << std::strerror(error);
  int status = 0;
  const bool ended = testing::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; },
                                         std::chrono::milliseconds(30000));
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::ifstream in(out_path);
  std::ostringstream out;
  out << in.rdbuf();
  ASSERT_TRUE(ended) << "still running after 30 s\n" << out.str();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out.str();
  EXPECT_NE(out.str().find("late write with fence 1 refused"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("no sale lost"), std::string::npos) << out.str();
  EXPECT_EQ(server().command({"EXISTS", "stock:1"}), "0");
}

}  // namespace
}  // namespace distlock
