// Tests for token.hpp.
#include "distlock/token.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace distlock {
namespace {

TEST(Token, Is32LowerCaseHexCharacters) {
  const std::string token = make_token();
  ASSERT_EQ(token.size(), 32u);
  for (const char c : token) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;
}

TEST(Token, DoesNotRepeat) {
  std::unordered_set<std::string> seen;
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(seen.insert(make_token()).second);
}

TEST(Token, ForkedChildDoesNotRepeatItsParent) {
  // The parent takes a token first, so its thread has random bytes buffered
  // when it forks; the child must not hand out the same ones.
  static_cast<void>(make_token());
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  constexpr int per_side = 8;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string tokens;
    for (int i = 0; i < per_side; ++i) tokens += make_token();
    const ssize_t written = ::write(pipe_fds[1], tokens.data(), tokens.size());
    ::_exit(written == static_cast<ssize_t>(tokens.size()) ? 0 : 1);
  }
  std::unordered_set<std::string> seen;
  for (int i = 0; i < per_side; ++i) seen.insert(make_token());
  char buffer[32 * per_side];
  std::size_t got = 0;
  while (got < sizeof buffer) {
    const ssize_t n = ::read(pipe_fds[0], buffer + got, sizeof buffer - got);
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int i = 0; i < per_side; ++i) {
    EXPECT_TRUE(seen.insert(std::string(buffer + 32 * i, 32)).second) << "child repeated a token";
  }
}

TEST(Token, ThreadsNeverShareTokens) {
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  std::vector<std::vector<std::string>> made(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&made, t] {
      for (int i = 0; i < per_thread; ++i)
        made[static_cast<std::size_t>(t)].push_back(make_token());
    });
  }
  for (auto& worker : workers) worker.join();
  std::unordered_set<std::string> seen;
  for (const auto& list : made) {
    for (const auto& token : list) ASSERT_TRUE(seen.insert(token).second);
  }
}

}  // namespace
}  // namespace distlock
