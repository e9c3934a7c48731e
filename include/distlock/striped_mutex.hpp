// distlock::StripedMutex: K independent locks (stripes) under one name,
// for work that splits into segments: a flash sale's stock in 100
// segments, a cache in shards. Contenders for different stripes never wait
// for each other.
//
// Stripe i is an ordinary Mutex lease on the key "<name>:<i>" (i from 0 to
// K-1, in decimal): the stored layout is Mutex's, and since the keys share
// no hash tag a Redis Cluster spreads them over its slots (unless the name
// itself has a hash tag, which then puts every stripe in that one slot).
//
// lock(key) takes the stripe a key maps to: FNV-1a (32-bit) of the key's
// bytes, modulo K. FNV-1a: start from 2166136261; for each byte, XOR it in,
// then multiply by 16777619 modulo 2^32. Any language that hashes the same
// bytes the same way finds the same stripe. try_lock_any() and
// try_lock_any_for/until() take whichever stripe is free: first the one the
// object took last, then the others in order from a random start. A
// contender with an object of its own so settles on a stripe the others
// leave alone, and contenders spread out instead of all queueing on stripe
// 0 (each stripe another contender holds costs a refused round trip).
//
//   distlock::StripedMutex segments{redis, "sale:stock", 100};
//   if (auto [stripe, guard] = segments.try_lock_any_for(2s); guard) sell_from(stripe);
//
// The waiting calls have the standard's lock vocabulary: lock(key),
// try_lock_for(key, timeout) and try_lock_until(key, deadline) for a key's
// stripe, try_lock_any_for/until() for any stripe; cancel_waits() ends
// every one of them under way.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/lifecycle/single_server.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"

namespace distlock {

/// FNV-1a, 32-bit, of `bytes`: the stripe hash (see the top of the file).
constexpr std::uint32_t fnv1a32(std::string_view bytes) noexcept {
  std::uint32_t hash = 2166136261u;
  for (const char c : bytes) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 16777619u;
  }
  return hash;
}

namespace detail {
struct AsyncAccess;

/// At random in [0, n), n > 0.
inline std::size_t random_below(std::size_t n) noexcept {
  return std::min(static_cast<std::size_t>(jitter_unit() * static_cast<double>(n)), n - 1);
}

/// What a StripedMutex's waits share with it: an async wait
/// (distlock/asio.hpp) keeps it, and may outlive the object.
struct Stripes {
  std::vector<std::unique_ptr<distlock::Mutex>> locks;
  std::vector<SitePtr> sites;                       // each stripe's, for waiting on any
  std::atomic<std::size_t> home{max_stripe_count};  // the stripe taken last; none yet
  Cancellation cancellation;                        // ends the waits on any stripe

  static constexpr std::size_t max_stripe_count = 65536;

  /// A wait on any stripe watches the release channel of one listed in
  /// `among` (not empty), chosen at random; on a cluster, at the node that
  /// owns that stripe's slot, reading the slot map again there if that
  /// node refuses. Releases of the others are seen at the next pass.
  Notifier::Subscription subscribe_to_one_of(const std::vector<std::size_t>& among,
                                             SteadyClock::time_point until) const {
    const std::size_t i = among[random_below(among.size())];
    return sites[i]->subscribe(companion_key(locks[i]->key(), "released"), until);
  }
};

/// The sleep between two passes of a wait on any stripe: 1 ms at first,
/// doubled after each up to 50 ms (a release announced on the channel
/// watched ends it sooner), and never past the deadline.
class PassPause {
 public:
  SteadyClock::time_point end(SteadyClock::time_point now, SteadyClock::time_point until) const {
    return until - now < pause_ ? until : now + pause_;
  }
  void grow() { pause_ = std::min(pause_ * 2, std::chrono::milliseconds(50)); }

 private:
  std::chrono::milliseconds pause_{1};
};

/// Where the attempts of a pass over the stripes are cut: at the deadline
/// `until`. A pass that is a try (the first, with the deadline passed) is
/// not cut; after waiting, a last pass past the deadline gets what little
/// is left (a stripe freed during the last sleep is still taken), as a
/// lock's last attempt does.
inline SteadyClock::time_point pass_cut(SteadyClock::time_point now, SteadyClock::time_point until,
                                        bool a_try) {
  if (a_try) return no_deadline;
  return now < until ? until : now + last_step;
}

/// 0 to n-1: every stripe of n.
inline std::vector<std::size_t> all_stripes(std::size_t n) {
  std::vector<std::size_t> every(n);
  for (std::size_t i = 0; i < n; ++i) every[i] = i;
  return every;
}

/// The order of one pass over the stripes listed in `among`: first the one
/// taken last (`home`), then the others in order from a random start. The
/// stripe taken last was free then, and is likely free again: a contender
/// that keeps its own object settles on a stripe of its own instead of
/// meeting the others at random ones, and contenders spread out instead of
/// all queueing on the first stripe listed.
class StripePass {
 public:
  StripePass(const std::vector<std::size_t>& among, std::size_t home)
      : among_(among),
        home_(home),
        has_home_(std::find(among.begin(), among.end(), home) != among.end()),
        start_(among.empty() ? 0 : random_below(among.size())) {}

  /// The next stripe to try; nullopt once the pass is over.
  std::optional<std::size_t> next() {
    if (has_home_ && !home_tried_) {
      home_tried_ = true;
      return home_;
    }
    while (tried_ < among_.size()) {
      const std::size_t i = among_[(start_ + tried_++) % among_.size()];
      if (!(has_home_ && i == home_)) return i;  // home was tried first
    }
    return std::nullopt;
  }

 private:
  const std::vector<std::size_t>& among_;
  const std::size_t home_;
  const bool has_home_;
  const std::size_t start_;
  bool home_tried_ = false;
  std::size_t tried_ = 0;
};
}  // namespace detail

/// K stripes of Mutex on any Backend, waiting by any AcquirePolicy. Shared by threads
/// as a Mutex is: each stripe has at most one holder through this object.
class StripedMutex {
 public:
  /// Each stripe is a Mutex.
  using Stripe = Mutex;
  /// The clock the waits keep their deadlines on; a deadline given on
  /// another clock is converted to it.
  using clock = std::chrono::steady_clock;

  /// A stripe taken by try_lock_any_for/until(): which one, and its guard
  /// (owns_lock() false, and `stripe` meaningless, when none was taken).
  struct Taken {
    /// The stripe's index; meaningless when none was taken.
    std::size_t stripe = 0;
    /// The stripe's lock, held; owns_lock() false when none was taken.
    std::unique_lock<Stripe> guard;
    /// Whether a stripe was taken: guard.owns_lock().
    explicit operator bool() const noexcept { return guard.owns_lock(); }
  };

  /// `stripes` from 1 to max_stripes. Validates name and options
  /// (InvalidArgument); contacts no server.
  DISTLOCK_DECL StripedMutex(const Backend& backend, std::string_view name, std::size_t stripes,
                             LockOptions options = {}, AcquirePolicy policy = {});
  DISTLOCK_DECL ~StripedMutex();
  /// Another handle on the same stripes, as a second thread sharing this
  /// object is: the stripes' holders, and cancel_waits(), are the two's.
  StripedMutex(const StripedMutex&) = default;
  /// As the copy constructor.
  StripedMutex& operator=(const StripedMutex&) = default;
  /// Takes `other`'s stripes; the moved-from object may only be destroyed
  /// or assigned to.
  StripedMutex(StripedMutex&& other) noexcept = default;
  /// As the move constructor.
  StripedMutex& operator=(StripedMutex&& other) noexcept = default;

  /// The most stripes one object may have.
  static constexpr std::size_t max_stripes = detail::Stripes::max_stripe_count;

  /// The number of stripes, as made.
  std::size_t size() const noexcept { return stripes_->locks.size(); }

  /// The stripe `key` maps to: fnv1a32(key) % size().
  std::size_t stripe_of(std::string_view key) const noexcept {
    return static_cast<std::size_t>(fnv1a32(key) % size());
  }

  /// Stripe `i` itself, a Mutex (its own lock(), try_lock_for(), lost(),
  /// fence()...). Throws std::out_of_range past size().
  Stripe& stripe(std::size_t i) { return *stripes_->locks.at(i); }
  /// As stripe(i), read-only.
  const Stripe& stripe(std::size_t i) const { return *stripes_->locks.at(i); }

  /// The Mutex for `key`'s stripe; lock it as any Mutex:
  ///   std::unique_lock guard{segments.of("item:42")};
  Stripe& of(std::string_view key) { return *stripes_->locks[stripe_of(key)]; }

  /// Locks `key`'s stripe (Mutex::lock(): throws Error(cancelled) after
  /// cancel_waits()) and returns its index.
  std::size_t lock(std::string_view key) {
    const std::size_t i = stripe_of(key);
    stripes_->locks[i]->lock();
    return i;
  }
  /// One attempt at `key`'s stripe (Mutex::try_lock()).
  [[nodiscard]] bool try_lock(std::string_view key) { return of(key).try_lock(); }
  /// Attempts at `key`'s stripe until taken or `timeout` passes
  /// (Mutex::try_lock_for(): false when busy or after cancel_waits()).
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(std::string_view key,
                                  const std::chrono::duration<Rep, Period>& timeout) {
    return of(key).try_lock_for(timeout);
  }
  /// As try_lock_for, until `deadline` of any clock (Mutex::try_lock_until()).
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(std::string_view key,
                                    const std::chrono::time_point<Clock, Duration>& deadline) {
    return of(key).try_lock_until(deadline);
  }
  /// Gives `key`'s stripe back if held (Mutex::unlock(), never throws).
  void unlock(std::string_view key) noexcept { of(key).unlock(); }

  /// One attempt at every stripe not held through this object: first the
  /// one this object took last, then the others in order from a random
  /// start; stops at the first it takes. Nullopt when every stripe is held.
  /// Costs up to size() round trips. Throws as try_lock().
  std::optional<std::size_t> try_lock_any() { return try_lock_any(all()); }

  /// As try_lock_any(), among the stripes listed in `among` only (a sale
  /// skips the segments it knows are sold out).
  std::optional<std::size_t> try_lock_any(const std::vector<std::size_t>& among) {
    detail::StripePass pass(among, stripes_->home.load(std::memory_order_relaxed));
    while (const std::optional<std::size_t> i = pass.next()) {
      if (take(*i)) return i;
    }
    return std::nullopt;
  }

  /// Takes whichever stripe is free first, waiting up to `timeout` (a zero
  /// or negative timeout is one pass of try_lock_any()). Between passes it
  /// sleeps until a release of one stripe chosen at random is announced,
  /// or a pause that grows from 1 ms to 50 ms ends (releases of the other
  /// stripes are seen at the next pass). Returns by the deadline, as a
  /// lock's wait does: every attempt is cut there (one that lands late is
  /// undone), and a last pass after the last sleep gets a last step's few
  /// milliseconds. Empty when every stripe stayed busy or after
  /// cancel_waits(); TimeoutError when Redis left the wait unanswered (an
  /// outage, not busy stripes); otherwise throws as try_lock().
  template <class Rep, class Period>
  Taken try_lock_any_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_any_until(detail::deadline_after(timeout), all());
  }
  /// As try_lock_any_for(timeout), among the stripes listed in `among` only.
  template <class Rep, class Period>
  Taken try_lock_any_for(const std::chrono::duration<Rep, Period>& timeout,
                         const std::vector<std::size_t>& among) {
    return try_lock_any_until(detail::deadline_after(timeout), among);
  }
  /// As try_lock_any_for, until `deadline` of any clock.
  template <class Clock, class Duration>
  Taken try_lock_any_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_lock_any_until(deadline, all());
  }
  /// As try_lock_any_for, until `deadline` of any clock, among the stripes
  /// listed in `among` only.
  template <class Clock, class Duration>
  Taken try_lock_any_until(const std::chrono::time_point<Clock, Duration>& deadline,
                           const std::vector<std::size_t>& among) {
    const clock::time_point until = detail::to_steady_deadline(deadline);
    detail::Cancellation& cancellation = stripes_->cancellation;
    const std::uint64_t cancel_seen = cancellation.generation();
    std::optional<Notifier::Subscription> subscription;
    detail::PassPause pause;
    detail::Heard heard;
    for (bool first = true;; first = false) {
      // Read before the pass, so a release announced after it ends the sleep.
      const std::uint64_t seen = subscription ? subscription->generation() : 0;
      clock::time_point now = clock::now();
      const clock::time_point cut = detail::pass_cut(now, until, first && now >= until);
      if (const std::optional<std::size_t> i = pass(among, cut, until, heard)) {
        return Taken{*i, std::unique_lock<Stripe>(stripe(*i), std::adopt_lock)};
      }
      now = clock::now();
      if (among.empty() || now >= until || cancellation.since(cancel_seen)) return Taken{};
      if (!subscription && stripe(0).options().wake_on_release()) {
        // Confirmed before the next pass: no release after it goes unseen.
        Notifier::Subscription made = stripes_->subscribe_to_one_of(among, until);
        if (!made.moved()) {
          subscription.emplace(std::move(made));
          continue;
        }
        // Refused at once (a cluster node that no longer serves the slot):
        // this pass waits by its pause, the next subscribes again.
      }
      // Where Redis has not answered lately, the next pass goes out early
      // enough to hear from it before the deadline.
      const clock::time_point wake = heard.probe_by(pause.end(now, until), until);
      if (subscription) {
        // cancel_waits() wakes it: the watched stripe's cancel_waits()
        // wakes that stripe's release channel, the one subscribed to.
        subscription->wait(seen, wake);
      } else {
        cancellation.sleep_until(cancel_seen, wake);
      }
      if (cancellation.since(cancel_seen)) return Taken{};
      pause.grow();
      // A cluster node dropped it (the stripe's slot moved): again, where
      // the slot is now, on the next pass.
      if (subscription && subscription->moved()) subscription.reset();
    }
  }

  /// Makes every wait through this object that is under way now give up at
  /// once: the stripes' own (Mutex::cancel_waits() on each: lock(key)
  /// throws Error(cancelled), try_lock_for/until(key, ...) return false)
  /// and try_lock_any_for/until, which return with nothing taken. Callable
  /// from any thread; waits that start later are unaffected.
  void cancel_waits() {
    // First, so that a waiter on any stripe woken below sees it.
    stripes_->cancellation.cancel();
    for (const std::unique_ptr<Stripe>& each : stripes_->locks) each->cancel_waits();
  }

 private:
  friend struct detail::AsyncAccess;

  std::vector<std::size_t> all() const { return detail::all_stripes(size()); }

  // One attempt at stripe i; remembered as home when taken.
  bool take(std::size_t i) {
    // Held through this object (perhaps by the calling thread, for whom
    // a try_lock() would be a deadlock error): not free.
    if (stripe(i).owns_lock() || !stripe(i).try_lock()) return false;
    stripes_->home.store(i, std::memory_order_relaxed);
    return true;
  }

  // One pass of a wait for any stripe, each attempt cut at `cut` (none at
  // no_deadline), and none sent after it. An attempt the cut left
  // unanswered ends the wait: busy if Redis answered it lately (`heard`,
  // by the deadline `until`), else TimeoutError, as a lock's wait says.
  std::optional<std::size_t> pass(const std::vector<std::size_t>& among, clock::time_point cut,
                                  clock::time_point until, detail::Heard& heard) {
    if (cut == detail::no_deadline) return try_lock_any(among);
    detail::StripePass order(among, stripes_->home.load(std::memory_order_relaxed));
    while (const std::optional<std::size_t> i = order.next()) {
      if (stripe(*i).owns_lock()) continue;  // as take() says
      const clock::time_point sent = clock::now();
      if (sent >= cut) break;
      switch (stripe(*i).attempt_until(cut)) {
        case detail::Outcome::acquired:
          stripes_->home.store(*i, std::memory_order_relaxed);
          return i;
        case detail::Outcome::unanswered:
          detail::acquired_or_throw(heard.outcome_at(until), "try_lock_any_until",
                                    stripe(*i).key());
          return std::nullopt;
        default: heard.answered(sent);  // busy
      }
    }
    return std::nullopt;
  }

  std::shared_ptr<detail::Stripes> stripes_;
};

#if DISTLOCK_DEFINES_BODIES
DISTLOCK_DECL StripedMutex::StripedMutex(const Backend& backend, std::string_view name,
                                         std::size_t stripes, LockOptions options,
                                         AcquirePolicy policy) {
  if (stripes == 0 || stripes > max_stripes) {
    throw InvalidArgument("a StripedMutex needs 1 to " + std::to_string(max_stripes) +
                          " stripes, not " + std::to_string(stripes));
  }
  const std::string base = detail::lock_key(LockOptions{}, name);
  stripes_ = std::make_shared<detail::Stripes>();
  stripes_->locks.reserve(stripes);
  stripes_->sites.reserve(stripes);
  for (std::size_t i = 0; i < stripes; ++i) {
    stripes_->locks.push_back(
        std::make_unique<Stripe>(backend, base + ':' + std::to_string(i), options, policy));
    stripes_->sites.push_back(backend.site_for(stripes_->locks.back()->key()));
  }
}

DISTLOCK_DECL StripedMutex::~StripedMutex() = default;
#endif

}  // namespace distlock
