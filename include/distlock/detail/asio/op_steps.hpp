// OpSteps: what an async operation on a link (AcquireOp, RateOp) keeps of
// its steps. Each step, or wait, has a number, and the one steady_timer on
// the link's strand ends it at its time: a timer, wake or answer that comes
// for an earlier step finds the operation moved on and does nothing. It
// also keeps the request in flight and the link it went on (forgotten when
// nobody waits for it any longer), the handler's cancellation slot, whose
// terminal signal posts the operation's cancel() to the strand from
// whichever thread emits it, and the completion, posted once to the
// handler's executor. Everything here runs on the link's strand, but the
// slot's signal.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/wire/link.hpp"

namespace distlock::detail {

/// `Op` has `OpSteps<Op> steps_`, and, for this class (a friend),
/// `timed_out()` and `cancel()`.
template <class Op>
class OpSteps {
 public:
  /// On the operation's link, before any step.
  void bind(std::shared_ptr<AsioLink> link) {
    link_ = std::move(link);
    timer_.emplace(link_->strand());
  }
  const std::shared_ptr<AsioLink>& link() const noexcept { return link_; }

  /// A new step, numbered now (current()); `op->timed_out()` runs at `by`
  /// if it is still under way (never for no_deadline).
  void begin(const std::shared_ptr<Op>& op, SteadyClock::time_point by) {
    const unsigned at = ++current_;
    if (by == no_deadline) return;
    timer_->expires_at(by);
    timer_->async_wait([op, at](const std::error_code&) {
      if (op->steps_.current_ == at && !op->steps_.finished_) op->timed_out();
    });
  }
  /// The step ended: its timers let go.
  void end() noexcept {
    ++current_;
    try {
      if (timer_) timer_->cancel();
      if (pause_timer_) pause_timer_->cancel();
    } catch (...) {  // left to run out: they find the step over
    }
  }
  unsigned current() const noexcept { return current_; }
  bool finished() const noexcept { return finished_; }

  /// Has the link write a step (see AsioLink::submit): where the site
  /// routes the key, or where an ASK sent the step last refused.
  void submit(std::shared_ptr<Site> site, AsioLink::Write write, AsioLink::Failed failed) {
    const void* asked = std::exchange(asked_, nullptr);
    asking_ = asked != nullptr;
    if (asking_) {
      return link_->submit_asked(std::move(site), asked, std::move(write), std::move(failed));
    }
    link_->submit(std::move(site), std::move(write), std::move(failed));
  }
  /// Whether the last step submitted went behind ASKING (to the node an
  /// ASK named), which lets only the next command in: any other command
  /// of the step needs an ASKING of its own.
  bool asking() const noexcept { return asking_; }

  /// A step refused with `reply` sent again, if again() says so (false
  /// if not): `send(*op)` at once after a redirect; after a refusal for
  /// now, `hold()` begins the step again (its timer, at the step's
  /// deadline, ends it as it would have) and `send(*op)` runs once the
  /// pause has passed, if that step is still current.
  template <class Hold, class Send>
  bool send_again(Site& site, std::string_view reply, const std::shared_ptr<Op>& op, Hold hold,
                  Send send) {
    const std::optional<std::chrono::milliseconds> pause = again(site, reply);
    if (!pause) return false;
    if (pause->count() == 0) {
      send(*op);
      return true;
    }
    hold();
    if (!pause_timer_) pause_timer_.emplace(link_->strand());
    pause_timer_->expires_after(*pause);
    pause_timer_->async_wait([op, at = current_, send](const std::error_code&) {
      if (op->steps_.current_ == at && !op->steps_.finished_) send(*op);
    });
    return true;
  }

  /// The request of the step under way, sent on `on`, while its answer is
  /// awaited (and `on` with it: a link's sinks all run before it goes).
  void sent(Link& on, Link::Ticket ticket) noexcept {
    in_flight_ = ticket;
    on_ = &on;
  }
  /// Nothing in flight any longer (its answer came, or is not awaited).
  void clear_in_flight() noexcept { in_flight_.reset(); }
  /// Not waited for any longer: its answer is dropped, and `behind(link)`
  /// writes what must follow it on the same connection (an undo).
  template <class Behind>
  void forget_in_flight(Behind&& behind) {
    if (!in_flight_) return;
    on_->forget(*in_flight_);
    in_flight_.reset();
    std::forward<Behind>(behind)(*on_);
    link_->pump();
  }

  /// Terminal cancellation on `slot` (the handler's, if connected) posts
  /// `op->cancel()` to the strand; the operation, gone by then, is not
  /// kept alive for it.
  void watch(asio::cancellation_slot slot, const std::weak_ptr<Op>& op) {
    slot_ = slot;
    if (!slot_.is_connected()) return;
    slot_.assign([op, strand = link_->strand()](asio::cancellation_type type) {
      if ((type & asio::cancellation_type::terminal) == asio::cancellation_type::none) return;
      asio::post(strand, [op] {
        if (std::shared_ptr<Op> self = op.lock()) self->cancel();
      });
    });
  }

  /// Once, after end(): `handler(args...)` posted to `work`, never run
  /// inside the initiating call; false (nothing done) if it completed
  /// before. The slot is let go there too, where its signal is emitted (a
  /// slot is not thread-safe); a cancellation meanwhile finds the operation
  /// finished.
  template <class Handler, class... Args>
  bool complete(asio::any_io_executor& work, Handler& handler, Args... args) {
    if (finished_) return false;
    finished_ = true;
    asio::post(std::exchange(work, asio::any_io_executor()),
               [slot = slot_, done = std::move(handler),
                given = std::make_tuple(std::move(args)...)]() mutable {
                 if (slot.is_connected()) slot.clear();
                 std::apply([&](auto&... arg) { std::move(done)(std::move(arg)...); }, given);
               });
    return true;
  }

 private:
  /// In the sink of a step `site` refused with the error reply `reply`:
  /// whether it goes again, and after what pause. A cluster's redirect
  /// (MOVED, ASK) sends it again at once, a refusal for now (TRYAGAIN,
  /// CLUSTERDOWN) after the site's retry_pause, doubling at each: it was
  /// not run. max_redirects times in one operation at most.
  std::optional<std::chrono::milliseconds> again(Site& site, std::string_view reply) {
    const AsioLink::Refused next = link_->refused(site, reply);
    const bool redirected = next.moved || next.asked != nullptr;
    if (!(redirected || next.for_now) || redirects_ >= site.max_redirects()) return std::nullopt;
    ++redirects_;
    asked_ = next.asked;
    if (redirected) return std::chrono::milliseconds(0);
    const std::chrono::milliseconds pause = pause_.count() > 0 ? pause_ : site.retry_pause();
    pause_ = 2 * pause;
    return pause;
  }

  std::shared_ptr<AsioLink> link_;
  std::optional<Link::Ticket> in_flight_;
  Link* on_ = nullptr;                             // the link in_flight_ went on
  unsigned redirects_ = 0;                         // followed so far
  const void* asked_ = nullptr;                    // where an ASK sends the next step
  bool asking_ = false;                            // the last step went behind ASKING
  std::chrono::milliseconds pause_{};              // before the next refusal for now's retry
  std::optional<asio::steady_timer> timer_;        // on the link's strand
  std::optional<asio::steady_timer> pause_timer_;  // after a refusal for now
  asio::cancellation_slot slot_;
  unsigned current_ = 0;
  bool finished_ = false;
};

}  // namespace distlock::detail
