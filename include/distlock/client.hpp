// Client: everything distlock needs to talk to one Redis endpoint, shared by
// any number of lock objects and threads.
//
// It owns a bounded pool of Connections. A borrower gets one connection to
// itself and gives it back when its Borrowed handle goes away; a connection
// that broke is dropped then and a fresh one is opened by the next borrower,
// so a server restart costs one failed call, not a dead Client. It also owns,
// started on first use, the release Notifier and the lease Watchdog.
#pragma once

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/notifier.hpp"
#include "distlock/reply.hpp"
#include "distlock/token.hpp"
#include "distlock/watchdog.hpp"

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
  /// hiredis writes with write(2), so a write to a connection the server just
  /// closed raises SIGPIPE, whose default action kills the process. When set,
  /// a Client that finds SIGPIPE at its default sets it to ignored (a handler
  /// the application installed is left alone). Turn off to manage it yourself.
  bool ignore_sigpipe = true;
  /// Most acquirers of this Client waiting for a release at once; past it an
  /// acquire that would wait fails at once with Errc::too_many_waiters.
  std::size_t max_waiters = 10000;

  ClientOptions() = default;
  ClientOptions(ConnectionOptions connection) : ConnectionOptions(std::move(connection)) {}
  /// See ConnectionOptions::from_uri.
  static ClientOptions from_uri(std::string_view uri) {
    return ClientOptions(ConnectionOptions::from_uri(uri));
  }
};

/// A thread-safe handle to one Redis endpoint. Connections open lazily: a
/// Client can be made before its server is up.
class Client {
 public:
  /// A connection lent to one borrower; returned to the pool on destruction.
  class Borrowed {
   public:
    Borrowed(Borrowed&& other) noexcept
        : client_(std::exchange(other.client_, nullptr)),
          connection_(std::move(other.connection_)) {}
    Borrowed& operator=(Borrowed&&) = delete;
    Borrowed(const Borrowed&) = delete;
    Borrowed& operator=(const Borrowed&) = delete;
    ~Borrowed() {
      if (client_ != nullptr) client_->give_back(std::move(connection_));
    }

    Connection& operator*() const noexcept { return *connection_; }
    Connection* operator->() const noexcept { return connection_.get(); }

   private:
    friend class Client;
    Borrowed(Client* client, std::unique_ptr<Connection> connection) noexcept
        : client_(client), connection_(std::move(connection)) {}
    Client* client_;
    std::unique_ptr<Connection> connection_;
  };

  /// Throws InvalidArgument if the options are out of range; connects nothing.
  explicit Client(ClientOptions options = {});
  explicit Client(std::string_view uri) : Client(ClientOptions::from_uri(uri)) {}

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Lends a connection, opening one if the pool has room. Waits up to
  /// pool_wait_timeout for one to come back, then throws TimeoutError
  /// (Errc::pool_exhausted); a failed connect throws as Connection does.
  Borrowed borrow();

  /// One command on a borrowed connection; error replies throw ServerError.
  template <class... Arg>
  Reply command(const Arg&... args) {
    return borrow()->command(args...);
  }

  /// Runs a script by EVALSHA, loading it on NOSCRIPT; error replies throw.
  Reply eval(const Script& script, detail::Args keys, detail::Args args) {
    return borrow()->eval(script, keys, args);
  }

  const ClientOptions& options() const noexcept { return options_; }

  /// The release notifier, started (one thread, one connection) on first use.
  Notifier& notifier();
  /// The lease watchdog, started (one thread, one connection) on first use.
  Watchdog& watchdog();

  /// A random id for this Client instance, used to name lock owners.
  const std::string& id() const noexcept { return id_; }

 private:
  void give_back(std::unique_ptr<Connection> connection) noexcept;

  // A connection back in the pool for less than this is lent again without
  // asking the kernel whether the server closed it: that question is a
  // system call, which costs as much as the rest of a lock's client-side work,
  // and a server that went away within this window fails a command that was
  // about to be sent anyway.
  static constexpr std::chrono::milliseconds idle_check_after{10};

  const ClientOptions options_;
  const std::string id_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t open_ = 0;  // idle plus lent out

  // Declared last so they stop first: their threads use the options above.
  std::once_flag notifier_started_;
  std::unique_ptr<Notifier> notifier_;
  std::once_flag watchdog_started_;
  std::unique_ptr<Watchdog> watchdog_;
};

inline Client::Client(ClientOptions options) : options_(std::move(options)), id_(make_token()) {
  options_.validate();
  if (options_.pool_size == 0) throw InvalidArgument("pool_size must be at least 1");
  if (options_.pool_wait_timeout.count() < 0) {
    throw InvalidArgument("pool_wait_timeout must not be negative");
  }
  // give_back() is noexcept, so its push_back must never need to allocate.
  idle_.reserve(options_.pool_size);
  if (options_.ignore_sigpipe) detail::ignore_default_sigpipe();
}

inline Notifier& Client::notifier() {
  std::call_once(notifier_started_, [this] {
    notifier_ = std::make_unique<Notifier>(options_, options_.max_waiters);
  });
  return *notifier_;
}

inline Watchdog& Client::watchdog() {
  std::call_once(watchdog_started_, [this] { watchdog_ = std::make_unique<Watchdog>(options_); });
  return *watchdog_;
}

inline Client::Borrowed Client::borrow() {
  std::unique_lock lock(mutex_);
  const bool available = returned_.wait_for(lock, options_.pool_wait_timeout, [this] {
    return !idle_.empty() || open_ < options_.pool_size;
  });
  if (!available) {
    throw TimeoutError(Errc::pool_exhausted,
                       options_.endpoint() + ": all " + std::to_string(options_.pool_size) +
                           " pooled connections stayed busy for " +
                           std::to_string(options_.pool_wait_timeout.count()) + " ms");
  }
  while (!idle_.empty()) {
    std::unique_ptr<Connection> connection = std::move(idle_.back());
    idle_.pop_back();
    if (!connection->stale_after_idle(idle_check_after)) {
      return Borrowed(this, std::move(connection));
    }
    --open_;  // closed under us while idle: drop it and look again
  }
  // Connect outside the lock: other borrowers need not wait for our handshake.
  ++open_;
  lock.unlock();
  try {
    return Borrowed(this, std::make_unique<Connection>(options_));
  } catch (...) {
    lock.lock();
    --open_;
    lock.unlock();
    returned_.notify_one();
    throw;
  }
}

inline void Client::give_back(std::unique_ptr<Connection> connection) noexcept {
  bool reusable = connection && !connection->broken() && connection->pending() == 0;
  if (reusable) {
    try {
      connection->set_timeout(options_.command_timeout);
    } catch (...) {
      reusable = false;
    }
  }
  if (reusable) {
    connection->touch();
  } else {
    connection.reset();
  }
  {
    std::lock_guard lock(mutex_);
    if (connection) {
      idle_.push_back(std::move(connection));
    } else {
      --open_;
    }
  }
  returned_.notify_one();
}

}  // namespace distlock
