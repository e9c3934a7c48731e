// The Watchdog's schedule (detail/runtime/watchdog.hpp): when each lease falls due for
// renewal, when the thread has to wake, which leases a round takes, and when
// a lease falls due again once its renewal has answered.
//
// Only time and bookkeeping: nothing here sends, waits or tells a holder
// anything, so the Watchdog's thread, locking and lost-lease reporting read
// on their own. Every function here runs under the Watchdog's mutex.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "distlock/detail/base/lease_state.hpp"

namespace distlock::detail {

/// One lease the Watchdog keeps (Watchdog::Entry).
struct RenewalEntry {
  std::shared_ptr<LeaseState> lease;
  std::chrono::steady_clock::time_point next_renewal;
  std::chrono::steady_clock::time_point hold_until;
  bool in_flight = false;  // part of the round being sent
  bool fixed = false;      // fixed ttl: re-read on revalidate() only, never lengthened
  unsigned held_off = 0;   // extends of it under way (threads may share a lock)
};

/// The Watchdog's leases, by the address of their lease record.
using RenewalEntries = std::unordered_map<const LeaseState*, RenewalEntry>;

/// A lease set to `ttl` at `sent` falls due a third of the way in, which
/// leaves two thirds of it for retries should that renewal go unanswered.
inline std::chrono::steady_clock::time_point renewal_after(
    std::chrono::steady_clock::time_point sent, std::chrono::milliseconds ttl) {
  return sent + ttl / 3;
}

/// The entry of a lease just acquired, until `hold_until`; one of fixed ttl
/// (not `renew`) is off the schedule, kept only for revalidation. Its lease
/// record is the caller's to move in.
inline RenewalEntry first_entry(const LeaseState& lease,
                                std::chrono::steady_clock::time_point hold_until, bool renew) {
  RenewalEntry entry;
  entry.next_renewal = renew ? renewal_after(lease.acquired, lease.ttl)
                             : std::chrono::steady_clock::time_point::max();
  entry.hold_until = hold_until;
  entry.fixed = !renew;
  return entry;
}

/// Readies a fixed-ttl lease for revalidation: "renewed" to the time it
/// has left, so the server keeps the key no longer than its holder counts
/// on (a little longer: the round trip), and renewal scripts lengthen
/// only. False, and off the schedule, once it has run out.
inline bool revalidating(RenewalEntry& entry, std::chrono::steady_clock::time_point now) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(entry.lease->expires() - now);
  if (left <= std::chrono::milliseconds(0)) {
    entry.next_renewal = std::chrono::steady_clock::time_point::max();
    return false;
  }
  entry.lease->ttl = left;
  entry.lease->ttl_text = std::to_string(left.count());
  return true;
}

/// When the thread wakes next: the first renewal or expiry to fall due,
/// and no later than `latest`. A lease being extended counts for neither
/// (its holder's extend reschedules it).
inline std::chrono::steady_clock::time_point next_wake(
    const RenewalEntries& entries, std::chrono::steady_clock::time_point latest) {
  std::chrono::steady_clock::time_point wake = latest;
  for (const auto& [key, entry] : entries) {
    if (entry.held_off) continue;
    wake = std::min(wake, entry.next_renewal);
    if (!entry.fixed) wake = std::min(wake, entry.lease->expires());
  }
  return wake;
}

/// The leases a round at `now` renews (every one when `all`), marked in
/// flight, into `work`. A lease past its renewal cap is only taken off the
/// schedule: its expiry is all that is left of it.
inline void take_due(RenewalEntries& entries, std::chrono::steady_clock::time_point now, bool all,
                     std::vector<RenewalEntry*>& work) {
  work.clear();
  for (auto& [key, entry] : entries) {
    if (entry.held_off || entry.lease->lost) continue;
    if (entry.hold_until <= now) {
      entry.next_renewal = std::chrono::steady_clock::time_point::max();
      continue;
    }
    if (!all && entry.next_renewal > now) continue;
    if (entry.fixed && !revalidating(entry, now)) continue;
    entry.in_flight = true;
    work.push_back(&entry);
  }
}

/// Schedules `entry` again after its renewal, sent at `sent`, answered by
/// `after`: confirmed (`renewed`), its validity counts from `sent`; not
/// confirmed, it is tried again soon. A lease found gone is the caller's.
inline void reschedule(RenewalEntry& entry, bool renewed,
                       std::chrono::steady_clock::time_point sent,
                       std::chrono::steady_clock::time_point after) {
  LeaseState& lease = *entry.lease;
  if (!renewed) {
    // Unconfirmed: try again after a tenth of the lease (at most 100 ms),
    // well before it runs out. Counted from the try's sending, not its end:
    // a try that waited out a timeout as long as the interval (a Redlock's
    // node timeout is a tenth of its lease by default) is followed at once,
    // so rounds stay one timeout apart, not two, and a short spell of
    // replies between slow ones still holds a whole round. A try that
    // failed at once still waits the interval: a server that refuses at
    // once is not asked in a busy loop.
    const auto retry = std::min<std::chrono::steady_clock::duration>(
        lease.ttl / 10, std::chrono::milliseconds(100));
    entry.next_renewal = std::max(after, sent + retry);
  } else if (entry.fixed) {
    // Revalidated: its expiry stands.
    entry.next_renewal = std::chrono::steady_clock::time_point::max();
  } else {
    lease.set_expires(lease.expiry_after(sent));
    entry.next_renewal = renewal_after(sent, lease.ttl);
  }
}

/// Its holder set the lease to `ttl` at `sent` (an extend): its validity,
/// and the next renewal of one not of fixed ttl, count from there.
inline void extended(RenewalEntry& entry, std::chrono::milliseconds ttl,
                     std::chrono::steady_clock::time_point sent) {
  LeaseState& record = *entry.lease;
  record.ttl = ttl;
  record.ttl_text = std::to_string(ttl.count());
  record.set_expires(record.expiry_after(sent));
  if (!entry.fixed) entry.next_renewal = renewal_after(sent, ttl);
}

}  // namespace distlock::detail
