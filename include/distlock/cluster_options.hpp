// ClusterOptions: where a Redis Cluster is (a few seed nodes) and how to
// talk to it: every ClientOptions field, applied to each node's pool, plus
// the bounds on redirects and retries and how often the slot map is read
// again. ClusterClient (cluster_client.hpp) takes them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/client_options.hpp"
#include "distlock/connection_options.hpp"
#include "distlock/error.hpp"

namespace distlock {

/// ClientOptions for every node (host and port are ignored: the nodes are
/// the seeds and whatever the cluster says), plus the cluster's own.
struct ClusterOptions : ClientOptions {
  /// Nodes to learn the cluster from: "host:port" or "[v6]:port" (port
  /// 6379 if left out). Any one that answers is enough.
  std::vector<std::string> seeds;
  /// Most MOVED/ASK redirects and TRYAGAIN/CLUSTERDOWN retries one step
  /// follows before it fails with the last error.
  unsigned max_redirects = 5;
  /// The first pause after TRYAGAIN or CLUSTERDOWN (doubling after each),
  /// never past the caller's deadline.
  std::chrono::milliseconds retry_pause{10};
  /// The slot map is read again after a MOVED, after a node could not be
  /// reached, and when it is older than this (by the next call after).
  std::chrono::milliseconds refresh_interval{5000};

  ClusterOptions() = default;
  /// `client` for every node; no seeds yet, the cluster's own fields at
  /// their defaults.
  ClusterOptions(ClientOptions client) : ClientOptions(std::move(client)) {}
  /// `seed_nodes` as the seeds, `client` for every node; validate() checks
  /// them, not this.
  ClusterOptions(std::vector<std::string> seed_nodes, ClientOptions client = {})
      : ClientOptions(std::move(client)), seeds(std::move(seed_nodes)) {}

  /// Parses "redis://[user:password@]host1:port1,host2:port2[?option=value&...]",
  /// or "rediss://..." for a cluster over TLS (every node, with the TLS
  /// options of the query: ca_file, server_name, ...): the seeds,
  /// comma-separated where a URI has one host, and the options of
  /// ClientOptions::from_uri (a db other than 0 is refused: a cluster has
  /// only db 0). Throws InvalidArgument as ClientOptions::from_uri does.
  static ClusterOptions from_uri(std::string_view uri);

  /// Throws InvalidArgument if there is no seed, a seed is not
  /// "host[:port]", or a field is out of range.
  void validate() const;
};

namespace detail {

/// A seed as host and port.
inline ConnectionOptions parse_seed(std::string_view seed) {
  ConnectionOptions where;
  if (seed.empty() || seed.find('@') != std::string_view::npos ||
      seed.find('/') != std::string_view::npos) {
    throw InvalidArgument("cluster seed '" + std::string(seed) +
                          "': expected host:port (credentials go in the options)");
  }
  try {
    parse_authority(seed, where);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument("cluster seed '" + std::string(seed) + "': " + error.what());
  }
  return where;
}

}  // namespace detail

inline ClusterOptions ClusterOptions::from_uri(std::string_view uri) {
  const std::string_view scheme = detail::starts_with_nocase(uri, "rediss://")  ? "rediss://"
                                  : detail::starts_with_nocase(uri, "redis://") ? "redis://"
                                                                                : "";
  if (scheme.empty())
    throw detail::uri_error("a cluster URI must start with redis:// or rediss://");
  // The host list runs from after the credentials to the first '/' or '?'.
  const std::string_view rest = uri.substr(scheme.size());
  const auto at = rest.rfind('@');
  const std::size_t hosts_begin = at == std::string_view::npos ? 0 : at + 1;
  const std::size_t hosts_end = std::min(rest.find('/', hosts_begin), rest.find('?', hosts_begin));
  const std::string_view hosts =
      rest.substr(hosts_begin, hosts_end == std::string_view::npos ? std::string_view::npos
                                                                   : hosts_end - hosts_begin);
  const std::string_view before = uri.substr(0, scheme.size() + hosts_begin);
  const std::string_view after =
      hosts_end == std::string_view::npos ? std::string_view() : rest.substr(hosts_end);
  std::vector<std::string> seeds;
  std::size_t start = 0;
  while (start <= hosts.size()) {
    const std::size_t comma = std::min(hosts.find(',', start), hosts.size());
    seeds.emplace_back(hosts.substr(start, comma - start));
    if (seeds.back().empty()) throw detail::uri_error("an empty host in the cluster's host list");
    start = comma + 1;
  }
  // Each seed as a URI of its own, so each is checked as Client would.
  ClusterOptions options(
      ClientOptions::from_uri(std::string(before) + seeds.front() + std::string(after)));
  for (const std::string& seed : seeds) {
    const ClientOptions one = ClientOptions::from_uri(std::string(before) + seed + "/0");
    options.seeds.push_back(one.endpoint());
  }
  if (options.db != 0) throw detail::uri_error("a cluster has only db 0");
  return options;
}

inline void ClusterOptions::validate() const {
  if (seeds.empty()) throw InvalidArgument("a ClusterClient needs at least one seed node");
  for (const std::string& seed : seeds) detail::parse_seed(seed);
  if (db != 0) throw InvalidArgument("a cluster has only db 0");
  if (!unix_socket.empty()) throw InvalidArgument("cluster nodes are reached over TCP only");
  if (max_redirects == 0) throw InvalidArgument("max_redirects must be at least 1");
  if (retry_pause.count() < 0) throw InvalidArgument("retry_pause must not be negative");
  if (refresh_interval.count() <= 0) throw InvalidArgument("refresh_interval must be positive");
  ConnectionOptions check = *this;
  check.validate();
}

}  // namespace distlock
