// distlock::SimpleMutex: Mutex's lease, with no scripting at all.
//
// For servers where EVAL and EVALSHA are forbidden (ACL -@scripting, managed
// services). Acquire is the same SET <key> <token> NX PX <ttl>. Release and
// extend are optimistic transactions: WATCH the key and GET it (one round
// trip); if it still holds our token, MULTI / DEL or PEXPIRE / EXEC (a second
// round trip). EXEC fails if the key changed after WATCH, so the token check
// and the change are still one atomic step; we then look again.
//
// With fencing, acquire is MULTI / SET NX PX / INCR fence / EXEC: the counter
// also rises on refused attempts, so fences have gaps but still rise strictly
// from one holder to the next.
//
// What scripts do that this cannot:
// - Under maxmemory with noeviction, Redis refuses every command queued in a
//   MULTI, DEL included, so release() and extend() fail with ServerError
//   (OOM) and the lease runs out by itself. Mutex releases under OOM.
// - The cleanup after an acquire whose reply timed out reads before it
//   writes, so it removes our key only if the SET had already landed; a SET
//   still queued in the server (CLIENT PAUSE, a stalled server) stays until
//   its lease ends.
#pragma once

#include <string>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/lease_mutex.hpp"

namespace distlock {

namespace detail {

// SimpleMutex's wire protocol: plain commands and WATCH/MULTI/EXEC.
struct TransactionalLease {
  static Attempt acquire(Connection& connection, const LeaseKeys& keys, const std::string& token,
                         const Decimal& ttl, bool fencing) {
    if (!fencing) return set_if_absent(connection, keys, token, ttl);
    Attempt attempt;
    connection.append("MULTI");
    connection.append("SET", keys.key, token, "NX", "PX", ttl);
    connection.append("INCR", keys.fence);
    connection.append("EXEC");
    for (int queued = 0; queued < 3; ++queued) connection.read_reply().throw_if_error();
    const Reply& exec = connection.read_reply().throw_if_error();
    if (exec.size() != 2) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
    attempt.acquired = exec[0].is_ok();
    if (exec[1].is_error()) {
      // A transaction does not roll back: the SET stands though the INCR
      // failed. Take the unfenced lock away again before reporting.
      const ServerError error(exec[1].str());
      if (attempt.acquired) static_cast<void>(release(connection, keys, token));
      throw error;
    }
    if (attempt.acquired) attempt.fence = exec[1].integer();
    return attempt;
  }

  static TokenCheck release(Connection& connection, const LeaseKeys& keys,
                            const std::string& token) {
    return check_and_change(connection, keys, token, [&] {
      connection.append("DEL", keys.key);
      connection.append("PUBLISH", keys.channel, "0");
    });
  }

  static TokenCheck extend(Connection& connection, const LeaseKeys& keys, const std::string& token,
                           const Decimal& ttl) {
    return check_and_change(connection, keys, token,
                            [&] { connection.append("PEXPIRE", keys.key, ttl); });
  }

  // No script, so no batch: the watchdog renews each lease by itself.
  static Watchdog::RenewAlone renewer(const LeaseKeys& keys) {
    return [keys](Connection& connection, const LeaseState& lease, std::string_view ttl) {
      return check_and_change(connection, keys, lease.token,
                              [&] { connection.append("PEXPIRE", keys.key, ttl); });
    };
  }

  // WATCH + GET; if the key holds our token, MULTI + change + EXEC. An
  // aborted EXEC means the key changed under us: look again.
  template <class QueueChange>
  static TokenCheck check_and_change(Connection& connection, const LeaseKeys& keys,
                                     const std::string& token, QueueChange queue_change) {
    for (;;) {
      connection.append("WATCH", keys.key);
      connection.append("GET", keys.key);
      connection.read_reply().throw_if_error();
      const Reply& value = connection.read_reply();
      if (value.is_error() || value.is_nil() || value.str() != token) {
        const TokenCheck found = value.is_nil() ? TokenCheck::no_key : TokenCheck::other_token;
        const std::string error = value.is_error() ? std::string(value.str()) : std::string();
        connection.command("UNWATCH");
        if (!error.empty()) throw ServerError(error);
        return found;
      }
      connection.append("MULTI");
      const std::size_t queued_before = connection.pending();
      queue_change();
      const std::size_t changes = connection.pending() - queued_before;
      connection.append("EXEC");
      connection.read_reply().throw_if_error();  // MULTI
      for (std::size_t i = 0; i < changes; ++i) connection.read_reply().throw_if_error();
      const Reply& exec = connection.read_reply().throw_if_error();
      if (exec.is_nil()) continue;  // the key changed after WATCH
      exec[0].throw_if_error();
      return TokenCheck::done;
    }
  }
};

}  // namespace detail

/// A lease lock that never runs a script; otherwise as BasicMutex.
template <class Backend = Client, class Policy = DefaultPolicy>
using BasicSimpleMutex = detail::LeaseMutex<detail::TransactionalLease, Backend, Policy>;

/// The script-free exclusive lock for ordinary use.
using SimpleMutex = BasicSimpleMutex<>;

}  // namespace distlock
