// The slot map as one node tells it: which master serves which range of
// hash slots, read from the reply to CLUSTER SHARDS (Redis 7.0 and later)
// or to CLUSTER SLOTS (every Redis since 3.0, deprecated in 7.0). Only the
// parsing lives here; detail/backend/cluster_routing.hpp asks and keeps the map.
//
// CLUSTER SHARDS answers one entry per shard, each a flat list of names and
// values: "slots" (first, last, first, last, ...) and "nodes" (one flat
// list of names and values per node: "ip", "endpoint", "port", "tls-port",
// "role", "health", ...). CLUSTER SLOTS answers one entry per range: first,
// last, then the master as [host, port, id, ...], then its replicas.
//
// Over TLS the port to dial is "tls-port": a node that listens for clients
// on TLS only (port 0) lists no "port" at all (Redis 7.0 to Valkey 8.0),
// and one that listens on both lists both. CLUSTER SLOTS and MOVED name
// the port of the asking connection's kind (7.2 and later; 7.0 names the
// TLS port whenever tls-cluster is on), so over TLS they need no choice.
//
// Either way a
// host that is empty or "?" means the node asked (it does not know the
// address it is reached at), and an entry that is not understood is left
// out rather than failing the whole map.
//
// CLUSTER SHARDS is not to be believed while a failover settles, and
// CLUSTER SLOTS (read from the node's own slot table) is: after a replica
// takes over from a killed master, the shard lists both as role "master"
// until the cluster forgets the dead one, often the dead one first and
// with health "online" (it is flagged "fail" only after
// cluster-node-timeout), and Redis 7.2 answers the shard's slots as those
// of its first node, so an empty list. Such a reply is marked doubtful,
// and the caller asks CLUSTER SLOTS.
#pragma once

#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// Slots [first, last] are served by the master at host:port.
struct SlotRange {
  int first = 0;
  int last = 0;
  std::string host;
  int port = 0;
};

/// An integer reply, or a string reply that holds only a number (some
/// servers answer CLUSTER SHARDS' slots as strings); -1 otherwise.
inline long long reply_number(const ReplyView& reply) noexcept {
  if (reply.is_integer()) return reply.integer();
  const std::string_view text = reply.str();
  long long value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() ? value : -1;
}

/// The value after `name` in a flat list of names and values; null if none.
inline const redisReply* field_of(const ReplyView& map, std::string_view name) noexcept {
  for (std::size_t i = 0; i + 1 < map.size(); i += 2) {
    if (map[i].str() == name) return map[i + 1].raw();
  }
  return nullptr;
}

/// The ranges of a CLUSTER SLOTS reply; `asked_host` stands for a host the
/// node left out.
inline std::vector<SlotRange> ranges_from_slots(const ReplyView& reply,
                                                const std::string& asked_host) {
  std::vector<SlotRange> ranges;
  for (std::size_t i = 0; i < reply.size(); ++i) {
    const ReplyView range = reply[i];
    if (range.size() < 3 || range[2].size() < 2) continue;
    const ReplyView master = range[2];
    // As for CLUSTER SHARDS: slots and a port that are none leave the
    // entry out (the routing would spread a range of [-5, 20000] over the
    // whole map, and dial port 0).
    const long long first = reply_number(range[0]);
    const long long last = reply_number(range[1]);
    const long long port = reply_number(master[1]);
    if (first < 0 || last < first || last >= cluster_slots || port <= 0 || port > 65535) continue;
    std::string host(master[0].str());
    if (host.empty() || host == "?") host = asked_host;
    ranges.push_back(
        {static_cast<int>(first), static_cast<int>(last), std::move(host), static_cast<int>(port)});
  }
  return ranges;
}

/// What a CLUSTER SHARDS reply tells: its ranges, and whether they may be
/// wrong (see the top of this file).
struct ShardRanges {
  std::vector<SlotRange> ranges;
  /// A shard named more than one master, or a slot was left unserved: the
  /// ranges are a best guess, to be checked with CLUSTER SLOTS.
  bool doubtful = false;
};

/// The ranges of a CLUSTER SHARDS reply: each shard's slots, served by the
/// node of the shard whose role is "master" (if there are two, the first
/// whose health is "online", and the whole reply is doubtful), at its
/// "tls-port" for a client that speaks `tls` (its "port" if it names none),
/// else at its "port".
inline ShardRanges ranges_from_shards(const ReplyView& reply, const std::string& asked_host,
                                      bool tls = false) {
  ShardRanges told;
  std::size_t served = 0;
  for (std::size_t i = 0; i < reply.size(); ++i) {
    const ReplyView shard = reply[i];
    const redisReply* slots = field_of(shard, "slots");
    const redisReply* nodes = field_of(shard, "nodes");
    if (slots == nullptr || nodes == nullptr) continue;
    const redisReply* master = nullptr;
    bool master_online = false;
    for (std::size_t n = 0; n < ReplyView(nodes).size(); ++n) {
      const ReplyView node = ReplyView(nodes)[n];
      const redisReply* role = field_of(node, "role");
      if (role == nullptr || ReplyView(role).str() != "master") continue;
      if (master != nullptr) told.doubtful = true;
      const redisReply* health = field_of(node, "health");
      const bool online = health == nullptr || ReplyView(health).str() == "online";
      if (master == nullptr || (online && !master_online)) {
        master = node.raw();
        master_online = online;
      }
    }
    if (master == nullptr) continue;  // a shard that serves nothing now
    const redisReply* port_field = tls ? field_of(ReplyView(master), "tls-port") : nullptr;
    if (port_field == nullptr) port_field = field_of(ReplyView(master), "port");
    const long long port = port_field == nullptr ? -1 : reply_number(ReplyView(port_field));
    if (port <= 0 || port > 65535) continue;
    // "endpoint" is the address the cluster tells clients to use
    // (cluster-preferred-endpoint-type); "ip" when it has none.
    std::string host;
    for (const char* name : {"endpoint", "ip"}) {
      const redisReply* value = field_of(ReplyView(master), name);
      if (value != nullptr && !ReplyView(value).str().empty() && ReplyView(value).str() != "?") {
        host = std::string(ReplyView(value).str());
        break;
      }
    }
    if (host.empty()) host = asked_host;
    const ReplyView bounds(slots);
    for (std::size_t b = 0; b + 1 < bounds.size(); b += 2) {
      const long long first = reply_number(bounds[b]);
      const long long last = reply_number(bounds[b + 1]);
      if (first < 0 || last < first || last >= cluster_slots) continue;
      told.ranges.push_back(
          {static_cast<int>(first), static_cast<int>(last), host, static_cast<int>(port)});
      served += static_cast<std::size_t>(last - first + 1);
    }
  }
  // Shards do not overlap, so fewer slots than the cluster's means a hole
  // (or slots no node was given: CLUSTER SLOTS says so too, at one more
  // command per map read while that lasts).
  if (served < static_cast<std::size_t>(cluster_slots)) told.doubtful = true;
  return told;
}

}  // namespace distlock::detail
