// SentinelGroup: a throwaway master with two replicas watched by three
// Sentinels, for the tests of SentinelClient and of failover-aware leases.
//
// Every process is a RedisServer of its own (free loopback port, temp dir,
// no persistence); the Sentinels run `redis-server <conf> --sentinel` with
// a generated config (down-after-milliseconds 1000, a short failover
// timeout, quorum 2). The constructor returns once the replicas are in sync
// and every Sentinel knows the master, both replicas and the two other
// Sentinels; a server that does not start, or a group that does not agree
// within 15 s, throws (the test fails). The fault helpers force a failover
// (SENTINEL FAILOVER), kill -9 the master, SIGSTOP/SIGCONT a replica, and
// wait until all three Sentinels name the same new master and it says
// ROLE master. Everything is killed in the destructor.
//
// With a SentinelGroupTls the data nodes speak TLS only (port 0, tls-port:
// port()) and replicate over it (tls-replication), and the Sentinels talk
// TLS to them and to each other (tls-replication in a Sentinel covers
// every link it makes). The Sentinels themselves take clients over TLS
// only, or, with sentinels_tls_only false, in plain text at port() and
// over TLS at a tls-port of their own, which they announce to each other.
// The harness's commands go through unix sockets where TLS is the only
// way in.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

namespace distlock::testing {

/// How a SentinelGroup speaks TLS (see the top of this file).
struct SentinelGroupTls {
  RedisServerTls certs;  ///< every process's certificate, key and CA
  bool sentinels_tls_only = true;
};

class SentinelGroup {
 public:
  static constexpr const char* master_name = "distlock-master";

  /// Starts the master, two replicas and three Sentinels, and waits until
  /// they agree (see the top of this file). With passwords, the data nodes
  /// require `data_password` (and replicate with it), the Sentinels
  /// require `sentinel_password` (and tell each other with it). With
  /// `tls`, TLS as the top of this file says.
  explicit SentinelGroup(const std::string& data_password = {},
                         const std::string& sentinel_password = {},
                         const std::optional<SentinelGroupTls>& tls = std::nullopt) {
    RedisServerOptions master_options;
    master_options.config_lines = {"repl-diskless-sync yes", "repl-diskless-sync-delay 0"};
    if (tls) {
      master_options.tls = tls->certs;
      master_options.config_lines.push_back("tls-replication yes");
    }
    if (!data_password.empty()) {
      master_options.requirepass = data_password;
      master_options.config_lines.push_back("masterauth " + data_password);
    }
    servers_.push_back(std::make_unique<RedisServer>(master_options));
    for (int i = 0; i < 2; ++i) {
      RedisServerOptions options = master_options;
      options.config_lines.push_back("replicaof 127.0.0.1 " + std::to_string(master_port_()));
      servers_.push_back(std::make_unique<RedisServer>(options));
    }
    wait_for("the replicas to sync", [&] { return connected_replicas(server(0)) == 2; });
    for (int i = 0; i < 3; ++i) {
      RedisServerOptions options;
      options.sentinel = true;
      const std::string name = master_name;
      options.config_lines = {
          "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(master_port_()) + " 2",
          "sentinel down-after-milliseconds " + name + " 1000",
          "sentinel failover-timeout " + name + " 3000", "sentinel parallel-syncs " + name + " 2"};
      if (!data_password.empty()) {
        options.config_lines.push_back("sentinel auth-pass " + name + " " + data_password);
      }
      if (!sentinel_password.empty()) {
        options.requirepass = sentinel_password;
        options.config_lines.push_back("sentinel sentinel-pass " + sentinel_password);
      }
      if (tls) add_sentinel_tls(*tls, options);
      sentinels_.push_back(std::make_unique<RedisServer>(options));
    }
    wait_agreed(2);
  }

  SentinelGroup(const SentinelGroup&) = delete;
  SentinelGroup& operator=(const SentinelGroup&) = delete;

  /// The data servers: 0 started as the master, 1 and 2 as its replicas.
  RedisServer& server(std::size_t i) { return *servers_.at(i); }
  RedisServer& sentinel(std::size_t i) { return *sentinels_.at(i); }
  std::vector<std::string> sentinel_addresses() const {
    std::vector<std::string> out;
    for (const auto& s : sentinels_) out.push_back(s->host() + ":" + std::to_string(s->port()));
    return out;
  }

  /// The server all Sentinels name the master now.
  RedisServer& master() { return server(master_index()); }
  std::size_t master_index() {
    const int port = named_master_port(*sentinels_.at(0));
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (servers_[i]->port() == port) return i;
    }
    throw std::runtime_error("SentinelGroup: the Sentinels name an unknown master");
  }
  /// The i-th (0 or 1) server that is not the master now.
  RedisServer& replica(std::size_t i) {
    const std::size_t m = master_index();
    std::size_t seen = 0;
    for (std::size_t s = 0; s < servers_.size(); ++s) {
      if (s != m && seen++ == i) return *servers_[s];
    }
    throw std::runtime_error("SentinelGroup: no such replica");
  }

  /// SENTINEL FAILOVER, then waits for the switch (see wait_for_switch).
  void failover() {
    const int old_port = named_master_port(*sentinels_.at(0));
    const std::string reply = sentinels_.at(0)->command({"SENTINEL", "FAILOVER", master_name});
    if (reply != "OK") throw std::runtime_error("SentinelGroup: SENTINEL FAILOVER: " + reply);
    wait_for_switch(old_port);
  }

  /// kill -9 of the master; returns its index. Does not wait for the switch.
  std::size_t kill_master() {
    const std::size_t m = master_index();
    servers_[m]->kill();
    return m;
  }

  /// Waits (up to 15 s) until every Sentinel names a master other than the
  /// one on `old_port` and that server says ROLE master.
  void wait_for_switch(int old_port) {
    wait_for("the Sentinels to switch to a new master", [&] {
      int port = 0;
      for (const auto& s : sentinels_) {
        const int named = named_master_port(*s);
        if (named == old_port || (port != 0 && named != port)) return false;
        port = named;
      }
      for (const auto& d : servers_) {
        if (d->port() == port) return d->running() && role(*d) == "master";
      }
      return false;
    });
  }

  /// Waits until every Sentinel knows `replicas` healthy replicas of the
  /// master and the two other Sentinels, and all name one master.
  void wait_agreed(int replicas) {
    wait_for("the Sentinels to agree", [&] {
      int port = 0;
      for (const auto& s : sentinels_) {
        const std::string state = s->command({"SENTINEL", "MASTER", master_name});
        if (field(state, "num-slaves") != std::to_string(replicas) ||
            field(state, "num-other-sentinels") != "2" || field(state, "flags") != "master") {
          return false;
        }
        const int named = named_master_port(*s);
        if (port != 0 && named != port) return false;
        port = named;
      }
      return true;
    });
  }

  static std::string role(const RedisServer& server) {
    try {
      const std::string reply = server.command({"ROLE"});
      return reply.substr(0, reply.find('\n'));
    } catch (const std::exception&) {
      return {};
    }
  }

  static int connected_replicas(const RedisServer& server) {
    const std::string info = server.command({"INFO", "replication"});
    const std::string key = "connected_slaves:";
    const std::size_t at = info.find(key);
    return at == std::string::npos ? 0 : std::stoi(info.substr(at + key.size()));
  }

 private:
  int master_port_() const { return servers_.at(0)->port(); }

  static void add_sentinel_tls(const SentinelGroupTls& tls, RedisServerOptions& options) {
    options.config_lines.push_back("tls-replication yes");
    if (tls.sentinels_tls_only) {
      options.tls = tls.certs;
      return;
    }
    const auto quoted = [](const std::string& path) { return detail::quote_config_value(path); };
    options.config_lines.push_back("tls-port " + std::to_string(detail::pick_free_port()));
    options.config_lines.push_back("tls-cert-file " + quoted(tls.certs.cert_file));
    options.config_lines.push_back("tls-key-file " + quoted(tls.certs.key_file));
    options.config_lines.push_back("tls-ca-cert-file " + quoted(tls.certs.ca_file));
    options.config_lines.push_back("tls-auth-clients " + tls.certs.auth_clients);
  }

  static int named_master_port(const RedisServer& sentinel) {
    const std::string reply =
        sentinel.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name});
    const std::size_t newline = reply.find('\n');
    if (newline == std::string::npos) return 0;
    return std::stoi(reply.substr(newline + 1));
  }

  // The value after `name` in a flat field/value reply rendered one per line.
  static std::string field(const std::string& reply, const std::string& name) {
    std::istringstream lines(reply);
    std::string line;
    while (std::getline(lines, line)) {
      if (line == name) {
        std::getline(lines, line);
        return line;
      }
    }
    return {};
  }

  template <class Condition>
  void wait_for(const std::string& what, Condition&& condition) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (;;) {
      try {
        if (condition()) return;
      } catch (const std::exception&) {
        // A server between states: ask again.
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string details;
        for (const auto& s : sentinels_) details += "--- sentinel log ---\n" + s->log_tail(15);
        throw std::runtime_error("SentinelGroup: timed out waiting for " + what + "\n" + details);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

}  // namespace distlock::testing
