// TryLockOp: async_try_lock() (distlock/asio.hpp) as an operation that
// runs the lock's acquire steps (detail/lifecycle/acquire_steps.hpp) over an
// AsioLink: each server step a Next names is written on the link, and its
// answer, decoded by the protocol, goes to the next step; the sinks, the
// writes and a cancellation all run on the link's strand, one at a time.
//
// An attempt whose answer never comes (the link broke, or its command
// timeout passed) may still have been applied: its undo is written behind
// it on the same connection, and, where the server closed the connection
// mid-reply (so nothing written behind arrives), given back apart by the
// connector thread, as the blocking path does. A cancelled attempt is
// forgotten and undone behind itself the same way.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/lifecycle.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock {

template <class Lock>
class AsyncHold;

namespace detail {

template <class Life>
struct LifeTraits;
template <class P>
struct LifeTraits<Lifecycle<P>> {
  using Protocol = P;
  static constexpr typename P::Kind exclusive = P::exclusive;
};

/// What an async call reaches of a lock object and of its holds.
struct AsyncAccess {
  template <class Lock>
  static auto life_of(Lock& lock) {
    return lock.life_;
  }
  template <class Lock, class Life>
  static AsyncHold<Lock> hold(std::shared_ptr<Life> life, std::string id) noexcept {
    return AsyncHold<Lock>(std::move(life), std::move(id));
  }
  template <class Lock>
  static auto take(AsyncHold<Lock>& hold) noexcept {
    return std::make_pair(std::move(hold.life_), std::move(hold.id_));
  }
};

/// Whether a Protocol has its steps in a form a link sends (see
/// LeaseProtocol::send_attempt).
template <class P, class = void>
struct HasLinkSteps : std::false_type {};
template <class P>
struct HasLinkSteps<
    P, std::void_t<decltype(std::declval<const P&>().attempt_answer(std::declval<const Reply&>()))>>
    : std::true_type {};

template <class Lock>
using LifeOf = typename decltype(AsyncAccess::life_of(std::declval<Lock&>()))::element_type;
template <class Lock>
using HoldParts = decltype(AsyncAccess::take(std::declval<AsyncHold<Lock>&>()));

/// The error code an exception from a step stands for.
inline std::error_code code_of(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const std::system_error& error) {
    return error.code();
  } catch (const std::bad_alloc&) {
    return std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    return make_error_code(Errc::protocol_error);
  }
}

template <class Lock, class Handler>
class TryLockOp : public std::enable_shared_from_this<TryLockOp<Lock, Handler>> {
  using Life = LifeOf<Lock>;
  using Protocol = typename LifeTraits<Life>::Protocol;
  using Waiter = typename Life::Waiter;
  using Next = typename Life::Next;
  using Step = typename Life::Step;
  static constexpr auto kind = LifeTraits<Life>::exclusive;
  static_assert(!Protocol::per_thread && HasLinkSteps<Protocol>::value,
                "async_try_lock takes a distlock::Mutex so far");

 public:
  TryLockOp(std::shared_ptr<Life> life, Handler handler)
      : life_(std::move(life)),
        handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_)),
                           asio::execution::outstanding_work.tracked)),
        waiter_(kind, Life::clock::now(), /*wait=*/false, 0) {}

  // In the initiating call: nothing completes inside it.
  void start() {
    try {
      Protocol& protocol = life_->protocol();
      protocol.check_process();
      const std::shared_ptr<Site>& site = protocol.site();
      if (!site->one_endpoint() || protocol.waits_for_replicas()) {
        throw InvalidArgument(protocol.key() +
                              ": async locks run on a Client without LockOptions::replicas "
                              "so far (this lock is on " +
                              site->describe() + ")");
      }
      waiter_.async = true;
      const Next first = life_->start(waiter_);
      id_ = waiter_.id;
      // The link counts as work only while a step is in flight (its waits).
      link_ =
          asio::use_service<LinkService>(asio::query(work_, asio::execution::context))
              .link_for(*site, asio::prefer(work_, asio::execution::outstanding_work.untracked));
      watch_cancellation();
      run(first);
    } catch (...) {
      finish(code_of(std::current_exception()));
    }
  }

 private:
  // Each of these runs on the link's strand, but start()'s first run().
  void run(const Next& next) {
    switch (next.step) {
      case Step::done: return finish(next.outcome);
      case Step::attempt: return send_attempt();
      case Step::read_holder: return send_holder_read();
      case Step::subscribe:
      case Step::sleep: break;  // a try_lock never waits
    }
    finish(make_error_code(Errc::invalid_argument));
  }

  // Has `send(self, link)` run on the link, unless the operation finished
  // meanwhile; no link to be had ends it.
  template <class Send>
  void on_link(Send send) {
    auto self = this->shared_from_this();
    link_->submit(
        life_->protocol().site(),
        [self, send](Link& link) {
          if (!self->finished_) send(self, link);
        },
        [self](std::exception_ptr failure) { self->fail(failure); });
  }

  void send_attempt() {
    on_link([](const std::shared_ptr<TryLockOp>& self, Link& link) {
      self->in_flight_ = self->life_->protocol().send_attempt(
          link, self->id_,
          [self](LinkAnswer answer) { self->attempt_answered(std::move(answer)); });
    });
  }

  void attempt_answered(LinkAnswer answer) {
    in_flight_.reset();
    if (finished_) return;
    Protocol& protocol = life_->protocol();
    if (answer.failure) {
      undo(code_of(answer.failure) == Errc::io_error);
      return fail(answer.failure);
    }
    try {
      Attempt attempt;
      try {
        attempt = protocol.attempt_answer(*answer.reply);
      } catch (const ServerError&) {
        throw;  // refused by the server: nothing was applied
      } catch (const Error&) {
        undo(false);  // an answer no server gives: the step may have been applied
        throw;
      }
      run(life_->attempted(waiter_, std::move(attempt)));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // A try_lock refused without a reason looks once at the key (PTTL, TYPE).
  void send_holder_read() {
    on_link([](const std::shared_ptr<TryLockOp>& self, Link& link) {
      const std::string& key = self->life_->protocol().key();
      link.send({"PTTL", key}, [self](LinkAnswer answer) {
        if (answer.reply) self->pttl_ = std::move(answer.reply);
      });
      self->in_flight_ = link.send(
          {"TYPE", key}, [self](LinkAnswer answer) { self->holder_answered(std::move(answer)); });
    });
  }

  void holder_answered(LinkAnswer answer) {
    in_flight_.reset();
    if (finished_) return;
    if (answer.failure) return fail(answer.failure);
    if (!pttl_) return finish(make_error_code(Errc::protocol_error));
    try {
      run(life_->holder_read(waiter_, life_->protocol().holder_answer(*pttl_, *answer.reply)));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // The attempt in flight may have been applied: undo it behind itself,
  // and apart too where the connection closed under it, on a connection of
  // the connector's own (a pooled one may have been closed with it).
  void undo(bool apart) noexcept {
    if (Link* link = link_->current()) life_->protocol().send_undo(*link, id_);
    if (!apart) return;
    try {
      life_->protocol().site()->connector().post([life = life_, id = id_] {
        try {
          Connection fresh(life->protocol().site()->options());
          life->protocol().undo_on(fresh, id);
        } catch (...) {  // best effort: the lease runs out otherwise
        }
      });
    } catch (...) {
    }
  }

  // Terminal cancellation: posted to the strand from whichever thread asks.
  void watch_cancellation() {
    slot_ = asio::get_associated_cancellation_slot(handler_);
    if (!slot_.is_connected()) return;
    std::weak_ptr<TryLockOp> weak = this->shared_from_this();
    const AsioLink::Strand strand = link_->strand();
    slot_.assign([weak, strand](asio::cancellation_type type) {
      if ((type & asio::cancellation_type::terminal) == asio::cancellation_type::none) return;
      asio::post(strand, [weak] {
        if (std::shared_ptr<TryLockOp> self = weak.lock()) self->cancel();
      });
    });
  }

  void cancel() {
    if (finished_) return;
    if (in_flight_) {
      if (Link* link = link_->current()) link->forget(*in_flight_);
      in_flight_.reset();
      undo(false);  // harmless after a read of the holder: the token is ours alone
      link_->pump();
    }
    finish(asio::error::operation_aborted);
  }

  void fail(const std::exception_ptr& failure) { finish(code_of(failure)); }

  void finish(Outcome outcome) {
    switch (outcome) {
      case Outcome::acquired: return complete({}, AsyncAccess::hold<Lock>(life_, id_));
      case Outcome::timed_out: return complete({}, AsyncHold<Lock>());
      case Outcome::unanswered: return finish(make_error_code(Errc::timed_out));
      case Outcome::cancelled: return finish(make_error_code(Errc::cancelled));
    }
  }
  void finish(std::error_code ec) { complete(ec, AsyncHold<Lock>()); }

  // Once: on the handler's executor, never inside the initiating call. The
  // slot is let go there too, where its signal is emitted (a slot is not
  // thread-safe); a cancellation meanwhile finds the operation finished.
  void complete(std::error_code ec, AsyncHold<Lock> hold) {
    if (finished_) return;
    finished_ = true;
    asio::any_io_executor work = std::exchange(work_, asio::any_io_executor());
    asio::post(work,
               [slot = slot_, handler = std::move(handler_), ec, hold = std::move(hold)]() mutable {
                 if (slot.is_connected()) slot.clear();
                 std::move(handler)(ec, std::move(hold));
               });
  }

  const std::shared_ptr<Life> life_;
  Handler handler_;
  asio::any_io_executor work_;  // keeps the handler's context running until it completes
  Waiter waiter_;
  std::string id_;  // the token of this acquisition
  std::shared_ptr<AsioLink> link_;
  asio::cancellation_slot slot_;
  std::optional<Link::Ticket> in_flight_;
  std::optional<Reply> pttl_;
  bool finished_ = false;
};

}  // namespace detail
}  // namespace distlock
