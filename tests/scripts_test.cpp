// Tests for detail/wire/scripts.hpp: every stored SHA-1 is the one the server computes,
// and the batched renewal scripts renew exactly the leases still held.
#include "distlock/detail/wire/scripts.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "distlock/client.hpp"
#include "distlock/detail/wire/counting_scripts.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/redis_server.hpp"

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

// The positions a renewal script reported gone.
std::set<long long> gone_positions(const Reply& reply) {
  std::set<long long> gone;
  for (std::size_t i = 0; i < reply.size(); ++i) gone.insert(reply[i].integer());
  return gone;
}

TEST_F(ScriptsTest, RenewBatchRenewsOnlyLeasesStillHoldingTheirTokenAndNeverShortens) {
  Client client(testing::client_options(server()));
  client.command("SET", "held", "t1", "PX", "1000");
  client.command("SET", "taken", "other", "PX", "1000");
  client.command("SET", "longer", "t4", "PX", "90000");  // extended past the renewal's TTL
  client.command("HSET", "hash", "t5", "1");             // another type: gone, not an error
  const Reply gone = client.command("EVAL", scripts::renew_batch.source, "5", "held", "taken",
                                    "missing", "longer", "hash", "t1", "30000", "t2", "30000", "t3",
                                    "30000", "t4", "30000", "t5", "30000");
  EXPECT_EQ(gone_positions(gone), (std::set<long long>{2, 3, 5}));
  EXPECT_GT(client.command("PTTL", "held").integer(), 25000);
  EXPECT_LE(client.command("PTTL", "taken").integer(), 1000);
  EXPECT_GT(client.command("PTTL", "longer").integer(), 60000);
  EXPECT_EQ(client.command("EXISTS", "missing").integer(), 0);
}

// Renews permits of two sets, interleaved in the call as leases of two
// semaphores falling due together, and checks what each became, and what
// became of their count keys.
void renew_permits_of_two_sets(Client& client) {
  const long long now = std::stoll(std::string(client.command("TIME")[0].str())) * 1000;
  const auto at = [&](long long ms) { return std::to_string(now + ms); };
  client.command("ZADD", "a", at(1000), "a1", at(-5000), "a-expired", at(90000), "a-long");
  client.command("PEXPIRE", "a", "2000");
  client.command("SET", "a:n", "3");  // stored by resize(): no expiry, left so
  client.command("ZADD", "b", at(1000), "b1");
  client.command("PEXPIRE", "b", "90000");          // longer than any lease: left alone
  client.command("SET", "b:n", "2", "PX", "1000");  // adopted: lives as long as its set
  client.command("SET", "c", "x");                  // another type: gone, not an error
  const Reply gone =
      client.command("EVAL", scripts::semaphore_renew.source, "12", "a", "a:n", "b", "b:n", "a",
                     "a:n", "a", "a:n", "b", "b:n", "c", "c:n", "a1", "30000", "b1", "20000",
                     "a-expired", "30000", "a-long", "30000", "b-missing", "30000", "c1", "30000");
  EXPECT_EQ(gone_positions(gone), (std::set<long long>{3, 5, 6}));
  const auto score = [&](const char* set, const char* id) {
    return std::stoll(std::string(client.command("ZSCORE", set, id).str()));
  };
  EXPECT_GE(score("a", "a1"), now + 29000);
  EXPECT_GE(score("b", "b1"), now + 19000);
  EXPECT_LT(score("b", "b1"), now + 60000);
  EXPECT_GE(score("a", "a-long"), now + 89000);  // never moved back
  EXPECT_GT(client.command("PTTL", "a").integer(), 25000);
  EXPECT_GT(client.command("PTTL", "b").integer(), 60000);
  EXPECT_EQ(client.command("PTTL", "a:n").integer(), -1);
  EXPECT_GT(client.command("PTTL", "b:n").integer(), 60000);
  EXPECT_EQ(client.command("EXISTS", "c:n").integer(), 0);  // none is made
}

TEST_F(ScriptsTest, SemaphoreRenewRenewsOnlyLivePermitsOfEverySetItIsGiven) {
  Client client(testing::client_options(server()));
  renew_permits_of_two_sets(client);
}

TEST_F(ScriptsTest, SemaphoreRenewReadsScoresOneByOneWhereTheServerHasNoZmscore) {
  // As on a server before Redis 6.2.
  testing::RedisServerOptions options;
  options.config_lines.push_back("rename-command ZMSCORE \"\"");
  const testing::RedisServer old_server(options);
  Client client(testing::client_options(old_server));
  ASSERT_THROW(client.command("ZMSCORE", "a", "a1"), ServerError);
  renew_permits_of_two_sets(client);
}

}  // namespace
}  // namespace distlock
