// Endpoint: what every copy of a Client shares (the options, the pool of
// connections to one server, the owner id, the Runtime), and Borrowed, a
// connection lent from that pool. See client.hpp for how they behave.
#pragma once

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/client_options.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/runtime.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/reply.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

inline void ignore_default_sigpipe() noexcept {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

/// What every copy of a Client shares: the options, the pool, the owner id
/// and the Runtime. Lives as long as its last Client or lock object.
class Endpoint {
 public:
  explicit Endpoint(ClientOptions options);
  // In a forked child the sockets are the parent's too: closing our copies
  // is harmless, as long as nothing is sent on them.
  ~Endpoint() = default;

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

/// A connection lent to one borrower; returned to the pool on destruction.
class Borrowed {
 public:
  Borrowed(std::shared_ptr<Endpoint> endpoint, std::unique_ptr<Connection> connection) noexcept
      : endpoint_(std::move(endpoint)), connection_(std::move(connection)) {}
  Borrowed(Borrowed&&) noexcept = default;
  Borrowed& operator=(Borrowed&&) = delete;
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed() {
    if (endpoint_) endpoint_->give_back(std::move(connection_));
  }

  Connection& operator*() const noexcept { return *connection_; }
  Connection* operator->() const noexcept { return connection_.get(); }

 private:
  std::shared_ptr<Endpoint> endpoint_;  // it outlives every Client handle
  std::unique_ptr<Connection> connection_;
};

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

}  // namespace distlock::detail
