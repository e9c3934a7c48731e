// AnyStripeOp: a StripedMutex's wait for whichever stripe is free
// (distlock/asio_striped.hpp), the blocking try_lock_any_until's rules
// without a thread: passes of one attempt at a time over the stripes
// listed (StripePass: the one taken last first), and between passes a
// sleep until a release of one stripe chosen at random is announced,
// cancel_waits(), or a pause that grows from 1 ms to 50 ms ends (releases
// of the other stripes are seen at the next pass). An attempt is cut at
// the deadline (a first pass made after it is a try, uncut; a last pass
// after waiting gets a last step's 5 ms), and the call then ends busy or
// unanswered as a lock's wait does (Heard, in
// detail/lifecycle/heard.hpp): an empty result if Redis answered lately,
// Errc::timed_out if it did not.
//
// Each attempt is an async try_lock of the stripe, an AcquireOp of its own
// (detail/asio/acquire_op.hpp), on the same link and strand as this
// operation: its undo, should it be cut short, is that operation's, and a
// terminal cancellation is passed on to it. The release wake waits beside
// the stripe's own waiters rather than in their turn: the release it is
// woken for may be taken by one of them, while this wait takes another
// stripe, so it must not hold the baton they wait for. (A release wakes
// the waits on any stripe armed before the stripe's next own waiter; one
// armed after it wakes at its pause.)
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/asio_hold.hpp"
#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/asio/op_steps.hpp"
#include "distlock/detail/asio/op_wakes.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/error.hpp"
#include "distlock/mutex.hpp"
#include "distlock/striped_mutex.hpp"

namespace distlock::detail {

/// `Result` is built as Result{stripe, hold} (AsyncStripe).
template <class Result, class Handler>
class AnyStripeOp : public std::enable_shared_from_this<AnyStripeOp<Result, Handler>> {
  using clock = SteadyClock;
  using Hold = AsyncHold<distlock::Mutex>;

 public:
  /// `wait` false: one pass (async_try_lock_any), `until` ignored.
  AnyStripeOp(std::shared_ptr<Stripes> stripes, std::vector<std::size_t> among,
              clock::time_point until, bool wait, Handler handler)
      : stripes_(std::move(stripes)),
        among_(std::move(among)),
        until_(until),
        wait_(wait),
        first_pass_uncut_(!wait || deadline_reached(until)),
        cancel_seen_(stripes_->cancellation.generation()),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)) {}

  ~AnyStripeOp() { wakes_.disarm(); }

  AnyStripeOp(const AnyStripeOp&) = delete;
  AnyStripeOp& operator=(const AnyStripeOp&) = delete;

  // In the initiating call: nothing completes inside it.
  void start() {
    try {
      const std::size_t size = stripes_->locks.size();
      for (const std::size_t i : among_) {
        if (i >= size) {
          throw InvalidArgument("stripe " + std::to_string(i) + " of a StripedMutex of " +
                                std::to_string(size));
        }
      }
      const SitePtr& site = stripes_->sites.front();
      site->check_process();  // a child of a fork has no link of its parent's
      if (!site->links()) {
        throw InvalidArgument(stripes_->locks.front()->key() +
                              ": async locks run on a Client, a SentinelClient or a "
                              "ClusterClient (this one is on " +
                              site->describe() + ")");
      }
      steps_.bind(
          asio::use_service<LinkService>(asio::query(work_, asio::execution::context))
              .link_for(*site, asio::prefer(work_, asio::execution::outstanding_work.untracked)));
      wakes_.bind(this->weak_from_this(), steps_.link()->strand());
      wakes_.wait_beside();
      steps_.watch(asio::get_associated_cancellation_slot(handler_), this->weak_from_this());
      asio::post(steps_.link()->strand(), [self = this->shared_from_this()] { self->pass(); });
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  enum class Phase { none, attempt, subscribing, sleeping };

  // Everything below runs on the link's strand.

  void begin(Phase phase, clock::time_point by) {
    phase_ = phase;
    steps_.begin(this->shared_from_this(), by);
  }
  void end() noexcept {
    steps_.end();
    phase_ = Phase::none;
    wakes_.disarm();
  }

  void pass() {
    // Read before the pass, so a release announced after it ends the sleep.
    seen_ = subscription_ ? subscription_->generation() : 0;
    pass_.emplace(among_, stripes_->home.load(std::memory_order_relaxed));
    pass_until_ = pass_cut(clock::now(), until_, passes_++ == 0 && first_pass_uncut_);
    attempt_next();
  }

  void attempt_next() {
    const std::optional<std::size_t> i = pass_->next();
    if (!i) return passed();
    begin(Phase::attempt, pass_until_);
    sent_ = clock::now();
    auto self = this->shared_from_this();
    auto answered = [self, i = *i, at = steps_.current()](std::error_code ec, Hold hold) {
      if (!self->steps_.finished() && self->steps_.current() == at) {
        self->attempted(i, ec, std::move(hold));
      }
    };
    try {
      InitiateAcquire<distlock::Mutex, Side::exclusive>{clock::now(), /*wait=*/false}(
          asio::bind_cancellation_slot(
              attempt_cancel_.slot(),
              asio::bind_executor(steps_.link()->strand(), std::move(answered))),
          AsyncAccess::life_of(*stripes_->locks[*i]));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void attempted(std::size_t i, std::error_code ec, Hold hold) {
    end();
    if (ec) return finish(ec);  // an outage ends the wait, as try_lock() throws it
    heard_.answered(sent_);
    if (!hold) return attempt_next();
    stripes_->home.store(i, std::memory_order_relaxed);
    complete({}, Result{i, std::move(hold)});
  }

  // A pass that took nothing.
  void passed() {
    const clock::time_point now = clock::now();
    if (!wait_ || among_.empty() || now >= until_) return complete({}, Result{});
    if (stripes_->cancellation.since(cancel_seen_)) return cancelled();
    if (!subscription_ && stripes_->locks.front()->options().wake_on_release()) {
      return subscribe();
    }
    sleep(now);
  }

  // Subscribes to a stripe's release channel without waiting, then waits
  // (one command timeout at most, as the blocking path) for the server to
  // confirm it, so that no release after the next pass goes unseen.
  void subscribe() {
    try {
      Notifier::Subscription made = stripes_->subscribe_to_one_of(among_, clock::now());
      // Refused at once (a node that no longer serves the slot): this
      // pass waits by its pause, the next subscribes again.
      if (made.moved()) return sleep(clock::now());
      subscription_.emplace(std::move(made));
      if (subscription_->active()) return pass();
      const clock::time_point give_up =
          clock::now() + stripes_->sites.front()->options().command_timeout;
      begin(Phase::subscribing, std::min(until_, give_up));
      if (wakes_.confirmed_or_armed(*subscription_, steps_.current())) subscribed();
    } catch (...) {
      fail(std::current_exception());
    }
  }
  void subscribed() {
    end();
    pass();
  }

  // Until the pause ends, or, where Redis has not answered lately, early
  // enough for a last pass to hear from it before the deadline.
  void sleep(clock::time_point now) {
    begin(Phase::sleeping, heard_.probe_by(pause_.end(now, until_), until_));
    if (!wakes_.sleep_on(stripes_->cancellation, steps_.current(), cancel_seen_)) return slept();
    if (subscription_ && !wakes_.sleep_on(*subscription_, steps_.current(), seen_)) slept();
  }

  void slept() {
    end();
    if (stripes_->cancellation.since(cancel_seen_)) return cancelled();
    pause_.grow();
    // Dropped by a node (the stripe's slot moved): subscribed again, where
    // the slot is now, after the next pass.
    if (subscription_ && subscription_->moved()) subscription_.reset();
    pass();
  }

  friend class OpWakes<AnyStripeOp>;
  void woken_at(unsigned at, bool on_release) {
    if (steps_.finished() || at != steps_.current()) return;
    if (phase_ == Phase::subscribing) {
      // Another change than the confirmation: wait on.
      if (!wakes_.confirmed_or_armed(*subscription_, steps_.current())) return;
      return subscribed();
    }
    if (phase_ != Phase::sleeping) return;
    // A confirmation or a reconnect of the watched channel that brought no
    // release: sleep on.
    if (on_release && subscription_->generation() == seen_) {
      if (!wakes_.sleep_on(*subscription_, steps_.current(), seen_)) slept();
      return;
    }
    slept();
  }

  friend class OpSteps<AnyStripeOp>;
  void timed_out() {
    switch (phase_) {
      case Phase::subscribing: return subscribed();  // unconfirmed: the pause still wakes it
      case Phase::sleeping: return slept();
      case Phase::attempt: {  // cut at the deadline, and undone behind itself
        attempt_cancel_.emit(asio::cancellation_type::terminal);
        end();
        if (heard_.outcome_at(until_) == Outcome::timed_out) return complete({}, Result{});
        return finish(make_error_code(Errc::timed_out));
      }
      case Phase::none: return;
    }
  }

  void cancelled() { finish(make_error_code(Errc::cancelled)); }

  // Terminal cancellation, on the strand (see OpSteps::watch): the attempt
  // in flight is cancelled too, and undoes what it may have taken.
  void cancel() {
    if (steps_.finished()) return;
    if (phase_ == Phase::attempt) attempt_cancel_.emit(asio::cancellation_type::terminal);
    finish(asio::error::operation_aborted);
  }

  void fail(const std::exception_ptr& failure) { finish(code_of(failure)); }
  void finish(std::error_code ec) { complete(ec, Result{}); }

  // Once, on the handler's executor (see OpSteps::complete).
  void complete(std::error_code ec, Result result) {
    if (steps_.finished()) return;
    end();
    steps_.complete(work_, handler_, ec, std::move(result));
  }

  const std::shared_ptr<Stripes> stripes_;  // shared with the StripedMutex, which may go first
  const std::vector<std::size_t> among_;
  const clock::time_point until_;
  const bool wait_;
  const bool first_pass_uncut_;      // a try: no wait, or a deadline passed at the call
  const std::uint64_t cancel_seen_;  // the Cancellation's generation at the call
  Handler handler_;
  asio::any_io_executor work_;  // keeps the handler's context running until it completes
  OpSteps<AnyStripeOp> steps_;  // their numbers, timer, slot
  Phase phase_ = Phase::none;
  std::optional<StripePass> pass_;
  unsigned passes_ = 0;
  clock::time_point pass_until_;  // when the pass under way is cut
  clock::time_point sent_;        // the attempt in flight's
  Heard heard_;                   // when Redis last answered an attempt, and how fast
  std::optional<Notifier::Subscription> subscription_;  // one stripe's release channel
  std::uint64_t seen_ = 0;                              // its generation before the pass
  PassPause pause_;
  asio::cancellation_signal attempt_cancel_;  // the attempt in flight's
  OpWakes<AnyStripeOp> wakes_;
};

}  // namespace distlock::detail
