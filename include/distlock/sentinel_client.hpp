// SentinelClient: the transport to a master watched by Redis Sentinel, a
// Backend every lock type takes in place of a Client:
//
//   distlock::SentinelOptions options{"mymaster", {"10.0.0.5:26379", "10.0.0.6:26379"}};
//   distlock::SentinelClient sentinel{options};
//   distlock::Mutex job{sentinel, "job"};
//
// It asks the Sentinels where the master is, checks that it says ROLE
// master, and follows it when it moves; every lease held through it is then
// revalidated on the new master, kept or reported lost, never believed
// (detail/backend/sentinel_master.hpp). Copies share the pools (one per
// address the master has had), the watch thread and the Runtime; nothing
// connects until first use.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/backend.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/backend/sentinel_master.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/function_ref.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"
#include "distlock/sentinel_options.hpp"

namespace distlock {

namespace detail {
class SentinelSite;
}

/// A thread-safe handle to the master of one Sentinel-watched group.
/// Copies share everything.
class SentinelClient : public Backend {
 public:
  /// Throws InvalidArgument for bad options; connects nothing.
  DISTLOCK_DECL explicit SentinelClient(SentinelOptions options);
  DISTLOCK_DECL ~SentinelClient() override;
  /// Another handle to the same master (pools, watch thread, Runtime).
  DISTLOCK_DECL SentinelClient(const SentinelClient&);
  /// Takes `other`'s share; the moved-from handle may only be destroyed or
  /// assigned to.
  DISTLOCK_DECL SentinelClient(SentinelClient&&) noexcept;
  /// Makes this a handle to `other`'s master, letting go of its own.
  DISTLOCK_DECL SentinelClient& operator=(const SentinelClient&);
  /// Takes `other`'s share, letting go of its own; `other` may then only be
  /// destroyed or assigned to.
  DISTLOCK_DECL SentinelClient& operator=(SentinelClient&&) noexcept;

  /// A connection to the master, found first if need be. Throws
  /// ConnectionError when the Sentinels name no master that answers, and
  /// as Client::borrow does.
  Client::Borrowed borrow(std::chrono::steady_clock::time_point deadline =
                              std::chrono::steady_clock::time_point::max()) {
    try {
      return master_->master(deadline).borrow(deadline);
    } catch (const ConnectionError&) {
      master_->stale();
      throw;
    }
  }

  /// Runs `send(connection)` at the master, following it within `deadline`
  /// as detail/backend/sentinel_master.hpp says; returns what send returns.
  template <class Send>
  auto route(std::chrono::steady_clock::time_point deadline, Send&& send) {
    return master_->route(deadline, std::forward<Send>(send));
  }

  /// One command at the master; error replies throw ServerError.
  template <class... Arg>
  Reply command(const Arg&... args) {
    const std::string_view argv[] = {std::string_view(args)...};
    const detail::Args list(argv, sizeof...(Arg));
    return route(detail::no_deadline,
                 [&](Connection& connection) { return connection.command_argv(list); });
  }

  /// Runs a script at the master (EVALSHA, EVAL on NOSCRIPT).
  Reply eval(const Script& script, detail::Args keys, detail::Args args) {
    return route(detail::no_deadline,
                 [&](Connection& connection) { return connection.eval(script, keys, args); });
  }

  /// The options the master's pools are made with.
  const ClientOptions& options() const noexcept { return master_->options(); }

  /// Asks the Sentinels for the master now. Throws ConnectionError naming
  /// each Sentinel and what it said when none named a master that answers.
  void refresh(std::chrono::steady_clock::time_point deadline =
                   std::chrono::steady_clock::time_point::max()) {
    master_->stale();
    static_cast<void>(master_->master(deadline));
  }
  /// "host:port" of the master as last found; empty before first use.
  std::string master_address() const { return master_->address(); }
  /// How many times the master moved since it was first found.
  unsigned switches() const noexcept { return master_->switches(); }

  /// The release notifier (at the master, following it), started on first use.
  Notifier& notifier() { return master_->runtime().notifier(); }
  /// The options' on_event as the locks share it; null when none is set.
  const detail::SharedEventHook& events() const noexcept { return master_->events(); }
  /// The lease watchdog, started (one thread) on first use.
  Watchdog& watchdog() { return master_->runtime().watchdog(); }

  /// A random id shared by the copies, used to name lock owners.
  const std::string& id() const noexcept { return master_->id(); }
  /// Whether this handle was made before a fork() and is used in the child.
  bool forked() const noexcept { return master_->forked(); }
  /// Throws Error(forked) if forked().
  void check_process() const { master_->check_process(); }

  /// Where a lock on any key sends its steps: the master, wherever it is.
  DISTLOCK_DECL std::shared_ptr<detail::Site> site_for(std::string_view key) const override;

 private:
  friend class detail::SentinelSite;
  std::shared_ptr<detail::SentinelMaster> master_;
};

namespace detail {

/// A SentinelClient's site: the master, followed.
class SentinelSite final : public Site {
 public:
  explicit SentinelSite(SentinelClient sentinel) : sentinel_(std::move(sentinel)) {}

  void run(clock::time_point deadline, FunctionRef<void(Connection&)> send) override {
    sentinel_.route(deadline, send);
  }
  Borrowed borrow(clock::time_point deadline) override { return sentinel_.borrow(deadline); }
  // An error reply to a pipelined step: READONLY has the master looked for again.
  bool saw_error(std::string_view reply) override {
    sentinel_.master_->saw_error(reply);
    return false;
  }
  Notifier& notifier() override { return sentinel_.notifier(); }
  Watchdog& watchdog() override { return sentinel_.watchdog(); }
  Connector& connector() override { return sentinel_.master_->runtime().connector(); }
  // Every key lives at the master: async locks link to it, wherever it is.
  bool links() const noexcept override { return true; }
  ConnectionOptions endpoint_now(clock::time_point deadline) override {
    return sentinel_.master_->master(deadline).options();
  }
  std::uint64_t endpoint_epoch() const noexcept override { return sentinel_.master_->epoch(); }
  std::weak_ptr<const void> lifetime() const noexcept override { return sentinel_.master_; }
  const SharedEventHook& events() const noexcept override { return sentinel_.events(); }

  const ClientOptions& options() const noexcept override { return sentinel_.options(); }
  const std::string& id() const noexcept override { return sentinel_.id(); }
  bool forked() const noexcept override { return sentinel_.forked(); }
  void check_process() const override { sentinel_.check_process(); }
  const void* identity() const noexcept override { return sentinel_.master_.get(); }
  std::string describe() const override { return sentinel_.options().endpoint(); }

 private:
  SentinelClient sentinel_;
};

}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL SentinelClient::SentinelClient(SentinelOptions options)
    : master_(std::make_shared<detail::SentinelMaster>(std::move(options))) {}
DISTLOCK_DECL SentinelClient::~SentinelClient() = default;
DISTLOCK_DECL SentinelClient::SentinelClient(const SentinelClient&) = default;
DISTLOCK_DECL SentinelClient::SentinelClient(SentinelClient&&) noexcept = default;
DISTLOCK_DECL SentinelClient& SentinelClient::operator=(const SentinelClient&) = default;
DISTLOCK_DECL SentinelClient& SentinelClient::operator=(SentinelClient&&) noexcept = default;

DISTLOCK_DECL std::shared_ptr<detail::Site> SentinelClient::site_for(std::string_view) const {
  return std::make_shared<detail::SentinelSite>(*this);
}
#endif

}  // namespace distlock
