// RedlockCore: the quorum steps of a Redlock (see redlock.hpp for the
// algorithm). It holds the masters, the names and the timing, and sends
// every step to all masters at once (detail/redlock/fan_out.hpp). It is shared by
// the lock's Protocol and by its Renewer, so the Watchdog's renewals go
// through each master's own Client: a master that is down costs its vote,
// not the round.
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

#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/redlock/fan_out.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/redlock_options.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

class RedlockCore {
 public:
  using clock = std::chrono::steady_clock;
  using Fan = FanOut;
  using FanState = Fan::State;
  using FanSend = Fan::Send;

  /// On the site of the key at each master (Backend::site_for).
  RedlockCore(std::vector<SitePtr> masters, std::string key, std::chrono::milliseconds node_timeout)
      : masters_(std::move(masters)),
        key_(std::move(key)),
        channel_(companion_key(key_, "released")),
        node_timeout_(node_timeout),
        quorum_(masters_.size() / 2 + 1) {
    for (const SitePtr& master : masters_) pointers_.push_back(master.get());
  }

  RedlockCore(const RedlockCore&) = delete;
  RedlockCore& operator=(const RedlockCore&) = delete;

  /// The masters' sites of the key.
  const std::vector<Site*>& masters() const noexcept { return pointers_; }
  const std::vector<SitePtr>& sites() const noexcept { return masters_; }
  const std::string& key() const noexcept { return key_; }
  /// Where the release script announces a release.
  const std::string& channel() const noexcept { return channel_; }
  std::size_t quorum() const noexcept { return quorum_; }
  std::chrono::milliseconds node_timeout() const noexcept { return node_timeout_; }

  /// The token-checked release on every master at once.
  RedlockAttempt release(const std::string& token) {
    Fan fan(pointers_);
    const std::string_view keys[] = {key_, channel_};
    const std::string_view args[] = {token};
    return run_script(fan, RedlockStep::release, scripts::release, Args(keys, 2), Args(args, 1),
                      {});
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
    fan.borrow_by(start + budget);
    const std::string_view set[] = {"SET", key_, token, "NX", "PX", ttl};
    fan.send(Args(set, 6), [](const auto&) { return FanSend::and_wait; });
    fan.collect(start + budget);
    RedlockAttempt result = record(fan, RedlockStep::acquire, start, lease, acquire_answer);
    if (!result.succeeded) {
      clean_up(fan, token, start + budget);
      refuse_wrong_type(fan);
    }
    return result;
  }

  /// A master's answer to an attempt's SET NX PX.
  static std::optional<NodeStatus> acquire_answer(const Reply& reply) {
    if (reply.is_ok()) return NodeStatus::ok;
    if (reply.is_nil()) return NodeStatus::other_owner;
    return std::nullopt;
  }

  // After a failed attempt's clean_up: SET NX is refused by a key of any
  // type, and the release script fails with WRONGTYPE where the key is not
  // a string. When so many masters hold another type that no quorum can
  // ever be had, waiting is in vain: WrongTypeError, naming the type one of
  // them holds (one TYPE, on this path only).
  void refuse_wrong_type(Fan& fan) {
    std::size_t wrong = 0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < fan.size(); ++i) {
      if (fan[i].state != FanState::replied || !fan[i].reply.is_error()) continue;
      if (!is_wrong_type(ServerError(fan[i].reply.str()))) continue;
      if (wrong++ == 0) first = i;
    }
    if (wrong == 0 || fan.size() - wrong >= quorum_) return;
    std::string found = "value of another type";
    try {
      auto connection = fan[first].site->borrow(clock::now() + node_timeout_);
      connection->set_timeout(node_timeout_);
      found = std::string(connection->command("TYPE", key_).str());
    } catch (const Error&) {
      // The error is the same without the type's name.
    }
    throw WrongTypeError(key_, found, "string");
  }

  // Runs a token-checked script (1 done, 0 no key, -1 another token) on
  // every master at once.
  RedlockAttempt run_script(Fan& fan, RedlockStep step, const Script& script, Args keys, Args args,
                            std::chrono::milliseconds lease) {
    const clock::time_point start = clock::now();
    fan.borrow_by(start + node_timeout_);
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

  // What a step found: timing, validity, each master's answer as
  // answer(reply) reads it, or its failure, and whether a quorum said yes
  // with validity left (a release, with no lease, needs only the quorum).
  template <class Answer>
  RedlockAttempt record(const Fan& fan, RedlockStep step, clock::time_point start,
                        std::chrono::milliseconds lease, Answer answer) const {
    return record_rounds(
        fan, [&](std::size_t i) { return fan.where(fan[i]); }, step, start, lease, answer);
  }

  /// record() of what each master's round (`rounds[i]`, a FanOut::Round)
  /// found, `where(i)` naming the master: an event loop's fan-out.
  template <class Rounds, class Where, class Answer>
  RedlockAttempt record_rounds(const Rounds& rounds, Where where, RedlockStep step,
                               clock::time_point start, std::chrono::milliseconds lease,
                               Answer answer) const {
    RedlockAttempt result;
    result.step = step;
    result.quorum = quorum_;
    result.started = start;
    result.elapsed = clock::now() - start;
    if (lease.count() > 0) result.validity = lease - result.elapsed - redlock_drift(lease);
    result.nodes.resize(rounds.size());
    for (std::size_t i = 0; i < rounds.size(); ++i) {
      NodeOutcome& node = result.nodes[i];
      const FanOut::Round& round = rounds[i];
      switch (round.state) {
        case FanState::replied:
          if (const std::optional<NodeStatus> status = answer(round.reply)) {
            node.status = *status;
          } else if (round.reply.is_error()) {
            node.error = Errc::server_error;
            node.message = where(i) + ": " + std::string(round.reply.str());
          } else {
            node.error = Errc::protocol_error;
            node.message = where(i) + ": unexpected reply to " + to_string(step);
          }
          break;
        case FanState::timed_out: node.status = NodeStatus::timed_out; [[fallthrough]];
        case FanState::unreachable:
          // No connection by the deadline (a slow connect or TLS handshake)
          // is a slow master, as a late reply is, not one that is down.
          if (round.error == Errc::timed_out) node.status = NodeStatus::timed_out;
          [[fallthrough]];
        default:
          node.error = round.error;
          node.message = round.message;
          break;
      }
    }
    result.succeeded =
        result.ok() >= quorum_ && (lease.count() == 0 || result.validity > clock::duration::zero());
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
    if (!result.succeeded && !refused(result)) throw no_quorum(std::move(result));
    if (result.succeeded) restore(fan, result, token, lease_text, clock::now() + node_timeout_);
    return result;
  }

  /// Whether so many masters said our token is not there that no quorum
  /// can have it. Fewer refusals than that, with too few yeses, decide
  /// nothing: the silent masters may hold the key, so the lease may still
  /// stand on a quorum (the next try, or the validity running out, tells).
  bool refused(const RedlockAttempt& result) const noexcept {
    return result.nodes.size() - result.refused() < quorum_;
  }

  /// After a quorum extended the lease: sets it again (SET NX) on the
  /// masters that no longer had it, so that the lease stands on every
  /// master it can, not on the bare quorum, where one more slow master
  /// would cost the next renewal its quorum. Such a master lost the key to
  /// a SET that never landed, a restart without persistence, or a late
  /// attempt's take-back; a key another client holds stays (NX). This is
  /// safe only because a quorum has just confirmed the hold: nobody else
  /// can hold the lock meanwhile. Best effort: a master that does not
  /// answer is left, and what it applies late runs out with the lease.
  void restore(Fan& fan, const RedlockAttempt& extended, std::string_view token,
               std::string_view lease, clock::time_point until) noexcept {
    if (extended.refused() == 0) return;
    try {
      fan.borrow_by(until);
      const std::string_view set[] = {"SET", key_, token, "NX", "PX", lease};
      fan.send(Args(set, 6), [&](const auto& node) {
        const std::size_t i = static_cast<std::size_t>(&node - &fan[0]);
        const NodeStatus status = extended.nodes[i].status;
        return status == NodeStatus::other_owner || status == NodeStatus::no_key ? FanSend::and_wait
                                                                                 : FanSend::skip;
      });
      fan.collect(until);
    } catch (...) {
      // Nothing is lost: the quorum holds the lease.
    }
  }

  /// The masters' identities, equal for two cores with the same masters in
  /// the same order (for cluster masters, the same slot on each: one
  /// script runs over keys of one slot only).
  std::vector<const void*> master_identity() const {
    std::vector<const void*> identity;
    for (const SitePtr& master : masters_) identity.push_back(master->identity());
    return identity;
  }

  /// The Watchdog's renewal of the leases of several Redlocks with these
  /// masters (lease i held through cores[i]): one renew_batch call for all
  /// of them on every master at once, which only ever lengthens a lease (so
  /// a renewal that lands late cannot cut back an extend), giving up at
  /// `deadline` or the node timeout. Each lease is judged as an extend:
  /// renewed when a quorum renewed it with validity left, gone when a
  /// quorum answered otherwise, unknown (and no_quorum remembered) when
  /// fewer than a quorum answered at all.
  void renew_together(const std::vector<RedlockCore*>& cores,
                      const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
                      clock::time_point deadline) {
    Fan fan(pointers_);
    const clock::time_point start = clock::now();
    const clock::time_point until = std::min(deadline, start + node_timeout_);
    fan.borrow_by(until);
    std::vector<std::string_view> keys;
    std::vector<std::string_view> args;
    for (std::size_t i = 0; i < leases.size(); ++i) {
      keys.push_back(cores[i]->key_);
      args.push_back(leases[i]->token);
      args.push_back(leases[i]->ttl_text);
    }
    fan.send_script(scripts::renew_batch, Args(keys), Args(args),
                    [](const auto&) { return FanSend::and_wait; });
    fan.collect(until);
    std::vector<std::pair<std::size_t, RedlockAttempt>> missing;
    for (std::size_t i = 0; i < leases.size(); ++i) {
      // The script answers the 1-based positions of the leases it found gone.
      const auto position = static_cast<long long>(i + 1);
      RedlockAttempt result = record(fan, RedlockStep::extend, start, leases[i]->ttl,
                                     [position](const Reply& reply) -> std::optional<NodeStatus> {
                                       if (!reply.is_array()) return std::nullopt;
                                       for (std::size_t g = 0; g < reply.size(); ++g) {
                                         if (reply[g].integer() == position)
                                           return NodeStatus::other_owner;
                                       }
                                       return NodeStatus::ok;
                                     });
      if (!result.succeeded && !refused(result)) {
        static_cast<void>(cores[i]->no_quorum(std::move(result)));  // remembered; unknown
        continue;
      }
      outcomes[i] = result.succeeded ? Renewed::yes : Renewed::gone;
      if (result.succeeded && result.refused() > 0) missing.emplace_back(i, result);
      cores[i]->remember(std::move(result));
    }
    // Rare: only where a master lost a lease the others kept.
    for (const auto& [i, renewed] : missing) {
      restore(fan, renewed, leases[i]->token, leases[i]->ttl_text,
              std::min(deadline, clock::now() + node_timeout_));
    }
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
          case FanState::unreachable:
          case FanState::broken: return FanSend::skip;  // nothing to queue behind
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
  const std::vector<SitePtr> masters_;
  std::vector<Site*> pointers_;  // of masters_, for a FanOut
  const std::string key_;
  const std::string channel_;  // the release script announces on it, as Mutex's does
  const std::chrono::milliseconds node_timeout_;
  const std::size_t quorum_;

  mutable Mutex mutex_;
  RedlockAttempt last_attempt_ DISTLOCK_GUARDED_BY(mutex_);
};

}  // namespace distlock::detail
