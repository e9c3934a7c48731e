// LeaseMutex: the single-key lease lock that Mutex and SimpleMutex share,
// as a Protocol for the Lifecycle.
//
// The lock is one string key holding a random token, with the lease as its
// PTTL. A Wire says how one attempt, one release, one extend, the undo of
// an ambiguous attempt and a batch of renewals are sent (Lua scripts for
// Mutex, plain commands and WATCH/MULTI/EXEC for SimpleMutex); each is one
// atomic server step. Everything else is the Lifecycle's.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/armed_attempt.hpp"
#include "distlock/detail/command_format.hpp"
#include "distlock/detail/exclusive_lock.hpp"
#include "distlock/detail/key_type.hpp"
#include "distlock/detail/single_server.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/token.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// The keys one lease lock touches, all in the lock key's hash slot (views
/// of its Protocol's names).
struct LeaseKeys {
  std::string_view key;      ///< holds the token, with the lease as its PTTL
  std::string_view fence;    ///< fencing counter (INCR per acquisition)
  std::string_view channel;  ///< release announcements
};

/// The plain acquire both wires share: SET NX PX, one atomic step.
/// SET NX's answer: OK granted, nil refused. Anything else is no answer a
/// Redis server gives (ConnectionError): the SET may have been applied, and
/// the caller undoes it as it does an attempt whose reply never came.
inline Attempt set_reply(const Reply& reply) {
  Attempt attempt;
  attempt.acquired = reply.is_ok();
  if (!attempt.acquired && !reply.is_nil()) unexpected_reply("SET NX", "OK or nil", reply.type());
  return attempt;
}

inline Attempt set_if_absent(Connection& connection, const LeaseKeys& keys,
                             const std::string& token, const Decimal& ttl) {
  return set_reply(connection.command("SET", keys.key, token, "NX", "PX", ttl));
}

/// The Lifecycle's Protocol for a single-key lease over `Wire`.
template <class Wire, class Backend>
class LeaseProtocol : public SingleServer<Backend> {
 public:
  enum class Kind { exclusive };
  static constexpr Kind exclusive = Kind::exclusive;
  static constexpr bool per_thread = false;
  static constexpr bool given_back_first(Kind) noexcept { return false; }
  // A minimum hold keeps the lease: every acquisition has a token of its
  // own, so nothing else of this process can take it meanwhile.
  static constexpr bool holds_at_least(Kind) noexcept { return true; }
  void keeping(Kind, const std::string&) const noexcept {}

  LeaseProtocol(Backend backend, std::string key, const LockOptions& options)
      : SingleServer<Backend>(std::move(backend), key, companion_key(key, "released"), options),
        fence_key_(companion_key(key, "fence")),
        fencing_(options.fencing()),
        renewer_(this->template make_renewer<typename Wire::template Renewer<Backend>>()) {}

  std::string id_for(Kind) const { return make_token(); }
  template <class DepthOf>
  void before_first(Kind, DepthOf&&) const noexcept {}
  void held(Kind, int) noexcept {}

  std::optional<Attempt> attempt(Kind, const std::string& token, SteadyClock::time_point deadline) {
    return attempt_or_undo(
        this->backend_, deadline,
        [&](Connection& connection) {
          return Wire::acquire(connection, keys(), token, this->ttl_, fencing_);
        },
        [&](Connection& connection) { Wire::undo(connection, keys(), token); },
        this->replicas_.get(), this->key_);
  }

  /// The attempt as the notifier thread may write it for a sleeping waiter
  /// (detail/armed_attempt.hpp); empty where it may not: a fenced attempt
  /// (a script or a transaction), one with WAIT behind it, or a Backend
  /// other than Client (a cluster routes each step; a sentinel's master
  /// may move while the waiter sleeps).
  std::string armed_command(Kind, const std::string& token) const {
    if constexpr (std::is_same_v<Backend, Client>) {
      if (!fencing_ && !this->replicas_) {
        return format_command({"SET", this->key_, token, "NX", "PX", this->ttl_});
      }
    }
    static_cast<void>(token);
    return {};
  }
  /// An armed attempt's reply, as set_if_absent() reads it.
  static Attempt armed_reply(const Reply& reply) {
    reply.throw_if_error();
    return set_reply(reply);
  }
  /// Behind an armed attempt whose reply never came, as attempt() undoes.
  void undo(Kind, Connection& connection, const std::string& token) {
    Wire::undo(connection, keys(), token);
  }
  Notifier& notifier() { return this->backend_.notifier(); }
  std::chrono::milliseconds command_timeout() const {
    return this->backend_.options().command_timeout;
  }

  /// The holder's PTTL, and (in the same round trip) a check that the key
  /// holds a string: SET NX is refused by a key of any type, and a hash or
  /// a list there would be waited for in vain.
  std::optional<long long> holder_pttl(SteadyClock::time_point deadline) {
    return read_pttl_of_type(this->backend_, this->key_, "string", deadline);
  }

  TokenCheck release(Kind, const std::string& token) {
    return this->checked(
        [&](Connection& connection) { return Wire::release(connection, keys(), token); });
  }

  TokenCheck extend(Kind, const std::string& token, std::chrono::milliseconds ttl) {
    return this->extended([&](Connection& connection) {
      return Wire::extend(connection, keys(), token, Decimal(ttl.count()));
    });
  }

  std::shared_ptr<LeaseState> watched(Kind, const std::string& token, SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(this->key_, token, options.ttl(), sent, options.on_lost(),
                                        renewer_);
  }

  static std::string describe(Kind) { return "lock"; }

 private:
  LeaseKeys keys() const noexcept { return {this->key_, fence_key_, this->channel_}; }

  const std::string fence_key_;
  const bool fencing_;
  std::shared_ptr<Renewer> renewer_;
};

/// An exclusive single-key lease lock: Mutex or SimpleMutex.
template <class Wire, class Backend, class Policy>
class LeaseMutex : public ExclusiveLock<LeaseProtocol<Wire, Backend>, Policy> {
  using Base = ExclusiveLock<LeaseProtocol<Wire, Backend>, Policy>;

 public:
  /// Validates name and options (InvalidArgument); contacts no server. The
  /// lock keeps a copy of the Client (a handle), so it may outlive the
  /// Client it was made from.
  LeaseMutex(const Backend& backend, std::string_view name, LockOptions options = {},
             Policy policy = {})
      : Base(LeaseProtocol<Wire, Backend>(backend, lock_key(options, name), options), options,
             std::move(policy)) {}

  /// Releases the lease if this object still holds it.
  ~LeaseMutex() = default;
  LeaseMutex(LeaseMutex&&) noexcept = default;
  LeaseMutex& operator=(LeaseMutex&&) noexcept = default;

  /// The token of the current lease; empty when not held.
  std::string token() const { return this->life_->id(Base::kind); }
};

}  // namespace distlock::detail
