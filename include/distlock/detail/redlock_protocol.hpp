// The quorum steps of a Redlock (see redlock.hpp for the algorithm), and
// its Protocol for the Lifecycle.
//
// RedlockCore holds the masters, the names and the timing, and sends every
// step to all masters at once (detail/fan_out.hpp). It is shared by the
// lock's Protocol and by its Renewer, so the Watchdog's renewals go through
// each master's own Client: a master that is down costs its vote, not the
// round.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/fan_out.hpp"
#include "distlock/detail/thread_annotations.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/redlock_options.hpp"
#include "distlock/scripts.hpp"
#include "distlock/token.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

template <class Backend>
class RedlockCore {
 public:
  using clock = std::chrono::steady_clock;
  using Fan = FanOut<Backend>;
  using FanState = typename Fan::State;
  using FanSend = typename Fan::Send;

  RedlockCore(const std::vector<Backend*>& masters, std::string key,
              std::chrono::milliseconds node_timeout)
      : key_(std::move(key)),
        channel_(companion_key(key_, "released")),
        node_timeout_(node_timeout),
        quorum_(masters.size() / 2 + 1) {
    masters_.reserve(masters.size());
    for (Backend* master : masters) masters_.push_back(*master);
    for (Backend& master : masters_) pointers_.push_back(&master);
  }

  RedlockCore(const RedlockCore&) = delete;
  RedlockCore& operator=(const RedlockCore&) = delete;

  /// The masters, as pointers to this core's own handles (stable).
  const std::vector<Backend*>& masters() const noexcept { return pointers_; }
  const std::string& key() const noexcept { return key_; }
  std::size_t quorum() const noexcept { return quorum_; }
  std::chrono::milliseconds node_timeout() const noexcept { return node_timeout_; }

  /// The token-checked release on every master at once.
  RedlockAttempt release(const std::string& token) {
    Fan fan(pointers_);
    const std::string_view keys[] = {key_, channel_};
    const std::string_view args[] = {token};
    RedlockAttempt result =
        run_script(fan, RedlockStep::release, scripts::release, Args(keys, 2), Args(args, 1), {});
    result.succeeded = result.ok() >= quorum_;
    return result;
  }

  /// extend_on_masters with a Fan of its own; what a lost extend may have
  /// left is taken back.
  RedlockAttempt extend(const std::string& token, std::chrono::milliseconds lease) {
    Fan fan(pointers_);
    RedlockAttempt result = extend_on_masters(fan, token, lease);
    if (!result.succeeded) clean_up(fan, token, clock::now() + node_timeout_);
    return result;
  }

  /// One acquire attempt on every master, `budget` for all; a failed one
  /// is taken back at once.
  RedlockAttempt acquire_step(const std::string& token, std::chrono::milliseconds lease,
                              clock::duration budget) {
    const Decimal ttl(lease.count());
    Fan fan(pointers_);
    const clock::time_point start = clock::now();
    fan.send({"SET", key_, token, "NX", "PX", ttl}, [](const auto&) { return FanSend::and_wait; });
    fan.collect(start + budget);
    RedlockAttempt result = record(fan, RedlockStep::acquire, start, lease,
                                   [](const Reply& reply) -> std::optional<NodeStatus> {
                                     if (reply.is_ok()) return NodeStatus::ok;
                                     if (reply.is_nil()) return NodeStatus::other_owner;
                                     return std::nullopt;
                                   });
    result.succeeded = result.ok() >= quorum_ && result.validity > clock::duration::zero();
    if (!result.succeeded) clean_up(fan, token, start + budget);
    return result;
  }

  // Runs a token-checked script (1 done, 0 no key, -1 another token) on
  // every master at once.
  RedlockAttempt run_script(Fan& fan, RedlockStep step, const Script& script, Args keys, Args args,
                            std::chrono::milliseconds lease) {
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

  // Sets the lease to `lease` on every master at once. Succeeded when a
  // quorum did and the new validity is positive; throws NoQuorumError when
  // fewer than a quorum answered at all.
  RedlockAttempt extend_on_masters(Fan& fan, const std::string& token,
                                   std::chrono::milliseconds lease) {
    const Decimal lease_text(lease.count());
    const std::string_view keys[] = {key_};
    const std::string_view args[] = {token, lease_text};
    RedlockAttempt result =
        run_script(fan, RedlockStep::extend, scripts::extend, Args(keys, 1), Args(args, 2), lease);
    result.succeeded = result.ok() >= quorum_ && result.validity > clock::duration::zero();
    if (!result.succeeded && result.answered() < quorum_) throw no_quorum(std::move(result));
    return result;
  }

  // Takes back what a failed attempt or a lost extend may have left: the
  // release script goes to every master the step reached. A master that
  // never answered gets it on the same connection, queued behind the
  // command still in flight, so if that command is applied late the release
  // is applied right after it; nobody waits for such a master. Errors are
  // swallowed: whatever is not released runs out with its lease.
  void clean_up(Fan& fan, const std::string& token, clock::time_point until) noexcept {
    try {
      const std::string_view keys[] = {key_, channel_};
      const std::string_view args[] = {token};
      // Past `until` (the caller's deadline) nobody is waited for: the
      // release is queued behind on each connection all the same.
      const bool wait = clock::now() < until;
      fan.send_script(scripts::release, Args(keys, 2), Args(args, 1), [wait](const auto& node) {
        switch (node.state) {
          case FanState::idle:
          case FanState::unreachable: return FanSend::skip;
          case FanState::timed_out: return FanSend::without_waiting;
          default: return wait ? FanSend::and_wait : FanSend::without_waiting;
        }
      });
      fan.collect(until);
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

  void remember(RedlockAttempt result) {
    MutexLock guard(mutex_);
    last_attempt_ = std::move(result);
  }

  RedlockAttempt last_attempt() const {
    MutexLock guard(mutex_);
    return last_attempt_;
  }

 private:
  std::vector<Backend> masters_;
  std::vector<Backend*> pointers_;
  const std::string key_;
  const std::string channel_;  // the release script announces on it, as Mutex's does
  const std::chrono::milliseconds node_timeout_;
  const std::size_t quorum_;

  mutable Mutex mutex_;
  RedlockAttempt last_attempt_ DISTLOCK_GUARDED_BY(mutex_);
};

/// Renews one Redlock's lease with an extend on every master; a quorum
/// keeps it. Too few answers: unknown (tried again until the validity runs
/// out); a majority that no longer holds our token: gone.
template <class Backend>
class RedlockRenewer final : public Renewer {
 public:
  explicit RedlockRenewer(std::shared_ptr<RedlockCore<Backend>> core) : core_(std::move(core)) {}
  BatchKey batch_key() const noexcept override { return {&kind_tag, this}; }
  void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
             SteadyClock::time_point) noexcept override {
    for (std::size_t i = 0; i < leases.size(); ++i) {
      try {
        typename RedlockCore<Backend>::Fan fan(core_->masters());
        RedlockAttempt result = core_->extend_on_masters(fan, leases[i]->token, leases[i]->ttl);
        outcomes[i] = result.succeeded ? Renewed::yes : Renewed::gone;
        core_->remember(std::move(result));
      } catch (...) {
        // No quorum answered (remembered by extend_on_masters): unknown.
      }
    }
  }

 private:
  static constexpr char kind_tag = 0;
  std::shared_ptr<RedlockCore<Backend>> core_;
};

/// The Lifecycle's Protocol for a Redlock.
template <class Backend>
class RedlockProtocol {
 public:
  using clock = std::chrono::steady_clock;
  enum class Kind { exclusive };
  static constexpr Kind exclusive = Kind::exclusive;
  static constexpr bool per_thread = false;
  static constexpr bool given_back_first(Kind) noexcept { return false; }

  RedlockProtocol(const std::vector<Backend*>& masters, std::string key,
                  const RedlockOptions& options)
      : options_(options),
        core_(std::make_shared<RedlockCore<Backend>>(
            masters, std::move(key),
            options.node_timeout().count() > 0 ? options.node_timeout()
                                               : default_node_timeout(masters, options.ttl()))),
        renewer_(std::make_shared<RedlockRenewer<Backend>>(core_)) {}

  void check_process() const {
    for (const Backend* master : core_->masters()) master->check_process();
  }
  bool forked() const noexcept { return core_->masters().front()->forked(); }

  std::string id_for(Kind) const { return make_token(); }
  template <class DepthOf>
  void before_first(Kind, DepthOf&&) const noexcept {}
  void held(Kind, int) noexcept {}

  // One attempt on every master. No master is waited for past the caller's
  // deadline; a call without one gives each the full node timeout. Too few
  // answers is a failure of the masters (NoQuorumError), not a lost race;
  // unless the deadline cut the wait short, which only means the time is up.
  std::optional<Attempt> attempt(Kind, const std::string& token, clock::time_point deadline) {
    check_process();  // a master refusing in a forked child is not a vote
    const clock::time_point now = clock::now();
    clock::duration budget = core_->node_timeout();
    const bool clipped = deadline != no_deadline && deadline - now < budget;
    if (clipped) budget = std::max<clock::duration>(deadline - now, std::chrono::milliseconds(1));
    RedlockAttempt result = core_->acquire_step(token, options_.ttl(), budget);
    Attempt attempt;
    attempt.holder_pttl = -1;  // nothing to go by: retry at the policy's (random) pace
    if (result.succeeded) {
      attempt.acquired = true;
      core_->remember(std::move(result));
      return attempt;
    }
    const std::size_t answered = result.answered();
    const bool cut = clipped && answered + result.count(NodeStatus::timed_out) >= core_->quorum();
    if (answered < core_->quorum() && !cut) throw core_->no_quorum(std::move(result));
    core_->remember(std::move(result));
    if (cut && answered < core_->quorum()) return std::nullopt;
    return attempt;
  }

  TokenCheck release(Kind, const std::string& token) {
    RedlockAttempt result = core_->release(token);
    if (!result.succeeded && result.answered() < core_->quorum()) {
      throw core_->no_quorum(std::move(result));
    }
    const bool released = result.succeeded;
    const bool taken = result.count(NodeStatus::other_owner) > 0;
    core_->remember(std::move(result));
    if (released) return TokenCheck::done;
    return taken ? TokenCheck::other_token : TokenCheck::no_key;
  }

  TokenCheck extend(Kind, const std::string& token, std::chrono::milliseconds ttl) {
    RedlockAttempt result = core_->extend(token, ttl);
    const bool succeeded = result.succeeded;
    core_->remember(std::move(result));
    return succeeded ? TokenCheck::done : TokenCheck::other_token;
  }

  std::optional<long long> holder_pttl(clock::time_point) const { return -1; }
  std::optional<Notifier::Subscription> subscribe(clock::time_point) const { return std::nullopt; }
  void wake() const noexcept {}

  std::shared_ptr<LeaseState> watched(Kind, const std::string& token, clock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(core_->key(), token, options.ttl(), sent, options.on_lost(),
                                        renewer_, std::string(), &redlock_drift);
  }
  // The watchdog of the first master's Client keeps the time; renewals go
  // to every master through its own Client.
  Watchdog& watchdog() { return core_->masters().front()->watchdog(); }
  static std::chrono::nanoseconds margin(std::chrono::milliseconds ttl) noexcept {
    return redlock_drift(ttl);
  }

  const std::string& key() const noexcept { return core_->key(); }
  static std::string describe(Kind) { return "lock"; }
  const RedlockOptions& options() const noexcept { return options_; }
  RedlockCore<Backend>& core() const noexcept { return *core_; }

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
    const std::chrono::milliseconds lease = checked_milliseconds(ttl, max_ttl, what);
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

 private:
  const RedlockOptions options_;
  std::shared_ptr<RedlockCore<Backend>> core_;
  std::shared_ptr<Renewer> renewer_;
};

}  // namespace distlock::detail
