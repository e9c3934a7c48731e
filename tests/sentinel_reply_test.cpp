// Tests for detail/backend/sentinel_reply.hpp: the master's address read from a
// SENTINEL get-master-addr-by-name reply, given as the bytes a Sentinel
// sends and parsed by hiredis's reader. No server needed; real Sentinels'
// replies are read in sentinel_test.cpp.
#include "distlock/detail/backend/sentinel_reply.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock {
// Named, so that it holds in any company (a unity batch).
namespace sentinel_reply_test {
namespace {

/// The reply hiredis reads from `bytes`.
Reply parsed(const std::string& bytes) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, bytes.data(), bytes.size());
  void* reply = nullptr;
  const int status = redisReaderGetReply(reader, &reply);
  redisReaderFree(reader);
  if (status != REDIS_OK || reply == nullptr) throw std::runtime_error("not one whole reply");
  return Reply(static_cast<redisReply*>(reply));
}

std::optional<detail::MasterAddress> address(const std::string& bytes) {
  return detail::master_address(parsed(bytes).view());
}

TEST(SentinelReply, AHostAndAPortAreTheMaster) {
  const auto master = address("*2\r\n$8\r\n10.0.0.1\r\n$4\r\n6380\r\n");
  ASSERT_TRUE(master.has_value());
  EXPECT_EQ(master->host, "10.0.0.1");
  EXPECT_EQ(master->port, 6380);
}

TEST(SentinelReply, NilOrAnotherShapeIsNoMaster) {
  EXPECT_FALSE(address("*-1\r\n").has_value());
  EXPECT_FALSE(address("$-1\r\n").has_value());
  EXPECT_FALSE(address("*1\r\n$8\r\n10.0.0.1\r\n").has_value());
  EXPECT_FALSE(address(":6379\r\n").has_value());
}

TEST(SentinelReply, APortOrHostThatIsNoneIsAProtocolError) {
  for (const char* bytes :
       {"*2\r\n$4\r\nhost\r\n$5\r\n99999\r\n", "*2\r\n$4\r\nhost\r\n$1\r\n0\r\n",
        "*2\r\n$4\r\nhost\r\n$7\r\n6379abc\r\n", "*2\r\n$4\r\nhost\r\n$0\r\n\r\n",
        "*2\r\n$0\r\n\r\n$4\r\n6379\r\n", "*2\r\n:1\r\n$4\r\n6379\r\n"}) {
    try {
      address(bytes);
      ADD_FAILURE() << "accepted " << bytes;
    } catch (const ConnectionError& error) {
      EXPECT_EQ(error.code(), Errc::protocol_error);
      EXPECT_NE(std::string(error.what()).find("get-master-addr-by-name"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace sentinel_reply_test
}  // namespace distlock
