// distlock::Mutex: an exclusive lock on one Redis key, held as a lease.
//
// Acquire is one command, SET <key> <token> NX PX <ttl> (or, with fencing,
// one script that also INCRs the fence counter), so a key never exists
// without its expiry. Release and extend are Lua compare-and-delete and
// compare-and-pexpire on the 128-bit random token, run by EVALSHA: only the
// holder of this acquisition can end or lengthen it, and a release after the
// lease ran out never deletes a successor's lock.
//
// The stored layout is exactly SET <key> <token> PX <ttl>, as redis-py's Lock,
// node-redlock and redsync store it, so services in those languages exclude a
// C++ service on the same key.
//
//   distlock::Mutex stock{redis, "stock:42", distlock::LockOptions{}.ttl(5s)};
//   if (std::unique_lock lock{stock, 2s}) { ... }   // try_lock_for(2s)
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/batch_renewal.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/lifecycle/lease_mutex.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"

namespace distlock {

namespace detail {

// Mutex's wire protocol: SET NX PX to acquire, scripts for the rest.
struct ScriptedLease {
  static Attempt acquire(Connection& connection, const LeaseKeys& keys, const std::string& token,
                         const Decimal& ttl, bool fencing) {
    if (!fencing) return set_if_absent(connection, keys, token, ttl);
    return acquire_answer(
        connection.eval(scripts::acquire_fenced, {keys.key, keys.fence}, {token, ttl}), keys,
        fencing);
  }

  // The same on a link (an event loop's): sent, then its answer decoded.
  static Link::Ticket send_acquire(Link& link, const LeaseKeys& keys, const std::string& token,
                                   const Decimal& ttl, bool fencing, Link::Sink sink) {
    if (!fencing) return send_set_if_absent(link, keys, token, ttl, std::move(sink));
    return link.send_script(scripts::acquire_fenced, {keys.key, keys.fence}, {token, ttl},
                            std::move(sink));
  }
  static Attempt acquire_answer(const Reply& reply, const LeaseKeys& keys, bool fencing) {
    if (!fencing) return set_answer(reply);
    reply.throw_if_error();
    if (reply.size() < 2) throw ConnectionError(Errc::protocol_error, "bad fenced acquire reply");
    // Refused, the key's type follows the holder's PTTL.
    Attempt attempt = fenced_attempt(reply);
    if (!attempt.acquired && reply.size() > 2) {
      check_key_type(keys.key, reply[2].str(), "string");
      if (reply[2].str() == "string") check_expires(keys.key, "string", attempt.holder);
    }
    return attempt;
  }

  // Behind an attempt that got no reply: the release script.
  static void undo(UndoWriter& write, const LeaseKeys& keys, const std::string& token) {
    write.script(scripts::release, {keys.key, keys.channel}, {token});
  }
  static void send_undo(Link& link, const LeaseKeys& keys, const std::string& token) {
    link.undo_eval(scripts::release, {keys.key, keys.channel}, {token});
  }

  static TokenCheck release(Connection& connection, const LeaseKeys& keys,
                            const std::string& token) {
    return release_answer(connection.eval(scripts::release, {keys.key, keys.channel}, {token}));
  }
  static Link::Ticket send_release(Link& link, const LeaseKeys& keys, const std::string& token,
                                   Link::Sink sink) {
    return link.send_script(scripts::release, {keys.key, keys.channel}, {token}, std::move(sink));
  }
  static TokenCheck release_answer(const Reply& reply) {
    return token_check(reply, "lease release");
  }

  static TokenCheck extend(Connection& connection, const LeaseKeys& keys, const std::string& token,
                           const Decimal& ttl) {
    return token_check(connection.eval(scripts::extend, {keys.key}, {token, ttl}), "lease extend");
  }

  // Renewal: renew_batch, one call per Watchdog::batch_size leases.
  using Renewer = ScriptRenewer<scripts::renew_batch>;
};

}  // namespace detail

/// An exclusive lease lock on any Backend, waiting by any AcquirePolicy.
/// Meets Lockable and TimedLockable; see detail::ExclusiveLock for each
/// member's contract.
class Mutex : public detail::LeaseMutex<detail::ScriptedLease> {
 public:
  using LeaseMutex::LeaseMutex;
};

namespace detail {
DISTLOCK_LOCK_TEMPLATE(class LeaseProtocol<ScriptedLease>)
DISTLOCK_EXCLUSIVE_LOCK_OF(LeaseProtocol<ScriptedLease>)
DISTLOCK_LOCK_TEMPLATE(class LeaseMutex<ScriptedLease>)
}  // namespace detail

}  // namespace distlock
