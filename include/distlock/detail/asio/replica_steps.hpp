// ReplicaSteps: what an async attempt (AcquireOp) of a lock with
// LockOptions::replicas adds to its step, as ReplicaCheck adds it to the
// blocking one (detail/lifecycle/replica_check.hpp). The count to wait
// for is asked the first time in one write (INFO replication and WAIT 0 1:
// an ACL's refusal, or fewer replicas connected than asked for, fails the
// call before anything is granted); then WAIT goes behind each attempt in
// the same write, and its answer decides a grant: too few acknowledged
// makes it not_replicated, for the operation to give back.
//
// WAIT blocks its connection until the replicas answer or its timeout
// passes, so these locks' steps go on a link of their own
// (LinkService::link_for's replicas lane): no other lock's steps queue
// behind a WAIT. Everything here runs on that link's strand.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/replica_check.hpp"
#include "distlock/detail/wire/link.hpp"

namespace distlock::detail {

/// The replica steps of an `Op` (AcquireOp, of which it is a friend): the
/// Op has `ReplicaSteps<Op> replicas_`, the phases `attempt` and
/// `replicated` (a grant answered, its WAIT's answer awaited), and
/// `write_attempt(link)`.
template <class Op>
class ReplicaSteps {
 public:
  /// `check` is the lock's (SingleServer::replica_check()), null without
  /// replicas; it outlives the steps.
  explicit ReplicaSteps(ReplicaCheck* check) noexcept : check_(check) {}

  /// Whether the lock waits for replicas at all.
  bool wanted() const noexcept { return check_ != nullptr; }

  /// In the attempt's write on `link`: `op->write_attempt(link)`, at once
  /// when the count is known (or none is wanted); else once the answers to
  /// INFO replication and WAIT 0 1, written now, have told it, if the step
  /// is still under way.
  void before_attempt(const std::shared_ptr<Op>& op, Link& link) {
    if (check_ == nullptr || (needed_ = check_->known()) > 0) return op->write_attempt(link);
    auto info = std::make_shared<ReplicaCheck::Connected>();
    link.send({"INFO", "replication"}, [info](LinkAnswer answer) {
      if (answer.reply) *info = ReplicaCheck::connected(*answer.reply);
    });
    auto counted = [op, info, at = op->steps_.current()](LinkAnswer answer) {
      if (op->steps_.finished() || op->steps_.current() != at) return;
      op->steps_.clear_in_flight();
      ReplicaSteps& self = op->replicas_;
      try {
        if (answer.failure) std::rethrow_exception(answer.failure);
        self.needed_ = self.check_->needed_from(*info, *answer.reply, op->life_->protocol().key());
      } catch (...) {
        return op->fail(std::current_exception());
      }
      op->write_attempt(*op->link().current());
    };
    op->steps_.sent(link, link.send({"WAIT", "0", "1"}, std::move(counted)));
  }

  /// Writes WAIT behind the attempt just written on `link`, for the
  /// replica timeout cut to the step's deadline; the link waits for its
  /// answer as long as WAIT may take.
  void write_wait(Op& op, Link& link) {
    time_ = check_->wait_time(op.waiter_.step_deadline,
                              op.life_->protocol().site()->options().command_timeout);
    ahead_ = false;
    wait_at_ = op.steps_.current();
    const Decimal replicas(needed_);
    const Decimal milliseconds(time_.waited.count());
    wait_ = link.send(
        {"WAIT", replicas, milliseconds},
        [self = op.shared_from_this(), at = wait_at_](LinkAnswer answer) {
          self->replicas_.answered(*self, at, std::move(answer));
        },
        time_.answer);
  }

  /// In the attempt's sink, a grant: it stands once WAIT says enough
  /// replicas have it. A WAIT answered ahead of it (the attempt, answered
  /// NOSCRIPT, went again by EVAL behind it) is written again.
  void await(Op& op, Attempt grant, SteadyClock::time_point by) {
    op.begin(Op::Phase::replicated, by);
    granted_.emplace(std::move(grant));
    Link& on = *op.link().current();
    if (ahead_) return write_wait(op, on);
    op.steps_.sent(on, wait_);
  }

  /// The grant awaited, whose WAIT the caller's deadline cut before it
  /// answered: too few replicas in time, as when WAIT answers short at the
  /// deadline; marked undone, for the caller to undo.
  Attempt cut() {
    Attempt grant = std::move(*granted_);
    grant.replicas = 0;
    grant.replicas_wanted = needed_;
    not_replicated(grant, /*deadline_cut=*/true);
    return grant;
  }

 private:
  // WAIT's answer, written at step `at`: ahead of its attempt's, or the
  // one the grant awaits, which settles it (a grant not kept is undone,
  // apart too where the link broke).
  void answered(Op& op, unsigned at, LinkAnswer answer) {
    if (op.steps_.finished()) return;
    if (op.phase_ == Op::Phase::attempt && op.steps_.current() == at) {
      ahead_ = true;
      return;
    }
    if (op.phase_ != Op::Phase::replicated || wait_at_ != at) return;
    op.steps_.clear_in_flight();
    const SteadyClock::time_point by = op.waiter_.step_deadline;
    op.end();
    const bool broke = answer.failure != nullptr;
    try {
      Attempt settled = settle(answer, by);
      if (settled.not_replicated) op.undo(broke);
      op.run(op.life_->attempted(op.waiter_, std::move(settled)));
    } catch (...) {
      op.undo(broke);
      op.fail(std::current_exception());
    }
  }

  // The grant awaited, as WAIT's answer leaves it: with the replicas that
  // acknowledged it, or, when too few did (or the link's timeout at the
  // step's deadline `by` cut WAIT), not_replicated, with the count to be
  // asked again for the next attempt. Throws for a refused WAIT or a
  // broken link.
  Attempt settle(const LinkAnswer& answer, SteadyClock::time_point by) {
    if (answer.failure) {
      if (code_of(answer.failure) != Errc::timed_out || !deadline_reached(by)) {
        std::rethrow_exception(answer.failure);
      }
      return cut();
    }
    Attempt grant = std::move(*granted_);
    const int acknowledged = ReplicaCheck::acknowledged_by(*answer.reply);
    grant.replicas = acknowledged;
    grant.replicas_wanted = needed_;
    if (acknowledged < needed_) {
      not_replicated(grant, time_.cut);
      check_->reread();  // a replica may have gone
    }
    return grant;
  }

  // Never held: the Lifecycle gives it no release (the caller undoes it).
  static void not_replicated(Attempt& grant, bool deadline_cut) noexcept {
    grant.acquired = false;
    grant.not_replicated = true;
    grant.deadline_cut = deadline_cut;
    grant.undone = true;
  }

  ReplicaCheck* const check_;
  int needed_ = 0;  // for the attempt under way
  ReplicaCheck::WaitTime time_{};
  Link::Ticket wait_ = 0;           // the latest WAIT's
  unsigned wait_at_ = 0;            // the step it was written at
  bool ahead_ = false;              // it answered before its attempt
  std::optional<Attempt> granted_;  // answered, its WAIT's answer awaited
};

}  // namespace distlock::detail
