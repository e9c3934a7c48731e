// MultiProtocol: the Lifecycle's Protocol for a lock on several names at
// once (MultiMutex): all of them or none.
//
// Every name is stored as a Mutex stores it, all under one token
// (detail/wire/multi_scripts.hpp). The names are grouped by where one
// script can take them together: one group on a Client or a
// SentinelClient, one per hash slot on a cluster. An attempt takes the
// groups in a fixed order (by their first keys), each by one script that
// takes all its names or none; a group refused gives back the groups the
// same attempt took before it. So a waiter never holds some names while it
// waits for others (no deadlock, with other MultiMutexes or with a Mutex on
// one of the names), and it waits for the release of the name that refused
// it: its subscription follows that name from one refusal to the next.
// With one group an attempt costs one round trip; with k, up to k.
//
// A lease that lost one name (it ran out, or its renewal found it gone)
// gives back the others at once rather than let them run out: the whole
// is lost either way, and nobody should wait for its remains.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/backend.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

/// The names of one MultiMutex that one script takes: their keys, then
/// each key's release channel, as one script's KEYS.
struct NameGroup {
  SitePtr site;
  std::vector<std::string> names;  // keys, then their channels
  std::vector<std::string_view> views;

  std::size_t size() const noexcept { return names.size() / 2; }
  Args keys() const noexcept { return Args(views.data(), size()); }
  Args keys_and_channels() const noexcept { return Args(views.data(), views.size()); }
  const std::string& key(std::size_t i) const { return names[i]; }
  const std::string& channel(std::size_t i) const { return names[size() + i]; }
};

/// Every group of one lock, in the order an attempt takes them. Made once
/// and never changed: the views point into it.
using NameGroups = std::vector<NameGroup>;

/// Takes `group` by its script; a refusal tells which key refused (`busy`,
/// its place in the group) and its holder, checked as a Mutex checks its key.
inline Attempt take_group(Connection& connection, const NameGroup& group, const std::string& token,
                          const Decimal& ttl, std::size_t& busy) {
  const Reply reply = connection.eval(scripts::multi_acquire, group.keys(), {token, ttl});
  reply.throw_if_error();
  Attempt attempt;
  attempt.acquired = reply[0].expect_integer("multi acquire") == 1;
  if (attempt.acquired) return attempt;
  if (reply.size() < 4) throw ConnectionError(Errc::protocol_error, "bad multi acquire reply");
  const long long position = reply[1].expect_integer("multi acquire");
  busy = position >= 1 && static_cast<std::size_t>(position) <= group.size()
             ? static_cast<std::size_t>(position - 1)
             : 0;
  attempt.holder = HolderLease::from_pttl(reply[2].expect_integer("multi acquire"));
  const std::string& key = group.key(busy);
  check_key_type(key, reply[3].str(), "string");
  if (reply[3].str() == "string") check_expires(key, "string", attempt.holder);
  return attempt;
}

/// Gives back what `token` holds in `group`, on its site by `deadline`.
inline TokenCheck give_group_back(const NameGroup& group, const std::string& token,
                                  SteadyClock::time_point deadline) {
  return on_site(*group.site, deadline, [&](Connection& connection) {
    return token_check(connection.eval(scripts::multi_release, group.keys_and_channels(), {token}),
                       "multi release");
  });
}

/// What several groups' answers come to: another owner's if any says so,
/// else the first that is not done, else done.
inline TokenCheck worst_of(TokenCheck a, TokenCheck b) noexcept {
  if (a == TokenCheck::other_token || b == TokenCheck::other_token) return TokenCheck::other_token;
  return a == TokenCheck::done ? b : a;
}

/// Renews a MultiMutex's leases: every group by renew_batch, and a lease
/// one of whose names is gone is given back whole (see the top of file).
/// Its leases share no batch with other locks' (each has its own groups).
class MultiRenewer final : public Renewer {
 public:
  explicit MultiRenewer(std::shared_ptr<const NameGroups> groups) : groups_(std::move(groups)) {}
  BatchKey batch_key() const noexcept override { return {this, groups_.get()}; }
  const void* endpoint() const noexcept override { return groups_->front().site->identity(); }
  void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
             SteadyClock::time_point deadline) noexcept override {
    for (std::size_t i = 0; i < leases.size(); ++i) outcomes[i] = renew(*leases[i], deadline);
  }

 private:
  Renewed renew(const LeaseState& lease, SteadyClock::time_point deadline) const noexcept {
    Renewed outcome = Renewed::yes;
    for (const NameGroup& group : *groups_) {
      try {
        std::vector<std::string_view> args;
        args.reserve(2 * group.size());
        for (std::size_t k = 0; k < group.size(); ++k) {
          args.push_back(lease.token);
          args.push_back(lease.ttl_text);
        }
        const Reply reply = on_site(*group.site, deadline, [&](Connection& connection) {
          return connection.eval(scripts::renew_batch, group.keys(), args);
        });
        if (!reply.is_array()) {
          outcome = Renewed::unknown;
        } else if (reply.size() > 0) {
          outcome = Renewed::gone;
          break;
        }
      } catch (...) {
        outcome = Renewed::unknown;
      }
    }
    if (outcome == Renewed::gone) {
      for (const NameGroup& group : *groups_) {
        try {
          give_group_back(group, lease.token, deadline);
        } catch (...) {  // what is left runs out with its lease
        }
      }
    }
    return outcome;
  }

  const std::shared_ptr<const NameGroups> groups_;
};

class MultiProtocol : public OneKindProtocol {
 public:
  // Every acquisition has a token of its own.
  static constexpr bool holds_at_least(Kind) noexcept { return true; }

  /// `keys`: distinct, at least one, each checked by lock_key().
  MultiProtocol(const Backend& backend, std::vector<std::string> keys, const LockOptions& options);

  void check_process() const {
    for (const NameGroup& group : *groups_) group.site->check_process();
  }
  bool forked() const noexcept { return groups_->front().site->forked(); }
  std::string id_for(Kind) const { return make_token(); }

  /// One attempt over every group in order (see the top of file). A group
  /// whose reply never came is undone behind it; the groups before it, and
  /// those before a refusal, are given back.
  std::optional<Attempt> attempt(Kind, const std::string& token, SteadyClock::time_point deadline,
                                 bool waits);

  TokenCheck release(Kind, const std::string& token) {
    std::exception_ptr failed;
    TokenCheck check = TokenCheck::done;
    for (const NameGroup& group : *groups_) {
      try {
        check = worst_of(check, give_group_back(group, token, no_deadline));
      } catch (const Error&) {
        if (!failed) failed = std::current_exception();  // the others still go back
      }
    }
    if (failed) std::rethrow_exception(failed);
    return check;
  }

  /// Every group's lease set to `ttl`, or, when one has lost a name, the
  /// remains given back.
  TokenCheck extend(Kind kind, const std::string& token, std::chrono::milliseconds ttl) {
    const Decimal text(ttl.count());
    TokenCheck check = TokenCheck::done;
    for (const NameGroup& group : *groups_) {
      check = on_site(*group.site, no_deadline, [&](Connection& connection) {
        return token_check(connection.eval(scripts::multi_extend, group.keys(), {token, text}),
                           "multi extend");
      });
      if (check != TokenCheck::done) break;
    }
    if (check != TokenCheck::done) {
      try {
        static_cast<void>(release(kind, token));
      } catch (const Error&) {  // what is left runs out with its lease
      }
    }
    return check;
  }

  std::optional<HolderLease> read_holder(SteadyClock::time_point deadline) {
    const NameGroup& first = groups_->front();
    return read_holder_of_type(*first.site, first.key(0), "string", deadline);
  }

  /// The waiter `id` listens for the release of the name that last refused
  /// it; listens_elsewhere() tells when a later refusal named another.
  std::optional<Notifier::Subscription> subscribe(const std::string& id,
                                                  SteadyClock::time_point deadline) {
    Place place;
    {
      MutexLock guard(waiting_->mutex);
      auto found = waiting_->by_id.find(id);
      if (found != waiting_->by_id.end()) {
        found->second.listening = found->second.refused;
        place = found->second.refused;
      }
    }
    const NameGroup& group = (*groups_)[place.group];
    return group.site->subscribe(group.channel(place.name), deadline);
  }
  bool listens_elsewhere(const std::string& id) const {
    MutexLock guard(waiting_->mutex);
    auto found = waiting_->by_id.find(id);
    return found != waiting_->by_id.end() && !(found->second.listening == found->second.refused);
  }
  /// Wakes every waiter of this lock, whichever name it listens for.
  void wake() {
    for (const NameGroup& group : *groups_) {
      for (std::size_t i = 0; i < group.size(); ++i) group.site->wake(group.channel(i));
    }
  }
  void left(Kind, const std::string& id, SteadyClock::time_point, bool) noexcept {
    forget_waiter(id);
  }

  std::shared_ptr<LeaseState> watched(Kind, const std::string& token, SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(label_, token, options.ttl(), sent, options.on_lost(),
                                        renewer_);
  }

  Watchdog& watchdog() { return groups_->front().site->watchdog(); }
  const SharedEventHook& events() const noexcept { return groups_->front().site->events(); }
  /// The keys, in the order taken, joined by '+': the lock in messages.
  const std::string& key() const noexcept { return label_; }
  static std::string describe(Kind) { return "lock"; }

  const NameGroups& groups() const noexcept { return *groups_; }

 private:
  // A name, as its group and its place there.
  struct Place {
    std::size_t group = 0;
    std::size_t name = 0;
    bool operator==(const Place& other) const noexcept {
      return group == other.group && name == other.name;
    }
  };
  struct Listening {
    Place refused;    // the name that last refused the waiter
    Place listening;  // the name its subscription is for
  };
  struct Waiting {
    Mutex mutex;
    std::map<std::string, Listening> by_id DISTLOCK_GUARDED_BY(mutex);
  };

  void refused_at(const std::string& id, Place place) {
    MutexLock guard(waiting_->mutex);
    waiting_->by_id[id].refused = place;
  }
  void forget_waiter(const std::string& id) noexcept {
    MutexLock guard(waiting_->mutex);
    waiting_->by_id.erase(id);
  }

  // Gives back groups [0, count) taken by this attempt: at once while the
  // deadline allows, else (or when that fails) from the connector thread,
  // so that the call still returns by its deadline.
  void give_back_first(std::size_t count, const std::string& token,
                       SteadyClock::time_point deadline) noexcept;

  std::shared_ptr<const NameGroups> groups_;
  std::string label_;
  Decimal ttl_;
  std::shared_ptr<Renewer> renewer_;
  std::shared_ptr<Waiting> waiting_;
};

// The longer members, below the class so that it reads as an interface.

inline MultiProtocol::MultiProtocol(const Backend& backend, std::vector<std::string> keys,
                                    const LockOptions& options)
    : ttl_(options.ttl().count()), waiting_(std::make_shared<Waiting>()) {
  if (keys.empty()) throw InvalidArgument("a MultiMutex needs at least one name");
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  auto groups = std::make_shared<NameGroups>();
  for (std::string& key : keys) {
    if (!label_.empty()) label_ += '+';
    label_ += key;
    SitePtr site = backend.site_for(key);
    auto same = std::find_if(groups->begin(), groups->end(), [&](const NameGroup& group) {
      return group.site->identity() == site->identity();
    });
    if (same == groups->end())
      same = groups->insert(groups->end(), NameGroup{std::move(site), {}, {}});
    same->names.push_back(std::move(key));
  }
  // Each group's keys, then their channels; the views last, once nothing moves.
  for (NameGroup& group : *groups) {
    const std::size_t count = group.names.size();
    for (std::size_t i = 0; i < count; ++i) {
      group.names.push_back(companion_key(group.names[i], "released"));
    }
  }
  for (NameGroup& group : *groups) group.views.assign(group.names.begin(), group.names.end());
  groups_ = std::move(groups);
  renewer_ = std::make_shared<MultiRenewer>(groups_);
}

inline std::optional<Attempt> MultiProtocol::attempt(Kind, const std::string& token,
                                                     SteadyClock::time_point deadline, bool waits) {
  for (std::size_t g = 0; g < groups_->size(); ++g) {
    const NameGroup& group = (*groups_)[g];
    std::size_t busy = 0;
    std::optional<Attempt> taken;
    try {
      taken = attempt_or_undo(
          *group.site, deadline,
          [&](Connection& connection) { return take_group(connection, group, token, ttl_, busy); },
          [&](UndoWriter& write) {
            write.script(scripts::multi_release, group.keys_and_channels(), {token});
          });
    } catch (...) {
      give_back_first(g, token, deadline);
      throw;
    }
    if (!taken || !taken->acquired) {
      give_back_first(g, token, deadline);
      if (taken && waits) {
        refused_at(token, Place{g, busy});
      } else {
        forget_waiter(token);
      }
      return taken;
    }
  }
  forget_waiter(token);
  Attempt granted;
  granted.acquired = true;
  return granted;
}

inline void MultiProtocol::give_back_first(std::size_t count, const std::string& token,
                                           SteadyClock::time_point deadline) noexcept {
  for (std::size_t g = 0; g < count; ++g) {
    try {
      const NameGroup& group = (*groups_)[g];
      try {
        if (SteadyClock::now() < deadline) {
          give_group_back(group, token, deadline);
          continue;
        }
      } catch (const Error&) {
      }
      group.site->connector().post([groups = groups_, g, token]() noexcept {
        try {
          give_group_back((*groups)[g], token, no_deadline);
        } catch (...) {  // it runs out with its lease
        }
      });
    } catch (...) {
    }
  }
}

}  // namespace distlock::detail
