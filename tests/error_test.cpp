// Tests for error.hpp: classification and the error_code category.
#include "distlock/error.hpp"

#include <gtest/gtest.h>

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
