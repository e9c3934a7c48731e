// Tests for scripts.hpp: every stored SHA-1 is the one the server computes.
#include "distlock/scripts.hpp"

#include <gtest/gtest.h>

#include "distlock/client.hpp"
#include "distlock/counting_scripts.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

class ScriptsTest : public testing::RedisTest {};

TEST_F(ScriptsTest, StoredShaMatchesScriptLoad) {
  Client client(testing::client_options(server()));
  for (const Script* script : scripts::all) {
    EXPECT_EQ(client.command("SCRIPT", "LOAD", script->source).str(), script->sha1)
        << script->source;
  }
  for (const Script* script : scripts::counting) {
    EXPECT_EQ(client.command("SCRIPT", "LOAD", script->source).str(), script->sha1)
        << script->source;
  }
}

}  // namespace
}  // namespace distlock
