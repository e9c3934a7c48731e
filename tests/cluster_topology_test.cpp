// Tests for detail/backend/cluster_topology.hpp: the slot map read from CLUSTER
// SHARDS and CLUSTER SLOTS replies, given as the bytes a server sends
// (RESP2) and parsed by hiredis's reader. No server needed; the replies of
// a real cluster are read in cluster_client_test.cpp (ClusterRouting).
#include "distlock/detail/backend/cluster_topology.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "distlock/reply.hpp"

namespace distlock {
namespace {

using detail::SlotRange;

std::string bulk(const std::string& text) {
  return "$" + std::to_string(text.size()) + "\r\n" + text + "\r\n";
}
std::string number(long long value) { return ":" + std::to_string(value) + "\r\n"; }
std::string list(std::initializer_list<std::string> items) {
  std::string out = "*" + std::to_string(items.size()) + "\r\n";
  for (const std::string& item : items) out += item;
  return out;
}

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

/// One node of a CLUSTER SHARDS entry, as Redis 7.0 lists its fields.
std::string shard_node(const std::string& ip, const std::string& endpoint, long long port,
                       const std::string& role, const std::string& health) {
  return list({bulk("id"), bulk("e5a3c2"), bulk("port"), number(port), bulk("ip"), bulk(ip),
               bulk("endpoint"), bulk(endpoint), bulk("role"), bulk(role),
               bulk("replication-offset"), number(72156), bulk("health"), bulk(health)});
}

bool same(const SlotRange& range, int first, int last, const std::string& host, int port) {
  return range.first == first && range.last == last && range.host == host && range.port == port;
}

TEST(ClusterTopology, ShardsNameEachShardsMasterForItsRanges) {
  const Reply reply = parsed(list(
      {list({bulk("slots"), list({number(0), number(99), number(200), number(5460)}), bulk("nodes"),
             list({shard_node("10.0.0.2", "10.0.0.2", 7003, "replica", "online"),
                   shard_node("10.0.0.1", "db-1.example", 7000, "master", "online")})}),
       list({bulk("slots"), list({number(100), number(199)}), bulk("nodes"),
             list({shard_node("", "?", 7001, "master", "online")})})}));
  const detail::ShardRanges told = detail::ranges_from_shards(reply.view(), "asked");
  const std::vector<SlotRange>& ranges = told.ranges;
  EXPECT_TRUE(told.doubtful) << "slots 5461 and up are served by no node";
  ASSERT_EQ(ranges.size(), 3u);
  // The endpoint the cluster tells clients to use, over the ip.
  EXPECT_TRUE(same(ranges[0], 0, 99, "db-1.example", 7000));
  EXPECT_TRUE(same(ranges[1], 200, 5460, "db-1.example", 7000));
  // Unknown: the node asked.
  EXPECT_TRUE(same(ranges[2], 100, 199, "asked", 7001));
}

TEST(ClusterTopology, ShardsGuessTheOnlineMasterAndSkipShardsWithoutOne) {
  const Reply reply =
      parsed(list({list({bulk("slots"), list({number(0), number(10)}), bulk("nodes"),
                         list({shard_node("10.0.0.1", "", 7000, "master", "failed"),
                               shard_node("10.0.0.2", "", 7003, "master", "online")})}),
                   // A shard of replicas only, and one that serves no slot.
                   list({bulk("slots"), list({number(11), number(20)}), bulk("nodes"),
                         list({shard_node("10.0.0.4", "", 7004, "replica", "online")})}),
                   list({bulk("slots"), list({}), bulk("nodes"),
                         list({shard_node("10.0.0.5", "", 7005, "master", "online")})}),
                   // Slots as strings, as some servers send them.
                   list({bulk("slots"), list({bulk("21"), bulk("30")}), bulk("nodes"),
                         list({shard_node("10.0.0.6", "", 7006, "master", "online")})})}));
  const detail::ShardRanges told = detail::ranges_from_shards(reply.view(), "asked");
  const std::vector<SlotRange>& ranges = told.ranges;
  EXPECT_TRUE(told.doubtful);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_TRUE(same(ranges[0], 0, 10, "10.0.0.2", 7003));
  EXPECT_TRUE(same(ranges[1], 21, 30, "10.0.0.6", 7006));
}

/// A CLUSTER SHARDS reply of three shards, the other two whole and settled:
/// `first` holds slots `slots` and the nodes `nodes`.
Reply three_shards(const std::string& slots, const std::string& nodes) {
  return parsed(
      list({list({bulk("slots"), slots, bulk("nodes"), nodes}),
            list({bulk("slots"), list({number(5461), number(10921)}), bulk("nodes"),
                  list({shard_node("127.0.0.1", "127.0.0.1", 7001, "master", "online"),
                        shard_node("127.0.0.1", "127.0.0.1", 7004, "replica", "online")})}),
            list({bulk("slots"), list({number(10922), number(16383)}), bulk("nodes"),
                  list({shard_node("127.0.0.1", "127.0.0.1", 7002, "master", "online")})})}));
}

TEST(ClusterTopology, SettledShardsAreBelieved) {
  const detail::ShardRanges told = detail::ranges_from_shards(
      three_shards(list({number(0), number(5460)}),
                   list({shard_node("127.0.0.1", "127.0.0.1", 7000, "master", "online"),
                         shard_node("127.0.0.1", "127.0.0.1", 7003, "replica", "online")}))
          .view(),
      "asked");
  EXPECT_FALSE(told.doubtful);
  ASSERT_EQ(told.ranges.size(), 3u);
  EXPECT_TRUE(same(told.ranges[0], 0, 5460, "127.0.0.1", 7000));
}

// Right after the master on 7000 was killed and its replica on 7003 took
// over (CLUSTER FAILOVER TAKEOVER), with every live node's CLUSTER SLOTS
// and CLUSTER NODES already naming 7003 for slots 0-5460.
TEST(ClusterTopology, ShardsNamingTheKilledMasterFirstAreDoubtful) {
  // Valkey 8.0.1: the dead master first, both "online" until
  // cluster-node-timeout flags it "fail".
  const detail::ShardRanges told = detail::ranges_from_shards(
      three_shards(list({number(0), number(5460)}),
                   list({shard_node("127.0.0.1", "127.0.0.1", 7000, "master", "online"),
                         shard_node("127.0.0.1", "127.0.0.1", 7003, "master", "online")}))
          .view(),
      "asked");
  EXPECT_TRUE(told.doubtful) << "the reply cannot tell which master serves 0-5460";
}

TEST(ClusterTopology, ShardsWithTheFailedOversSlotsMissingAreDoubtful) {
  // Redis 7.2.6: the same two nodes, and no slots (those of its first
  // node, the dead master), long after the dead one is flagged "fail".
  const detail::ShardRanges told = detail::ranges_from_shards(
      three_shards(list({}), list({shard_node("127.0.0.1", "127.0.0.1", 7000, "master", "fail"),
                                   shard_node("127.0.0.1", "127.0.0.1", 7003, "master", "online")}))
          .view(),
      "asked");
  EXPECT_TRUE(told.doubtful) << "slots 0-5460 are served by no node";
  EXPECT_EQ(told.ranges.size(), 2u);
}

TEST(ClusterTopology, ShardsWithTheDeadMasterInAShardOfItsOwnAreBelieved) {
  // Redis 7.0.15: the dead master alone in a shard with no slots.
  const Reply reply = parsed(
      list({list({bulk("slots"), list({number(0), number(5460)}), bulk("nodes"),
                  list({shard_node("127.0.0.1", "127.0.0.1", 7003, "master", "online")})}),
            list({bulk("slots"), list({number(5461), number(16383)}), bulk("nodes"),
                  list({shard_node("127.0.0.1", "127.0.0.1", 7001, "master", "online")})}),
            list({bulk("slots"), list({}), bulk("nodes"),
                  list({shard_node("127.0.0.1", "127.0.0.1", 7000, "master", "online")})})}));
  const detail::ShardRanges told = detail::ranges_from_shards(reply.view(), "asked");
  EXPECT_FALSE(told.doubtful);
  ASSERT_EQ(told.ranges.size(), 2u);
  EXPECT_TRUE(same(told.ranges[0], 0, 5460, "127.0.0.1", 7003));
}

TEST(ClusterTopology, ATlsClientDialsTheTlsPort) {
  // A node on both ports lists both; a TLS-only one (port 0) lists no
  // "port" (Redis 7.0 to Valkey 8.0, with tls-cluster).
  const auto node = [](std::initializer_list<std::string> ports) {
    std::string fields = bulk("id") + bulk("e5a3c2");
    for (const std::string& port : ports) fields += port;
    fields += bulk("ip") + bulk("10.0.0.1") + bulk("role") + bulk("master");
    return "*" + std::to_string(6 + ports.size()) + "\r\n" + fields;
  };
  const Reply reply = parsed(
      list({list({bulk("slots"), list({number(0), number(8191)}), bulk("nodes"),
                  list({node({bulk("port"), number(6379), bulk("tls-port"), number(6380)})})}),
            list({bulk("slots"), list({number(8192), number(16383)}), bulk("nodes"),
                  list({node({bulk("tls-port"), number(7380)})})})}));
  const detail::ShardRanges tls = detail::ranges_from_shards(reply.view(), "asked", true);
  EXPECT_FALSE(tls.doubtful);
  ASSERT_EQ(tls.ranges.size(), 2u);
  EXPECT_TRUE(same(tls.ranges[0], 0, 8191, "10.0.0.1", 6380));
  EXPECT_TRUE(same(tls.ranges[1], 8192, 16383, "10.0.0.1", 7380));
  // In plain text the TLS-only shard has no port to dial: the reply is
  // checked with CLUSTER SLOTS.
  const detail::ShardRanges plain = detail::ranges_from_shards(reply.view(), "asked", false);
  EXPECT_TRUE(plain.doubtful);
  ASSERT_EQ(plain.ranges.size(), 1u);
  EXPECT_TRUE(same(plain.ranges[0], 0, 8191, "10.0.0.1", 6379));
  // A TLS client of a node that names only "port" dials that.
  const Reply port_only =
      three_shards(list({number(0), number(5460)}),
                   list({shard_node("127.0.0.1", "", 7000, "master", "online")}));
  const detail::ShardRanges named = detail::ranges_from_shards(port_only.view(), "asked", true);
  ASSERT_FALSE(named.ranges.empty());
  EXPECT_TRUE(same(named.ranges[0], 0, 5460, "127.0.0.1", 7000));
}

TEST(ClusterTopology, SlotsNameEachRangesMaster) {
  const auto node = [](const std::string& host, long long port) {
    return list({bulk(host), number(port), bulk("e5a3c2")});
  };
  const Reply reply =
      parsed(list({list({number(0), number(5460), node("10.0.0.1", 7000), node("10.0.0.2", 7003)}),
                   list({number(5461), number(10922), node("?", 7001)}),
                   list({number(10923), number(16383)})}));  // no master: left out
  const std::vector<SlotRange> ranges = detail::ranges_from_slots(reply.view(), "asked");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_TRUE(same(ranges[0], 0, 5460, "10.0.0.1", 7000));
  EXPECT_TRUE(same(ranges[1], 5461, 10922, "asked", 7001));
}

TEST(ClusterTopology, AnythingElseIsNoRange) {
  EXPECT_TRUE(detail::ranges_from_shards(parsed(number(1)).view(), "a").ranges.empty());
  EXPECT_TRUE(detail::ranges_from_shards(parsed(list({bulk("slots")})).view(), "a").ranges.empty());
  EXPECT_TRUE(detail::ranges_from_slots(parsed(bulk("x")).view(), "a").empty());
  // A master without a usable port, and slots out of range.
  EXPECT_TRUE(
      detail::ranges_from_shards(
          parsed(list({list({bulk("slots"), list({number(0), number(10)}), bulk("nodes"),
                             list({list(
                                 {bulk("ip"), bulk("10.0.0.1"), bulk("role"), bulk("master")})})}),
                       list({bulk("slots"), list({number(16000), number(16384)}), bulk("nodes"),
                             list({shard_node("10.0.0.2", "", 7000, "master", "online")})})}))
              .view(),
          "a")
          .ranges.empty());
}

// Found by tests/fuzz/fuzz_cluster_slots.cpp: CLUSTER SLOTS entries whose
// slots or port are none were kept (a range of [-5, 20000] became the
// whole map, a port of 0 a node that cannot be dialled).
TEST(ClusterTopology, SlotsLeaveOutRangesThatAreNone) {
  const auto node = [](const std::string& host, long long port) {
    return list({bulk(host), number(port), bulk("e5a3c2")});
  };
  const Reply reply = parsed(list({list({number(-5), number(20000), node("10.0.0.1", 7000)}),
                                   list({number(10), number(5), node("10.0.0.1", 7000)}),
                                   list({number(0), number(10), node("10.0.0.1", 0)}),
                                   list({number(0), number(10), node("10.0.0.1", 65536)}),
                                   list({bulk("slots"), list({}), node("10.0.0.1", 7000)}),
                                   list({number(11), number(20), node("10.0.0.2", 7001)})}));
  const std::vector<SlotRange> ranges = detail::ranges_from_slots(reply.view(), "asked");
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_TRUE(same(ranges[0], 11, 20, "10.0.0.2", 7001));
}

}  // namespace
}  // namespace distlock
