// Tool: one run of the built distlock binary (DISTLOCK_CLI_PATH) as a
// subprocess, its stdout and stderr in files, for the tests that drive the
// command-line tool against their own servers.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/eventually.hpp"

#ifndef DISTLOCK_CLI_PATH
#error "DISTLOCK_CLI_PATH must name the built distlock binary"
#endif

namespace distlock::testing {

inline constexpr const char* tool_path = DISTLOCK_CLI_PATH;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// One run of the distlock binary, its stdout and stderr in files.
class Tool {
 public:
  using Clock = std::chrono::steady_clock;

  Tool(const std::vector<std::string>& args, const std::string& dir,
       const std::vector<std::string>& environment) {
    static int counter = 0;
    const std::string base = dir + "/tool" + std::to_string(++counter);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    std::vector<std::string> argv{tool_path};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> argv_ptrs;
    for (std::string& a : argv) argv_ptrs.push_back(a.data());
    argv_ptrs.push_back(nullptr);
    std::vector<std::string> env = environment;
    std::vector<char*> env_ptrs;
    for (std::string& e : env) env_ptrs.push_back(e.data());
    env_ptrs.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
    // Only stdin, stdout and stderr: the test's own Redis connections are
    // not the tool's to pass on.
    posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
#endif
    // Whatever the test runner ignores or blocks, the tool starts clean.
    sigset_t none;
    sigset_t all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setflags(&attributes,
                             static_cast<short>(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
    started_ = Clock::now();
    const int error =
        ::posix_spawn(&pid_, tool_path, &actions, &attributes, argv_ptrs.data(), env_ptrs.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (error != 0) {
      ADD_FAILURE() << "posix_spawn(" << tool_path << "): " << std::strerror(error);
      pid_ = -1;
    }
  }

  ~Tool() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
  }

  Tool(const Tool&) = delete;
  Tool& operator=(const Tool&) = delete;

  /// Whether the tool has exited, without waiting.
  bool exited() {
    if (!exited_ && pid_ > 0 && ::waitpid(pid_, &status_, WNOHANG) == pid_) {
      exited_ = true;
      took_ = Clock::now() - started_;
    }
    return exited_;
  }

  /// Waits up to `limit` for the tool to exit; true if it did.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    return eventually([&] { return exited(); }, limit);
  }

  /// The exit status (128 + N if killed by signal N); -1 while running.
  int status() {
    if (!wait()) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    return WIFSIGNALED(status_) ? 128 + WTERMSIG(status_) : -1;
  }
  Clock::duration took() const { return took_; }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  void signal(int number) const { ::kill(pid_, number); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
  Clock::time_point started_;
  Clock::duration took_{};
  std::string out_path_;
  std::string err_path_;
};

}  // namespace distlock::testing
