// RateOp: a RateLimiter's wait (distlock/asio.hpp: async_try_acquire,
// async_try_acquire_for/_until, async_acquire) as an operation on an
// AsioLink. It runs the blocking wait's rules (rate_limiter.hpp): an
// attempt, and after each refusal a sleep for its retry_after unless the
// next chance comes after the deadline, the first attempt a try when the
// deadline has passed, an attempt cut at the deadline ending the call with
// the last refusal, or Errc::timed_out where Redis has not answered lately
// (Heard). The attempts are written on the link; one steady_timer
// on the link's strand ends a sleep and cuts an attempt at the deadline;
// a Wake on the limiter's Cancellation ends a sleep for cancel_waits().
// Each attempt and sleep has a number (detail/asio/op_steps.hpp): a timer
// or wake that comes for an earlier one finds the operation moved on and
// does nothing.
//
// Nothing is undone: an attempt cut short (by the deadline, a
// cancellation) may have been counted, as the blocking call's may.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/asio/op_steps.hpp"
#include "distlock/detail/asio/op_wakes.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/rate_limiter.hpp"

namespace distlock::detail {

template <class Handler>
class RateOp : public std::enable_shared_from_this<RateOp<Handler>> {
  using clock = SteadyClock;

 public:
  /// `acquire`: cancel_waits() ends it with Errc::cancelled (acquire()),
  /// else with the last refusal and no error (the timed calls).
  RateOp(RateLimiter limiter, std::uint64_t cost, clock::time_point until, bool acquire,
         Handler handler)
      : limiter_(std::move(limiter)),
        cost_(cost),
        amount_(static_cast<long long>(cost)),
        until_(until),
        acquire_(acquire),
        seen_(limiter_.cancellation_.generation()),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)) {}

  ~RateOp() { wakes_.disarm(); }

  RateOp(const RateOp&) = delete;
  RateOp& operator=(const RateOp&) = delete;

  // In the initiating call: nothing completes inside it.
  void start() {
    try {
      limiter_.check_cost(cost_);
      const std::shared_ptr<Site>& site = limiter_.site_;
      site->check_process();  // a child of a fork has no link of its parent's
      if (!site->links()) {
        throw InvalidArgument(limiter_.key_ +
                              ": async rate limiters run on a Client, a SentinelClient or a "
                              "ClusterClient (this one is on " +
                              site->describe() + ")");
      }
      steps_.bind(
          asio::use_service<LinkService>(asio::query(work_, asio::execution::context))
              .link_for(*site, asio::prefer(work_, asio::execution::outstanding_work.untracked)));
      const AsioLink::Strand& strand = steps_.link()->strand();
      wakes_.bind(this->weak_from_this(), strand);
      steps_.watch(asio::get_associated_cancellation_slot(handler_), this->weak_from_this());
      asio::post(strand, [self = this->shared_from_this()] { self->attempt(); });
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  enum class Phase { none, attempt, sleeping };

  // Everything below runs on the link's strand.

  // A new attempt (or sleep), its timer set for `by`.
  void begin(Phase phase, clock::time_point by) {
    phase_ = phase;
    steps_.begin(this->shared_from_this(), by);
  }
  void end() noexcept {
    steps_.end();
    phase_ = Phase::none;
    wakes_.disarm();
  }

  void attempt() {
    // A deadline passed already makes the first attempt a try, uncut.
    const clock::time_point by =
        attempts_++ == 0 && deadline_reached(until_) ? no_deadline : until_;
    send(by);
  }

  // The attempt, cut at `by` (again, after a cluster's redirect).
  void send(clock::time_point by) {
    begin(Phase::attempt, by);
    sent_ = clock::now();
    auto self = this->shared_from_this();
    steps_.submit(
        limiter_.site_,
        [self, at = steps_.current(), by](Link& link) {
          if (self->steps_.finished() || self->steps_.current() != at) return;
          const RateLimiter& limiter = self->limiter_;
          self->steps_.sent(link, link.send_script(limiter.script(), {limiter.key_},
                                                   {limiter.first_, limiter.second_, self->amount_},
                                                   [self, at, by](LinkAnswer answer) {
                                                     if (self->steps_.current() == at) {
                                                       self->answered(std::move(answer), by);
                                                     }
                                                   }));
        },
        [self](const std::exception_ptr& failure) {
          if (!self->steps_.finished()) self->fail(failure);
        });
  }

  void answered(LinkAnswer answer, clock::time_point by) {
    steps_.clear_in_flight();
    end();
    if (steps_.finished()) return;
    if (answer.failure) {
      // A link timeout at the deadline is the deadline's cut.
      if (code_of(answer.failure) == Errc::timed_out && deadline_reached(by)) return cut();
      return fail(answer.failure);
    }
    heard_.answered(sent_);
    // Refused by the server, nothing was counted; a cluster's redirect
    // sends the attempt again where the key lives, a refusal for now after
    // a pause (as an attempt still: the deadline cuts it).
    if (answer.reply->is_error() &&
        steps_.send_again(
            *limiter_.site_, answer.reply->str(), this->shared_from_this(),
            [&] { begin(Phase::attempt, by); }, [by](RateOp& self) { self.send(by); })) {
      return;
    }
    try {
      decision_ = RateLimiter::decision_of(*answer.reply);
    } catch (...) {
      return fail(std::current_exception());
    }
    if (decision_.allowed) return finish({});
    const clock::time_point next = clock::now() + decision_.retry_after;
    if (next > until_) return finish({});  // refused at once: no chance before the deadline
    // Where Redis has not answered lately, the next attempt goes out early
    // enough to hear from it before the deadline (refused before
    // retry_after, it counts nothing).
    begin(Phase::sleeping, heard_.probe_by(next, until_));
    if (!wakes_.sleep_on(limiter_.cancellation_, steps_.current(), seen_)) cancelled();
  }

  friend class OpWakes<RateOp>;
  // Only cancel_waits() ends a sleep early; any other wake sleeps again.
  void woken_at(unsigned at, bool) {
    if (steps_.finished() || at != steps_.current() || phase_ != Phase::sleeping) return;
    static_cast<void>(wakes_.take_baton(false));
    if (!wakes_.sleep_on(limiter_.cancellation_, steps_.current(), seen_)) cancelled();
  }

  friend class OpSteps<RateOp>;
  void timed_out() {
    switch (phase_) {
      case Phase::attempt:  // cut at the deadline
        steps_.forget_in_flight([](Link&) {});
        return cut();
      case Phase::sleeping:  // retry_after has passed; a cancel first ends it
        if (limiter_.cancellation_.since(seen_)) return cancelled();
        end();
        return attempt();
      case Phase::none: return;
    }
  }

  // An attempt cut at the deadline: the last refusal if Redis answered
  // lately, else an outage.
  void cut() {
    end();
    finish(heard_.outcome_at(until_) == Outcome::unanswered ? make_error_code(Errc::timed_out)
                                                            : std::error_code());
  }

  void cancelled() {
    end();
    finish(acquire_ ? make_error_code(Errc::cancelled) : std::error_code());
  }

  // Terminal cancellation, on the strand (see OpSteps::watch).
  void cancel() {
    if (steps_.finished()) return;
    steps_.forget_in_flight([](Link&) {});
    finish(asio::error::operation_aborted);
  }

  void fail(const std::exception_ptr& failure) { finish(code_of(failure)); }

  // Once, with the last decision (see OpSteps::complete).
  void finish(std::error_code ec) {
    if (steps_.finished()) return;
    end();
    steps_.complete(work_, handler_, ec, decision_);
  }

  RateLimiter limiter_;  // a copy: it shares the original's Cancellation
  const std::uint64_t cost_;
  const Decimal amount_;
  const clock::time_point until_;
  const bool acquire_;
  const std::uint64_t seen_;  // the Cancellation's generation at the call
  Handler handler_;
  asio::any_io_executor work_;  // keeps the handler's context running until it completes
  OpSteps<RateOp> steps_;       // their numbers, timer, request in flight, slot
  Phase phase_ = Phase::none;
  unsigned attempts_ = 0;
  clock::time_point sent_;  // of the attempt in flight
  Heard heard_;             // when Redis last answered
  RateDecision decision_;   // the last one Redis gave
  OpWakes<RateOp> wakes_;
};

}  // namespace distlock::detail
