// Client: the transport to one Redis endpoint, shared by any number of lock
// objects and threads.
//
// A Client is a handle. Copies share one Endpoint: a bounded pool of
// Connections and, beside it, the Runtime (release Notifier and lease
// Watchdog, runtime.hpp). Lock objects keep a copy, so a lock that outlives
// the Client it was made from still releases its lease. A borrower gets one
// connection to itself and gives it back when its Borrowed handle goes away;
// a connection that broke is dropped then and a fresh one is opened by the
// next borrower, so a server restart costs one failed call, not a dead Client.
//
// A server that comes back may not be the one the leases were granted on
// (restarted without persistence, or another process on the address), so
// the first connection made after one broke has every lease the Watchdog
// has revalidated at once (Runtime::revalidate), and so does the Runtime's
// server watch, without waiting for a caller, within about a second of the
// server's return (detail/server_watch.hpp): kept if its key still
// holds its token (a renewed lease is renewed; one of fixed ttl keeps its
// expiry), reported lost otherwise. That answers what matters, whether the
// leases are still there, off the caller's path. With an event hook set,
// that connection and the Client's very first also ask INFO server for the
// server's run_id, once the call that made them is done with them (a round
// trip on those calls only, after their own command, so that a server
// that falls silent fails the caller's command, not one it never sent): a
// run_id other than the last one seen is a new server process, told as
// master_switched (events.hpp). A server that refuses INFO (an ACL) is not
// asked again; one that does not answer it is asked on the next connection.
//
// After fork() the child shares the parent's sockets, owner id and leases,
// but not its threads. A Client made before the fork therefore refuses every
// call in the child with Errc::forked (make a new Client there), and a lock
// object inherited by the child releases nothing: the parent's locks stay
// the parent's.
#pragma once

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/thread_annotations.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/reply.hpp"
#include "distlock/runtime.hpp"
#include "distlock/token.hpp"

namespace distlock {

namespace detail {

inline void ignore_default_sigpipe() noexcept {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace detail

/// ConnectionOptions plus the pool's bounds.
struct ClientOptions : ConnectionOptions {
  std::size_t pool_size = 8;  ///< most connections open at once
  /// The longest a borrower waits for a free connection when all are in use.
  std::chrono::milliseconds pool_wait_timeout{1000};
  /// A Connection writes with write(2), as hiredis does, so a write to a
  /// connection the server just closed raises SIGPIPE, whose default action
  /// kills the process. When set, a Client that finds SIGPIPE at its default
  /// sets it to ignored (a handler the application installed is left
  /// alone). Turn off to manage it yourself.
  bool ignore_sigpipe = true;
  /// Most acquirers of this Client waiting for a release at once; past it an
  /// acquire that would wait fails at once with Errc::too_many_waiters.
  std::size_t max_waiters = 10000;
  /// Told what this Client's locks do (acquired, released, renewed, lost,
  /// ...; see events.hpp). Empty: nothing is told, at the cost of a branch.
  EventHook on_event;

  ClientOptions() = default;
  ClientOptions(ConnectionOptions connection) : ConnectionOptions(std::move(connection)) {}
  /// ConnectionOptions::from_uri, plus the pool's options: pool_size (a
  /// whole number, at least 1), max_waiters (a whole number, 0 allowed),
  /// pool_wait_timeout and max_connection_age (durations as for
  /// command_timeout: "250", "250ms", "2s", "5m", "1h"; 0 allowed). Any other option is an
  /// InvalidArgument naming it. (A credentials provider is code: set it on
  /// the options made.)
  static ClientOptions from_uri(std::string_view uri);
};

inline ClientOptions ClientOptions::from_uri(std::string_view uri) {
  detail::ParsedUri parsed = detail::parse_uri(uri);
  ClientOptions options(std::move(parsed.connection));
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  for (const detail::UriOption& option : parsed.rest) {
    if (option.name == "pool_size") {
      options.pool_size = detail::parse_uri_number<std::size_t>(option.value, "pool_size", 1, most);
    } else if (option.name == "pool_wait_timeout") {
      options.pool_wait_timeout = detail::parse_uri_duration(option.value, "pool_wait_timeout");
    } else if (option.name == "max_waiters") {
      options.max_waiters =
          detail::parse_uri_number<std::size_t>(option.value, "max_waiters", 0, most);
    } else if (option.name == "max_connection_age") {
      options.max_connection_age = detail::parse_uri_duration(option.value, "max_connection_age");
    } else {
      throw detail::uri_error("unknown option '" + option.name +
                              "' (known: db, connect_timeout, command_timeout, pool_size, "
                              "pool_wait_timeout, max_waiters, max_connection_age; with "
                              "rediss:// ca_file, ca_dir, cert_file, key_file, server_name, "
                              "insecure_skip_verify)");
    }
  }
  return options;
}

namespace detail {

/// What every copy of a Client shares: the options, the pool, the owner id
/// and the Runtime. Lives as long as its last Client or lock object.
class Endpoint {
 public:
  explicit Endpoint(ClientOptions options);
  ~Endpoint();

  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// Throws Error(forked) when called in a child forked after this was made.
  void check_process() const {
    if (forked()) {
      throw Error(Errc::forked, options_.endpoint() +
                                    ": this Client was made before fork(); make a new Client in "
                                    "the child");
    }
  }
  bool forked() const noexcept {
    return fork_generation.load(std::memory_order_relaxed) != generation_;
  }

  std::unique_ptr<Connection> take(SteadyClock::time_point deadline);
  void give_back(std::unique_ptr<Connection> connection) noexcept;
  // Closes every idle connection (the Runtime's watch found the server gone
  // or silent): the next borrower makes a fresh one, and has the leases
  // revalidated.
  void drop_idle() noexcept;
  // Asks a new connection's server for its run_id: true if it is not the
  // last one seen (another server process). Throws as the connection does.
  bool new_process(Connection& connection);

  const ClientOptions& options() const noexcept { return options_; }
  const std::string& id() const noexcept { return id_; }
  const SharedEventHook& events() const noexcept { return events_; }
  Runtime& runtime() {
    check_process();
    return runtime_;
  }

 private:
  // A connection back in the pool for less than this is lent again without
  // asking the kernel whether the server closed it: that question is a
  // system call, which costs as much as the rest of a lock's client-side work,
  // and a server that went away within this window fails a command that was
  // about to be sent anyway.
  static constexpr std::chrono::milliseconds idle_check_after{10};

  const ClientOptions options_;
  const std::string id_;
  const unsigned generation_;
  const SharedEventHook events_;  // options_.on_event, shared with leases and the Notifier
  Mutex mutex_;
  std::condition_variable returned_;
  // A connection broke: the next one made has the leases revalidated.
  std::atomic<bool> reconnecting_{false};
  std::atomic<bool> server_asked_{false};           // the first connection asked for the run_id
  std::atomic<bool> identity_due_{false};           // the next connection given back asks for it
  std::string run_id_ DISTLOCK_GUARDED_BY(mutex_);  // the server's, as last seen; "" unknown
  std::vector<std::unique_ptr<Connection>> idle_ DISTLOCK_GUARDED_BY(mutex_);
  std::size_t open_ DISTLOCK_GUARDED_BY(mutex_) = 0;  // idle plus lent out

  // Declared last so it stops first: its threads use the options above.
  Runtime runtime_;
};

}  // namespace detail

/// A thread-safe handle to one Redis endpoint. Connections open lazily: a
/// Client can be made before its server is up. Copies share everything.
class Client {
 public:
  /// A connection lent to one borrower; returned to the pool on destruction.
  class Borrowed {
   public:
    Borrowed(Borrowed&& other) noexcept
        : endpoint_(std::move(other.endpoint_)), connection_(std::move(other.connection_)) {}
    Borrowed& operator=(Borrowed&&) = delete;
    Borrowed(const Borrowed&) = delete;
    Borrowed& operator=(const Borrowed&) = delete;
    ~Borrowed() {
      if (endpoint_) endpoint_->give_back(std::move(connection_));
    }

    Connection& operator*() const noexcept { return *connection_; }
    Connection* operator->() const noexcept { return connection_.get(); }

   private:
    friend class Client;
    Borrowed(std::shared_ptr<detail::Endpoint> endpoint,
             std::unique_ptr<Connection> connection) noexcept
        : endpoint_(std::move(endpoint)), connection_(std::move(connection)) {}
    std::shared_ptr<detail::Endpoint> endpoint_;  // it outlives every Client handle
    std::unique_ptr<Connection> connection_;
  };

  /// Throws InvalidArgument if the options are out of range; connects nothing.
  explicit Client(ClientOptions options = {})
      : endpoint_(std::make_shared<detail::Endpoint>(std::move(options))) {}
  explicit Client(std::string_view uri) : Client(ClientOptions::from_uri(uri)) {}

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

 private:
  std::shared_ptr<detail::Endpoint> endpoint_;
};

namespace detail {

inline Endpoint::Endpoint(ClientOptions options)
    : options_(std::move(options)),
      id_(make_token()),  // also registers the fork handler read below
      generation_(fork_generation.load(std::memory_order_relaxed)),
      events_(options_.on_event ? std::make_shared<const EventHook>(options_.on_event) : nullptr),
      runtime_(options_, options_.max_waiters, events_,
               WatchServer{true, [this] { drop_idle(); }}) {
  options_.validate();
  if (options_.pool_size == 0) throw InvalidArgument("pool_size must be at least 1");
  if (options_.pool_wait_timeout.count() < 0) {
    throw InvalidArgument("pool_wait_timeout must not be negative");
  }
  // give_back() is noexcept, so its push_back must never need to allocate.
  idle_.reserve(options_.pool_size);
  if (options_.ignore_sigpipe) ignore_default_sigpipe();
}

inline Endpoint::~Endpoint() {
  // In a forked child the sockets are the parent's too: closing our copies
  // is harmless, but nothing may be sent on them.
}

inline std::unique_ptr<Connection> Endpoint::take(SteadyClock::time_point deadline) {
  check_process();
  const SteadyClock::time_point now = SteadyClock::now();
  const SteadyClock::time_point pool_deadline =
      deadline - now < options_.pool_wait_timeout ? deadline : now + options_.pool_wait_timeout;
  MutexLock lock(mutex_);
  const bool available = lock.wait_until(
      returned_, pool_deadline,
      [this]() DISTLOCK_REQUIRES(mutex_) { return !idle_.empty() || open_ < options_.pool_size; });
  if (!available) {
    throw TimeoutError(Errc::pool_exhausted,
                       options_.endpoint() + ": all " + std::to_string(options_.pool_size) +
                           " pooled connections stayed busy for " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              SteadyClock::now() - now)
                                              .count()) +
                           " ms");
  }
  while (!idle_.empty()) {
    std::unique_ptr<Connection> connection = std::move(idle_.back());
    idle_.pop_back();
    // Aged while idle: replaced by one that asks for credentials afresh
    // (the same server: no lease needs revalidating).
    const bool aged = connection->aged();
    if (!aged && !connection->stale_after_idle(idle_check_after)) return connection;
    --open_;  // aged, or closed under us while idle: drop it and look again
    if (!aged) reconnecting_.store(true, std::memory_order_relaxed);
  }
  // Connect outside the lock: other borrowers need not wait for our handshake.
  ++open_;
  lock.unlock();
  try {
    // A caller with a deadline waits no longer for the connect, AUTH and
    // SELECT than it has left.
    auto connection = std::make_unique<Connection>(detail::cut_to(options_, deadline));
    connection->set_usual_timeout(options_.command_timeout);
    const bool reconnected = reconnecting_.exchange(false, std::memory_order_relaxed);
    if (reconnected) runtime_.revalidate();
    // Only a hook needs the run_id: revalidation does not. Asked in
    // give_back(), after the caller's own command.
    if (events_ && (reconnected || !server_asked_.load(std::memory_order_relaxed))) {
      identity_due_.store(true, std::memory_order_relaxed);
    }
    return connection;
  } catch (...) {
    lock.lock();
    --open_;
    lock.unlock();
    returned_.notify_one();
    throw;
  }
}

inline bool Endpoint::new_process(Connection& connection) {
  std::optional<Reply> info;
  try {
    info.emplace(connection.command("INFO", "server"));
  } catch (const ServerError&) {
    // Refused (an ACL): unasked from now on; the connection stays usable.
  }
  server_asked_.store(true, std::memory_order_relaxed);
  if (!info || info->type() != ReplyType::string) return false;
  const std::string_view run_id = server_info_field(info->str(), "run_id");
  MutexLock lock(mutex_);
  const bool other = !run_id_.empty() && !run_id.empty() && run_id != run_id_;
  if (!run_id.empty()) run_id_ = std::string(run_id);
  return other;
}

inline void Endpoint::drop_idle() noexcept {
  {
    MutexLock lock(mutex_);
    open_ -= idle_.size();
    idle_.clear();  // keeps its capacity: give_back() must never need to allocate
    reconnecting_.store(true, std::memory_order_relaxed);
  }
  returned_.notify_all();
}

inline void Endpoint::give_back(std::unique_ptr<Connection> connection) noexcept {
  // One past max_connection_age is closed rather than lent again: a lender
  // holds it for one call, so none outlives its age by more than that.
  bool reusable =
      connection && !connection->broken() && connection->pending() == 0 && !connection->aged();
  if (reusable) {
    try {
      connection->set_timeout(options_.command_timeout);
    } catch (...) {
      reusable = false;
    }
  }
  // A plain read first: the check is due only after a new connection with
  // an event hook, and every give-back passes here.
  if (reusable && identity_due_.load(std::memory_order_relaxed) &&
      identity_due_.exchange(false, std::memory_order_relaxed)) {
    try {
      if (new_process(*connection)) {
        emit_about(events_, LockEventType::master_switched, options_.endpoint());
      }
    } catch (...) {
      reusable = false;  // it may owe INFO's reply; the next connection asks
      identity_due_.store(true, std::memory_order_relaxed);
    }
  }
  if (reusable) {
    connection->touch();
  } else {
    if (connection && connection->broken()) reconnecting_.store(true, std::memory_order_relaxed);
    connection.reset();
  }
  {
    MutexLock lock(mutex_);
    if (connection) {
      idle_.push_back(std::move(connection));
    } else {
      --open_;
    }
  }
  returned_.notify_one();
}

}  // namespace detail
}  // namespace distlock
