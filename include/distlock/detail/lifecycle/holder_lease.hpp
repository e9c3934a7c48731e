// What a waiter knows of the lock's holder, which bounds how long it may
// sleep before trying again: the time the holder's lease has left (the
// lock is free then), that no end can be seen (a key with no expiry, a
// holder of this same object, a Redlock's holders spread over masters),
// that the lock was released since the attempt, or nothing yet (a refusal
// that gave no reason, as SET NX's). Redis says it with PTTL's numbers
// (-1 no expiry, -2 no key); this type says it with names.
#pragma once

#include <chrono>

namespace distlock::detail {

class HolderLease {
 public:
  /// Nothing known yet: the waiter reads the holder's PTTL before it sleeps.
  HolderLease() = default;

  /// From a PTTL reply (a script's, or the command's).
  static HolderLease from_pttl(long long pttl) {
    if (pttl == -2) return HolderLease(State::released);
    if (pttl < 0) return endless();
    HolderLease lease(State::expiring);
    lease.left_ = std::chrono::milliseconds(pttl);
    return lease;
  }

  /// Held with no end a waiter can see: it waits at its policy's pace.
  static HolderLease endless() { return HolderLease(State::endless); }

  bool known() const { return state_ != State::unknown; }
  bool released() const { return state_ == State::released; }
  bool is_endless() const { return state_ == State::endless; }
  /// With an expiring lease: the time it has left, else nullptr.
  const std::chrono::milliseconds* left() const {
    return state_ == State::expiring ? &left_ : nullptr;
  }

 private:
  enum class State { unknown, released, endless, expiring };
  explicit HolderLease(State state) : state_(state) {}

  State state_ = State::unknown;
  std::chrono::milliseconds left_{0};
};

}  // namespace distlock::detail
