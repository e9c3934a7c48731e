// distlock::FairMutex: a re-entrant lock granted in the order its waiters
// arrived, stored as Redisson's RFairLock stores it.
//
// The lock itself is a ReentrantMutex hash (owner id -> hold count). A
// waiter refused joins the queue "redisson_lock_queue:{<key>}" and holds a
// deadline in "redisson_lock_timeout:{<key>}": the lock goes to the waiter
// at the front when it is free, to nobody else, and a release tells that
// waiter alone, on "redisson_lock__channel:{<key>}:<owner id>" (the layout
// and rules are in detail/wire/fair_scripts.hpp). A waiter asks again at
// least every third of its waiter timeout, renewing its place; one that
// stops asking (its process died) is dropped from the front within its
// waiter timeout, and one that gives up (its deadline passed, or
// cancel_waits()) leaves the queue. try_lock() never joins
// the queue: it takes the lock only when nobody waits for it.
//
// Java services on Redisson's RFairLock and C++ services on FairMutex
// queue in one line on one name. Redisson's clients judge queue deadlines
// by their own wall clocks; these scripts by the server's clock (TIME), so
// a C++ waiter never skips or stalls the queue for a skewed client clock.
// In a mixed fleet a Java client's skew still moves its own deadlines.
//
//   distlock::FairMutex turns{redis, "printer"};
//   std::lock_guard guard(turns);   // served in arrival order
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/backend.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/exclusive_lock.hpp"
#include "distlock/detail/lifecycle/field_hold.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {

namespace detail {

enum class FairKind { exclusive };

/// How long a waiter that gave up may spend telling Redis it left the
/// queue, after its own deadline: one round trip, cut short so that a slow
/// server does not hold the caller (the entry then lapses by itself).
inline constexpr std::chrono::milliseconds leave_budget{50};

/// A waiter timeout, if it lies in [30 ms, 1 day]: a waiter asks again
/// every third of it, which must leave room for a round trip.
inline std::chrono::milliseconds checked_waiter_timeout(std::chrono::milliseconds timeout) {
  if (timeout < std::chrono::milliseconds(30) || timeout > std::chrono::hours(24)) {
    throw InvalidArgument("a fair lock's waiter_timeout must lie between 30 ms and 24 hours, not " +
                          std::to_string(timeout.count()) + " ms");
  }
  return timeout;
}

// FairMutex's Protocol: the fair scripts over the hash-field core.
class FairProtocol : public OwnerFieldCore<FairKind> {
  using Core = OwnerFieldCore<FairKind>;

 public:
  FairProtocol(const Backend& backend, std::string key, const LockOptions& options,
               std::chrono::milliseconds waiter_timeout)
      : Core(backend, key, redisson_prefixed("redisson_lock__channel", key), options),
        queue_key_(redisson_prefixed("redisson_lock_queue", this->key_)),
        deadlines_key_(redisson_prefixed("redisson_lock_timeout", this->key_)),
        waiter_timeout_(waiter_timeout.count()),
        waiting_(std::make_shared<Waiting>()) {
    this->site_->check_keys("fair lock '" + this->key_ + "'",
                            {this->key_, queue_key_, deadlines_key_});
  }

  /// One attempt; a refused one that `waits` joins the queue (or keeps its
  /// place), one that does not leaves it. Its undo, behind an attempt whose
  /// reply never came, gives back a grant and leaves the queue.
  std::optional<Attempt> attempt(Kind, const std::string& owner, SteadyClock::time_point deadline,
                                 bool waits) {
    return this->attempt_field(
        deadline,
        [&](Connection& connection) {
          // The fence counter is the fourth key, with fencing only.
          const std::string_view keys[] = {this->key_, queue_key_, deadlines_key_,
                                           this->fence_key_};
          return this->acquire_answer(
              connection.eval(scripts::fair_acquire, Args(keys, this->fencing_ ? 4 : 3),
                              {this->ttl_, owner, waiter_timeout_, waits ? "1" : "0"}),
              "fair acquire");
        },
        [&](UndoWriter& write) {
          write.script(scripts::fair_release, {this->key_, queue_key_, deadlines_key_},
                       {owner, this->channel_});
          write.script(scripts::fair_leave, {this->key_, queue_key_, deadlines_key_},
                       {owner, waiter_timeout_, this->channel_});
        });
  }

  TokenCheck release(Kind, const std::string& owner) {
    return this->released(owner, [&](Connection& connection) {
      return field_check(connection.eval(scripts::fair_release,
                                         {this->key_, queue_key_, deadlines_key_},
                                         {owner, this->channel_}));
    });
  }

  /// A waiter hears of a release on a channel of its own; cancel_waits()
  /// wakes every one of this object's waiters on theirs.
  std::optional<Notifier::Subscription> subscribe(const std::string& id,
                                                  SteadyClock::time_point deadline) {
    std::string channel = channel_of(id);
    {
      MutexLock guard(waiting_->mutex);
      waiting_->channels.insert(channel);
    }
    return this->site_->subscribe(channel, deadline);
  }
  void wake() {
    std::vector<std::string> channels;
    {
      MutexLock guard(waiting_->mutex);
      channels.assign(waiting_->channels.begin(), waiting_->channels.end());
    }
    for (const std::string& channel : channels) this->site_->wake(channel);
  }

  /// The waiter `id`, whose call had `deadline`, gave up without a last
  /// attempt that left the queue (cancel_waits(), an error, or an attempt
  /// answered past the deadline or not at all): it leaves at once if Redis
  /// answers within leave_budget and the deadline, else from the backend's
  /// connector thread, so that the call returns by its deadline: an entry
  /// left behind would hold the front of the queue for up to a waiter
  /// timeout. (A leave sent so may land after this thread's next wait on
  /// the lock has begun, and take its place: it then joins again at the
  /// back when it next asks.)
  void left(Kind, const std::string& id, SteadyClock::time_point deadline,
            bool answering) noexcept {
    try {
      {
        MutexLock guard(waiting_->mutex);
        waiting_->channels.erase(channel_of(id));
      }
      const SteadyClock::time_point now = SteadyClock::now();
      if (answering && now < deadline) {
        try {
          leave(*this->site_, std::min(deadline, now + leave_budget), id);
          return;
        } catch (const Error&) {
        }
      }
      this->site_->connector().post([site = this->site_, protocol = *this, id]() noexcept {
        try {
          protocol.leave(*site, no_deadline, id);
        } catch (...) {
        }
      });
    } catch (...) {
    }
  }

  const std::string& queue_key() const noexcept { return queue_key_; }
  const std::string& deadlines_key() const noexcept { return deadlines_key_; }

 private:
  struct Waiting {
    Mutex mutex;
    std::set<std::string> channels DISTLOCK_GUARDED_BY(mutex);
  };

  std::string channel_of(const std::string& id) const { return this->channel_ + ':' + id; }

  void leave(Site& site, SteadyClock::time_point deadline, const std::string& id) const {
    on_site(site, deadline, [&](Connection& connection) {
      connection
          .eval(scripts::fair_leave, {this->key_, queue_key_, deadlines_key_},
                {id, waiter_timeout_, this->channel_})
          .throw_if_error();
    });
  }

  const std::string queue_key_;
  const std::string deadlines_key_;
  const Decimal waiter_timeout_;
  std::shared_ptr<Waiting> waiting_;
};

}  // namespace detail

/// A re-entrant lease lock granted first come, first served, in Redisson's
/// RFairLock layout, on any Backend. As ReentrantMutex for everything but
/// the order (see the top of this file and detail::ExclusiveLock for each
/// member's contract): each thread's holds are its own, and only a thread's
/// first lock and last unlock reach Redis.
class FairMutex : public detail::ExclusiveLock<detail::FairProtocol> {
  using Base = detail::ExclusiveLock<detail::FairProtocol>;

 public:
  /// How long a waiter may go without asking before it loses its place,
  /// which is also how long one that died can hold the front of the queue.
  /// Redisson's default is 5 minutes; a FairMutex waiter renews its place
  /// as it asks (every third of this), so a short one costs little.
  static constexpr std::chrono::milliseconds default_waiter_timeout{std::chrono::seconds(10)};
  /// Redisson's own default (its lock(); its tryLock(wait, ...) uses the
  /// wait). A Java grant moves every queued deadline up by the Java
  /// client's wait time, so in a fleet with Java clients a FairMutex needs
  /// a waiter timeout at least theirs, or a Java grant can drop its live
  /// waiters (who then join again at the back).
  static constexpr std::chrono::milliseconds redisson_waiter_timeout{std::chrono::minutes(5)};

  /// Validates name, options and waiter_timeout (InvalidArgument: at least
  /// 30 ms, at most a day); contacts no server.
  DISTLOCK_DECL FairMutex(const Backend& backend, std::string_view name, LockOptions options = {},
                          AcquirePolicy policy = {},
                          std::chrono::milliseconds waiter_timeout = default_waiter_timeout);

  /// How many times the calling thread holds the lock through this object.
  unsigned hold_count() const noexcept { return this->life_->depth(Base::kind); }

  /// The calling thread's owner id: its hash field and its place in the
  /// queue, "<client id>:<thread number>".
  std::string owner_id() const { return this->life_->protocol().owner(); }

  /// The waiters' queue, redisson_lock_queue:{key}, and their deadlines,
  /// redisson_lock_timeout:{key}.
  const std::string& queue_key() const noexcept { return this->life_->protocol().queue_key(); }
  /// The waiters' deadlines, redisson_lock_timeout:{key}: a sorted set of
  /// owner ids, each scored by when it must ask again (ms since the epoch).
  const std::string& deadlines_key() const noexcept {
    return this->life_->protocol().deadlines_key();
  }
};

namespace detail {
DISTLOCK_EXCLUSIVE_LOCK_OF(FairProtocol)
}  // namespace detail

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL FairMutex::FairMutex(const Backend& backend, std::string_view name,
                                   LockOptions options, AcquirePolicy policy,
                                   std::chrono::milliseconds waiter_timeout)
    : Base(detail::FairProtocol(backend, detail::lock_key(options, name), options,
                                detail::checked_waiter_timeout(waiter_timeout)),
           options, std::move(policy)) {}
#endif

}  // namespace distlock
