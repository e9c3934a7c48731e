// distlock::Redlock: one lock held by a majority of independent Redis
// masters, after the Redlock algorithm; with RedlockOptions, the per-master
// results (NodeOutcome, RedlockAttempt) and NoQuorumError.
//
// One master replicates asynchronously, so a failover can lose a lock it
// granted a moment before. Redlock asks N masters that share nothing and
// holds the lock only while a majority of them hold its token. To acquire
// with lease TTL:
//
//   1. t0 = the steady clock.
//   2. SET <key> <token> NX PX <ttl> on every master at once, each with a
//      per-node timeout far shorter than the TTL.
//   3. elapsed = now - t0; drift = TTL * 0.01 + 2 ms (clocks on different
//      machines run at different rates); validity = TTL - elapsed - drift.
//   4. Held if at least N/2 + 1 masters granted it and validity > 0.
//      Otherwise the release script goes to every master the attempt
//      reached, and a caller willing to wait tries again after the policy's
//      randomised pause, so contenders who split the vote do not split it
//      again in step.
//
// A master that is down, stopped past the per-node timeout, or answering
// with an error counts as a "no", and last_attempt() says which and why.
// Only when fewer than a quorum of masters give any answer at all is the
// step undecidable, and it throws NoQuorumError.
//
// Release and extend run Mutex's token-checked scripts on every master;
// extend needs a majority again and recomputes the validity. The key holds
// exactly SET <key> <token> PX <ttl> on each master, as node-redlock and
// redsync store it.
//
// The commands go to all masters at once without a thread per master: one
// connection is borrowed from each master's Client, the command is written
// to all of them, and then the replies are awaited against one deadline
// (detail/fan_out.hpp). A step costs about the slowest master's round trip;
// a master that is down refuses the connection at once, and one that is
// stopped costs the per-node timeout once, however many there are.
// Getting the connections is the exception: a Client opens one
// synchronously, so a master whose host drops packets (rather than refusing
// them) costs its Client's connect_timeout, one such master after another,
// whenever a step needs a new connection to it; and a Client whose pool
// stays busy costs its pool_wait_timeout. Give the masters' Clients a
// connect_timeout no longer than the node timeout.
//
// What Redlock does not give:
// - No fencing token. Counters kept on independent masters do not form one
//   rising sequence, so LockOptions::fencing(true) is refused.
// - No renewal unless asked. A Redlock keeps its lease (the 30 s default
//   when no ttl is given) unless it is given auto_renew(true): then the
//   Watchdog of the first master's Client renews it about every ttl/3 with
//   an extend on every master, which needs a quorum like extend() does. A
//   renewal a majority refuses (key gone or taken) loses the lease; one too
//   few masters answer is tried again until the validity (ttl minus the
//   drift allowance, from the last quorum renewal) runs out, and then the
//   lease is lost; either way lost() turns true, on_lost is called and
//   release() answers Release::lost, sending nothing. max_hold and on_lost
//   need auto_renew(true). wake_on_release does not apply (a waiter retries
//   at its policy's pace).
// - Safety rests on bounded clock drift and on masters that keep the keys
//   they acknowledged: a master restarted without persistence forgets its
//   locks, so keep a restarted master out for the longest TTL before it
//   rejoins, or run it with appendonly yes and appendfsync always.
// - Masters are told apart by endpoint (host:port, or socket path); two
//   names for one server ("localhost" and "127.0.0.1") are not detected.
// - A master that answers only after a successful attempt stopped waiting
//   for it may still set the key. The key holds our token, so release()
//   removes it if it has landed by then; if not, it runs out with its
//   lease. (A failed attempt queues its release right behind such a SET,
//   so there the late key is taken back as soon as it lands.)
//
// Any number of masters is accepted; the quorum is N/2 + 1. N = 1 or 2
// tolerates no failed master, and an even N tolerates no more failures than
// N - 1 masters would, so 3 or 5 are the sensible choices.
//
//   std::vector<distlock::Client*> masters{&a, &b, &c, &d, &e};
//   distlock::Redlock billing{masters, "billing:run", distlock::LockOptions{}.ttl(10s)};
//   if (std::unique_lock lock{billing, 2s}) { ... }   // try_lock_for(2s)
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/fan_out.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/scripts.hpp"
#include "distlock/token.hpp"

namespace distlock {

/// What one master answered to one step of a Redlock.
enum class NodeStatus {
  ok,           ///< acquire: granted; extend: extended; release: deleted
  other_owner,  ///< another token holds the key (acquire refused, or ours ran out and was taken)
  no_key,       ///< extend or release: our key was gone (it expired, or never landed)
  timed_out,    ///< no reply within the per-node timeout; the command may yet be applied
  failed,       ///< no connection, a broken connection, or an error reply
};

inline const char* to_string(NodeStatus status) noexcept {
  switch (status) {
    case NodeStatus::ok: return "ok";
    case NodeStatus::other_owner: return "other_owner";
    case NodeStatus::no_key: return "no_key";
    case NodeStatus::timed_out: return "timed_out";
    case NodeStatus::failed: return "failed";
  }
  return "unknown";
}

/// One master's part in a step.
struct NodeOutcome {
  NodeStatus status = NodeStatus::failed;
  /// For timed_out and failed: what went wrong, in distlock's category
  /// (connect_failed, io_error, timed_out, server_error, ...).
  std::error_code error;
  /// For timed_out and failed: the error's text, starting with the master's
  /// endpoint (never a token or a password).
  std::string message;
};

/// The steps a Redlock takes on its masters.
enum class RedlockStep { acquire, extend, release };

inline const char* to_string(RedlockStep step) noexcept {
  switch (step) {
    case RedlockStep::acquire: return "acquire";
    case RedlockStep::extend: return "extend";
    case RedlockStep::release: return "release";
  }
  return "unknown";
}

/// What every master said to one acquire attempt, extend or release.
struct RedlockAttempt {
  RedlockStep step = RedlockStep::acquire;
  /// One per master, in the order the masters were given to the lock.
  std::vector<NodeOutcome> nodes;
  /// Masters needed: N/2 + 1.
  std::size_t quorum = 0;
  /// The steady clock when the step began (t0).
  std::chrono::steady_clock::time_point started{};
  /// From t0 to the last reply (or the per-node timeout).
  std::chrono::nanoseconds elapsed{0};
  /// Acquire and extend: lease - elapsed - drift, negative when the step
  /// took longer than the lease allows. Zero for release.
  std::chrono::nanoseconds validity{0};
  /// Acquire: the lock is held. Extend: the lease was extended. Release: a
  /// quorum deleted our key.
  bool succeeded = false;

  /// How many masters answered with `status`.
  std::size_t count(NodeStatus status) const noexcept {
    return static_cast<std::size_t>(std::count_if(
        nodes.begin(), nodes.end(), [status](const NodeOutcome& n) { return n.status == status; }));
  }
  std::size_t ok() const noexcept { return count(NodeStatus::ok); }
  /// Masters that gave a definite answer: ok, other_owner or no_key.
  std::size_t answered() const noexcept {
    return ok() + count(NodeStatus::other_owner) + count(NodeStatus::no_key);
  }
};

/// Too few masters gave a definite answer for a Redlock step to be decided:
/// a majority was down, stopped, or answered with errors. attempt() holds
/// what each master said.
class NoQuorumError : public Error {
 public:
  NoQuorumError(const std::string& what, RedlockAttempt attempt)
      : Error(Errc::no_quorum, what),
        attempt_(std::make_shared<const RedlockAttempt>(std::move(attempt))) {}
  const RedlockAttempt& attempt() const noexcept { return *attempt_; }

 private:
  // Shared, so that copying the exception cannot throw.
  std::shared_ptr<const RedlockAttempt> attempt_;
};

/// The safety margin Redlock subtracts for clock drift between machines:
/// ttl * 0.01 + 2 ms.
inline std::chrono::nanoseconds redlock_drift(std::chrono::milliseconds ttl) noexcept {
  return std::chrono::nanoseconds(ttl) / 100 + std::chrono::milliseconds(2);
}

/// LockOptions, plus how long a Redlock waits for each master.
class RedlockOptions : public LockOptions {
 public:
  RedlockOptions() = default;
  /// Takes every LockOptions setting; the node timeout stays automatic.
  RedlockOptions(LockOptions options) : LockOptions(std::move(options)) {}

  // LockOptions' setters, returning RedlockOptions so a chain can go on.
  using LockOptions::fencing;
  using LockOptions::key_prefix;
  using LockOptions::ttl;
  template <class Rep, class Period>
  RedlockOptions& ttl(std::chrono::duration<Rep, Period> lease) {
    LockOptions::ttl(lease);
    return *this;
  }
  RedlockOptions& fencing(bool on) noexcept {
    LockOptions::fencing(on);
    return *this;
  }
  RedlockOptions& key_prefix(std::string prefix) {
    LockOptions::key_prefix(std::move(prefix));
    return *this;
  }

  // Renewal is opt-in for a Redlock (see the top of this file); wake-ups do
  // not apply. Redeclared, not inherited, because the inherited setters
  // would return LockOptions and quietly drop the node timeout from the chain.
  using LockOptions::auto_renew;
  using LockOptions::max_hold;
  using LockOptions::on_lost;
  using LockOptions::wake_on_release;
  RedlockOptions& auto_renew(bool on) noexcept {
    LockOptions::auto_renew(on);
    return *this;
  }
  template <class Rep, class Period>
  RedlockOptions& max_hold(std::chrono::duration<Rep, Period> cap) {
    LockOptions::max_hold(cap);
    return *this;
  }
  RedlockOptions& on_lost(LostCallback callback) {
    LockOptions::on_lost(std::move(callback));
    return *this;
  }
  RedlockOptions& wake_on_release(bool) = delete;

  /// The longest a step waits for any one master; the masters share one
  /// deadline, so a step takes at most about this long. Unset (zero),
  /// it is min(command_timeout of the masters, max(1 ms, ttl / 10)): short
  /// enough that a dead master costs a small part of the lease. A longer
  /// one lets a slow master eat the validity: past the TTL, every attempt
  /// that waits for it fails. An acquire with a deadline never waits past
  /// the deadline, whatever this says. Must be in [1 ms, max_ttl].
  template <class Rep, class Period>
  RedlockOptions& node_timeout(std::chrono::duration<Rep, Period> timeout) {
    node_timeout_ = detail::checked_milliseconds(timeout, max_ttl, "Redlock node timeout");
    return *this;
  }
  std::chrono::milliseconds node_timeout() const noexcept { return node_timeout_; }

 private:
  std::chrono::milliseconds node_timeout_{0};
};

/// A lock held by a majority of independent masters, each a Backend (a
/// Client). Meets Lockable and TimedLockable. Thread-safe as std::mutex is:
/// threads may share one object. Not copyable, not movable.
template <class Backend = Client, class Policy = DefaultPolicy>
class BasicRedlock {
 public:
  using clock = std::chrono::steady_clock;

  /// One Backend per master; they must outlive the lock. Validates at once
  /// and contacts no server. Throws InvalidArgument for no masters, a null
  /// one, two with the same endpoint, a bad name, a TTL no longer than its
  /// drift allowance (under 3 ms), or options a Redlock cannot honour:
  /// fencing(true), auto_renew(true), max_hold, on_lost.
  BasicRedlock(std::vector<Backend*> masters, std::string_view name, RedlockOptions options = {},
               Policy policy = {})
      : masters_(checked_masters(std::move(masters))),
        options_(checked_options(std::move(options))),
        policy_(std::move(policy)),
        key_(detail::lock_key(options_, name)),
        channel_(detail::companion_key(key_, "released")),
        node_timeout_(options_.node_timeout().count() > 0
                          ? options_.node_timeout()
                          : default_node_timeout(masters_, options_.ttl())),
        quorum_(masters_.size() / 2 + 1),
        renews_(renews(options_)) {}

  /// The same, for masters given as references: Redlock lock({a, b, c}, "k").
  BasicRedlock(std::initializer_list<std::reference_wrapper<Backend>> masters,
               std::string_view name, RedlockOptions options = {}, Policy policy = {})
      : BasicRedlock(pointers(masters), name, std::move(options), std::move(policy)) {}

  /// Releases the lock if this object still holds it.
  ~BasicRedlock() { unlock(); }

  BasicRedlock(const BasicRedlock&) = delete;
  BasicRedlock& operator=(const BasicRedlock&) = delete;

  /// Blocks until a quorum grants the lock, pausing between attempts as the
  /// policy says (never before the first). Throws NoQuorumError when an
  /// attempt could not reach a majority of masters (a minority down never
  /// throws), and std::system_error(resource_deadlock_would_occur) if the
  /// calling thread already holds the lock through this object.
  void lock() { static_cast<void>(acquire(clock::time_point::max(), /*wait=*/true)); }

  /// One attempt with the full per-node timeout; false if the masters'
  /// votes did not add up to a quorum within the lease. Throws as lock().
  [[nodiscard]] bool try_lock() { return acquire(clock::now(), /*wait=*/false); }

  /// Attempts until acquired or `timeout` has passed on the steady clock;
  /// no attempt waits for a master past that deadline. A zero or negative
  /// timeout makes exactly one attempt, as try_lock() does.
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(detail::deadline_after(timeout), /*wait=*/true);
  }

  /// Attempts until acquired or `deadline` (of any clock) has passed. A
  /// deadline already past makes exactly one attempt.
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return acquire(detail::to_steady_deadline(deadline), /*wait=*/true);
  }

  /// Releases on every master if held; does nothing otherwise. Never
  /// throws: a master that cannot be told lets its copy of the lease run
  /// out. Use release() to learn what happened.
  void unlock() noexcept {
    try {
      if (owns_lock()) static_cast<void>(release());
    } catch (...) {
      // The leases expire by themselves; unlock() runs in destructors.
    }
  }

  /// Releases on every master and says what they found: released when a
  /// quorum deleted our key (masters down in a minority do not matter; see
  /// last_attempt()); otherwise not_owner if any master holds another token
  /// (ours ran out and someone took it), else expired. Never lost. Throws NoQuorumError
  /// when fewer than a quorum of masters answered at all, and NotHeldError
  /// if this object holds nothing. Either way the object no longer holds
  /// the lock afterwards.
  Release release() {
    const auto [token, lease] = take_lease();
    if (lease) {
      masters_.front()->watchdog().remove(*lease);  // waits out a renewal in flight
      if (lease->lost) return Release::lost;
    }
    Fan fan(masters_);
    const std::string_view keys[] = {key_, channel_};
    const std::string_view args[] = {token};
    RedlockAttempt result = run_script(fan, RedlockStep::release, scripts::release,
                                       detail::Args(keys, 2), detail::Args(args, 1), {});
    result.succeeded = result.ok() >= quorum_;
    const bool undecided = !result.succeeded && result.answered() < quorum_;
    const bool taken = result.count(NodeStatus::other_owner) > 0;
    const bool released = result.succeeded;
    if (undecided) throw no_quorum(std::move(result));
    remember(std::move(result));
    if (released) return Release::released;
    return taken ? Release::not_owner : Release::expired;
  }

  /// Sets the lease to `ttl` on every master that still holds our token.
  /// True if a quorum did so and the new validity (ttl - elapsed - drift)
  /// is positive. False if not: a majority answered that the key is gone or
  /// taken, or the step outlasted the lease; the object then no longer
  /// holds the lock, and what is left of it is released. Throws
  /// NoQuorumError, keeping the lease as it was, when fewer than a quorum
  /// answered at all; NotHeldError if not held; InvalidArgument for a ttl
  /// out of range.
  template <class Rep, class Period>
  [[nodiscard]] bool extend(const std::chrono::duration<Rep, Period>& ttl) {
    const std::chrono::milliseconds lease = checked_lease(ttl, "extend ttl");
    const std::string token = current_token();
    if (lost()) {
      static_cast<void>(release());  // sends nothing: a lost lease is not revived
      return false;
    }
    Fan fan(masters_);
    RedlockAttempt result = extend_on_masters(fan, token, lease);
    const bool succeeded = result.succeeded;
    const clock::time_point started = result.started;
    const clock::time_point expires = started + lease - redlock_drift(lease);
    std::shared_ptr<detail::LeaseState> watched;
    {
      std::lock_guard guard(state_mutex_);
      last_attempt_ = std::move(result);
      if (!held_ || token_ != token) return false;  // released meanwhile
      if (succeeded) {
        expires_ = expires;
        if (lease_) {
          renew_ttl_ms_ = lease.count();
          lease_->set_expires(expires);
          masters_.front()->watchdog().extended(
              *lease_, std::chrono::floor<std::chrono::milliseconds>(expires - started), started);
        }
        return true;
      }
      watched = std::move(lease_);
      forget();
    }
    if (watched) masters_.front()->watchdog().remove(*watched);
    clean_up(fan, token, node_timeout_);
    return false;
  }

  /// True once the watchdog could not renew this auto-renewed lock on a
  /// quorum (a majority said the key is gone or taken, or the validity ran
  /// out with no quorum answering); work under the lock should stop.
  /// Always false without auto_renew(true).
  bool lost() const noexcept {
    std::lock_guard guard(state_mutex_);
    return lease_ && lease_->lost;
  }

  /// Whether this object holds the lock, as far as it knows locally (the
  /// leases may also run out on the masters; see validity()).
  bool owns_lock() const noexcept {
    std::lock_guard guard(state_mutex_);
    return held_;
  }

  /// Time left of the lock's validity by the steady clock: from t0 of the
  /// acquire (or last extend), ttl minus the drift allowance. Zero when not
  /// held.
  std::chrono::milliseconds validity() const noexcept {
    std::lock_guard guard(state_mutex_);
    if (!held_ || (lease_ && lease_->lost)) return std::chrono::milliseconds(0);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(expires_ - clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

  /// The token of the current lock; empty when not held.
  std::string token() const {
    std::lock_guard guard(state_mutex_);
    return held_ ? token_ : std::string();
  }

  /// What the masters said to the latest acquire attempt, extend or release
  /// of this object (a default RedlockAttempt before the first).
  RedlockAttempt last_attempt() const {
    std::lock_guard guard(state_mutex_);
    return last_attempt_;
  }

  /// The Redis key of the lock (prefix and name), the same on every master.
  const std::string& key() const noexcept { return key_; }
  const RedlockOptions& options() const noexcept { return options_; }
  const std::vector<Backend*>& masters() const noexcept { return masters_; }
  /// Masters needed: N/2 + 1.
  std::size_t quorum() const noexcept { return quorum_; }
  /// The per-node timeout in force (RedlockOptions::node_timeout).
  std::chrono::milliseconds node_timeout() const noexcept { return node_timeout_; }

 private:
  using Fan = detail::FanOut<Backend>;
  using FanState = typename Fan::State;
  using FanSend = typename Fan::Send;

  // A little past the caller's deadline is better than keys left behind
  // for a whole lease.
  static constexpr std::chrono::milliseconds cleanup_floor{10};

  static std::vector<Backend*> checked_masters(std::vector<Backend*> masters) {
    if (masters.empty()) throw InvalidArgument("Redlock needs at least one master");
    std::vector<std::string> endpoints;
    endpoints.reserve(masters.size());
    for (Backend* master : masters) {
      if (master == nullptr) throw InvalidArgument("Redlock master must not be null");
      endpoints.push_back(master->options().endpoint());
    }
    std::sort(endpoints.begin(), endpoints.end());
    if (const auto twice = std::adjacent_find(endpoints.begin(), endpoints.end());
        twice != endpoints.end()) {
      throw InvalidArgument("Redlock masters must be independent servers; " + *twice +
                            " is given more than once");
    }
    return masters;
  }

  static RedlockOptions checked_options(RedlockOptions options) {
    if (options.fencing()) {
      throw InvalidArgument(
          "Redlock offers no fencing token: counters kept on independent masters do not form "
          "one rising sequence");
    }
    if (!renews(options) && (options.max_hold().count() > 0 || options.on_lost())) {
      throw InvalidArgument(
          "max_hold and on_lost apply to a renewed lease: give the Redlock auto_renew(true)");
    }
    static_cast<void>(checked_lease(options.ttl(), "Redlock ttl"));
    return options;
  }

  // Whether the watchdog renews this lock: only when asked for. LockOptions'
  // auto_renew() answers true by default when no ttl was set; with the ttl
  // set (to what it already is) it answers true only if renewal was asked for.
  static bool renews(const RedlockOptions& options) {
    LockOptions asked = options;
    asked.ttl(options.ttl());
    return asked.auto_renew();
  }

  template <class Rep, class Period>
  static std::chrono::milliseconds checked_lease(std::chrono::duration<Rep, Period> ttl,
                                                 const char* what) {
    const std::chrono::milliseconds lease = detail::checked_milliseconds(ttl, max_ttl, what);
    if (lease <= redlock_drift(lease)) {
      throw InvalidArgument(std::string(what) +
                            " must be longer than its drift allowance (ttl / 100 + 2 ms)");
    }
    return lease;
  }

  static std::chrono::milliseconds default_node_timeout(const std::vector<Backend*>& masters,
                                                        std::chrono::milliseconds ttl) {
    std::chrono::milliseconds timeout = std::max(ttl / 10, std::chrono::milliseconds(1));
    for (const Backend* master : masters) {
      timeout = std::min(timeout, master->options().command_timeout);
    }
    return timeout;
  }

  static std::vector<Backend*> pointers(
      std::initializer_list<std::reference_wrapper<Backend>> masters) {
    std::vector<Backend*> out;
    out.reserve(masters.size());
    for (Backend& master : masters) out.push_back(&master);
    return out;
  }

  bool acquire(clock::time_point deadline, bool wait) {
    check_not_held_by_this_thread();
    // One token for every attempt of this acquire: a SET from an earlier
    // attempt that lands late then holds our own token, and our release
    // takes it back.
    const std::string token = make_token();
    const detail::Decimal ttl(options_.ttl().count());
    for (unsigned attempt = 1;; ++attempt) {
      const clock::time_point now = clock::now();
      if (attempt > 1 && now >= deadline) return false;
      const bool last_chance = !wait || now >= deadline;
      // No master is waited for past the caller's deadline; the one attempt
      // of try_lock() or of a deadline already past gets the full timeout.
      clock::duration budget = node_timeout_;
      const bool clipped = !last_chance && deadline - now < budget;
      if (clipped) budget = std::max<clock::duration>(deadline - now, std::chrono::milliseconds(1));
      RedlockAttempt result = attempt_once(token, ttl, budget);
      if (result.succeeded) {
        adopt(token, std::move(result));
        return true;
      }
      // Too few answers is a failure of the masters, not a lost race;
      // unless the caller's deadline cut the wait short, which only means
      // the time is up.
      const std::size_t answered = result.answered();
      const bool cut_by_deadline =
          clipped && answered + result.count(NodeStatus::timed_out) >= quorum_;
      if (answered < quorum_ && !cut_by_deadline) throw no_quorum(std::move(result));
      remember(std::move(result));
      if (last_chance) return false;
      pause_before_retry(attempt, deadline);
    }
  }

  RedlockAttempt attempt_once(const std::string& token, const detail::Decimal& ttl,
                              clock::duration budget) {
    Fan fan(masters_);
    const clock::time_point start = clock::now();
    fan.send({"SET", key_, token, "NX", "PX", ttl}, [](const auto&) { return FanSend::and_wait; });
    fan.collect(start + budget);
    RedlockAttempt result = record(fan, RedlockStep::acquire, start, options_.ttl(),
                                   [](const Reply& reply) -> std::optional<NodeStatus> {
                                     if (reply.is_ok()) return NodeStatus::ok;
                                     if (reply.is_nil()) return NodeStatus::other_owner;
                                     return std::nullopt;
                                   });
    result.succeeded = result.ok() >= quorum_ && result.validity > clock::duration::zero();
    if (!result.succeeded) {
      clean_up(fan, token, std::max<clock::duration>(budget, cleanup_floor));
    }
    return result;
  }

  // Runs a token-checked script (1 done, 0 no key, -1 another token) on
  // every master at once.
  RedlockAttempt run_script(Fan& fan, RedlockStep step, const Script& script, detail::Args keys,
                            detail::Args args, std::chrono::milliseconds lease) {
    const clock::time_point start = clock::now();
    fan.send_script(script, keys, args, [](const auto&) { return FanSend::and_wait; });
    fan.collect(start + node_timeout_);
    return record(fan, step, start, lease, [](const Reply& reply) -> std::optional<NodeStatus> {
      if (!reply.is_integer()) return std::nullopt;
      switch (reply.integer()) {
        case 1: return NodeStatus::ok;
        case 0: return NodeStatus::no_key;
        default: return NodeStatus::other_owner;
      }
    });
  }

  // What a step found: timing, validity, and each master's answer as
  // answer(reply) reads it, or its failure.
  template <class Answer>
  RedlockAttempt record(const Fan& fan, RedlockStep step, clock::time_point start,
                        std::chrono::milliseconds lease, Answer answer) const {
    RedlockAttempt result;
    result.step = step;
    result.quorum = quorum_;
    result.started = start;
    result.elapsed = clock::now() - start;
    if (lease.count() > 0) result.validity = lease - result.elapsed - redlock_drift(lease);
    result.nodes.resize(fan.size());
    for (std::size_t i = 0; i < fan.size(); ++i) {
      NodeOutcome& node = result.nodes[i];
      switch (fan[i].state) {
        case FanState::replied:
          if (const std::optional<NodeStatus> status = answer(fan[i].reply)) {
            node.status = *status;
          } else if (fan[i].reply.is_error()) {
            node.error = Errc::server_error;
            node.message =
                fan[i].backend->options().endpoint() + ": " + std::string(fan[i].reply.str());
          } else {
            node.error = Errc::protocol_error;
            node.message =
                fan[i].backend->options().endpoint() + ": unexpected reply to " + to_string(step);
          }
          break;
        case FanState::timed_out: node.status = NodeStatus::timed_out; [[fallthrough]];
        default:
          node.error = fan[i].error;
          node.message = fan[i].message;
          break;
      }
    }
    return result;
  }

  // Takes back what a failed attempt or a lost extend may have left: the
  // release script goes to every master the step reached. A master that
  // never answered gets it on the same connection, queued behind the
  // command still in flight, so if that command is applied late the release
  // is applied right after it; nobody waits for such a master. Errors are
  // swallowed: whatever is not released runs out with its lease.
  void clean_up(Fan& fan, const std::string& token, clock::duration budget) noexcept {
    try {
      const std::string_view keys[] = {key_, channel_};
      const std::string_view args[] = {token};
      fan.send_script(scripts::release, detail::Args(keys, 2), detail::Args(args, 1),
                      [](const auto& node) {
                        switch (node.state) {
                          case FanState::idle:
                          case FanState::unreachable: return FanSend::skip;
                          case FanState::timed_out: return FanSend::without_waiting;
                          default: return FanSend::and_wait;
                        }
                      });
      fan.collect(clock::now() + budget);
    } catch (...) {
      // Best effort: the leases expire by themselves.
    }
  }

  NoQuorumError no_quorum(RedlockAttempt result) {
    std::string what = key_ + ": " + to_string(result.step) + " had answers from " +
                       std::to_string(result.answered()) + " of " +
                       std::to_string(result.nodes.size()) + " masters; " +
                       std::to_string(quorum_) + " needed";
    for (const NodeOutcome& node : result.nodes) {
      if (!node.message.empty()) what += "; " + node.message;
    }
    remember(result);  // a copy: the exception carries the original
    return NoQuorumError(what, std::move(result));
  }

  // Sleeps the policy's pause, cut short by the deadline. The default
  // policy's pause is random, which is what keeps contenders that split
  // the vote from retrying in lockstep.
  void pause_before_retry(unsigned attempt, clock::time_point deadline) const {
    std::chrono::nanoseconds pause = policy_.pause(attempt, detail::jitter_unit());
    const clock::time_point now = clock::now();
    if (deadline - now < pause) pause = deadline - now;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }

  void check_not_held_by_this_thread() const {
    std::lock_guard guard(state_mutex_);
    if (held_ && owner_ == std::this_thread::get_id()) {
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              key_ + " is already held by this thread");
    }
  }

  void adopt(const std::string& token, RedlockAttempt result) {
    const clock::time_point started = result.started;
    std::shared_ptr<detail::LeaseState> lease;
    if (renews_) {
      // The watchdog of the first master's Client keeps the time; the
      // renewal itself goes to every master and needs a quorum. Its record
      // counts the drift allowance out of the lease, so the loss is
      // reported by the validity, not by the masters' longer TTL.
      renew_ttl_ms_ = options_.ttl().count();
      lease = std::make_shared<detail::LeaseState>(
          key_, token,
          options_.ttl() -
              std::chrono::ceil<std::chrono::milliseconds>(redlock_drift(options_.ttl())),
          started, options_.on_lost());
      const clock::time_point hold_until = options_.max_hold().count() > 0
                                               ? started + options_.max_hold()
                                               : clock::time_point::max();
      masters_.front()->watchdog().add(
          lease,
          [this, token](Connection&, const detail::LeaseState&, std::string_view) {
            return renew_on_quorum(token);
          },
          hold_until);
    }
    std::lock_guard guard(state_mutex_);
    held_ = true;
    token_ = token;
    expires_ = started + options_.ttl() - redlock_drift(options_.ttl());
    owner_ = std::this_thread::get_id();
    last_attempt_ = std::move(result);
    lease_ = std::move(lease);
  }

  // Sets the lease to `lease` on every master at once. Succeeded when a
  // quorum did and the new validity is positive; throws NoQuorumError when
  // fewer than a quorum answered at all.
  RedlockAttempt extend_on_masters(Fan& fan, const std::string& token,
                                   std::chrono::milliseconds lease) {
    const detail::Decimal lease_text(lease.count());
    const std::string_view keys[] = {key_};
    const std::string_view args[] = {token, lease_text};
    RedlockAttempt result = run_script(fan, RedlockStep::extend, scripts::extend,
                                       detail::Args(keys, 1), detail::Args(args, 2), lease);
    result.succeeded = result.ok() >= quorum_ && result.validity > clock::duration::zero();
    if (!result.succeeded && result.answered() < quorum_) throw no_quorum(std::move(result));
    return result;
  }

  // The watchdog's renewal: extend on every master. Too few answers throws
  // (the watchdog tries again until the validity runs out); a majority that
  // no longer holds our token, or a step that outlasted the lease, loses it.
  detail::TokenCheck renew_on_quorum(const std::string& token) {
    const std::chrono::milliseconds lease(renew_ttl_ms_.load());
    Fan fan(masters_);
    RedlockAttempt result = extend_on_masters(fan, token, lease);
    const bool succeeded = result.succeeded;
    const clock::time_point expires = result.started + lease - redlock_drift(lease);
    std::lock_guard guard(state_mutex_);
    if (succeeded && held_ && token_ == token) expires_ = expires;
    last_attempt_ = std::move(result);
    return succeeded ? detail::TokenCheck::done : detail::TokenCheck::other_token;
  }

  void remember(RedlockAttempt result) {
    std::lock_guard guard(state_mutex_);
    last_attempt_ = std::move(result);
  }

  // Marks the lock as given back; returns its token and watchdog record.
  std::pair<std::string, std::shared_ptr<detail::LeaseState>> take_lease() {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(key_ + " is not held");
    std::pair<std::string, std::shared_ptr<detail::LeaseState>> taken{std::move(token_),
                                                                      std::move(lease_)};
    forget();
    return taken;
  }

  std::string current_token() const {
    std::lock_guard guard(state_mutex_);
    if (!held_) throw NotHeldError(key_ + " is not held");
    return token_;
  }

  void forget() noexcept {
    held_ = false;
    token_.clear();
    owner_ = std::thread::id();
  }

  const std::vector<Backend*> masters_;
  const RedlockOptions options_;
  const Policy policy_;
  const std::string key_;
  const std::string channel_;  // the release script announces on it, as Mutex's does
  const std::chrono::milliseconds node_timeout_;
  const std::size_t quorum_;
  const bool renews_;

  // The lock as this object knows it; guarded because threads may share
  // one object. The masters, not this mutex, decide who holds the lock.
  mutable std::mutex state_mutex_;
  bool held_ = false;
  std::string token_;
  clock::time_point expires_{};
  std::shared_ptr<detail::LeaseState> lease_;  // set while the watchdog renews it
  std::atomic<long long> renew_ttl_ms_{0};     // the lease a renewal asks for
  std::thread::id owner_{};
  RedlockAttempt last_attempt_;
};

/// The Redlock for ordinary use: Clients as masters, the default policy.
using Redlock = BasicRedlock<>;

}  // namespace distlock
