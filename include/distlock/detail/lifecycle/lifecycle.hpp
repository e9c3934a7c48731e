// Lifecycle: everything a lock object does between its wire protocol and
// its user, written once for every lock type.
//
// It keeps the object's holds (detail/lifecycle/hold_keeper.hpp), drives
// the acquire steps (detail/lifecycle/acquire_steps.hpp: re-entry, a
// holder of this object to wait behind; attempt; subscribe to the release
// channel; sleep until a release, the policy's pause, the holder's lease or
// the deadline; try again) by blocking the calling thread, and extends
// leases. Holds are adopted (registered with the Watchdog: renewed, or of
// fixed ttl and kept for revalidation only) by the steps, and released by
// HoldKeeper.
//
// A Protocol supplies the server steps (OneKindProtocol, in acquire.hpp,
// answers the questions about kinds for a protocol with one):
//
//   using Kind;                        the kinds of hold (read/write, or one)
//   static constexpr bool per_thread;  holds belong to threads (re-entrant)
//                                      rather than to the object
//   given_back_first(kind)             which kinds a destructor releases first
//   check_process(), forked()          Error(forked) / true in a forked child
//   id_for(kind), before_first(kind, depth_of)   hold id; refusals (upgrade)
//   async_id_for(kind)                 per_thread only: an async acquire's
//                                      hold id, an owner of its own
//   attempt(kind, id, deadline, waits) -> optional<Attempt>, undo included;
//                                      waits: false when no wait follows a
//                                      refusal (a try, or a wait's last
//                                      attempt: a fair queue is left)
//   release(kind, id) / extend(kind, id, ttl)  -> TokenCheck
//   read_holder(deadline), subscribe(id, deadline), wake()   for waiting
//   listens_elsewhere(id)              the waiter's refusal names another
//                                      channel than it subscribed to
//   left(kind, id, deadline, answering)  a waiting acquire of id with
//                                      `deadline` ended without the lock,
//                                      after an attempt (answering: Redis
//                                      was answering it); noexcept
//   watched(kind, id, sent, options)   -> the Watchdog's LeaseState, never
//                                      null: every hold has one, and its
//                                      expiry_after() takes off any margin
//   watchdog(), held(kind, +1/-1), key(), describe(kind)
//   events()                           the Client's event hook (events.hpp)
//
// Holds: with per_thread false (Mutex, SimpleMutex, Redlock) the object
// has at most one, as a shared std::mutex: another thread of the object
// waits for it, the holding thread may not lock again, any thread may
// unlock. With per_thread true (ReentrantMutex, SharedMutex) each thread
// has its own per kind, counted locally: only a thread's first lock and
// last unlock of a kind reach Redis. An async hold (distlock/asio.hpp) is
// no thread's: of a per_thread protocol, each is an owner of its own that
// never re-enters, counted by no thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/acquire_steps.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

template <class Protocol>
class Lifecycle : public AcquireSteps<Protocol> {
 public:
  using Kind = typename Protocol::Kind;
  using clock = SteadyClock;

  Lifecycle(Protocol protocol, LockOptions options, AcquirePolicy policy,
            Cancellation cancellation = {})
      : AcquireSteps<Protocol>(std::move(protocol), std::move(options), std::move(policy),
                               std::move(cancellation)) {}

  /// Acquires a hold of `kind` for the calling thread (see the top of file),
  /// running each step the acquire steps name and sleeping on the release
  /// channel (or, polling or behind a holder of this object, on the
  /// Cancellation, which cancel_waits() and a local unlock wake).
  Outcome acquire(Kind kind, clock::time_point deadline, bool wait) {
    Waiter waiter(kind, deadline, wait, cancellation_.generation());
    Outcome outcome;
    try {
      outcome = run(waiter);
    } catch (const Error& error) {
      if (wait && waiter.attempts > 0) {
        protocol_.left(kind, waiter.id, deadline, answered(error.code()));
      }
      throw;
    }
    // A last attempt refused has left already (it did not wait).
    const bool gone = waiter.last_chance && waiter.answered;
    if (wait && outcome != Outcome::acquired && waiter.attempts > 0 && !gone) {
      protocol_.left(kind, waiter.id, deadline, outcome != Outcome::unanswered);
    }
    return outcome;
  }

  /// Sets the hold's lease to `ttl` if it is still ours (see Mutex::extend).
  bool extend(Kind kind, std::chrono::milliseconds ttl) {
    std::string id;
    std::shared_ptr<LeaseState> lease;
    {
      MutexLock guard(mutex_);
      const Hold* hold = holds_.mine(kind);
      if (hold == nullptr) throw NotHeldError(not_held_message(kind));
      id = hold->id;
      lease = hold->lease;
    }
    protocol_.check_process();
    if (lease->lost) {
      forget(kind, id, Release::lost);
      return false;
    }
    // Renewals of this lease wait meanwhile, so none sent before this
    // extend can land after it and set the old lease back.
    std::optional<Watchdog::HoldOff> quiet = protocol_.watchdog().hold_off(*lease);
    const clock::time_point sent = clock::now();
    const TokenCheck found = lease->lost ? TokenCheck::no_key : protocol_.extend(kind, id, ttl);
    if (found != TokenCheck::done) {
      quiet.reset();
      forget(kind, id, lease->lost ? Release::lost : to_release(found));
      return false;
    }
    quiet->extended(ttl, sent);
    return true;
  }

  /// Makes every acquire of this object that is waiting now give up.
  void cancel_waits() {
    cancellation_.cancel();
    if (options_.wake_on_release()) protocol_.wake();
  }

  // For an event-loop driver (distlock/asio.hpp): the steps acquire()
  // runs, each called on one thread at a time per Waiter, the give-back of
  // a grant the driver could not hand over, and what a sleep waits on.
  using Steps = AcquireSteps<Protocol>;
  using Steps::attempted;
  using Steps::give_back;
  using Steps::holder_read;
  using Steps::start;
  using Steps::subscribed;
  using Steps::woken;
  using typename Steps::Next;
  using typename Steps::Step;
  using typename Steps::Waiter;
  Cancellation& cancellation() noexcept { return cancellation_; }

 private:
  // Whether an error that ended an acquire came from a Redis that answered
  // (a server error, a refusal by a rule) rather than from one that did not.
  static bool answered(std::error_code code) noexcept {
    return code != Errc::connect_failed && code != Errc::io_error && code != Errc::timed_out &&
           code != Errc::protocol_error && code != Errc::pool_exhausted && code != Errc::forked;
  }

  // The steps of one acquire, each run on the calling thread.
  Outcome run(Waiter& waiter) {
    for (Next next = start(waiter);;) {
      switch (next.step) {
        case Step::attempt:
          next = attempted(waiter, protocol_.attempt(waiter.kind, waiter.id, next.by,
                                                     waiter.wait && !waiter.last_chance));
          break;
        case Step::read_holder: next = holder_read(waiter, protocol_.read_holder(next.by)); break;
        case Step::subscribe:
          next = subscribed(waiter, protocol_.subscribe(waiter.id, next.by));
          break;
        case Step::sleep:
          if (waiter.subscription && !waiter.local_holder) {
            waiter.subscription->wait(waiter.seen, next.by);
          } else {
            cancellation_.sleep_until(waiter.cancel_seen, next.by);
          }
          next = woken(waiter);
          break;
        case Step::done: return next.outcome;
      }
    }
  }

  using Steps::cancellation_;
  using Steps::forget;
  using Steps::holds_;
  using Steps::mutex_;
  using Steps::not_held_message;
  using Steps::options_;
  using Steps::protocol_;
  using typename Steps::Hold;
};

}  // namespace distlock::detail
