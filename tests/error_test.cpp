// Tests for error.hpp: classification and the error_code category.
#include "distlock/error.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

namespace distlock {
namespace {

TEST(Error, ClassifiesServerErrorsByPrefix) {
  EXPECT_EQ(classify_server_error("WRONGTYPE Operation against a key"), ServerErrorKind::wrongtype);
  EXPECT_EQ(classify_server_error("NOSCRIPT No matching script"), ServerErrorKind::noscript);
  EXPECT_EQ(classify_server_error("OOM command not allowed"), ServerErrorKind::oom);
  EXPECT_EQ(classify_server_error("READONLY You can't write"), ServerErrorKind::readonly);
  EXPECT_EQ(classify_server_error("LOADING Redis is loading"), ServerErrorKind::loading);
  EXPECT_EQ(classify_server_error("BUSY Redis is busy"), ServerErrorKind::busy);
  EXPECT_EQ(classify_server_error("NOAUTH Authentication required."), ServerErrorKind::noauth);
  EXPECT_EQ(classify_server_error("WRONGPASS invalid username"), ServerErrorKind::wrongpass);
  EXPECT_EQ(classify_server_error("NOPERM this user has no permissions"), ServerErrorKind::noperm);
  EXPECT_EQ(classify_server_error("NOREPLICAS Not enough good replicas"),
            ServerErrorKind::noreplicas);
  EXPECT_EQ(classify_server_error("ERR unknown command"), ServerErrorKind::other);
  EXPECT_EQ(classify_server_error(""), ServerErrorKind::other);
  EXPECT_EQ(classify_server_error("OOMPH"), ServerErrorKind::other);
}

TEST(Error, CodesAreInDistlocksCategory) {
  const std::error_code code = Errc::timed_out;
  EXPECT_EQ(&code.category(), &error_category());
  EXPECT_STREQ(code.category().name(), "distlock");
  EXPECT_EQ(code.message(), "timed out");
}

// The process the test below starts: before main, when the variable is
// set, it registers an exit handler that builds an error, then uses the
// category and exits. The handler was registered before the category's
// first use, so it runs after the category would have been destroyed, as
// a library thread still giving a hold back while the process exits does.
[[maybe_unused]] const bool built_at_exit_probe = [] {
  if (std::getenv("DISTLOCK_ERROR_AT_EXIT_PROBE") == nullptr) return false;
  std::atexit([] {
    const Error late(Errc::io_error, "built at exit");
    std::fputs(late.what(), stdout);
  });
  const bool named = make_error_code(Errc::io_error).category().name() == std::string("distlock");
  std::exit(named ? 0 : 1);
}();

TEST(Error, AnErrorBuiltWhileTheProcessExitsHasItsMessage) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::setenv("DISTLOCK_ERROR_AT_EXIT_PROBE", "1", 1);
    ::execl("/proc/self/exe", "probe", nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string printed;
  char buffer[512];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) {
    printed.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << printed;
  EXPECT_NE(printed.find("built at exit"), std::string::npos) << printed;
}

TEST(Error, HierarchyCanBeCaughtAtEachLevel) {
  try {
    throw ServerError("OOM command not allowed when used memory > 'maxmemory'.");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), Errc::server_error);
    EXPECT_NE(std::string(error.what()).find("OOM"), std::string::npos);
  }
  EXPECT_THROW(throw TimeoutError(Errc::timed_out, "x"), std::system_error);
  EXPECT_THROW(throw InvalidArgument("x"), Error);
}

}  // namespace
}  // namespace distlock
