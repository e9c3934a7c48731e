// ClusterSuite: the fixture of the cluster test suites. Each suite (a
// class deriving from it) starts one cluster of its own in SetUpTestSuite,
// 3 masters and no replicas unless it calls start() with others, and each
// test gets a fresh ClusterClient on it; the helpers look at one node
// directly (its replies as RedisServer renders them, its command and error
// counts, its shard-channel subscribers). A suite that starts its cluster
// with TLS gets clients that speak it (client_tls_).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/cluster_client.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/events.hpp"
#include "distlock/tls_options.hpp"
#include "support/fixture.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

namespace distlock::testing {

class ClusterSuite : public ::testing::Test {
 protected:
  using Clock = std::chrono::steady_clock;
  static void SetUpTestSuite() { start(0); }
  /// Starts the suite's cluster: `masters` masters with `replicas`
  /// replicas each; TLS-only with `tls`, reached with `client_tls`.
  static void start(std::size_t replicas, std::size_t masters = 3,
                    std::optional<RedisServerTls> tls = std::nullopt,
                    distlock::TlsOptions client_tls = {}) {
    if (!RedisServer::available()) return;
    client_tls_ = std::move(client_tls);
    try {
      cluster_ = new RedisCluster(masters, replicas, std::move(tls));
    } catch (const std::exception& error) {
      start_error_ = new std::string(error.what());
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
    client_tls_ = {};
  }

  void SetUp() override {
    DISTLOCK_REQUIRE_REDIS_SERVER();
    ASSERT_NE(cluster_, nullptr) << "the cluster did not start: "
                                 << (start_error_ != nullptr ? *start_error_ : "?");
    client_.emplace(options());
  }

  static distlock::ClusterOptions options() {
    distlock::ClusterOptions options(cluster_->seed_list());
    options.connect_timeout = std::chrono::seconds(1);
    options.command_timeout = std::chrono::seconds(1);
    options.tls = client_tls_;
    return options;
  }

  RedisCluster& cluster() { return *cluster_; }
  distlock::ClusterClient& client() { return *client_; }

  /// A name made from `stem` whose key (`suffix` appended) master
  /// `master` owns now.
  static std::string name_on(std::size_t master, const std::string& stem,
                             const std::string& suffix = "") {
    for (int i = 0;; ++i) {
      std::string name = stem + "-" + std::to_string(i);
      if (cluster_->owner_of(distlock::detail::key_slot(name + suffix)) == master) return name;
    }
  }

  /// A command at one node, as RedisServer renders its reply.
  std::string at(std::size_t master, const std::vector<std::string>& argv) {
    return cluster_->node(master).command(argv);
  }
  long long pttl_at(std::size_t master, const std::string& key) {
    return std::stoll(at(master, {"PTTL", key}));
  }
  long long calls_at(std::size_t master, const std::string& command) {
    const std::string stats = at(master, {"INFO", "commandstats"});
    const std::string field = "cmdstat_" + command + ":calls=";
    const auto found = stats.find(field);
    return found == std::string::npos ? 0 : std::stoll(stats.substr(found + field.size()));
  }
  /// Error replies of one kind ("MOVED", "TRYAGAIN") a node has sent.
  long long errors_at(std::size_t master, const std::string& kind) {
    const std::string stats = at(master, {"INFO", "errorstats"});
    const std::string field = "errorstat_" + kind + ":count=";
    const auto found = stats.find(field);
    return found == std::string::npos ? 0 : std::stoll(stats.substr(found + field.size()));
  }
  /// When `key` runs out at a node, in Unix milliseconds (PEXPIRETIME).
  long long expiry_at(std::size_t master, const std::string& key) {
    return std::stoll(at(master, {"PEXPIRETIME", key}));
  }

  /// Joins a waiter thread, cancelling its wait first, however the test
  /// ends (an ASSERT returns early).
  template <class Lock>
  struct Waiter {
    Lock& lock;
    std::thread thread;
    ~Waiter() {
      if (!thread.joinable()) return;
      lock.cancel_waits();
      thread.join();
    }
  };

  /// Waits until `master` has a shard-channel subscriber on `channel`.
  bool subscribed_at(std::size_t master, const std::string& channel) {
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < until) {
      if (at(master, {"PUBSUB", "SHARDNUMSUB", channel}).find("1") != std::string::npos) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  /// Polls `done` until it holds or 10 s pass (a bound, not a timing).
  template <class Done>
  static bool eventually(Done done) {
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!done() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done();
  }

  /// Options whose event hook counts each key's confirmed renewals.
  struct RenewalCount {
    std::mutex mutex;
    std::map<std::string, int> renewed;
    int of(const std::string& key) {
      const std::lock_guard<std::mutex> guard(mutex);
      return renewed[key];
    }
  };
  static distlock::ClusterOptions counting(RenewalCount& count) {
    distlock::ClusterOptions hooked = options();
    hooked.on_event = [&count](const distlock::LockEvent& event) {
      if (event.type != distlock::LockEventType::renewed) return;
      const std::lock_guard<std::mutex> guard(count.mutex);
      ++count.renewed[std::string(event.key)];
    };
    return hooked;
  }

  inline static RedisCluster* cluster_ = nullptr;
  inline static std::string* start_error_ = nullptr;
  inline static distlock::TlsOptions client_tls_;
  std::optional<distlock::ClusterClient> client_;
};

}  // namespace distlock::testing
