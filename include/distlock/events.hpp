// Events: what a Client's locks do, told to one hook per Client
// (ClientOptions::on_event), for metrics and logs.
//
// The hook runs on the thread where the event happens: the caller's for
// acquired, released and unlock_failed; the Watchdog's for renewed,
// renewal_failed and lost; the Notifier's for notifier_reconnected; for
// master_switched, the thread whose step found the new master (a
// SentinelClient's watch thread, when a Sentinel announced it). No
// internal lock of distlock is held while it runs, so it may use the lock
// objects and the Client; it should return quickly (a renewal round or the
// release notifications wait for it). An exception it throws is dropped.
// With no hook set an event costs one branch and no allocation.
//
//   distlock::ClientOptions where = distlock::ClientOptions::from_uri(url);
//   where.on_event = [&](const distlock::LockEvent& e) { metrics.count(e); };
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string_view>

#include "distlock/lease.hpp"

namespace distlock {

/// What happened.
enum class LockEventType {
  acquired,        ///< a lock was taken in Redis (not a local re-entry): waited, attempts
  released,        ///< a hold was given back by release() or unlock(): held, outcome
  renewed,         ///< the Watchdog renewed a lease
  renewal_failed,  ///< a renewal got no answer; it is tried again until the lease runs out
  lost,            ///< a held lease was lost: reason (as on_lost is told)
  unlock_failed,  ///< unlock() (or a destructor) could not release and let the lease run out: error
  notifier_reconnected,  ///< the release notifier connected again after losing its connection
  /// the backend now talks to another master: a SentinelClient followed a
  /// failover, or a Client found another server process at its address
  /// (key: the new master's endpoint). Once per switch; the leases held
  /// through it are being revalidated there (each kept, or lost).
  master_switched,
};

inline const char* to_string(LockEventType type) noexcept {
  switch (type) {
    case LockEventType::acquired: return "acquired";
    case LockEventType::released: return "released";
    case LockEventType::renewed: return "renewed";
    case LockEventType::renewal_failed: return "renewal_failed";
    case LockEventType::lost: return "lost";
    case LockEventType::unlock_failed: return "unlock_failed";
    case LockEventType::notifier_reconnected: return "notifier_reconnected";
    case LockEventType::master_switched: return "master_switched";
  }
  return "unknown";
}

/// One event. The views are valid only during the hook's call.
struct LockEvent {
  /// What happened; it says which of the fields below are set.
  LockEventType type = LockEventType::acquired;
  std::string_view key;  ///< the lock's Redis key; the endpoint for notifier_reconnected
                         ///< and master_switched
  /// acquired: from the first attempt of the call to the grant.
  std::chrono::nanoseconds waited{0};
  /// acquired: attempts sent to Redis by the call (1 when uncontended).
  unsigned attempts = 0;
  /// released: from the grant to the release.
  std::chrono::nanoseconds held{0};
  /// released: what the release found.
  Release outcome = Release::released;
  /// lost: why.
  LostReason reason = LostReason::taken;
  /// unlock_failed: the error that unlock() swallowed.
  std::string_view error;
};

/// A Client's event hook.
using EventHook = std::function<void(const LockEvent&)>;

namespace detail {

/// A Client's hook as its locks, its Watchdog and its Notifier share it;
/// null when none is set.
using SharedEventHook = std::shared_ptr<const EventHook>;

/// Calls the hook, if any, dropping what it throws.
inline void emit(const SharedEventHook& hook, const LockEvent& event) noexcept {
  if (!hook) return;
  try {
    (*hook)(event);
  } catch (...) {
    // A metrics hook must not break a lock.
  }
}

/// An event that carries only its type and key (and, for lost, why).
inline void emit_about(const SharedEventHook& hook, LockEventType type, std::string_view key,
                       LostReason reason = LostReason::taken) noexcept {
  if (!hook) return;
  LockEvent event;
  event.type = type;
  event.key = key;
  event.reason = reason;
  emit(hook, event);
}

/// The lock side's events, built only when a hook is set.
inline void emit_acquired(const SharedEventHook& hook, std::string_view key,
                          std::chrono::nanoseconds waited, unsigned attempts) noexcept {
  LockEvent event;
  event.type = LockEventType::acquired;
  event.key = key;
  event.waited = waited;
  event.attempts = attempts;
  emit(hook, event);
}
inline void emit_released(const SharedEventHook& hook, std::string_view key,
                          std::chrono::nanoseconds held, Release outcome) noexcept {
  LockEvent event;
  event.type = LockEventType::released;
  event.key = key;
  event.held = held;
  event.outcome = outcome;
  emit(hook, event);
}
inline void emit_unlock_failed(const SharedEventHook& hook, std::string_view key,
                               std::string_view error) noexcept {
  LockEvent event;
  event.type = LockEventType::unlock_failed;
  event.key = key;
  event.error = error;
  emit(hook, event);
}

/// Runs `give_back`, a release whose failure nobody could be told of
/// otherwise (unlock(), a destructor): what it throws goes to the hook as
/// unlock_failed, and the lease runs out by itself.
template <class GiveBack>
void reporting_unlock_failure(const SharedEventHook& hook, std::string_view key,
                              GiveBack&& give_back) noexcept {
  try {
    give_back();
  } catch (const std::exception& error) {
    emit_unlock_failed(hook, key, error.what());
  } catch (...) {
    emit_unlock_failed(hook, key, "unknown error");
  }
}

}  // namespace detail
}  // namespace distlock
