// distlock::MultiMutex: one lock on several names at once, held all
// together or not at all, and released together. For work that touches
// several records, as moving stock between two warehouses does: taking the
// two names' Mutexes one after the other invites deadlock (two movers in
// opposite directions) and leaves one name held when the other is refused.
//
// Each name is stored as a Mutex stores it, all under one token, so a
// Mutex on one of the names excludes the MultiMutex and is excluded by it,
// and `distlock status` reads each name as a Mutex. On a Client or a
// SentinelClient, and on a cluster for names that share a hash slot
// ("{order:7}:a", "{order:7}:b"), one script takes every name or none: a
// free lock costs one round trip. Names on several slots are taken slot by
// slot in a fixed order, and a slot refused gives back the ones taken
// before it, so a waiter never sits on some names while it waits for the
// rest (detail/lifecycle/multi_protocol.hpp). The lease, the watchdog, the
// lost-lease signal, deadlines, cancel_waits(), wake-on-release and events
// work as for Mutex; a lease that loses one name gives back the rest.
//
//   distlock::MultiMutex move{redis, {"stock:{w1}:42", "stock:{w2}:42"}};
//   if (std::unique_lock both{move, 2s}) { ... }   // both, or neither
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/backend.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/lifecycle/multi_protocol.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {

/// An exclusive lease lock on several names, all or none, on any Backend,
/// waiting by any AcquirePolicy. Meets Lockable and TimedLockable; see
/// detail::ExclusiveLock for each member's contract. key() names the lock
/// in messages and events: its keys, sorted, joined by '+'.
class MultiMutex : public detail::ExclusiveLock<detail::MultiProtocol> {
  using Base = detail::ExclusiveLock<detail::MultiProtocol>;

 public:
  /// The most names one MultiMutex takes.
  static constexpr std::size_t max_names = 1000;

  /// Validates names and options (InvalidArgument: no names, more than
  /// max_names, a bad name, fencing or replicas asked for); contacts no
  /// server. A name given twice counts once.
  DISTLOCK_DECL MultiMutex(const Backend& backend, const std::vector<std::string>& names,
                           LockOptions options = {}, AcquirePolicy policy = {});

  /// The token every name holds under the current lease; empty when not held.
  std::string token() const { return this->life_->id(Base::kind); }

  /// The keys, sorted, without repeats.
  std::vector<std::string> keys() const;
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(MultiProtocol)

/// The keys of `names`, each checked by lock_key(), after the checks only
/// a MultiMutex makes (see its constructor).
inline std::vector<std::string> multi_keys(const std::vector<std::string>& names,
                                           const LockOptions& options) {
  if (names.size() > MultiMutex::max_names) {
    throw InvalidArgument("a MultiMutex takes at most " + std::to_string(MultiMutex::max_names) +
                          " names, not " + std::to_string(names.size()));
  }
  // One fence counter cannot order the holders of several names, and a
  // grant confirmed by WAIT per slot is not one grant: neither is offered.
  if (options.fencing()) {
    throw InvalidArgument("a MultiMutex offers no fencing tokens: fence with a Mutex per name");
  }
  if (options.replicas() != 0) {
    throw InvalidArgument("a MultiMutex does not wait for replicas (LockOptions::replicas)");
  }
  std::vector<std::string> keys;
  keys.reserve(names.size());
  for (const std::string& name : names) keys.push_back(lock_key(options, name));
  return keys;
}
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL MultiMutex::MultiMutex(const Backend& backend, const std::vector<std::string>& names,
                                     LockOptions options, AcquirePolicy policy)
    : Base(detail::MultiProtocol(backend, detail::multi_keys(names, options), options), options,
           std::move(policy)) {}
#endif

inline std::vector<std::string> MultiMutex::keys() const {
  std::vector<std::string> out;
  for (const detail::NameGroup& group : this->life_->protocol().groups()) {
    for (std::size_t i = 0; i < group.size(); ++i) out.push_back(group.key(i));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace distlock
