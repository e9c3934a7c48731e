// OpWakes: the two Wakes (detail/base/wake.hpp) an async acquire
// (detail/asio/acquire_op.hpp) waits on: one on its lock's release channel,
// for the server's confirmation of a subscription and for a release in its
// turn; one on the lock object's Cancellation, for cancel_waits() and a
// local unlock. A fire posts `op->woken_at(wait, on_release)` to the
// operation's strand, with the number of the wait it was armed for; the
// operation, gone by then, is not kept alive for it. A release and a local
// unlock each wake the waiter next in turn, with the baton it must use or
// pass on (detail/base/wake.hpp).
#pragma once

#include <asio/post.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/base/wake.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/runtime/notifier.hpp"

namespace distlock::detail {

template <class Op>
class OpWakes {
 public:
  /// Before any arming: whom a fire posts to, and where.
  void bind(const std::weak_ptr<Op>& op, const AsioLink::Strand& strand) {
    for (Armed* wake : {&release_, &cancel_}) {
      wake->op = op;
      wake->strand.emplace(strand);
    }
  }

  /// A release fires the release wake beside the waiter next in turn, not
  /// as that waiter (detail/base/wake.hpp): for a wait that may take
  /// another lock than the one whose channel it watches.
  void wait_beside() noexcept { release_.exclusive = false; }

  /// While `pending` awaits the server's confirmation: true once it is
  /// confirmed (or moved); else the release wake is armed for its next
  /// change, numbered `wait`.
  bool confirmed_or_armed(Notifier::Subscription& pending, unsigned wait) {
    if (pending.active() || pending.moved()) return true;
    arm_release(pending, wait);
    return pending.active() || pending.moved();
  }
  /// For a release in turn after generation `seen`; false (not armed) if
  /// one went unclaimed meanwhile.
  bool sleep_on(Notifier::Subscription& subscription, unsigned wait, std::uint64_t seen) {
    release_.wait = wait;
    armed_on_ = &subscription;
    return subscription.sleep_on(release_, seen);
  }
  /// For cancel_waits() and a local unlock in turn; false (not armed) if
  /// one came first.
  bool sleep_on(Cancellation& cancellation, unsigned wait, std::uint64_t seen) {
    cancel_.wait = wait;
    cancel_on_ = &cancellation;
    return cancellation.sleep_on(cancel_, seen);
  }

  /// The subscription the release wake was last armed on.
  Notifier::Subscription* release_on() const noexcept { return armed_on_; }
  /// Whether a wake fired with the baton, now used.
  bool take_baton(bool on_release) {
    if (on_release) return armed_on_ != nullptr && armed_on_->take_baton(release_);
    return cancel_on_ != nullptr && cancel_on_->take_baton(cancel_);
  }

  /// Lets both go (a baton not used goes on to the next waiter).
  void disarm() noexcept {
    try {
      if (armed_on_ != nullptr) std::exchange(armed_on_, nullptr)->disarm(release_);
      if (cancel_on_ != nullptr) std::exchange(cancel_on_, nullptr)->disarm(cancel_);
    } catch (...) {  // a mutex that would not lock: nothing sane is left to do
      std::terminate();
    }
  }

 private:
  // For the confirmation of `subscription`, or any change of its channel.
  void arm_release(Notifier::Subscription& subscription, unsigned wait) {
    release_.wait = wait;
    armed_on_ = &subscription;
    subscription.arm(release_);
  }

  struct Armed final : Wake {
    explicit Armed(bool on_release) : release(on_release) {}
    std::weak_ptr<Op> op;
    std::optional<AsioLink::Strand> strand;
    unsigned wait = 0;
    const bool release;
    void fire() noexcept override {
      try {
        asio::post(*strand, [target = op, at = wait, on_release = release] {
          if (std::shared_ptr<Op> self = target.lock()) self->woken_at(at, on_release);
        });
      } catch (...) {  // no memory for it: the wait's timer ends it
      }
    }
  };

  Armed release_{true};
  Armed cancel_{false};
  Notifier::Subscription* armed_on_ = nullptr;
  Cancellation* cancel_on_ = nullptr;
};

}  // namespace distlock::detail
