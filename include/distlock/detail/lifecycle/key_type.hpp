// Key types: what a lock's key must hold, and the checks that make a key
// of another type a WrongTypeError, and a key that never expires (no lock's:
// see lock_layout.hpp) a NotALockError, at the first attempt instead of a
// wait that never ends or a try_lock() that is refused for ever. Every check
// runs only on the path of a refused or failed attempt, never on an attempt
// that succeeds:
// - a lease lock (SET NX, which any existing key refuses) reads the key's
//   TYPE in the same round trip as the holder's PTTL that the waiter reads
//   anyway (read_holder_of_type; a refused try_lock() reads them too), or its
//   fenced script answers the type with the PTTL;
// - a hash lock's scripts fail with WRONGTYPE on a key of another type;
//   naming_wrong_type() turns that reply into the error naming the key and
//   the type found. A refusal answers the holder's PTTL: -1 is a hash that
//   never expires.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/holder_lease.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_layout.hpp"

namespace distlock::detail {

/// Whether a server error is a command meeting a key of another type. Redis
/// 7 passes a script's WRONGTYPE on as it is; earlier versions wrap it in
/// "ERR Error running script ...".
inline bool is_wrong_type(const ServerError& error) noexcept {
  return error.kind() == ServerErrorKind::wrongtype ||
         std::string_view(error.what()).find("WRONGTYPE") != std::string_view::npos;
}

/// Throws WrongTypeError unless `found` (TYPE's answer) is `expected` or
/// "none" (the key is gone: nothing is in the way).
inline void check_key_type(std::string_view key, std::string_view found,
                           std::string_view expected) {
  if (found == expected || found == "none") return;
  throw WrongTypeError(std::string(key), std::string(found), std::string(expected));
}

/// Throws NotALockError if the key a refused attempt met, of the type
/// `found`, never expires (PTTL -1): every lock's layout sets the key and
/// its expiry in one step, so this one is no lock's (application data, or
/// a peer's bug), and a wait for it would never end.
inline void check_expires(std::string_view key, std::string_view found, HolderLease holder) {
  if (!holder.is_endless()) return;
  throw NotALockError(std::string(key), std::string(found), not_a_lock(found, "expiry"),
                      "no lock can be taken there");
}

/// The holder's PTTL and the key's type, in one round trip, by the
/// deadline rules of read_holder(); throws WrongTypeError if the key holds
/// something other than `expected`, NotALockError if it never expires.
/// nullopt when the caller's deadline cut the read short.
/// The holder's lease from the replies to PTTL and TYPE of `key`, checked
/// as read_holder_of_type() checks them.
inline HolderLease holder_of_type(const std::string& key, const Reply& pttl, const Reply& type,
                                  std::string_view expected) {
  const HolderLease holder = HolderLease::from_pttl(pttl.throw_if_error().integer());
  const std::string_view found = type.throw_if_error().str();
  check_key_type(key, found, expected);
  if (found == expected) check_expires(key, found, holder);
  return holder;
}

inline std::optional<HolderLease> read_holder_of_type(Site& site, const std::string& key,
                                                      std::string_view expected,
                                                      SteadyClock::time_point deadline) {
  // Through the site: on a cluster, a slot that moved since the
  // attempt answers MOVED here, which is followed, not thrown.
  // After an ASK, the ASKING sent before PTTL lets only PTTL in: TYPE
  // needs its own, or the importing node sends it back with MOVED.
  return on_site_by(site, deadline, [&](Connection& connection) {
    const bool asking = connection.asking();
    connection.append("PTTL", key);
    if (asking) connection.append("ASKING");
    connection.append("TYPE", key);
    connection.read_reply();
    const Reply pttl = connection.take_last();
    if (asking) connection.read_reply().throw_if_error();
    return holder_of_type(key, pttl, connection.read_reply(), expected);
  });
}

/// send(), with a WRONGTYPE reply about `key` thrown as WrongTypeError
/// naming the type found there (one TYPE, on that failure only).
template <class Send>
auto naming_wrong_type(Connection& connection, const std::string& key, std::string_view expected,
                       Send&& send) {
  try {
    return send();
  } catch (const WrongTypeError&) {
    throw;
  } catch (const ServerError& error) {
    if (!is_wrong_type(error)) throw;
    const Reply type = connection.command("TYPE", key);
    check_key_type(key, type.str(), expected);
    throw;  // the lock's key is fine: another key of the step was in the way
  }
}

}  // namespace distlock::detail
