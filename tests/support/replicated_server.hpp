// ReplicatedServer: a throwaway master with one or two replicas, for the
// tests and benchmarks of replica acknowledgement (LockOptions::replicas).
//
// Every server is a RedisServer of its own (free port, temp dir, no
// persistence). The replicas start with `replicaof` the master and the
// constructor returns only once each one reports master_link_status:up and
// the master counts it as connected and online: a WAIT issued then is
// answered by every replica. The fault helpers stop and continue a replica
// (SIGSTOP/SIGCONT: its link stays up, it just stops acknowledging), kill -9
// the master, and promote a replica (REPLICAOF NO ONE). Everything is killed
// in the destructor; a server that cannot start, or replicas that do not
// come in sync within 10 s, throw from the constructor (the test fails).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

namespace distlock::testing {

class ReplicatedServer {
 public:
  /// Starts the master and `replica_count` (1 or 2) replicas and waits until
  /// they are in sync.
  explicit ReplicatedServer(std::size_t replica_count = 1) {
    if (replica_count < 1 || replica_count > 2) {
      throw std::invalid_argument("ReplicatedServer: 1 or 2 replicas");
    }
    RedisServerOptions master_options;
    // Diskless full syncs start at once rather than after the default 5 s
    // wait for more replicas to join.
    master_options.config_lines = {"repl-diskless-sync yes", "repl-diskless-sync-delay 0"};
    master_ = std::make_unique<RedisServer>(master_options);
    for (std::size_t i = 0; i < replica_count; ++i) {
      RedisServerOptions options;
      options.config_lines = {
          "replicaof " + master_->host() + " " + std::to_string(master_->port()),
          "replica-read-only yes"};
      replicas_.push_back(std::make_unique<RedisServer>(options));
    }
    wait_in_sync();
  }

  ReplicatedServer(const ReplicatedServer&) = delete;
  ReplicatedServer& operator=(const ReplicatedServer&) = delete;
  ~ReplicatedServer() = default;  // each RedisServer kills its process

  RedisServer& master() { return *master_; }
  RedisServer& replica(std::size_t i = 0) { return *replicas_.at(i); }
  std::size_t replica_count() const { return replicas_.size(); }

  /// Waits (up to 10 s) until every running, unpromoted replica has its
  /// link up and the master lists it online with its offset caught up.
  void wait_in_sync() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      if (in_sync() && acknowledges()) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string details = "--- master INFO replication ---\n" + info(*master_);
        for (const auto& replica : replicas_) {
          details += "--- replica log ---\n" + replica->log_tail(10) + "\n";
        }
        throw std::runtime_error("ReplicatedServer: replicas not in sync after 10 s\n" + details);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// SIGSTOPs replica i: it stays connected but acknowledges nothing.
  void stop_replica(std::size_t i = 0) { replica(i).pause(); }
  /// SIGCONTs replica i.
  void continue_replica(std::size_t i = 0) { replica(i).resume(); }
  /// kill -9 of the master: whatever its replicas had not received is lost.
  void kill_master() { master_->kill(); }
  /// REPLICAOF NO ONE on replica i: it becomes a master with what it has.
  void promote(std::size_t i = 0) {
    const std::string reply = replica(i).command({"REPLICAOF", "NO", "ONE"});
    if (reply != "OK") throw std::runtime_error("ReplicatedServer: REPLICAOF NO ONE: " + reply);
    promoted_.push_back(i);
  }

  /// The value of `field` in `server`'s INFO replication ("" if absent).
  static std::string info_field(const RedisServer& server, const std::string& field) {
    const std::string text = info(server);
    const std::string key = field + ":";
    std::size_t at = text.find(key);
    while (at != std::string::npos && at != 0 && text[at - 1] != '\n') at = text.find(key, at + 1);
    if (at == std::string::npos) return {};
    const std::size_t begin = at + key.size();
    return text.substr(begin, text.find_first_of("\r\n", begin) - begin);
  }

 private:
  static std::string info(const RedisServer& server) {
    return server.command({"INFO", "replication"});
  }

  // The first WAIT after a sync can wait for the replica's once-a-second
  // acknowledgement; one answered here makes the next ones prompt. PUBLISH
  // is replicated, so it gives WAIT something to wait for without a key.
  bool acknowledges() const {
    detail::RedisContextPtr context(redisConnectWithTimeout(
        master_->host().c_str(), master_->port(), detail::to_timeval(std::chrono::seconds(2))));
    if (!context || context->err != 0) return false;
    redisSetTimeout(context.get(), detail::to_timeval(std::chrono::seconds(5)));
    const std::size_t expected = online_count();
    detail::RedisReplyPtr published =
        detail::run_argv(context.get(), {"PUBLISH", "distlock-harness:sync", "1"});
    detail::RedisReplyPtr acked =
        detail::run_argv(context.get(), {"WAIT", std::to_string(expected), "3000"});
    return published && acked && acked->type == REDIS_REPLY_INTEGER &&
           acked->integer >= static_cast<long long>(expected);
  }

  std::size_t online_count() const {
    std::size_t count = 0;
    for (std::size_t i = 0; i < replicas_.size(); ++i) {
      bool promoted = false;
      for (const std::size_t p : promoted_) promoted = promoted || p == i;
      if (!promoted && replicas_[i]->running()) ++count;
    }
    return count;
  }

  bool in_sync() const {
    if (!master_->running()) return false;
    const std::string master_offset = info_field(*master_, "master_repl_offset");
    std::size_t online = 0;
    for (std::size_t i = 0; i < replicas_.size(); ++i) {
      bool promoted = false;
      for (const std::size_t p : promoted_) promoted = promoted || p == i;
      if (promoted || !replicas_[i]->running()) continue;
      if (info_field(*replicas_[i], "master_link_status") != "up") return false;
      // A replica that has applied everything the master has sent.
      if (info_field(*replicas_[i], "slave_repl_offset") != master_offset) return false;
      ++online;
    }
    const std::string text = info(*master_);
    std::size_t listed = 0;
    for (std::size_t at = text.find("state=online"); at != std::string::npos;
         at = text.find("state=online", at + 1)) {
      ++listed;
    }
    return listed >= online;
  }

  std::unique_ptr<RedisServer> master_;
  std::vector<std::unique_ptr<RedisServer>> replicas_;
  std::vector<std::size_t> promoted_;
};

}  // namespace distlock::testing
