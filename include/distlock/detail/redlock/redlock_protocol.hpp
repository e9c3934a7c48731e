// A Redlock's Protocol for the Lifecycle and its Renewer, over the quorum
// steps of detail/redlock/redlock_core.hpp, and the checks of its options.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "distlock/backend.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/redlock/redlock_core.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/redlock_options.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

/// Renews Redlock leases as extends: those of Redlocks with the same
/// masters go together, one renew_batch call per Watchdog::batch_size leases
/// on every master at once. A quorum keeps a lease. Too few answers:
/// unknown (tried again until the validity runs out); a majority that no
/// longer holds our token: gone.
class RedlockRenewer final : public Renewer {
 public:
  explicit RedlockRenewer(std::shared_ptr<RedlockCore> core) : core_(std::move(core)) {}
  // The batch key names the first master only; renew() sorts the leases by
  // their whole set of masters.
  BatchKey batch_key() const noexcept override {
    return {&kind_tag, core_->masters().front()->identity()};
  }
  void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
             SteadyClock::time_point deadline) noexcept override {
    try {
      std::map<std::vector<const void*>, std::vector<std::size_t>> by_masters;
      for (std::size_t i = 0; i < leases.size(); ++i) {
        by_masters[core_of(*leases[i]).master_identity()].push_back(i);
      }
      std::vector<RedlockCore*> cores;
      std::vector<LeaseState*> batch;
      std::vector<Renewed> found;
      for (const auto& [masters, positions] : by_masters) {
        for (std::size_t first = 0; first < positions.size(); first += Watchdog::batch_size) {
          const std::size_t end = std::min(first + Watchdog::batch_size, positions.size());
          cores.clear();
          batch.clear();
          for (std::size_t n = first; n < end; ++n) {
            batch.push_back(leases[positions[n]]);
            cores.push_back(&core_of(*batch.back()));
          }
          found.assign(batch.size(), Renewed::unknown);
          try {
            cores.front()->renew_together(cores, batch, found, deadline);
          } catch (...) {
            // This batch stays unknown; the others go on.
          }
          for (std::size_t n = first; n < end; ++n) outcomes[positions[n]] = found[n - first];
        }
      }
    } catch (...) {
      // Whatever was not settled stays unknown.
    }
  }

 private:
  // Leases with equal batch keys have renewers of this very type.
  static RedlockCore& core_of(const LeaseState& lease) noexcept {
    return *static_cast<const RedlockRenewer&>(*lease.renewer).core_;
  }

  static constexpr char kind_tag = 0;
  std::shared_ptr<RedlockCore> core_;
};

/// The Lifecycle's Protocol for a Redlock.
class RedlockProtocol : public OneKindProtocol {
 public:
  using clock = std::chrono::steady_clock;
  // A minimum hold keeps the lease on every master that still has the
  // token (extend), as for a single-key lease.
  static constexpr bool holds_at_least(Kind) noexcept { return true; }

  /// Validates (InvalidArgument, see redlock.hpp) and contacts no server.
  RedlockProtocol(const std::vector<const Backend*>& masters, std::string_view name,
                  const RedlockOptions& options)
      : options_(checked_options(options)),
        core_(core_on(masters, lock_key(options, name), options)),
        renewer_(std::make_shared<RedlockRenewer>(core_)) {}

  void check_process() const {
    for (const Site* master : core_->masters()) master->check_process();
  }
  bool forked() const noexcept { return core_->masters().front()->forked(); }

  std::string id_for(Kind) const { return std::string(); }  // see attempt()

  // One attempt on every master. No master is waited for past the caller's
  // deadline; a call without one gives each the full node timeout.
  // Too few answers is judged by why they are missing:
  // - masters that are down, refuse the connection, drop it or answer with
  //   an error leave fewer than a quorum able to answer: no attempt can
  //   succeed now, so NoQuorumError at once, whatever the deadline;
  // - otherwise the missing answers are masters that were slow (no reply
  //   within the node timeout). A call with a deadline (try_lock_for,
  //   try_lock_until) takes that as a "no" and tries again at the policy's
  //   pace until its deadline; if a quorum never answered in the probe
  //   window before it, that call ends unanswered (TimeoutError), as
  //   Mutex's does when Redis is silent (detail/lifecycle/lifecycle.hpp). A call
  //   without one (try_lock, lock) has no time to wait in, and throws
  //   NoQuorumError.
  // Each attempt has a token of its own: the release that takes back a
  // failed attempt may land late, and must never hit a later attempt's key.
  std::optional<Attempt> attempt(Kind, const std::string&, clock::time_point deadline,
                                 bool /*waits*/) {
    check_process();  // a master refusing in a forked child is not a vote
    const std::string token = make_token();
    RedlockAttempt result = core_->acquire_step(token, options_.ttl(), budget(deadline));
    return judged(std::move(result), token, deadline);
  }

  /// How long an attempt with `deadline` may wait for the masters.
  clock::duration budget(clock::time_point deadline) const {
    const clock::duration most = core_->node_timeout();
    if (deadline == no_deadline) return most;
    const clock::duration left = deadline - clock::now();
    return left >= most ? most : std::max<clock::duration>(left, std::chrono::milliseconds(1));
  }

  /// The attempt `token`'s outcome (see attempt()) from what the masters
  /// answered (`result`, remembered): granted, refused, nullopt when the
  /// deadline cut it, or NoQuorumError. A refused attempt is the caller's
  /// to take back (RedlockCore::clean_up).
  std::optional<Attempt> judged(RedlockAttempt result, const std::string& token,
                                clock::time_point deadline) {
    Attempt attempt;
    attempt.holder = HolderLease::endless();  // nothing to go by: the policy's (random) pace
    if (result.succeeded) {
      attempt.acquired = true;
      attempt.id = token;
      core_->remember(std::move(result));
      return attempt;
    }
    const bool timed = deadline != no_deadline;
    const std::size_t answered = result.answered();
    const bool slow = answered + result.count(NodeStatus::timed_out) >= core_->quorum();
    if (answered < core_->quorum() && !(timed && slow)) throw core_->no_quorum(std::move(result));
    core_->remember(std::move(result));
    // The fan-out waits by poll() to the very deadline it was given, so only
    // a deadline that has passed cut it short (deadline_reached()'s slack is
    // for socket timeouts): an attempt ending just before it is a "no".
    if (answered < core_->quorum() && clock::now() >= deadline) return std::nullopt;
    attempt.unheard = answered < core_->quorum();
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
    const bool taken = result.count(NodeStatus::other_owner) > 0;
    core_->remember(std::move(result));
    if (succeeded) return TokenCheck::done;
    return taken ? TokenCheck::other_token : TokenCheck::no_key;
  }

  std::optional<HolderLease> read_holder(clock::time_point) const { return HolderLease::endless(); }
  std::optional<Notifier::Subscription> subscribe(const std::string&, clock::time_point) const {
    return std::nullopt;
  }
  bool listens_elsewhere(const std::string&) const noexcept { return false; }
  void wake() const noexcept {}
  void left(Kind, const std::string&, clock::time_point, bool) const noexcept {}

  std::shared_ptr<LeaseState> watched(Kind, const std::string& token, clock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(core_->key(), token, options.ttl(), sent, options.on_lost(),
                                        renewer_, std::string(), &redlock_drift);
  }
  // The watchdog of the first master's Client keeps the time; renewals go
  // to every master through its own Client.
  Watchdog& watchdog() { return core_->masters().front()->watchdog(); }
  // Its events go to the first master's Client's hook, too.
  const SharedEventHook& events() const noexcept { return core_->masters().front()->events(); }

  const std::string& key() const noexcept { return core_->key(); }
  /// The first master's site: its connector thread runs what an async call
  /// does off the event loop (a release, on every master at once).
  const SitePtr& site() const noexcept { return core_->sites().front(); }
  static std::string describe(Kind) { return "lock"; }
  const RedlockOptions& options() const noexcept { return options_; }
  RedlockCore& core() const noexcept { return *core_; }

  /// The site of `key` at each master: none null, no two the same server
  /// (two handles on one cluster count as one), the key's companions in its
  /// slot on a cluster.
  static std::vector<SitePtr> sites_of(const std::vector<const Backend*>& masters,
                                       const std::string& key) {
    if (masters.empty()) throw InvalidArgument("Redlock needs at least one master");
    std::vector<SitePtr> sites;
    std::vector<std::string> servers;
    sites.reserve(masters.size());
    servers.reserve(masters.size());
    for (const Backend* master : masters) {
      if (master == nullptr) throw InvalidArgument("Redlock master must not be null");
      sites.push_back(master->site_for(key));
      sites.back()->check_keys("Redlock '" + key + "'", {key, companion_key(key, "released")});
      servers.push_back(sites.back()->describe());
    }
    std::sort(servers.begin(), servers.end());
    if (const auto twice = std::adjacent_find(servers.begin(), servers.end());
        twice != servers.end()) {
      throw InvalidArgument("Redlock masters must be independent servers; " + *twice +
                            " is given more than once");
    }
    return sites;
  }

  static RedlockOptions checked_options(RedlockOptions options) {
    if (options.fencing()) {
      throw InvalidArgument(
          "Redlock offers no fencing token: counters kept on independent masters do not form "
          "one rising sequence");
    }
    if (options.replicas() != 0) {
      throw InvalidArgument(
          "Redlock takes no replicas(): WAIT counts one server's replicas, and a Redlock's "
          "masters are independent servers (a quorum of them is its redundancy)");
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

  static std::chrono::milliseconds default_node_timeout(const std::vector<SitePtr>& masters,
                                                        std::chrono::milliseconds ttl) {
    std::chrono::milliseconds timeout = std::max(ttl / 10, std::chrono::milliseconds(1));
    for (const SitePtr& master : masters) {
      timeout = std::min(timeout, master->options().command_timeout);
    }
    return timeout;
  }

 private:
  static std::shared_ptr<RedlockCore> core_on(const std::vector<const Backend*>& masters,
                                              std::string key, const RedlockOptions& options) {
    std::vector<SitePtr> sites = sites_of(masters, key);
    const std::chrono::milliseconds node_timeout = options.node_timeout().count() > 0
                                                       ? options.node_timeout()
                                                       : default_node_timeout(sites, options.ttl());
    return std::make_shared<RedlockCore>(std::move(sites), std::move(key), node_timeout);
  }

  const RedlockOptions options_;
  std::shared_ptr<RedlockCore> core_;
  std::shared_ptr<Renewer> renewer_;
};

}  // namespace distlock::detail
