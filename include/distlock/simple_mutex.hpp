// distlock::SimpleMutex: Mutex's lease, with no scripting at all.
//
// For servers where EVAL and EVALSHA are forbidden (ACL -@scripting, managed
// services). Acquire is the same SET <key> <token> NX PX <ttl>. Release and
// extend are optimistic transactions: WATCH the key, GET it and open a MULTI
// (one round trip); if it still holds our token, DEL or PEXPIRE and EXEC (a
// second round trip), else an empty EXEC. EXEC fails if the key changed
// after WATCH, so the token check and the change are still one atomic step;
// we then look again. A user whose ACL rules refuse MULTI gets no such
// step: the change goes on its own only while the key holds our token with
// more than two command timeouts of lease left (nobody else can set it
// before then), and is refused otherwise.
//
// With fencing, acquire is MULTI / SET NX PX / INCR fence / EXEC: the counter
// also rises on refused attempts, so fences have gaps but still rise strictly
// from one holder to the next.
//
// What scripts do that this cannot:
// - Under maxmemory with noeviction, Redis (7.0, 7.2) refuses every command
//   queued in a MULTI, DEL included, so release() and extend() fail with
//   ServerError (OOM), renewals wait for memory, and the lease runs out by
//   itself. Mutex releases under OOM. (Valkey 8 refuses only the commands
//   that need memory, so there all three go through as they would anyway.)
// - The undo of an acquire whose reply timed out cannot be queued blindly
//   behind it (a token-checked delete needs a script or a read first), so
//   it reads before it writes, on a connection of its own made by a
//   background thread once the call has returned: it removes our key only
//   if the SET had landed by then; a SET still queued in a stalled server
//   stays until its lease ends.
// - A round of renewals costs two round trips (WATCH and read; then one
//   MULTI/EXEC for every lease still ours) instead of one script call.
#pragma once

#include "distlock/acquire_policy.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/lease_mutex.hpp"
#include "distlock/detail/lifecycle/transactional_lease.hpp"

namespace distlock {

/// A lease lock that never runs a script; otherwise as Mutex.
class SimpleMutex : public detail::LeaseMutex<detail::TransactionalLease> {
 public:
  using LeaseMutex::LeaseMutex;
};

namespace detail {
DISTLOCK_LOCK_TEMPLATE(class LeaseProtocol<TransactionalLease>)
DISTLOCK_EXCLUSIVE_LOCK_OF(LeaseProtocol<TransactionalLease>)
DISTLOCK_LOCK_TEMPLATE(class LeaseMutex<TransactionalLease>)
}  // namespace detail

}  // namespace distlock
