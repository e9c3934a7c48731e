// ClusterClient: the transport to a Redis Cluster, a Backend every lock type
// takes in place of a Client:
//
//   distlock::ClusterClient cluster{"redis://10.0.0.5:7000,10.0.0.6:7000"};
//   distlock::Mutex stock{cluster, "stock:{42}"};
//
// A lock's keys all share one hash slot (its companion keys carry the name
// as a hash tag; InvalidArgument when they do not), so a lock's site is the
// slot, and every step, the Watchdog's batched renewals too, goes to the
// node that owns it now, following MOVED and ASK (detail/backend/cluster_route.hpp).
// Copies share the pools (one per node), the slot map and the Runtime;
// nothing connects until first use. Releases SPUBLISH on the lock's channel
// (sharded pub/sub, Redis 7, as Redisson in cluster mode) and waiters
// SSUBSCRIBE at the slot's owner; when the slot moves they subscribe again
// at the new owner (ClusterSite::subscribe).
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/backend.hpp"
#include "distlock/client.hpp"
#include "distlock/cluster_options.hpp"
#include "distlock/detail/backend/cluster_route.hpp"
#include "distlock/detail/backend/cluster_routing.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/function_ref.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock {

/// A thread-safe handle to one Redis Cluster. Copies share everything.
class ClusterClient : public Backend {
 public:
  /// Throws InvalidArgument for bad options (no seed among them); connects
  /// nothing.
  DISTLOCK_DECL explicit ClusterClient(ClusterOptions options);
  /// ClusterOptions::from_uri: "redis://host1:port1,host2:port2?...".
  DISTLOCK_DECL explicit ClusterClient(std::string_view uri);
  DISTLOCK_DECL ~ClusterClient() override;
  /// Another handle to the same cluster (pools, slot map, Runtime), bound
  /// to the same slot.
  DISTLOCK_DECL ClusterClient(const ClusterClient&);
  /// Takes `other`'s share and slot; the moved-from handle may only be
  /// destroyed or assigned to.
  DISTLOCK_DECL ClusterClient(ClusterClient&&) noexcept;
  /// Makes this a handle to `other`'s cluster and slot, letting go of its
  /// own.
  DISTLOCK_DECL ClusterClient& operator=(const ClusterClient&);
  /// Takes `other`'s share and slot, letting go of its own; `other` may then
  /// only be destroyed or assigned to.
  DISTLOCK_DECL ClusterClient& operator=(ClusterClient&&) noexcept;

  /// A copy bound to the slot of `key`: what a lock object keeps.
  ClusterClient for_key(std::string_view key) const {
    ClusterClient bound(*this);
    bound.slot_ = detail::key_slot(key);
    return bound;
  }
  /// The slot this copy is bound to; -1 if unbound.
  int slot() const noexcept { return slot_; }

  /// A connection to the node that owns this copy's slot (the slot map is
  /// read first if it is due). Throws InvalidArgument on an unbound copy,
  /// and as Client::borrow does.
  Client::Borrowed borrow(std::chrono::steady_clock::time_point deadline =
                              std::chrono::steady_clock::time_point::max()) {
    Client::Borrowed connection = nodes_->owner(bound_slot(), deadline).client.borrow(deadline);
    connection->set_sharded_publish(true);  // releases sent on it SPUBLISH
    return connection;
  }

  /// One command, sent to the owner of the slot of its first argument after
  /// the command's name (the key of GET, SET, PTTL, DEL, HGETALL, ...), or of
  /// this copy's slot when bound. Error replies throw ServerError.
  template <class... Arg>
  Reply command(const Arg&... args) {
    const std::string_view argv[] = {std::string_view(args)...};
    const detail::Args list(argv, sizeof...(Arg));
    const int slot = slot_ >= 0 ? slot_ : detail::key_slot(sizeof...(Arg) > 1 ? argv[1] : "");
    return detail::route_to_owner(*nodes_, slot, detail::no_deadline, [&](Connection& connection) {
      return connection.command_argv(list);
    });
  }

  /// Runs a script at the owner of its first key's slot (EVALSHA, EVAL on
  /// NOSCRIPT); every key must share that slot (InvalidArgument otherwise).
  Reply eval(const Script& script, detail::Args keys, detail::Args args) {
    if (keys.size() == 0) throw InvalidArgument("a script sent to a cluster needs a key");
    const std::string_view first = *keys.begin();
    const int slot = detail::key_slot(first);
    for (const std::string_view key : keys) detail::check_one_slot("eval", {first, key});
    return detail::route_to_owner(*nodes_, slot, detail::no_deadline, [&](Connection& connection) {
      return connection.eval(script, keys, args);
    });
  }

  /// The options every node's pool was made with.
  const ClientOptions& options() const noexcept { return nodes_->options(); }
  /// Reads the slot map now. Throws ConnectionError naming the nodes tried
  /// when none answers.
  void refresh(std::chrono::steady_clock::time_point deadline =
                   std::chrono::steady_clock::time_point::max()) {
    nodes_->refresh(deadline);
  }
  /// "host:port" of the node that owns `slot` (the map is read if due).
  std::string node_of(int slot) {
    return nodes_->owner(slot, detail::no_deadline).client.options().endpoint();
  }

  /// The release notifier of the node that owns this copy's slot (slot 0
  /// when unbound) now: sharded pub/sub, started (one thread, one
  /// connection per node) on first use.
  Notifier& notifier() { return nodes_->notifier_of(slot_ >= 0 ? slot_ : 0); }
  /// The options' on_event as the locks share it; null when none is set.
  const detail::SharedEventHook& events() const noexcept { return nodes_->events(); }
  /// The lease watchdog, started (one thread) on first use.
  Watchdog& watchdog() { return nodes_->runtime().watchdog(); }

  /// A random id shared by the copies, used to name lock owners.
  const std::string& id() const noexcept { return nodes_->id(); }
  /// Whether this handle was made before a fork() and is used in the child.
  bool forked() const noexcept { return nodes_->forked(); }
  /// Throws Error(forked) if forked().
  void check_process() const { nodes_->check_process(); }

  /// Where a lock on `key` sends its steps: the owner of its slot.
  DISTLOCK_DECL std::shared_ptr<detail::Site> site_for(std::string_view key) const override;

 private:
  int bound_slot() const {
    if (slot_ < 0) {
      throw InvalidArgument("this ClusterClient is not bound to a slot: use for_key(key)");
    }
    return slot_;
  }

  std::shared_ptr<detail::ClusterNodes> nodes_;
  int slot_ = -1;
};

namespace detail {

/// A ClusterClient's site: the slot of the key, at whichever node owns it.
class ClusterSite final : public Site {
 public:
  ClusterSite(std::shared_ptr<ClusterNodes> nodes, int slot)
      : nodes_(std::move(nodes)), slot_(slot) {}

  void run(clock::time_point deadline, FunctionRef<void(Connection&)> send) override {
    route_to_owner(*nodes_, slot_, deadline, send);
  }
  Borrowed borrow(clock::time_point deadline) override {
    return sharded(nodes_->owner(slot_, deadline).client.borrow(deadline));
  }
  bool saw_error(std::string_view reply) override { return nodes_->saw_error(reply); }
  bool redirects() const noexcept override { return true; }
  // The importing node an ASK reply names, where the step may go once after
  // ASKING on the same connection.
  Borrowed borrow_asked(std::string_view reply, clock::time_point deadline) override {
    ClusterNodes::Node* importing = nodes_->asked_node(reply);
    if (importing == nullptr) throw ServerError(reply);
    return sharded(importing->client.borrow(deadline));
  }
  // Async links go to each node the map names: one per node and context.
  bool links() const noexcept override { return true; }
  const void* route() const noexcept override { return nodes_->owner_known(slot_); }
  const void* asked_route(std::string_view reply) override { return nodes_->asked_node(reply); }
  unsigned max_redirects() const noexcept override { return nodes_->options().max_redirects; }
  bool refused_for_now(std::string_view reply) const override {
    return parse_redirect(reply).kind == Redirect::Kind::try_again;
  }
  std::chrono::milliseconds retry_pause() const noexcept override {
    return nodes_->options().retry_pause;
  }
  ConnectionOptions endpoint_now(clock::time_point deadline) override {
    return nodes_->owner(slot_, deadline).client.options();
  }
  void unreachable(const void*, clock::time_point deadline) override { nodes_->reread(deadline); }
  ConnectionOptions endpoint_of(const void* route, clock::time_point) override {
    return static_cast<const ClusterNodes::Node*>(route)->client.options();
  }
  Notifier& notifier() override { return nodes_->notifier_of(slot_); }
  // A refusal at the owner (the slot moved, and no step since met the MOVED
  // that would have told us) means the slot map is behind: it is read once
  // more and the subscription made where it says now. Refused still, the
  // waiter falls back to its timer.
  Notifier::Subscription subscribe(const std::string& channel,
                                   clock::time_point deadline) override {
    Notifier& first = notifier();
    Notifier::Subscription subscription = first.subscribe(channel, deadline);
    if (!subscription.moved()) return subscription;
    try {
      nodes_->refresh(deadline);
    } catch (const Error&) {
      return subscription;  // no node told the map: the timer it is
    }
    Notifier& now = notifier();
    if (&now == &first) return subscription;
    return now.subscribe(channel, deadline);
  }
  // Every node: a waiter may still sleep at a node its lock's slot has left.
  void wake(const std::string& channel) override { nodes_->wake_everywhere(channel); }
  Watchdog& watchdog() override { return nodes_->runtime().watchdog(); }
  Connector& connector() override { return nodes_->runtime().connector(); }
  std::weak_ptr<const void> lifetime() const noexcept override { return nodes_; }
  const SharedEventHook& events() const noexcept override { return nodes_->events(); }

  const ClientOptions& options() const noexcept override { return nodes_->options(); }
  const std::string& id() const noexcept override { return nodes_->id(); }
  bool forked() const noexcept override { return nodes_->forked(); }
  void check_process() const override { nodes_->check_process(); }
  // Distinct for each slot: the Watchdog renews one slot's leases together.
  const void* identity() const noexcept override { return nodes_->slot_identity(slot_); }
  std::string describe() const override {
    std::string text = "cluster";
    char separator = ' ';
    for (const std::string& seed : nodes_->options().seeds) {
      text += separator + seed;
      separator = ',';
    }
    return text;
  }
  void check_keys(std::string_view what,
                  std::initializer_list<std::string_view> keys) const override {
    check_one_slot(what, keys);
  }

 private:
  static Borrowed sharded(Borrowed connection) {
    connection->set_sharded_publish(true);
    return connection;
  }

  std::shared_ptr<ClusterNodes> nodes_;
  int slot_;
};

}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL ClusterClient::ClusterClient(ClusterOptions options)
    : nodes_(std::make_shared<detail::ClusterNodes>(std::move(options))) {}
DISTLOCK_DECL ClusterClient::ClusterClient(std::string_view uri)
    : ClusterClient(ClusterOptions::from_uri(uri)) {}
DISTLOCK_DECL ClusterClient::~ClusterClient() = default;
DISTLOCK_DECL ClusterClient::ClusterClient(const ClusterClient&) = default;
DISTLOCK_DECL ClusterClient::ClusterClient(ClusterClient&&) noexcept = default;
DISTLOCK_DECL ClusterClient& ClusterClient::operator=(const ClusterClient&) = default;
DISTLOCK_DECL ClusterClient& ClusterClient::operator=(ClusterClient&&) noexcept = default;

DISTLOCK_DECL std::shared_ptr<detail::Site> ClusterClient::site_for(std::string_view key) const {
  return std::make_shared<detail::ClusterSite>(nodes_, detail::key_slot(key));
}
#endif

}  // namespace distlock
