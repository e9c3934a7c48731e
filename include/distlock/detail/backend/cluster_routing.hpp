// ClusterNodes: what every copy of a ClusterClient shares: one Client (a
// connection pool) per node, and the map from hash slot to the node that
// owns it. Steps are sent to a slot's owner, following the cluster's
// answers, by route_to_owner() (detail/backend/cluster_route.hpp).
//
// The slot map is read from any node that answers, known nodes first, then
// the seeds: with CLUSTER SHARDS (Redis 7.0 and later), or with CLUSTER
// SLOTS from a node that refuses it (a server before 7.0, or an ACL user
// denied cluster|shards), which is then asked only that from then on
// (detail/backend/cluster_topology.hpp parses both), and with CLUSTER SLOTS too
// when the SHARDS reply is doubtful (while a failover settles, it may name
// the dead master, or no node, for the slots). It is read on first use, and
// again after a MOVED, after a node could not be reached, and when it is
// older than refresh_interval; a read that fails leaves the old map, and so
// does one answered after a read that began later was installed.
//
// Every connection to a node (its pool, its notifier) has
// the ClusterOptions' own, TLS included, with only host and port changed:
// a cluster speaks TLS at every node or at none (tls-cluster).
//
// A map read that finds a slot with a new owner has the Watchdog re-read
// that slot's leases at once (Watchdog::revalidate): after a failover the
// promoted replica may have missed a lease's key (replication is
// asynchronous); the lease is then reported lost, not believed until its
// next renewal.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/cluster_options.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/backend/cluster_topology.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/runtime.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

class ClusterNodes {
 public:
  /// One node and its pool. Nodes are never removed while the ClusterNodes
  /// lives, so a Node& stays valid.
  struct Node {
    Node(const ClientOptions& base, std::string node_host, int node_port)
        : client(with_address(base, std::move(node_host), node_port)) {}
    Client client;
    // Its release notifier (sharded pub/sub), made on first use, and
    // published for wake_everywhere() once made.
    std::once_flag notifier_made;
    std::unique_ptr<Notifier> notifier;
    std::atomic<Notifier*> notifier_ready{nullptr};
    // It refused CLUSTER SHARDS and answered CLUSTER SLOTS.
    std::atomic<bool> shards_refused{false};
    const std::string& host() const noexcept { return client.options().host; }
    int port() const noexcept { return client.options().port; }

   private:
    static ClientOptions with_address(ClientOptions options, std::string host, int port) {
      options.host = std::move(host);
      options.port = port;
      options.unix_socket.clear();
      return options;
    }
  };

  explicit ClusterNodes(ClusterOptions options)
      : options_(checked(std::move(options))),
        id_(make_token()),
        events_(options_.on_event ? std::make_shared<const EventHook>(options_.on_event) : nullptr),
        slots_(cluster_slots, nullptr) {}

  /// In a forked child the nodes' notifier threads exist only in the
  /// parent: their objects are left be, as Runtime leaves its own.
  ~ClusterNodes() {
    if (!forked()) return;
    for (const auto& node : nodes_) {
      if (node->notifier) left_behind_in_child().push_back(node->notifier.release());
    }
  }

  ClusterNodes(const ClusterNodes&) = delete;
  ClusterNodes& operator=(const ClusterNodes&) = delete;

  const ClusterOptions& options() const noexcept { return options_; }
  const std::string& id() const noexcept { return id_; }
  const SharedEventHook& events() const noexcept { return events_; }

  bool forked() const noexcept { return fork_guard_.forked(); }
  void check_process() const { fork_guard_.check("ClusterClient"); }

  /// The node that owns `slot`, reading the map first if it is due (or
  /// missing: then a failure to read it throws ConnectionError naming the
  /// nodes tried). Throws ServerError if no node serves the slot.
  Node& owner(int slot, SteadyClock::time_point deadline) {
    Node* node = owner_if_any(slot, deadline);
    if (node == nullptr) throw ServerError(unserved(slot));
    return *node;
  }

  /// As owner(), but null if no node serves the slot; the map is then read
  /// again before the next look.
  Node* owner_if_any(int slot, SteadyClock::time_point deadline) {
    check_process();
    refresh_if_due(deadline);
    MutexLock lock(mutex_);
    Node* node = slots_[static_cast<std::size_t>(slot)];
    if (node == nullptr) stale_ = true;
    return node;
  }

  /// The owner of `slot` as the map says now, without reading it; null if
  /// it was not read yet or names none.
  Node* owner_known(int slot) {
    MutexLock lock(mutex_);
    return slots_[static_cast<std::size_t>(slot)];
  }

  /// The CLUSTERDOWN message for a slot the map has no owner for.
  static std::string unserved(int slot) {
    return "CLUSTERDOWN Hash slot " + std::to_string(slot) + " is not served by any node";
  }

  /// An address distinct for each slot: what renewal batches of one slot
  /// share (detail::batch_identity).
  const void* slot_identity(int slot) const noexcept {
    return &slot_tags_[static_cast<std::size_t>(slot)];
  }

  /// Has the map read again before the next step (a node may be gone).
  void mark_stale() noexcept { stale_ = true; }

  /// A node did not answer: the map is read again now, as a failover may
  /// name a new owner. A read no node answers leaves the map stale, for the
  /// next step to read again.
  void reread(SteadyClock::time_point deadline) {
    stale_ = true;
    try {
      refresh(deadline);
    } catch (const Error&) {  // no node told the map: the next step finds out again
    }
  }

  /// Notes that `slot` is now served by `node` (a MOVED), and that the rest
  /// of the map is to be read again soon.
  void moved(int slot, Node& node) {
    MutexLock lock(mutex_);
    slots_[static_cast<std::size_t>(slot)] = &node;
    stale_ = true;
  }

  /// Reads the error reply of a pipelined step: a MOVED updates the map.
  /// True for a MOVED so noted: the step may go again to the new owner.
  bool saw_error(std::string_view reply) {
    const Redirect redirect = parse_redirect(reply);
    if (redirect.kind != Redirect::Kind::moved || redirect.host.empty()) {
      if (redirect.kind != Redirect::Kind::none) stale_ = true;
      return false;
    }
    moved(redirect.slot, node_at(redirect.host, redirect.port));
    return true;
  }

  /// The importing node an ASK reply names; null for any other reply.
  Node* asked_node(std::string_view reply) {
    const Redirect redirect = parse_redirect(reply);
    if (redirect.kind != Redirect::Kind::ask || redirect.host.empty()) return nullptr;
    return &node_at(redirect.host, redirect.port);
  }

  /// The node at host:port, its pool made on first sight.
  Node& node_at(const std::string& host, int port) {
    MutexLock lock(mutex_);
    return node_at_locked(host, port);
  }

  /// Reads the slot map now (see the top of this file). Throws
  /// ConnectionError naming every node tried if none answered.
  void refresh(SteadyClock::time_point deadline);

  /// The release notifier of the node that owns `slot` now: sharded
  /// pub/sub (SSUBSCRIBE there), made on first use. Releases SPUBLISH on
  /// the owner of the channel's slot, which is the lock's.
  Notifier& notifier_of(int slot) {
    Node& node = owner(slot, SteadyClock::now() + options_.connect_timeout);
    std::call_once(node.notifier_made, [&] {
      node.notifier = std::make_unique<Notifier>(node.client.options(), options_.max_waiters,
                                                 events_, /*sharded=*/true);
      node.notifier_ready.store(node.notifier.get(), std::memory_order_release);
    });
    return *node.notifier;
  }

  /// Wakes the waiters of `channel` at every node that has a notifier. A
  /// waiter may sleep on its subscription at a node its slot has left (that
  /// node has not dropped it yet) while the map already names the new
  /// owner, or the other way round. Makes nothing and connects nowhere.
  void wake_everywhere(const std::string& channel) {
    std::vector<Notifier*> notifiers;
    {
      MutexLock lock(mutex_);
      for (const auto& node : nodes_) {
        if (Notifier* made = node->notifier_ready.load(std::memory_order_acquire)) {
          notifiers.push_back(made);
        }
      }
    }
    for (Notifier* notifier : notifiers) notifier->wake(channel);
  }

  /// The Runtime (its Watchdog) beside the pools, made on first use.
  Runtime& runtime() {
    check_process();
    std::call_once(runtime_made_, [this] {
      ConnectionOptions where = options_;
      const Node& first = owner(0, SteadyClock::now() + options_.connect_timeout);
      where.host = first.host();
      where.port = first.port();
      runtime_ = std::make_unique<Runtime>(where, options_.max_waiters, events_);
      runtime_ready_.store(runtime_.get(), std::memory_order_release);
    });
    return *runtime_;
  }

 private:
  static ClusterOptions checked(ClusterOptions options) {
    options.validate();
    if (options.ignore_sigpipe) ignore_default_sigpipe();
    return options;
  }

  Node& node_at_locked(const std::string& host, int port) DISTLOCK_REQUIRES(mutex_) {
    for (const auto& node : nodes_) {
      if (node->port() == port && node->host() == host) return *node;
    }
    nodes_.push_back(std::make_unique<Node>(options_, host, port));
    return *nodes_.back();
  }

  void refresh_if_due(SteadyClock::time_point deadline) {
    const auto now = SteadyClock::now();
    bool loaded = false;
    {
      MutexLock lock(mutex_);
      loaded = loaded_;
      if (loaded && !stale_ && now - refreshed_ < options_.refresh_interval) return;
    }
    if (loaded) {
      // Someone else is reading it: go on with the map as it is.
      std::unique_lock<std::mutex> one(refreshing_, std::try_to_lock);
      if (!one.owns_lock()) return;
      try {
        refresh(deadline);
      } catch (const Error&) {
        // Keep the old map; the step itself finds out whether it still holds.
      }
      return;
    }
    std::lock_guard<std::mutex> one(refreshing_);
    {
      MutexLock lock(mutex_);
      if (loaded_) return;  // read while we waited
    }
    refresh(deadline);
  }

  /// Has the Watchdog re-read at once the leases of the slots marked in
  /// `changed` (by slot): their owner changed, so they may be gone.
  void revalidate(const std::vector<bool>& changed);

  /// The map as one node tells it; false if the node did not answer.
  bool read_map_from(Node& node, SteadyClock::time_point deadline, std::string& why);

  const ClusterOptions options_;
  const std::string id_;
  const ForkGuard fork_guard_;
  const SharedEventHook events_;  // options_.on_event, shared with leases and the Notifier
  std::mutex refreshing_;         // one map read at a time
  mutable Mutex mutex_;
  std::vector<std::unique_ptr<Node>> nodes_ DISTLOCK_GUARDED_BY(mutex_);
  std::vector<Node*> slots_ DISTLOCK_GUARDED_BY(mutex_);
  bool loaded_ DISTLOCK_GUARDED_BY(mutex_) = false;
  SteadyClock::time_point refreshed_ DISTLOCK_GUARDED_BY(mutex_){};
  std::atomic<std::uint64_t> reads_begun_{0};                     // numbers each map read
  std::uint64_t installed_read_ DISTLOCK_GUARDED_BY(mutex_) = 0;  // the one the map is from
  std::atomic<bool> stale_{false};
  const std::array<char, cluster_slots> slot_tags_{};
  std::once_flag runtime_made_;
  // Declared last so it stops first: its threads use the pools above.
  std::unique_ptr<Runtime> runtime_;
  std::atomic<Runtime*> runtime_ready_{nullptr};
};

inline void ClusterNodes::refresh(SteadyClock::time_point deadline) {
  std::vector<Node*> candidates;
  {
    MutexLock lock(mutex_);
    for (const auto& node : nodes_) candidates.push_back(node.get());
    for (const std::string& seed : options_.seeds) {
      const ConnectionOptions where = parse_seed(seed);
      candidates.push_back(&node_at_locked(where.host, where.port));
    }
  }
  std::string why;
  for (Node* node : candidates) {
    if (read_map_from(*node, deadline, why)) return;
    if (deadline != no_deadline && SteadyClock::now() >= deadline) break;
  }
  stale_ = true;
  throw ConnectionError(Errc::connect_failed, "no cluster node told the slot map:" + why);
}

inline bool ClusterNodes::read_map_from(Node& node, SteadyClock::time_point deadline,
                                        std::string& why) {
  const std::uint64_t begun = reads_begun_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::vector<SlotRange> ranges;
  try {
    auto connection = node.client.borrow(deadline);
    connection->set_timeout(reply_timeout(options_.command_timeout, deadline));
    std::optional<ShardRanges> told;
    if (!node.shards_refused.load(std::memory_order_relaxed)) {
      try {
        told = ranges_from_shards(connection->command("CLUSTER", "SHARDS").view(), node.host(),
                                  options_.tls.enabled);
      } catch (const ServerError&) {
        // Refused (unknown to the server, or denied): the older command.
      }
    }
    if (told && !told->doubtful) {
      ranges = std::move(told->ranges);
    } else {
      // A doubtful SHARDS reply (a failover settling) is checked here:
      // CLUSTER SLOTS reads the node's own slot table.
      try {
        ranges = ranges_from_slots(connection->command("CLUSTER", "SLOTS").view(), node.host());
      } catch (const ServerError&) {
        if (!told) throw;
        ranges = std::move(told->ranges);  // denied cluster|slots: the best guess
      }
      if (!told) node.shards_refused.store(true, std::memory_order_relaxed);
    }
  } catch (const Error& error) {
    why += "\n  " + node.client.options().endpoint() + ": " + error.what();
    return false;
  }
  // Slots whose owner changed (a failover, or a move this client had not
  // followed yet): their leases are re-read at the new owner at once.
  std::vector<bool> changed;
  {
    MutexLock lock(mutex_);
    // Reads run side by side (a failed route rereads while another caller
    // refreshes): one that began later and has installed its map knows at
    // least as much as this one, whose answer may predate a failover.
    if (begun < installed_read_) return true;
    installed_read_ = begun;
    std::vector<Node*> map(cluster_slots, nullptr);
    for (const SlotRange& range : ranges) {
      Node& owner = node_at_locked(range.host, range.port);
      const int first = std::clamp(range.first, 0, cluster_slots - 1);
      const int last = std::clamp(range.last, 0, cluster_slots - 1);
      for (int slot = first; slot <= last; ++slot) map[static_cast<std::size_t>(slot)] = &owner;
    }
    for (std::size_t slot = 0; slot < map.size(); ++slot) {
      if (slots_[slot] == nullptr || slots_[slot] == map[slot]) continue;
      if (changed.empty()) changed.assign(map.size(), false);
      changed[slot] = true;
    }
    slots_ = std::move(map);
    loaded_ = true;
    refreshed_ = SteadyClock::now();
    stale_ = false;
  }
  if (!changed.empty()) revalidate(changed);
  return true;
}

inline void ClusterNodes::revalidate(const std::vector<bool>& changed) {
  Runtime* runtime = runtime_ready_.load(std::memory_order_acquire);
  Watchdog* watchdog = runtime == nullptr ? nullptr : runtime->started_watchdog();
  if (watchdog == nullptr) return;  // no lease is renewed, so none to re-read
  const char* const first = slot_tags_.data();
  watchdog->revalidate([&](const LeaseState& lease) {
    const auto* at = static_cast<const char*>(lease.renewer->endpoint());
    // Leases of this cluster only: their endpoint is one of our slot tags.
    return std::less_equal<const char*>()(first, at) &&
           std::less<const char*>()(at, first + cluster_slots) &&
           changed[static_cast<std::size_t>(at - first)];
  });
}

}  // namespace distlock::detail
