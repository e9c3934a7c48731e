// Wake and WakeList: how something that is not a thread waits for an event
// a condition variable announces (a release message, cancel_waits(), a
// local unlock). A waiter on an event loop arms a Wake on the event's
// WakeList; whoever signals the condition variable fires the list too,
// under the same mutex. A fire only posts work to the waiter's loop, so it
// is quick, takes no lock of ours, and may run on any thread.
//
// A Wake fires once per arming: the list lets go of it as it fires, and
// the waiter arms it again if it goes on waiting. Disarming one that
// already fired, or was never armed, is a no-op. The list is intrusive, so
// arming costs no allocation and disarming is constant time, as 10,000
// waiters on one name need.
//
// A release frees one place, so it need not wake 10,000 waiters to race for
// it: fire_next() fires them in the order they armed, up to and including
// the first exclusive one (a shared waiter can go in beside others), and
// that one holds the baton: it attempts, or, should it not (its wait ended
// otherwise, it re-arms, it is disarmed or destroyed first), the baton goes
// on to the next. An attempt that loses the race keeps no baton: the
// winner's release wakes the next. A release that finds nobody armed to
// take it (its waiters were between attempt and sleep) is kept as missed,
// and the first of them to go to sleep claims it and attempts instead.
#pragma once

#include <cstddef>
#include <utility>

namespace distlock::detail {

class Wake {
 public:
  Wake() = default;
  Wake(const Wake&) = delete;
  Wake& operator=(const Wake&) = delete;

  /// Called under the lock that guards its list: post, and return.
  virtual void fire() noexcept = 0;

  /// Whether it waits for a place of its own (set before arming).
  bool exclusive = true;

 protected:
  ~Wake() = default;

 private:
  friend class WakeList;
  Wake* prev_ = nullptr;
  Wake* next_ = nullptr;
  bool armed_ = false;
  bool baton_ = false;  // fired by fire_next(), not yet used
};

/// Guarded by its owner's mutex, like the condition variable beside it.
class WakeList {
 public:
  WakeList() = default;
  WakeList(const WakeList&) = delete;
  WakeList& operator=(const WakeList&) = delete;

  /// Appends `wake`; a baton it held goes on first (arming again is not
  /// using it).
  void arm(Wake& wake) noexcept {
    pass(wake);
    if (wake.armed_) return;
    wake.armed_ = true;
    wake.prev_ = tail_;
    wake.next_ = nullptr;
    (tail_ != nullptr ? tail_->next_ : head_) = &wake;
    tail_ = &wake;
  }

  /// Removes `wake`; a baton it held goes on.
  void disarm(Wake& wake) noexcept {
    if (wake.armed_) unlink(wake);
    pass(wake);
  }

  /// Whether `wake` was fired with the baton, which it uses now.
  bool take_baton(Wake& wake) noexcept { return std::exchange(wake.baton_, false); }

  /// Fires and lets go of every armed Wake.
  void fire_all() noexcept {
    while (head_ != nullptr) fire(*head_);
  }

  /// Fires the oldest Wakes up to and including the first exclusive one,
  /// which gets the baton; with none armed, the release is missed.
  void fire_next() noexcept {
    while (head_ != nullptr) {
      Wake& wake = *head_;
      wake.baton_ = wake.exclusive;
      fire(wake);
      if (wake.exclusive) return;
    }
    missed_ = true;
  }

  /// Whether a release went by with nobody armed to take it; the caller,
  /// about to sleep, attempts instead.
  bool claim_missed() noexcept { return std::exchange(missed_, false); }

  bool empty() const noexcept { return head_ == nullptr; }
  /// How many are armed: walks the list (for tests).
  std::size_t size() const noexcept {
    std::size_t count = 0;
    for (const Wake* wake = head_; wake != nullptr; wake = wake->next_) ++count;
    return count;
  }

 private:
  void unlink(Wake& wake) noexcept {
    (wake.prev_ != nullptr ? wake.prev_->next_ : head_) = wake.next_;
    (wake.next_ != nullptr ? wake.next_->prev_ : tail_) = wake.prev_;
    wake.prev_ = wake.next_ = nullptr;
    wake.armed_ = false;
  }
  void fire(Wake& wake) noexcept {
    unlink(wake);
    wake.fire();
  }
  void pass(Wake& wake) noexcept {
    if (std::exchange(wake.baton_, false)) fire_next();
  }

  Wake* head_ = nullptr;
  Wake* tail_ = nullptr;
  bool missed_ = false;
};

}  // namespace distlock::detail
