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
// can stop between (the ASK window). Like RedisServer it depends only on
// POSIX and hiredis, not on GoogleTest.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

namespace distlock::testing {

class RedisCluster {
 public:
  static constexpr int slots = 16384;

  explicit RedisCluster(std::size_t masters = 3) {
    if (masters == 0) throw std::invalid_argument("RedisCluster: at least one master");
    for (std::size_t i = 0; i < masters; ++i) {
      const int bus_port = detail::pick_free_port();
      RedisServerOptions options;
      options.config_lines = {"cluster-enabled yes", "cluster-config-file nodes.conf",
                              "cluster-port " + std::to_string(bus_port),
                              "cluster-node-timeout 5000", "cluster-require-full-coverage yes"};
      nodes_.push_back(std::make_unique<RedisServer>(options));
      bus_ports_.push_back(bus_port);
    }
    owner_.assign(slots, 0);
    for (std::size_t i = 0; i < masters; ++i) {
      const int first = static_cast<int>(slots * i / masters);
      const int last = static_cast<int>(slots * (i + 1) / masters) - 1;
      expect_ok(i, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
      expect_ok(i, {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
      for (int slot = first; slot <= last; ++slot) owner_[static_cast<std::size_t>(slot)] = i;
      ids_.push_back(nodes_[i]->command({"CLUSTER", "MYID"}));
    }
    for (std::size_t i = 1; i < masters; ++i) {
      expect_ok(0, {"CLUSTER", "MEET", nodes_[i]->host(), std::to_string(nodes_[i]->port()),
                    std::to_string(bus_ports_[i])});
    }
    wait_until_ok();
  }

  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  std::size_t size() const { return nodes_.size(); }
  RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  const std::string& id(std::size_t i) const { return ids_.at(i); }

  /// "127.0.0.1:p1,127.0.0.1:p2,..." (every master).
  std::string seeds() const {
    std::string out;
    for (const auto& node : nodes_) {
      if (!out.empty()) out += ',';
      out += node->host() + ":" + std::to_string(node->port());
    }
    return out;
  }
  std::vector<std::string> seed_list() const {
    std::vector<std::string> out;
    for (const auto& node : nodes_)
      out.push_back(node->host() + ":" + std::to_string(node->port()));
    return out;
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

  /// Step 3: every node is told that `to` owns the slot now.
  void finish_migration(int slot, std::size_t to) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
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

  /// Waits until every node says cluster_state:ok; throws after 20 s.
  void wait_until_ok() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      bool all = true;
      for (const auto& node : nodes_) {
        all =
            all && node->command({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
      }
      if (all) return;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string details;
        for (const auto& node : nodes_) {
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
  void expect_ok(std::size_t node, const std::vector<std::string>& argv) {
    const std::string reply = nodes_.at(node)->command(argv);
    if (reply != "OK") {
      throw std::runtime_error("RedisCluster: " + argv.at(0) + " " + argv.at(1) + " on node " +
                               std::to_string(node) + " answered: " + reply);
    }
  }

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<int> bus_ports_;
  std::vector<std::string> ids_;
  std::vector<std::size_t> owner_;
};

}  // namespace distlock::testing
