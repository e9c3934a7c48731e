// Tests for token.hpp.
#include "distlock/token.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <unordered_set>

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
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string token = make_token();
    const ssize_t written = ::write(pipe_fds[1], token.data(), token.size());
    ::_exit(written == static_cast<ssize_t>(token.size()) ? 0 : 1);
  }
  const std::string parent_token = make_token();
  char buffer[32];
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
  EXPECT_NE(std::string(buffer, sizeof buffer), parent_token);
}

}  // namespace
}  // namespace distlock
