// RedlockOp: an async acquire of a Redlock (distlock/asio.hpp). It runs the
// lock's acquire steps (detail/lifecycle/acquire_steps.hpp) as AcquireOp
// does, but each attempt goes to every master at once, on the link of each
// master's backend on the caller's context (LinkService), and is judged by
// the Redlock's own rules as the answers come (RedlockCore::record_rounds,
// RedlockProtocol::judged) once every master answered or the attempt's
// budget (the node timeout, cut to the deadline) ran out, a master that did
// not answer by then counting as slow: granted when a quorum said yes with
// validity left. Not at the first quorum: the hold's release goes through
// the backends' pools, not these links, and could reach a slow master
// before its SET, which would then stand for the lease. A Redlock has no holder to read and no
// release announcement to wait for: between attempts it sleeps at the
// policy's pace, woken early by cancel_waits() or a local unlock.
//
// The operation lives on the first master's link's strand; the other
// masters' answers are posted there from their links' strands. A refused
// or cut attempt is taken back on every master it reached: the release
// script written behind the attempt on the same link, so that an attempt
// applied late is released right after it. As the blocking call does, a
// refused attempt waits (within its budget) for the masters that answered
// it to answer the take-back too: where so many answer WRONGTYPE that no
// quorum can ever be had, the call fails (WrongTypeError's server_error)
// rather than wait in vain. A master's MOVED (a cluster's slot moved)
// costs it this attempt's vote and has its map noted, so the next attempt
// goes where the slot is.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstddef>
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
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/redlock/fan_out.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/redlock.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

template <class Handler>
class RedlockOp : public std::enable_shared_from_this<RedlockOp<Handler>> {
  using Life = LifeOf<distlock::Redlock>;
  using Waiter = typename Life::Waiter;
  using Next = typename Life::Next;
  using Step = typename Life::Step;
  using Hold = AsyncHold<distlock::Redlock>;
  using clock = SteadyClock;
  using Round = FanOut::Round;
  static constexpr auto kind = RedlockProtocol::exclusive;

 public:
  /// `wait` false: one attempt (async_try_lock), `deadline` ignored.
  RedlockOp(std::shared_ptr<Life> life, Handler handler, clock::time_point deadline, bool wait)
      : life_(std::move(life)),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)),
        waiter_(kind, wait ? deadline : clock::now(), wait, life_->cancellation().generation()) {}

  ~RedlockOp() { wakes_.disarm(); }

  RedlockOp(const RedlockOp&) = delete;
  RedlockOp& operator=(const RedlockOp&) = delete;

  // In the initiating call: nothing completes inside it.
  void start() {
    try {
      RedlockProtocol& protocol = life_->protocol();
      protocol.check_process();
      LinkService& service =
          asio::use_service<LinkService>(asio::query(work_, asio::execution::context));
      const asio::any_io_executor untracked =
          asio::prefer(work_, asio::execution::outstanding_work.untracked);
      for (const SitePtr& site : protocol.core().sites()) {
        if (!site->links()) {
          throw InvalidArgument(protocol.key() +
                                ": async Redlocks run on Clients, SentinelClients or "
                                "ClusterClients (a master is " +
                                site->describe() + ")");
        }
        links_.push_back(service.link_for(*site, untracked));
      }
      waiter_.async = true;
      const Next first = life_->start(waiter_);
      steps_.bind(links_.front());
      wakes_.bind(this->weak_from_this(), strand());
      steps_.watch(asio::get_associated_cancellation_slot(handler_), this->weak_from_this());
      asio::post(strand(), [self = this->shared_from_this(), first] { self->run(first); });
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  enum class Phase { none, attempt, taking_back, sleeping };

  // Everything below runs on strand().
  const AsioLink::Strand& strand() const noexcept { return links_.front()->strand(); }
  RedlockProtocol& protocol() const noexcept { return life_->protocol(); }

  // A Redlock reads no holder and subscribes to nothing (its protocol's
  // answers come without a server): those steps go straight on.
  void run(const Next& next) {
    switch (next.step) {
      case Step::done: return finish(next.outcome);
      case Step::attempt: return send_attempt(next.by);
      case Step::read_holder:
        return run(life_->holder_read(waiter_, protocol().read_holder(next.by)));
      case Step::subscribe:
        return run(life_->subscribed(waiter_, protocol().subscribe(waiter_.id, next.by)));
      case Step::sleep: return sleep(next.by);
    }
  }

  void begin(Phase phase, clock::time_point by) {
    phase_ = phase;
    steps_.begin(this->shared_from_this(), by);
  }
  void end() noexcept {
    steps_.end();
    phase_ = Phase::none;
    wakes_.disarm();
  }

  // SET NX PX with a token of this attempt's own on every master at once;
  // the step ends at its budget.
  void send_attempt(clock::time_point by) {
    by_ = by;
    token_ = make_token();
    started_ = clock::now();
    until_ = started_ + protocol().budget(by);
    rounds_.clear();
    rounds_.resize(links_.size());
    owed_ = links_.size();
    begin(Phase::attempt, until_);
    const unsigned at = steps_.current();
    const std::vector<SitePtr>& sites = protocol().core().sites();
    for (std::size_t i = 0; i < links_.size(); ++i) {
      auto self = this->shared_from_this();
      links_[i]->submit(
          sites[i],
          [self, at, i, token = token_](Link& on) {
            const RedlockProtocol& lock = self->protocol();
            const Decimal ttl(lock.options().ttl().count());
            on.send({"SET", lock.key(), token, "NX", "PX", ttl}, [self, at, i](LinkAnswer answer) {
              self->noted(i, answer);
              asio::dispatch(self->strand(), [self, at, i, answer = std::move(answer)]() mutable {
                self->answered(at, i, std::move(answer));
              });
            });
          },
          [self, at, i](const std::exception_ptr& failure) {
            asio::dispatch(self->strand(),
                           [self, at, i, failure] { self->unreached(at, i, failure); });
          });
    }
  }

  // On master i's link's strand: a MOVED has its site note the slot's new
  // owner, for the next attempt.
  void noted(std::size_t i, const LinkAnswer& answer) {
    if (answer.reply && answer.reply->is_error()) {
      static_cast<void>(links_[i]->refused(*protocol().core().sites()[i], answer.reply->str()));
    }
  }

  void answered(unsigned at, std::size_t i, LinkAnswer answer) {
    if (steps_.finished() || phase_ != Phase::attempt || steps_.current() != at) return;
    Round& round = rounds_[i];
    if (answer.reply) {
      round.state = FanOut::State::replied;
      round.reply = std::move(*answer.reply);
    } else {
      const std::error_code code = code_of(answer.failure);
      round.state = code == Errc::timed_out ? FanOut::State::timed_out : FanOut::State::broken;
      round.error = code;
      round.message = message_of(answer.failure);
    }
    if (--owed_ == 0) decide();
  }

  // No link to master i could be had: nothing was sent to it.
  void unreached(unsigned at, std::size_t i, const std::exception_ptr& failure) {
    if (steps_.finished() || phase_ != Phase::attempt || steps_.current() != at) return;
    rounds_[i].state = FanOut::State::unreachable;
    rounds_[i].error = code_of(failure);
    rounds_[i].message = message_of(failure);
    if (--owed_ == 0) decide();
  }

  // The attempt as the masters left it: granted, or refused and taken
  // back, the take-back's answers awaited first (see the top).
  void decide() {
    end();
    RedlockCore& core = protocol().core();
    RedlockAttempt result = core.record_rounds(
        rounds_, [&](std::size_t i) { return core.sites()[i]->describe(); }, RedlockStep::acquire,
        started_, protocol().options().ttl(), RedlockCore::acquire_answer);
    const bool granted = result.succeeded;
    judged_.reset();
    failure_ = nullptr;
    try {
      judged_ = protocol().judged(std::move(result), token_, by_);
    } catch (...) {
      failure_ = std::current_exception();
    }
    if (granted) {
      id_ = token_;
      return settle();
    }
    begin(Phase::taking_back, until_);
    if (take_back(/*wait=*/true) == 0) settle();
  }

  // After the attempt and what it needed taken back: the next step.
  void settle() {
    end();
    if (wrong_type_ > links_.size() - protocol().core().quorum()) {
      return fail(std::make_exception_ptr(
          WrongTypeError(protocol().key(), "value of another type", "string")));
    }
    if (failure_) return fail(failure_);
    run(life_->attempted(waiter_, std::move(judged_)));
  }

  // The attempt's release on every master it may have reached, behind it
  // on the same link; with `wait`, the answers of those that answered the
  // attempt are awaited (owed_: how many). Returns owed_.
  std::size_t take_back(bool wait) {
    const std::vector<SitePtr>& sites = protocol().core().sites();
    wrong_type_ = 0;
    owed_ = 0;
    const unsigned at = steps_.current();
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (rounds_[i].state == FanOut::State::unreachable) continue;  // nothing was sent there
      const bool awaited = wait && rounds_[i].state == FanOut::State::replied;
      owed_ += awaited ? 1 : 0;
      auto self = this->shared_from_this();
      links_[i]->submit(
          sites[i],
          [self, at, awaited, token = token_](Link& on) {
            const RedlockCore& core = self->protocol().core();
            const std::string_view keys[] = {core.key(), core.channel()};
            const std::string_view args[] = {token};
            Link::Sink sink;
            if (awaited) {
              sink = [self, at](LinkAnswer answer) {
                const bool wrong = answer.reply && answer.reply->is_error() &&
                                   is_wrong_type(ServerError(answer.reply->str()));
                asio::dispatch(self->strand(), [self, at, wrong] { self->taken_back(at, wrong); });
              };
            }
            on.send_eval(scripts::release, Args(keys, 2), Args(args, 1), std::move(sink));
          },
          [self, at, awaited](const std::exception_ptr&) {
            if (awaited) {
              asio::dispatch(self->strand(), [self, at] { self->taken_back(at, false); });
            }
          });
    }
    return owed_;
  }

  void taken_back(unsigned at, bool wrong_type) {
    if (steps_.finished() || phase_ != Phase::taking_back || steps_.current() != at) return;
    if (wrong_type) ++wrong_type_;
    if (--owed_ == 0) settle();
  }

  // Until `by`: the policy's pause, cancel_waits() or a local unlock.
  void sleep(clock::time_point by) {
    begin(Phase::sleeping, by);
    if (!wakes_.sleep_on(life_->cancellation(), steps_.current(), waiter_.cancel_seen)) slept();
  }
  void slept() {
    end();
    run(life_->woken(waiter_));
  }

  friend class OpWakes<RedlockOp>;
  void woken_at(unsigned at, bool) {
    if (!steps_.finished() && at == steps_.current() && phase_ == Phase::sleeping) slept();
  }

  friend class OpSteps<RedlockOp>;
  // The attempt's budget ran out: the masters yet to answer are slow.
  void timed_out() {
    if (phase_ == Phase::sleeping) return slept();
    if (phase_ == Phase::taking_back) return settle();  // not all answered it: waited for no more
    if (phase_ != Phase::attempt) return;
    for (std::size_t i = 0; i < rounds_.size(); ++i) {
      Round& round = rounds_[i];
      if (round.state != FanOut::State::idle) continue;
      round.state = FanOut::State::timed_out;
      round.error = make_error_code(Errc::timed_out);
      const auto waited = std::chrono::ceil<std::chrono::milliseconds>(clock::now() - started_);
      round.message = protocol().core().sites()[i]->describe() + ": SET: no reply within " +
                      std::to_string(waited.count()) + " ms";
    }
    decide();
  }

  // Terminal cancellation, on the strand (see OpSteps::watch): an attempt
  // under way is taken back.
  void cancel() {
    if (steps_.finished()) return;
    if (phase_ == Phase::attempt) take_back(/*wait=*/false);
    finish(asio::error::operation_aborted);
  }

  void fail(const std::exception_ptr& failure) { finish(code_of(failure)); }

  void finish(Outcome outcome) {
    if (outcome != Outcome::acquired) return finish(code_of(outcome));
    complete({}, AsyncAccess::hold<distlock::Redlock, Side::exclusive>(life_, id_, links_.front()));
  }
  void finish(std::error_code ec) { complete(ec, Hold()); }

  // Once, on the handler's executor (see OpSteps::complete).
  void complete(std::error_code ec, Hold hold) {
    if (steps_.finished()) return;
    end();
    steps_.complete(work_, handler_, ec, std::move(hold));
  }

  static std::string message_of(const std::exception_ptr& failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& error) {
      return error.what();
    } catch (...) {
      return "unknown failure";
    }
  }

  const std::shared_ptr<Life> life_;
  Handler handler_;
  asio::any_io_executor work_;  // keeps the handler's context running until it completes
  Waiter waiter_;
  std::vector<std::shared_ptr<AsioLink>> links_;  // each master's backend's
  OpSteps<RedlockOp> steps_;  // their numbers, timer (on the first link's strand), slot
  Phase phase_ = Phase::none;
  // The attempt under way.
  std::string token_;
  clock::time_point by_;           // its deadline
  clock::time_point started_;      // when it was sent
  clock::time_point until_;        // when its budget runs out
  std::vector<Round> rounds_;      // each master's answer
  std::size_t owed_ = 0;           // answers still to come
  std::optional<Attempt> judged_;  // its outcome, once the masters answered
  std::exception_ptr failure_;     // or why there is none (NoQuorumError)
  std::size_t wrong_type_ = 0;     // its take-back's WRONGTYPE answers
  std::string id_;                 // the token of the grant
  OpWakes<RedlockOp> wakes_;
};

template <class Handler>
struct AcquireOpOf<distlock::Redlock, Side::exclusive, Handler> {
  using type = RedlockOp<Handler>;
};

}  // namespace distlock::detail
