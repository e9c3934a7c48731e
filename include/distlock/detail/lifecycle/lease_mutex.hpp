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
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/lifecycle/single_server.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/command_format.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/token.hpp"

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
inline Attempt set_answer(const Reply& reply) {
  reply.throw_if_error();
  Attempt attempt;
  attempt.acquired = reply.is_ok();
  if (!attempt.acquired && !reply.is_nil()) unexpected_reply("SET NX", "OK or nil", reply.type());
  return attempt;
}
inline Attempt set_if_absent(Connection& connection, const LeaseKeys& keys,
                             const std::string& token, const Decimal& ttl) {
  return set_answer(connection.command("SET", keys.key, token, "NX", "PX", ttl));
}
/// The same, on a link (detail/wire/link.hpp).
inline Link::Ticket send_set_if_absent(Link& link, const LeaseKeys& keys, const std::string& token,
                                       const Decimal& ttl, Link::Sink sink) {
  return link.send({"SET", keys.key, token, "NX", "PX", ttl}, std::move(sink));
}

/// The Lifecycle's Protocol for a single-key lease over `Wire`.
template <class Wire>
class LeaseProtocol : public SingleServer, public OneKindProtocol {
 public:
  // A minimum hold keeps the lease: every acquisition has a token of its
  // own, so nothing else of this process can take it meanwhile.
  static constexpr bool holds_at_least(Kind) noexcept { return true; }

  LeaseProtocol(const Backend& backend, std::string key, const LockOptions& options)
      : SingleServer(backend, key, companion_key(key, "released"), options),
        fence_key_(companion_key(key, "fence")),
        fencing_(options.fencing()),
        renewer_(make_renewer<typename Wire::Renewer>()) {}

  std::string id_for(Kind) const { return make_token(); }

  std::optional<Attempt> attempt(Kind, const std::string& token, SteadyClock::time_point deadline,
                                 bool /*waits*/) {
    return attempt_or_undo(
        *site_, deadline,
        [&](Connection& connection) {
          return Wire::acquire(connection, keys(), token, ttl_, fencing_);
        },
        [&](UndoWriter& write) { Wire::undo(write, keys(), token); }, replicas_.get(), key_);
  }

  // The steps for an event loop (distlock/asio.hpp), where the Wire has
  // them: written on a link, each answer decoded apart, an attempt undone
  // behind it. Templates, so that an explicit instantiation over a Wire
  // without some (SimpleMutex's has no undo nor release on a link) leaves
  // them out, and the async calls can tell (detail/asio/async_access.hpp).
  template <class W = Wire>
  Link::Ticket send_attempt(Kind, Link& link, const std::string& token, Link::Sink sink) const {
    return W::send_acquire(link, keys(), token, ttl_, fencing_, std::move(sink));
  }
  template <class W = Wire>
  auto attempt_answer(Kind, const Reply& reply) const
      -> decltype(W::acquire_answer(reply, LeaseKeys(), false)) {
    return W::acquire_answer(reply, keys(), fencing_);
  }
  template <class W = Wire>
  auto send_undo(Kind, Link& link, const std::string& token) const
      -> decltype(W::send_undo(link, LeaseKeys(), token)) {
    W::send_undo(link, keys(), token);
  }
  // The release on a link, and its answer.
  template <class W = Wire>
  auto send_release(Kind, Link& link, const std::string& token, Link::Sink sink) const
      -> decltype(W::send_release(link, LeaseKeys(), token, std::move(sink))) {
    return W::send_release(link, keys(), token, std::move(sink));
  }
  template <class W = Wire>
  auto release_answer(Kind, const Reply& reply) const -> decltype(W::release_answer(reply)) {
    return W::release_answer(reply);
  }
  // The undo on a connection of its own, answered (the connector's).
  void undo_on(Kind, Connection& connection, const std::string& token) const {
    static_cast<void>(Wire::release(connection, keys(), token));
  }
  // read_holder() on a link: the replies to PTTL and TYPE of key().
  HolderLease holder_answer(const Reply& pttl, const Reply& type) const {
    return holder_of_type(key_, pttl, type, "string");
  }

  /// The holder's lease, and (in the same round trip) a check that the key
  /// holds a string: SET NX is refused by a key of any type, and a hash or
  /// a list there would be waited for in vain.
  std::optional<HolderLease> read_holder(SteadyClock::time_point deadline) {
    return read_holder_of_type(*site_, key_, "string", deadline);
  }

  TokenCheck release(Kind, const std::string& token) {
    return checked(
        [&](Connection& connection) { return Wire::release(connection, keys(), token); });
  }

  TokenCheck extend(Kind, const std::string& token, std::chrono::milliseconds ttl) {
    return extended([&](Connection& connection) {
      return Wire::extend(connection, keys(), token, Decimal(ttl.count()));
    });
  }

  std::shared_ptr<LeaseState> watched(Kind, const std::string& token, SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(key_, token, options.ttl(), sent, options.on_lost(),
                                        renewer_);
  }

  static std::string describe(Kind) { return "lock"; }

 private:
  LeaseKeys keys() const noexcept { return {key_, fence_key_, channel_}; }

  const std::string fence_key_;
  const bool fencing_;
  std::shared_ptr<Renewer> renewer_;
};

/// An exclusive single-key lease lock: Mutex or SimpleMutex.
template <class Wire>
class LeaseMutex : public ExclusiveLock<LeaseProtocol<Wire>> {
  using Base = ExclusiveLock<LeaseProtocol<Wire>>;

 public:
  /// Validates name and options (InvalidArgument); contacts no server. The
  /// lock keeps its key's site (detail/backend/site.hpp), so it may outlive the
  /// backend object it was made from.
  LeaseMutex(const Backend& backend, std::string_view name, LockOptions options = {},
             AcquirePolicy policy = {});

  /// The token of the current lease; empty when not held.
  std::string token() const;
};

// Out of the class, as ExclusiveLock's members are.
template <class Wire>
LeaseMutex<Wire>::LeaseMutex(const Backend& backend, std::string_view name, LockOptions options,
                             AcquirePolicy policy)
    : Base(LeaseProtocol<Wire>(backend, lock_key(options, name), options), options,
           std::move(policy)) {}
template <class Wire>
std::string LeaseMutex<Wire>::token() const {
  return this->life_->id(Base::kind);
}

}  // namespace distlock::detail
