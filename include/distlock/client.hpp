// Client: the transport to one Redis endpoint, shared by any number of lock
// objects and threads.
//
// A Client is a handle. Copies share one Endpoint: a bounded pool of
// Connections and, beside it, the Runtime (release Notifier and lease
// Watchdog, detail/runtime/runtime.hpp). Lock objects keep a copy, so a lock that outlives
// the Client it was made from still releases its lease. A borrower gets one
// connection to itself and gives it back when its Borrowed handle goes away;
// a connection that broke is dropped then and a fresh one is opened by the
// next borrower, so a server restart costs one failed call, not a dead Client.
//
// A server that comes back may not be the one the leases were granted on
// (restarted without persistence, or another process on the address), so
// the first connection made after one broke, and the server watch within
// about a second of its return (detail/runtime/server_watch.hpp), has every
// lease the Watchdog holds revalidated (Runtime::revalidate): kept if its
// key still holds its token, reported lost otherwise. With an event hook
// set, those connections also ask INFO server for the run_id, after their
// caller's command: another run_id is told as master_switched.
//
// After fork() the child shares the parent's sockets, owner id and leases,
// but not its threads. A Client made before the fork therefore refuses every
// call in the child with Errc::forked (make a new Client there), and a lock
// object inherited by the child releases nothing: the parent's locks stay
// the parent's.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/backend.hpp"
#include "distlock/client_options.hpp"
#include "distlock/detail/backend/endpoint.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/events.hpp"
#include "distlock/reply.hpp"

namespace distlock {

/// A thread-safe handle to one Redis endpoint. Connections open lazily: a
/// Client can be made before its server is up. Copies share everything.
class Client : public Backend {
 public:
  /// A connection lent to one borrower; returned to the pool on destruction.
  using Borrowed = detail::Borrowed;

  /// Throws InvalidArgument if the options are out of range; connects nothing.
  DISTLOCK_DECL explicit Client(ClientOptions options = {});
  /// Client(ClientOptions::from_uri(uri)): InvalidArgument for a bad URI;
  /// connects nothing.
  DISTLOCK_DECL explicit Client(std::string_view uri);
  DISTLOCK_DECL ~Client() override;
  /// Another handle to the same endpoint (pool, Runtime, id).
  DISTLOCK_DECL Client(const Client&);
  /// Takes `other`'s endpoint; the moved-from Client may only be destroyed
  /// or assigned to.
  DISTLOCK_DECL Client(Client&&) noexcept;
  /// Makes this a handle to `other`'s endpoint, letting go of its own.
  DISTLOCK_DECL Client& operator=(const Client&);
  /// Takes `other`'s endpoint, letting go of its own; `other` may then only
  /// be destroyed or assigned to.
  DISTLOCK_DECL Client& operator=(Client&&) noexcept;

  /// Lends a connection, opening one if the pool has room. Waits for one
  /// to come back up to pool_wait_timeout or `deadline`, whichever is
  /// first, then throws TimeoutError (Errc::pool_exhausted); a connect (and
  /// its AUTH/SELECT) is cut to the deadline too, and fails as Connection's
  /// constructor does. Throws Error(forked) in a child forked after the
  /// Client was made.
  Borrowed borrow(std::chrono::steady_clock::time_point deadline =
                      std::chrono::steady_clock::time_point::max()) {
    return Borrowed(endpoint_, endpoint_->take(deadline));
  }

  /// One command on a borrowed connection; error replies throw ServerError.
  template <class... Arg>
  Reply command(const Arg&... args) {
    return borrow()->command(args...);
  }

  /// Runs a script by EVALSHA, loading it on NOSCRIPT; error replies throw.
  Reply eval(const Script& script, detail::Args keys, detail::Args args) {
    return borrow()->eval(script, keys, args);
  }

  /// The options the endpoint was made with, shared by every copy.
  const ClientOptions& options() const noexcept { return endpoint_->options(); }

  /// The release notifier, started (one thread, one connection) on first use.
  Notifier& notifier() { return endpoint_->runtime().notifier(); }
  /// The lease watchdog, started (one thread) on first use.
  Watchdog& watchdog() { return endpoint_->runtime().watchdog(); }

  /// A random id for this Client's endpoint (shared by its copies), used to
  /// name lock owners.
  const std::string& id() const noexcept { return endpoint_->id(); }

  /// Whether this Client was made before a fork() and is used in the child.
  bool forked() const noexcept { return endpoint_->forked(); }
  /// Throws Error(forked) if forked().
  void check_process() const { endpoint_->check_process(); }

  /// The options' on_event as the locks share it; null when none is set.
  const detail::SharedEventHook& events() const noexcept { return endpoint_->events(); }

  /// Where a lock on any key sends its steps: this endpoint.
  DISTLOCK_DECL std::shared_ptr<detail::Site> site_for(std::string_view key) const override;

 private:
  std::shared_ptr<detail::Endpoint> endpoint_;
};

namespace detail {

/// A Client's site: its one endpoint, whatever the key.
class EndpointSite final : public Site {
 public:
  explicit EndpointSite(std::shared_ptr<Endpoint> endpoint) : endpoint_(std::move(endpoint)) {}

  void run(clock::time_point deadline, FunctionRef<void(Connection&)> send) override {
    Borrowed connection = borrow(deadline);
    connection->set_timeout(reply_timeout(endpoint_->options().command_timeout, deadline));
    send(*connection);
  }
  Borrowed borrow(clock::time_point deadline) override {
    return Borrowed(endpoint_, endpoint_->take(deadline));
  }
  Notifier& notifier() override { return endpoint_->runtime().notifier(); }
  Watchdog& watchdog() override { return endpoint_->runtime().watchdog(); }
  Connector& connector() override { return endpoint_->runtime().connector(); }
  bool links() const noexcept override { return true; }
  std::weak_ptr<const void> lifetime() const noexcept override { return endpoint_; }
  const SharedEventHook& events() const noexcept override { return endpoint_->events(); }

  const ClientOptions& options() const noexcept override { return endpoint_->options(); }
  const std::string& id() const noexcept override { return endpoint_->id(); }
  bool forked() const noexcept override { return endpoint_->forked(); }
  void check_process() const override { endpoint_->check_process(); }
  const void* identity() const noexcept override { return &endpoint_->options(); }
  std::string describe() const override { return endpoint_->options().endpoint(); }

 private:
  const std::shared_ptr<Endpoint> endpoint_;
};

}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL Client::Client(ClientOptions options)
    : endpoint_(std::make_shared<detail::Endpoint>(std::move(options))) {}

DISTLOCK_DECL Client::Client(std::string_view uri) : Client(ClientOptions::from_uri(uri)) {}
DISTLOCK_DECL Client::~Client() = default;
DISTLOCK_DECL Client::Client(const Client&) = default;
DISTLOCK_DECL Client::Client(Client&&) noexcept = default;
DISTLOCK_DECL Client& Client::operator=(const Client&) = default;
DISTLOCK_DECL Client& Client::operator=(Client&&) noexcept = default;

DISTLOCK_DECL std::shared_ptr<detail::Site> Client::site_for(std::string_view) const {
  return std::make_shared<detail::EndpointSite>(endpoint_);
}
#endif

}  // namespace distlock
