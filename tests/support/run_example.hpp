// Runs a built example program as a child process, for the tests that
// check an example end to end: its argument, its stdout and stderr in one
// file, its exit status, and a bound on how long it may take.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace distlock::testing {

struct ExampleRun {
  int status = -1;  // exit status; 128 + N if killed by signal N; -1 if it never ended
  std::string out;  // stdout and stderr
};

/// Runs `program argument`, its output into `dir`/example.out; kills it if
/// it has not exited within `limit`.
inline ExampleRun run_example(const std::string& program, const std::string& argument,
                              const std::string& dir,
                              std::chrono::seconds limit = std::chrono::seconds(30)) {
  const std::string out_path = dir + "/example.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string path = program;
  std::string arg = argument;
  std::vector<char*> argv{path.data(), arg.data(), nullptr};
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ExampleRun run;
  if (error != 0) {
    run.out = "posix_spawn(" + program + "): " + std::strerror(error);
    return run;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
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

}  // namespace distlock::testing
