// A throwaway Redis Cluster for tests and benchmarks.
//
// Defines distlock::testing::RedisCluster: N masters (3 by default), each a
// RedisServer (redis_server.hpp) started with cluster mode on, on free
// ports (its cluster bus port picked free too, and given explicitly), in its
// own temp dir, with no persistence. The slots are split evenly with
// CLUSTER ADDSLOTSRANGE, the nodes joined with CLUSTER MEET, and the
// constructor returns once every node reports cluster_state:ok (or throws,
// with each node's CLUSTER INFO and log, after 20 s). It also moves slots
// between masters the way redis-cli --cluster reshard does, in steps a test
// can stop between (the ASK window). With replicas (RedisCluster(3, 1)) each
// master gets its own, attached with CLUSTER REPLICATE and in sync before
// the constructor returns; fail_over() then kills a master (kill -9) and
// promotes its replica with CLUSTER FAILOVER TAKEOVER, or hands over
// gracefully with CLUSTER FAILOVER. Given a RedisServerTls, every node
// speaks TLS only, to clients (port 0, tls-port: node(i).port()), on the
// cluster bus (tls-cluster) and to its master (tls-replication); the
// harness's own commands go through each node's unix socket. Like
// RedisServer it depends only on POSIX and hiredis, not on GoogleTest.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/redis_server.hpp"

namespace distlock::testing {

class RedisCluster {
 public:
  static constexpr int slots = 16384;

  /// `masters` masters with `replicas` replicas each. Node indexes: the
  /// masters first (0 .. masters-1), then the replicas.
  /// With `tls`, a TLS-only cluster (see the top of this file).
  explicit RedisCluster(std::size_t masters = 3, std::size_t replicas = 0,
                        std::optional<RedisServerTls> tls = std::nullopt)
      : masters_(masters), tls_(std::move(tls)) {
    if (masters == 0) throw std::invalid_argument("RedisCluster: at least one master");
    for (std::size_t i = 0; i < masters * (1 + replicas); ++i) start_node();
    owner_.assign(slots, 0);
    for (std::size_t i = 0; i < masters; ++i) {
      const int first = static_cast<int>(slots * i / masters);
      const int last = static_cast<int>(slots * (i + 1) / masters) - 1;
      expect_ok(i, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
      expect_ok(i, {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
      for (int slot = first; slot <= last; ++slot) owner_[static_cast<std::size_t>(slot)] = i;
      ids_.push_back(nodes_[i]->command({"CLUSTER", "MYID"}));
    }
    for (std::size_t i = masters; i < nodes_.size(); ++i) {
      ids_.push_back(nodes_[i]->command({"CLUSTER", "MYID"}));
    }
    for (std::size_t i = 1; i < nodes_.size(); ++i) {
      expect_ok(0, {"CLUSTER", "MEET", nodes_[i]->host(), std::to_string(nodes_[i]->port()),
                    std::to_string(bus_ports_[i])});
    }
    for (std::size_t i = masters; i < nodes_.size(); ++i) {
      const std::size_t master = master_of_[i];
      // CLUSTER REPLICATE needs the master known to the replica first.
      wait_for("node " + std::to_string(i) + " to learn of its master", [&] {
        return nodes_[i]->command({"CLUSTER", "NODES"}).find(ids_[master]) != std::string::npos;
      });
      expect_ok(i, {"CLUSTER", "REPLICATE", ids_[master]});
    }
    wait_until_ok();
    for (std::size_t i = masters; i < nodes_.size(); ++i) {
      wait_for("replica " + std::to_string(i) + " to sync", [&] {
        return nodes_[i]->command({"INFO", "replication"}).find("master_link_status:up") !=
               std::string::npos;
      });
    }
  }

  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  /// Nodes, replicas included.
  std::size_t size() const { return nodes_.size(); }
  std::size_t masters() const { return masters_; }
  RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  const std::string& id(std::size_t i) const { return ids_.at(i); }

  /// "127.0.0.1:p1,127.0.0.1:p2,..." (the first masters).
  std::string seeds() const {
    std::string out;
    for (const std::string& seed : seed_list()) out += (out.empty() ? "" : ",") + seed;
    return out;
  }
  std::vector<std::string> seed_list() const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < masters_; ++i) {
      out.push_back(nodes_[i]->host() + ":" + std::to_string(nodes_[i]->port()));
    }
    return out;
  }

  /// The first live replica of node `master` (the index of a node).
  std::size_t replica_of(std::size_t master) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (alive_.at(i) && master_of_.at(i) == master) return i;
    }
    throw std::runtime_error("RedisCluster: node " + std::to_string(master) + " has no replica");
  }

  /// Waits until the replica of `master` has every write the master made.
  void wait_replicated(std::size_t master) {
    const std::size_t replica = replica_of(master);
    const long long target =
        info_number(nodes_.at(master)->command({"INFO", "replication"}), "master_repl_offset:");
    wait_for("replica " + std::to_string(replica) + " to catch up", [&] {
      return info_number(nodes_.at(replica)->command({"INFO", "replication"}),
                         "slave_repl_offset:") >= target;
    });
  }

  /// Promotes the replica of `master`: with `kill`, the master is killed
  /// (SIGKILL) and the replica takes over (CLUSTER FAILOVER TAKEOVER);
  /// without, they hand over (CLUSTER FAILOVER; the old master becomes its
  /// replica). Returns, with the replica's index, once every live node says
  /// the replica owns the master's slots and cluster_state:ok; owner_of()
  /// gives the replica for those slots from then on. "Says" by CLUSTER
  /// NODES, which reads the node's slot table as CLUSTER SLOTS does; not by
  /// CLUSTER SHARDS, which may name the dead master for them until it is
  /// forgotten (Valkey 8.0), or no slots at all (Redis 7.2).
  std::size_t fail_over(std::size_t master, bool kill) {
    const std::size_t replica = replica_of(master);
    if (kill) {
      this->kill(master);
      expect_ok(replica, {"CLUSTER", "FAILOVER", "TAKEOVER"});
    } else {
      expect_ok(replica, {"CLUSTER", "FAILOVER"});
    }
    const int slot = first_slot_of(master);
    // A hand-over the master has not confirmed within the manual failover's
    // 5 s (a busy machine) is dropped by the replica, which stays one: it
    // is asked again then.
    auto asked = std::chrono::steady_clock::now();
    const auto still_replica = [&] {
      return nodes_.at(replica)->command({"INFO", "replication"}).find("role:slave") !=
             std::string::npos;
    };
    wait_for(
        "node " + std::to_string(replica) + " to own slot " + std::to_string(slot),
        [&] {
          for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (alive_[i] && !says_owner(i, replica, slot)) {
              if (!kill && std::chrono::steady_clock::now() - asked > std::chrono::seconds(6) &&
                  still_replica()) {
                expect_ok(replica, {"CLUSTER", "FAILOVER"});
                asked = std::chrono::steady_clock::now();
              }
              return false;
            }
          }
          return true;
        },
        std::chrono::seconds(40));
    for (std::size_t& owner : owner_) {
      if (owner == master) owner = replica;
    }
    master_of_.at(replica) = no_master;
    if (!kill) master_of_.at(master) = replica;
    wait_until_ok();
    return replica;
  }

  /// Kills node `i` (SIGKILL), and promotes nothing: the harness leaves it
  /// out from then on.
  void kill(std::size_t i) {
    nodes_.at(i)->kill();
    alive_.at(i) = false;
  }

  /// The master that owns `slot`, as this harness assigned it.
  std::size_t owner_of(int slot) const { return owner_.at(static_cast<std::size_t>(slot)); }
  /// The first slot a master owns.
  int first_slot_of(std::size_t master) const {
    for (int slot = 0; slot < slots; ++slot) {
      if (owner_of(slot) == master) return slot;
    }
    throw std::runtime_error("RedisCluster: master " + std::to_string(master) + " owns no slot");
  }

  /// Step 1 of a slot move: `to` imports it, `from` migrates it. From now
  /// on `from` answers ASK for keys of the slot it no longer has.
  void begin_migration(int slot, std::size_t from, std::size_t to) {
    expect_ok(to, {"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", ids_.at(from)});
    expect_ok(from, {"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", ids_.at(to)});
  }

  /// Step 2: MIGRATE every key of the slot from `from` to `to`.
  void migrate_keys(int slot, std::size_t from, std::size_t to) {
    for (;;) {
      const std::string listed =
          nodes_.at(from)->command({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"});
      if (listed.empty()) return;
      std::vector<std::string> argv = {
          "MIGRATE", nodes_.at(to)->host(), std::to_string(nodes_.at(to)->port()), "", "0", "5000",
          "KEYS"};
      std::istringstream keys(listed);
      for (std::string key; std::getline(keys, key);) argv.push_back(key);
      const std::string reply = nodes_.at(from)->command(argv);
      if (reply != "OK" && reply != "NOKEY") {
        throw std::runtime_error("RedisCluster: MIGRATE failed: " + reply);
      }
    }
  }

  /// Step 3: every master is told that `to` owns the slot now, `to`
  /// first (as redis-cli does): told before it, the old owner would answer
  /// MOVED to `to`, and `to`, still importing, MOVED back.
  ///
  /// `to` takes a new config epoch then, without consensus: one past the
  /// greatest it knows of. Epochs spread by gossip, which can take a second
  /// or more, so right after an earlier move `to` may not know the epoch
  /// that move gave another node, and takes an epoch no greater than it.
  /// A ping the old owner sent before it was told, still claiming the slot
  /// with the greater epoch, then wins the slot back at every node it
  /// reaches, and the old and new owner answer MOVED to each other for
  /// good. So every node learns the greatest epoch first (spread_epochs).
  void finish_migration(int slot, std::size_t to) {
    spread_epochs();
    expect_ok(to, {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids_.at(to)});
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (i == to || !alive_[i] || master_of_[i] != no_master) continue;
      expect_ok(i, {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids_.at(to)});
    }
    owner_.at(static_cast<std::size_t>(slot)) = to;
  }

  /// The three steps at once.
  void move_slot(int slot, std::size_t to) {
    const std::size_t from = owner_of(slot);
    if (from == to) return;
    begin_migration(slot, from, to);
    migrate_keys(slot, from, to);
    finish_migration(slot, to);
  }

  /// Makes `slot` served by no node: every live node drops it (CLUSTER
  /// DELSLOTS at each; a node drops a slot only when told itself). With
  /// cluster-require-full-coverage, the nodes answer CLUSTERDOWN for every
  /// slot until restore_slot().
  void unassign_slot(int slot) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (alive_[i]) expect_ok(i, {"CLUSTER", "DELSLOTS", std::to_string(slot)});
    }
  }

  /// Gives `slot` back to owner_of(slot), and returns once every live node
  /// says so (it spreads by gossip) and cluster_state:ok. Restoring a slot
  /// twice is restoring it once.
  void restore_slot(int slot) {
    const std::size_t owner = owner_of(slot);
    if (!says_owner(owner, owner, slot)) {
      expect_ok(owner, {"CLUSTER", "ADDSLOTS", std::to_string(slot)});
    }
    wait_for("every node to learn who owns slot " + std::to_string(slot), [&] {
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (alive_[i] && !says_owner(i, owner, slot)) return false;
      }
      return true;
    });
    wait_until_ok();
  }

  /// Has every live node learn the greatest epoch any node knows, and
  /// waits until they all report it: a PUBLISH goes to every node over the
  /// cluster bus at once, and every bus message carries its sender's epochs.
  void spread_epochs() {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (alive_[i]) nodes_[i]->command({"PUBLISH", "redis-cluster-harness:epochs", "1"});
    }
    wait_for("the nodes to agree on the current epoch", [&] {
      long long first = -1;
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (!alive_[i]) continue;
        const long long epoch =
            info_number(nodes_[i]->command({"CLUSTER", "INFO"}), "cluster_current_epoch:");
        if (first == -1) first = epoch;
        if (epoch != first) return false;
      }
      return true;
    });
  }

  /// Waits until every live node says cluster_state:ok; throws after 20 s.
  void wait_until_ok() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      bool all = true;
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        all = all &&
              (!alive_[i] || nodes_[i]->command({"CLUSTER", "INFO"}).find("cluster_state:ok") !=
                                 std::string::npos);
      }
      if (all) return;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string details;
        for (const auto& node : nodes_) {
          if (!node->running()) continue;
          details += "--- node " + std::to_string(node->port()) + " ---\n" +
                     node->command({"CLUSTER", "INFO"}) + "\n" + node->log_tail(10) + "\n";
        }
        throw std::runtime_error("RedisCluster: not every node reached cluster_state:ok in 20 s\n" +
                                 details);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  static constexpr std::size_t no_master = static_cast<std::size_t>(-1);

  void start_node() {
    const int bus_port = detail::pick_free_port();
    RedisServerOptions options;
    options.config_lines = {"cluster-enabled yes", "cluster-config-file nodes.conf",
                            "cluster-port " + std::to_string(bus_port), "cluster-node-timeout 5000",
                            "cluster-require-full-coverage yes"};
    if (tls_) {
      options.tls = tls_;
      options.config_lines.push_back("tls-cluster yes");
      options.config_lines.push_back("tls-replication yes");
    }
    nodes_.push_back(std::make_unique<RedisServer>(options));
    bus_ports_.push_back(bus_port);
    alive_.push_back(true);
    master_of_.push_back(nodes_.size() <= masters_ ? no_master
                                                   : (nodes_.size() - 1 - masters_) % masters_);
  }

  /// Waits until `done()`; throws naming `what` after `limit`.
  template <class Done>
  static void wait_for(const std::string& what, Done done,
                       std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("RedisCluster: timed out waiting for " + what);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// A number after `field` in an INFO reply; -1 if absent.
  static long long info_number(const std::string& info, const std::string& field) {
    const std::size_t at = info.find(field);
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + field.size()));
  }

  /// Whether node `asked` says (CLUSTER NODES) that node `owner` is a master
  /// serving `slot`.
  bool says_owner(std::size_t asked, std::size_t owner, int slot) const {
    std::istringstream lines(nodes_.at(asked)->command({"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string id, address, flags, master, ping, pong, epoch, link;
      fields >> id >> address >> flags >> master >> ping >> pong >> epoch >> link;
      if (id != ids_.at(owner)) continue;
      if (flags.find("master") == std::string::npos) return false;
      for (std::string range; fields >> range;) {
        if (range.empty() || range.front() == '[') continue;  // a slot being moved
        const std::size_t dash = range.find('-');
        const int first = std::stoi(range.substr(0, dash));
        const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
        if (first <= slot && slot <= last) return true;
      }
      return false;
    }
    return false;
  }

  void expect_ok(std::size_t node, const std::vector<std::string>& argv) {
    const std::string reply = nodes_.at(node)->command(argv);
    if (reply != "OK") {
      throw std::runtime_error("RedisCluster: " + argv.at(0) + " " + argv.at(1) + " on node " +
                               std::to_string(node) + " answered: " + reply);
    }
  }

  const std::size_t masters_;
  const std::optional<RedisServerTls> tls_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<bool> alive_;
  std::vector<std::size_t> master_of_;  // per node: the node it replicates, or no_master
  std::vector<int> bus_ports_;
  std::vector<std::string> ids_;
  std::vector<std::size_t> owner_;
};

}  // namespace distlock::testing
