// Site: where a lock's steps go, the one interface every backend offers a
// lock (backend.hpp). A lock gets its site when it is made and keeps it;
// every step it sends, from any thread and from the Watchdog, goes through
// it: to the one endpoint of a Client, to the node that owns the key's slot
// now on a cluster, to the master as the Sentinels name it now.
//
// A step is sent by run(): the backend finds the connection, cuts its reply
// timeout by the deadline rules (detail/base/time.hpp), and follows redirects and
// failover inside, so a step may run more than once. A pipeline whose
// replies the caller reads itself (a renewal batch, a Redlock round) takes
// a connection by borrow() and hands the error replies it meets to
// saw_error(). Waiting for a release is subscribe() and wake(). A virtual
// call per step costs nothing beside the round trip it makes.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "distlock/client_options.hpp"
#include "distlock/detail/backend/endpoint.hpp"
#include "distlock/detail/base/function_ref.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/connector.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"

namespace distlock::detail {

class Site {
 public:
  using clock = SteadyClock;

  /// The route() of every key of a backend on one server.
  static constexpr char one_server = 0;

  virtual ~Site() = default;

  /// Runs `send(connection)` where the key lives, within `deadline` (see
  /// the top of file). Throws as the step does, or when no server answers.
  virtual void run(clock::time_point deadline, FunctionRef<void(Connection&)> send) = 0;
  /// A connection to where the key lives now, for a pipeline.
  virtual Borrowed borrow(clock::time_point deadline) = 0;
  /// An error reply a pipeline met: true if it was a MOVED (the step may go
  /// once more to borrow(), which now names the new owner).
  virtual bool saw_error(std::string_view /*reply*/) { return false; }
  /// Whether the key's slot may move (MOVED, ASK): a cluster.
  virtual bool redirects() const noexcept { return false; }
  /// For an ASK reply: a connection to the node it names, where the step
  /// may go once behind ASKING. Throws ServerError (the reply) otherwise.
  virtual Borrowed borrow_asked(std::string_view reply, clock::time_point /*deadline*/) {
    throw ServerError(reply);
  }

  /// The release Notifier where the key's waiters listen, started (one
  /// thread, one connection) on first use: not before a lock first waits.
  virtual Notifier& notifier() = 0;
  /// Subscribes to `channel` (a release channel in the key's slot) there.
  virtual Notifier::Subscription subscribe(const std::string& channel, clock::time_point deadline) {
    return notifier().subscribe(channel, deadline);
  }
  /// Wakes every waiter of `channel`, wherever it sleeps.
  virtual void wake(const std::string& channel) { notifier().wake(channel); }
  virtual Watchdog& watchdog() = 0;
  /// The thread for the blocking work of async locks (connect, release).
  virtual Connector& connector() = 0;
  /// Whether async locks link to it (distlock/asio.hpp): a Client's
  /// server, a SentinelClient's master, a cluster's nodes.
  virtual bool links() const noexcept { return false; }
  /// The server the key's steps go to now, as the name of an async link to
  /// it, without asking anyone: null when that takes asking around (a
  /// cluster whose slot map was not read yet, or names no owner), and
  /// endpoint_now() is asked on the connector thread first. A backend on
  /// one server names it by one constant.
  virtual const void* route() const noexcept { return &one_server; }
  /// The route an ASK reply names (a cluster's importing node), where the
  /// step may go once behind ASKING; null for any other reply.
  virtual const void* asked_route(std::string_view /*reply*/) { return nullptr; }
  /// How many redirects one step follows (a cluster's max_redirects).
  virtual unsigned max_redirects() const noexcept { return 0; }
  /// Whether `reply` refuses a step for now only (a cluster's TRYAGAIN or
  /// CLUSTERDOWN: it was not run), to be sent again after retry_pause(),
  /// doubling at each refusal; they count among the max_redirects().
  virtual bool refused_for_now(std::string_view /*reply*/) const { return false; }
  virtual std::chrono::milliseconds retry_pause() const noexcept { return {}; }
  /// Where the key's server is now. May ask around first (a SentinelClient
  /// asks its Sentinels when the master moved, a cluster reads its slot
  /// map), so it runs on the connector thread, until `deadline` at most.
  virtual ConnectionOptions endpoint_now(clock::time_point /*deadline*/) { return options(); }
  /// On the connector thread: the server `route` names could not be
  /// reached. A cluster reads its slot map again (a failover may have
  /// promoted a replica), until `deadline` at most.
  virtual void unreachable(const void* /*route*/, clock::time_point /*deadline*/) {}
  /// Where a route() names, on the connector thread, until `deadline`.
  virtual ConnectionOptions endpoint_of(const void* /*route*/, clock::time_point deadline) {
    return endpoint_now(deadline);
  }
  /// Grows when that server may have moved (a SentinelClient's master
  /// marked stale): a link made at an earlier epoch is let go.
  virtual std::uint64_t endpoint_epoch() const noexcept { return 0; }
  /// Alive while the backend is (any copy of it): what outlives it, such
  /// as an async link to its server, lets go when this expires.
  virtual std::weak_ptr<const void> lifetime() const noexcept = 0;
  virtual const SharedEventHook& events() const noexcept = 0;

  virtual const ClientOptions& options() const noexcept = 0;
  /// A random id the backend's copies share, used to name lock owners.
  virtual const std::string& id() const noexcept = 0;
  virtual bool forked() const noexcept = 0;
  /// Throws Error(forked) if forked().
  virtual void check_process() const = 0;
  /// What leases renewed in one batch share: the endpoint, or a cluster's
  /// slot (a cluster runs a script only over keys of one slot).
  virtual const void* identity() const noexcept = 0;
  /// The backend in messages: "host:port", or "cluster <seeds>".
  virtual std::string describe() const = 0;
  /// Throws InvalidArgument unless `keys` may go in one script here (a
  /// cluster's keys must share a slot).
  virtual void check_keys(std::string_view /*what*/,
                          std::initializer_list<std::string_view> /*keys*/) const {}
};

/// What a lock keeps of its backend.
using SitePtr = std::shared_ptr<Site>;

/// `send(connection)` by Site::run, returning what send returns.
template <class Send>
auto on_site(Site& site, SteadyClock::time_point deadline, Send&& send)
    -> decltype(send(std::declval<Connection&>())) {
  using Result = decltype(send(std::declval<Connection&>()));
  if constexpr (std::is_void_v<Result>) {
    site.run(deadline, send);
  } else {
    std::optional<Result> result;
    site.run(deadline, [&](Connection& connection) { result.emplace(send(connection)); });
    return std::move(*result);
  }
}

}  // namespace distlock::detail
