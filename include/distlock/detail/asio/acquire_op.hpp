// AcquireOp: an async acquire (distlock/asio.hpp) as an operation that
// runs the lock's acquire steps (detail/lifecycle/acquire_steps.hpp) over an
// AsioLink. A server step a Next names is written on the link, and its
// answer, decoded by the protocol, goes to the next step; a subscription
// is confirmed, and a sleep ends, by a Wake armed on the release channel
// and on the lock object's Cancellation (detail/asio/op_wakes.hpp), or by the
// operation's timer, which also cuts a server step at its deadline. No
// thread waits: everything here runs on the link's strand, one at a time.
//
// Each step, and each wait of one, has a number (detail/asio/op_steps.hpp):
// a timer or wake that comes for an earlier one finds the operation moved
// on and does nothing.
//
// An attempt whose answer does not come (the link broke, its command
// timeout or the step's deadline passed, the operation was cancelled) may
// still have been applied: its undo is written behind it on the same
// connection, and, where the server closed the connection mid-reply (so
// nothing written behind arrives), given back apart by the connector
// thread, as the blocking path does. With LockOptions::replicas, a grant
// stands once the WAIT written behind it says so (replica_steps.hpp).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/asio/op_steps.hpp"
#include "distlock/detail/asio/op_wakes.hpp"
#include "distlock/detail/asio/replica_steps.hpp"
#include "distlock/detail/asio/undo_apart.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

template <class Lock, Side side, class Handler>
class AcquireOp : public std::enable_shared_from_this<AcquireOp<Lock, side, Handler>> {
  using Life = LifeOf<Lock>;
  using Protocol = typename LifeTraits<Life>::Protocol;
  using Waiter = typename Life::Waiter;
  using Next = typename Life::Next;
  using Step = typename Life::Step;
  using clock = SteadyClock;
  using Hold = AsyncHold<Lock, side>;
  static constexpr auto kind = LifeTraits<Life>::template kind<side>();
  static constexpr bool undoes_behind = UndoesBehind<Protocol>::value;
  static_assert(HasLinkSteps<Protocol>::value,
                "async locks take a Mutex, a SimpleMutex, a ReentrantMutex, a SharedMutex, a "
                "Redlock or a Semaphore (not yet a FairMutex or a MultiMutex)");

 public:
  /// `wait` false: one attempt (async_try_lock), `deadline` ignored.
  AcquireOp(std::shared_ptr<Life> life, Handler handler, clock::time_point deadline, bool wait)
      : life_(std::move(life)),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)),
        waiter_(kind, wait ? deadline : clock::now(), wait, life_->cancellation().generation()),
        replicas_(life_->protocol().replica_check()) {}

  ~AcquireOp() { wakes_.disarm(); }

  AcquireOp(const AcquireOp&) = delete;
  AcquireOp& operator=(const AcquireOp&) = delete;

  // In the initiating call: nothing completes inside it.
  void start() {
    try {
      Protocol& protocol = life_->protocol();
      protocol.check_process();
      const std::shared_ptr<Site>& site = protocol.site();
      if (!site->links()) {
        throw InvalidArgument(protocol.key() +
                              ": async locks run on a Client, a SentinelClient or a "
                              "ClusterClient (this lock is on " +
                              site->describe() + ")");
      }
      waiter_.async = true;
      const Next first = life_->start(waiter_);
      id_ = waiter_.id;
      // The link counts as work only while a step is in flight (its waits).
      steps_.bind(asio::use_service<LinkService>(asio::query(work_, asio::execution::context))
                      .link_for(*site,
                                asio::prefer(work_, asio::execution::outstanding_work.untracked),
                                replicas_.wanted() ? Lane::replicas : Lane::plain));
      wakes_.bind(this->weak_from_this(), link().strand());
      steps_.watch(asio::get_associated_cancellation_slot(handler_), this->weak_from_this());
      // An attempt with no deadline arms nothing that could fire on
      // another thread before it is written (the hot path of try_lock and
      // lock); any other first step starts on the strand.
      if (first.step == Step::attempt && first.by == no_deadline) return run(first);
      asio::post(link().strand(), [self = this->shared_from_this(), first] { self->run(first); });
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  // `replicated`: a grant answered, its WAIT's answer awaited.
  enum class Phase { none, attempt, replicated, holder, subscribing, sleeping };

  // Each of these runs on the link's strand, but start()'s first run().
  void run(const Next& next) {
    switch (next.step) {
      case Step::done: return finish(next.outcome);
      case Step::attempt: return send_attempt(next.by);
      case Step::read_holder: return send_holder_read(next.by);
      case Step::subscribe: return subscribe(next.by);
      case Step::sleep: return sleep(next.by);
    }
  }

  AsioLink& link() const noexcept { return *steps_.link(); }

  // A new step (or wait), its timer set for `by`.
  void begin(Phase phase, clock::time_point by) {
    phase_ = phase;
    steps_.begin(this->shared_from_this(), by);
  }
  // The step ended: its timer and wakes are let go.
  void end() noexcept {
    steps_.end();
    phase_ = Phase::none;
    wakes_.disarm();
  }

  // Has `send(self, link)` run on the link to where the key lives (or an
  // ASK named), unless the step is over by then; no link to be had ends
  // the operation.
  template <class Send>
  void on_link(Send send) {
    auto self = this->shared_from_this();
    steps_.submit(
        life_->protocol().site(),
        [self, send, at = steps_.current()](Link& on) {
          if (!self->steps_.finished() && self->steps_.current() == at) send(self, on);
        },
        [self](std::exception_ptr failure) {
          if (!self->steps_.finished()) self->fail(failure);
        });
  }

  // Whether a step refused by `reply` goes again by `send`, its phase kept
  // meanwhile (OpSteps::send_again).
  bool again(std::string_view reply, Phase phase, clock::time_point by,
             void (AcquireOp::*send)(clock::time_point)) {
    return steps_.send_again(
        *life_->protocol().site(), reply, this->shared_from_this(), [&] { begin(phase, by); },
        [send, by](AcquireOp& self) { (self.*send)(by); });
  }

  // The attempt; with replicas, the count to wait for first, if not known.
  void send_attempt(clock::time_point by) {
    begin(Phase::attempt, by);
    on_link([](const std::shared_ptr<AcquireOp>& self, Link& link) {
      self->replicas_.before_attempt(self, link);
    });
  }

  // With replicas, WAIT goes behind it in the same write. The attempt is
  // what is in flight until it is answered (forgotten, an EVALSHA answered
  // NOSCRIPT is not sent again behind its undo), then its WAIT.
  void write_attempt(Link& link) {
    auto answered = [self = this->shared_from_this(), at = steps_.current(),
                     unanswered = unanswered_guard(life_, kind, id_)](LinkAnswer answer) {
      if constexpr (!undoes_behind) unanswered->answered = true;
      if (self->steps_.current() == at) return self->attempt_answered(std::move(answer));
      if constexpr (!undoes_behind) self->answered_late(answer);
    };
    steps_.sent(link, life_->protocol().send_attempt(kind, link, id_, std::move(answered)));
    if (replicas_.wanted()) replicas_.write_wait(*this, link);
  }

  void attempt_answered(LinkAnswer answer) {
    steps_.clear_in_flight();
    const clock::time_point by = waiter_.step_deadline;
    end();
    if (steps_.finished()) return;
    Protocol& protocol = life_->protocol();
    if (answer.failure) {
      const std::error_code code = code_of(answer.failure);
      undo(code == Errc::io_error);
      // A link timeout at the step's deadline is the deadline's cut.
      if (code == Errc::timed_out && deadline_reached(by)) {
        return run(life_->attempted(waiter_, std::nullopt));
      }
      return fail(answer.failure);
    }
    try {
      Attempt attempt;
      try {
        attempt = protocol.attempt_answer(kind, *answer.reply);
      } catch (const ServerError&) {
        // Refused by the server: nothing was applied.
        if (again(answer.reply->str(), Phase::attempt, by, &AcquireOp::send_attempt)) return;
        throw;
      } catch (const InvalidArgument&) {
        throw;  // found by the script (a Semaphore's count): nothing was applied
      } catch (const Error&) {
        undo(false);  // an answer no server gives: the step may have been applied
        throw;
      }
      if (replicas_.wanted() && attempt.acquired)
        return replicas_.await(*this, std::move(attempt), by);
      run(life_->attempted(waiter_, std::move(attempt)));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // A look at the key (PTTL, TYPE): before a sleep that no attempt told the
  // holder's lease, or a try_lock refused without a reason.
  void send_holder_read(clock::time_point by) {
    begin(Phase::holder, by);
    pttl_.reset();
    on_link([](const std::shared_ptr<AcquireOp>& self, Link& link) {
      const std::string& key = self->life_->protocol().key();
      const unsigned at = self->steps_.current();
      link.send({"PTTL", key}, [self, at](LinkAnswer answer) {
        if (self->steps_.current() == at && answer.reply) self->pttl_ = std::move(answer.reply);
      });
      if (self->steps_.asking()) link.send({"ASKING"}, nullptr);  // it let PTTL in only
      self->steps_.sent(link, link.send({"TYPE", key}, [self, at](LinkAnswer answer) {
        if (self->steps_.current() == at) self->holder_answered(std::move(answer));
      }));
    });
  }

  void holder_answered(LinkAnswer answer) {
    steps_.clear_in_flight();
    end();
    if (steps_.finished()) return;
    if (answer.failure) return fail(answer.failure);
    if (answer.reply->is_error() && again(answer.reply->str(), Phase::holder, waiter_.step_deadline,
                                          &AcquireOp::send_holder_read)) {
      return;
    }
    if (!pttl_) return finish(make_error_code(Errc::protocol_error));
    try {
      run(life_->holder_read(waiter_, life_->protocol().holder_answer(*pttl_, *answer.reply)));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // Subscribes without waiting, then waits (one command timeout at most,
  // as the blocking path) for the server to confirm it, woken by the
  // channel's Wake.
  void subscribe(clock::time_point by) {
    try {
      subscribed(life_->protocol().subscribe(waiter_.id, clock::now()), by);
    } catch (...) {
      fail(std::current_exception());
    }
  }
  void subscribed(std::optional<Notifier::Subscription> made, clock::time_point by) {
    if (!made || made->active() || made->moved()) {
      return run(life_->subscribed(waiter_, std::move(made)));
    }
    pending_.emplace(std::move(*made));
    const auto give_up = clock::now() + life_->protocol().site()->options().command_timeout;
    begin(Phase::subscribing, std::min(by, give_up));
    if (wakes_.confirmed_or_armed(*pending_, steps_.current())) subscription_settled();
  }

  void subscription_settled() {
    end();
    std::optional<Notifier::Subscription> made;
    made.emplace(std::move(*pending_));
    pending_.reset();
    run(life_->subscribed(waiter_, std::move(made)));
  }

  // Until `by`, a release on the channel (while subscribed), cancel_waits()
  // or a local unlock. Behind a holder of this object too, a release in
  // turn wakes it: the local unlock's turn may have gone to a waiter that
  // then lost the race to another process, and the lock may be free.
  void sleep(clock::time_point by) {
    begin(Phase::sleeping, by);
    if (!wakes_.sleep_on(life_->cancellation(), steps_.current(), waiter_.cancel_seen)) {
      return slept();
    }
    if (waiter_.subscription) sleep_on(*waiter_.subscription);
  }

  // Arms the release wake for this sleep, unless a release since the
  // attempt went to nobody: then this waiter takes it at once.
  void sleep_on(Notifier::Subscription& subscription) {
    if (!wakes_.sleep_on(subscription, steps_.current(), waiter_.seen)) slept();
  }

  void slept() {
    end();
    run(life_->woken(waiter_));
  }

  friend class OpWakes<AcquireOp>;
  void woken_at(unsigned at, bool release) {
    if (steps_.finished() || at != steps_.current()) return;
    if (phase_ == Phase::subscribing) {
      // Another change than the confirmation: wait on.
      if (!wakes_.confirmed_or_armed(*pending_, steps_.current())) return;
      return subscription_settled();
    }
    if (phase_ != Phase::sleeping) return;
    // Its turn after a release or a local unlock (the baton, used by the
    // attempt that follows), a cancel, or a change every waiter looks at;
    // else a confirmation, and it sleeps on.
    const bool turn = wakes_.take_baton(release);
    if (!release) return slept();
    Notifier::Subscription& subscription = *wakes_.release_on();
    if (turn || subscription.generation() != waiter_.seen) return slept();
    sleep_on(subscription);
  }

  friend class OpSteps<AcquireOp>;
  void timed_out() {
    switch (phase_) {
      case Phase::attempt:
        forget_in_flight(/*undo_it=*/true);
        end();
        return run(life_->attempted(waiter_, std::nullopt));
      case Phase::replicated:  // its WAIT cut by the deadline: the grant given back
        forget_in_flight(/*undo_it=*/true);
        end();
        return run(life_->attempted(waiter_, replicas_.cut()));
      case Phase::holder:
        forget_in_flight(/*undo_it=*/false);
        end();
        return run(life_->holder_read(waiter_, std::nullopt));
      case Phase::subscribing: return subscription_settled();  // unconfirmed: the waiter polls
      case Phase::sleeping: return slept();
      case Phase::none: return;
    }
  }

  // The step in flight is not waited for any longer; an attempt's undo
  // follows it on the same connection. Where none can (!undoes_behind),
  // the attempt's answer still comes to it (answered_late()), unless it
  // came (a grant whose WAIT is forgotten: undone apart).
  void forget_in_flight(bool undo_it) {
    if constexpr (!undoes_behind) {
      if (undo_it && phase_ != Phase::replicated) return steps_.clear_in_flight();
    }
    // Behind a WAIT, an undo may be dropped with its connection (a client
    // closed while WAIT blocks it loses what it queued): apart too.
    steps_.forget_in_flight([&](Link& on) {
      if (undo_it) undo_attempt(life_, kind, id_, &on, /*apart=*/replicas_.wanted());
    });
  }

  // The answer to an attempt nobody waits for any longer.
  void answered_late(const LinkAnswer& answer) noexcept {
    undo_late_grant(life_, kind, id_, answer);
  }

  // The attempt in flight may have been applied: undo it behind itself,
  // and apart too where the connection closed under it (undo_attempt).
  void undo(bool apart) noexcept {  // in its sink
    undo_attempt(life_, kind, id_, link().current(), apart);
  }

  // Terminal cancellation, on the strand (see OpSteps::watch).
  void cancel() {
    if (steps_.finished()) return;
    // The undo is harmless after a read of the holder: the token is ours alone.
    forget_in_flight(/*undo_it=*/phase_ == Phase::attempt || phase_ == Phase::replicated);
    finish(asio::error::operation_aborted);
  }

  void fail(const std::exception_ptr& failure) { finish(code_of(failure)); }

  void finish(Outcome outcome) {
    if (outcome != Outcome::acquired) return finish(code_of(outcome));
    complete({}, AsyncAccess::hold<Lock, side>(life_, id_, steps_.link()));
  }
  void finish(std::error_code ec) { complete(ec, Hold()); }

  // Once, on the handler's executor (see OpSteps::complete).
  void complete(std::error_code ec, Hold hold) {
    if (steps_.finished()) return;
    end();
    steps_.complete(work_, handler_, ec, std::move(hold));
  }

  const std::shared_ptr<Life> life_;
  Handler handler_;
  asio::any_io_executor work_;  // keeps the handler's context running until it completes
  Waiter waiter_;
  std::string id_;            // the token of this acquisition
  OpSteps<AcquireOp> steps_;  // their numbers, timer, request in flight, slot
  Phase phase_ = Phase::none;
  std::optional<Reply> pttl_;
  std::optional<Notifier::Subscription> pending_;  // subscribed, not yet confirmed
  OpWakes<AcquireOp> wakes_;
  friend class ReplicaSteps<AcquireOp>;
  ReplicaSteps<AcquireOp> replicas_;  // LockOptions::replicas' count and WAIT
};

}  // namespace distlock::detail
