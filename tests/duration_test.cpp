// One duration grammar: the same table of texts through a URI option
// (ClientOptions::from_uri) and through the distlock tool's parser must give
// the same duration, or the same refusal. A URI once refused "5m" that the
// tool took.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "../tools/duration.hpp"
#include "distlock/client.hpp"
#include "distlock/error.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;

struct Row {
  std::string text;
  std::optional<std::chrono::milliseconds> value;  // nullopt: refused
};

const std::vector<Row>& table() {
  static const std::vector<Row> rows{
      {"0", 0ms},
      {"250", 250ms},  // a bare number is milliseconds, as URIs always read it
      {"250ms", 250ms},
      {"0ms", 0ms},
      {"2s", 2s},
      {"5m", 5min},
      {"1h", 1h},
      {"8760h", 8760h},  // 365 days, the most
      {"31536000000", 31536000000ms},
      {"8761h", std::nullopt},
      {"31536000001", std::nullopt},
      {"99999999999999999999", std::nullopt},  // more than an int64 holds
      {"9223372036854775807s", std::nullopt},  // would overflow once in ms
      {"153722867280912931m", std::nullopt},
      {"", std::nullopt},
      {"s", std::nullopt},
      {"-5", std::nullopt},
      {"+5s", std::nullopt},
      {"1.5s", std::nullopt},
      {"1m30s", std::nullopt},
      {" 5s", std::nullopt},
      {"5 s", std::nullopt},
      {"5S", std::nullopt},
      {"5sec", std::nullopt},
      {"5d", std::nullopt},
  };
  return rows;
}

TEST(Durations, TheToolReadsTheTable) {
  for (const Row& row : table()) {
    EXPECT_EQ(cli::parse_duration(row.text), row.value) << "'" << row.text << "'";
  }
}

TEST(Durations, AUriReadsTheSameTableForEveryDurationOption) {
  for (const char* option : {"pool_wait_timeout", "max_connection_age", "command_timeout"}) {
    for (const Row& row : table()) {
      const std::string uri = std::string("redis://h?") + option + "=" + row.text;
      // A connection timeout must be positive: 0 is refused for that, not
      // for its form, so it is left out here (RejectsBadUris covers it).
      if (std::string(option) == "command_timeout" && row.value == 0ms) continue;
      if (row.value) {
        try {
          const ClientOptions parsed = ClientOptions::from_uri(uri);
          const std::chrono::milliseconds got =
              std::string(option) == "pool_wait_timeout"    ? parsed.pool_wait_timeout
              : std::string(option) == "max_connection_age" ? parsed.max_connection_age
                                                            : parsed.command_timeout;
          EXPECT_EQ(got, *row.value) << uri;
        } catch (const std::exception& error) {
          ADD_FAILURE() << uri << ": refused: " << error.what();
        }
        continue;
      }
      try {
        ClientOptions::from_uri(uri);
        ADD_FAILURE() << uri << ": accepted";
      } catch (const InvalidArgument& error) {
        // The message names the option and shows the value.
        const std::string message = error.what();
        EXPECT_NE(message.find(std::string("bad ") + option + " '" + row.text + "'"),
                  std::string::npos)
            << uri << ": " << message;
      }
    }
  }
}

TEST(Durations, CommandTimeoutOfFiveMinutesInAUri) {
  EXPECT_EQ(ConnectionOptions::from_uri("redis://h?command_timeout=5m").command_timeout, 5min);
  EXPECT_EQ(ConnectionOptions::from_uri("redis://h?connect_timeout=1h").connect_timeout, 1h);
}

}  // namespace
}  // namespace distlock
