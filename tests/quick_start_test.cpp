// Tests for examples/quick_start.cpp, the README's Quick start: the built
// program (DISTLOCK_QUICK_START_PATH) runs against its own redis-server and
// must exit 0, print what each part did and leave no lock behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/fixture.hpp"

#ifndef DISTLOCK_QUICK_START_PATH
#error "DISTLOCK_QUICK_START_PATH must name the built quick_start example"
#endif

extern char** environ;

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct ExampleRun {
  int status = -1;  // exit status; 128 + N if killed by signal N; -1 if it never ended
  std::string out;
};

// Runs the example with uri as its argument, its stdout and stderr into one
// file in dir; kills it if it has not exited within 30 s.
ExampleRun run_quick_start(const std::string& uri, const std::string& dir) {
  const std::string out_path = dir + "/quick_start.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string program = DISTLOCK_QUICK_START_PATH;
  std::string argument = uri;
  std::vector<char*> argv{program.data(), argument.data(), nullptr};
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ExampleRun run;
  if (error != 0) {
    ADD_FAILURE() << "posix_spawn(" << program << "): " << std::strerror(error);
    return run;
  }
  int status = 0;
  const auto deadline = Clock::now() + 30s;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ADD_FAILURE() << "quick_start still running after 30 s";
  } else if (WIFEXITED(status)) {
    run.status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    run.status = 128 + WTERMSIG(status);
  }
  std::ifstream in(out_path);
  std::ostringstream text;
  text << in.rdbuf();
  run.out = text.str();
  return run;
}

class QuickStart : public testing::RedisTest {};

TEST_F(QuickStart, RunsToTheEndAndLeavesNoLockBehind) {
  const ExampleRun run =
      run_quick_start("redis://127.0.0.1:" + std::to_string(server().port()), server().dir());
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_EQ(run.out,
            "nightly report: this process runs it tonight\n"
            "stock:42: 9 left (fence 1)\n"
            "catalog: rendered under a read lock\n"
            "catalog: rebuilt under the write lock\n"
            "stock:42: 8 left (fence 2)\n");
  for (const char* key : {"jobs:nightly-report", "stock:42", "menu-tree", "catalog"}) {
    EXPECT_EQ(server().command({"EXISTS", key}), "0") << key;
  }
  EXPECT_EQ(server().command({"GET", "{stock:42}:fence"}), "2");
}

}  // namespace
}  // namespace distlock
