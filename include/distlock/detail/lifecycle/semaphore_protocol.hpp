// SemaphoreProtocol: one Semaphore permit as a Protocol for the Lifecycle,
// and SemaphoreCore, what a Semaphore and its permits share.
//
// The permits of a name are a sorted set at its key: member the permit id
// (128 random bits), score its expiry in the server's milliseconds. Acquire
// prunes the expired ones and adds ours if fewer than the count are live,
// in one script (detail/wire/counting_scripts.hpp); release removes ours and announces
// it on "{key}:released"; extend and the watchdog's batched renewal move
// our score on. A permit is a lease like any lock's: the Lifecycle keeps
// it, waits for it, renews it and reports it lost.
//
// The count lives on the server too, at "{key}:permits", so that every
// object on the name enforces the same one: stored by resize() without
// expiry, or adopted by the first acquire from its object's count with an
// expiry, which every script that lengthens the set's lengthens too (so
// each of them, renewal included, gets the count key among its KEYS). An
// acquire whose object was made with another count than an adopted one is
// refused with InvalidArgument: it is the caller's configuration that
// disagrees, and no retry or wait would change the answer.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/batch_renewal.hpp"
#include "distlock/detail/lifecycle/single_server.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/counting_scripts.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

/// The most permits a Semaphore may have.
inline constexpr std::size_t max_permits = 1'000'000'000;

/// Renewal of permits, semaphore_renew per batch of Watchdog::batch_size
/// (the lease's aux is the name's count key, kept alive with the set).
using PermitRenewer = ScriptRenewer<scripts::semaphore_renew, /*WithAux=*/true>;

/// How a semaphore script answers a release or extend: 1 done, 0 the
/// permit had expired or was gone (a permit id is never another's).
inline TokenCheck permit_check(const Reply& reply) {
  return reply.throw_if_error().expect_integer("permit release or extend") == 1
             ? TokenCheck::done
             : TokenCheck::no_key;
}

class SemaphoreProtocol : public SingleServer, public OneKindProtocol {
 public:
  // A Semaphore refuses a minimum hold (semaphore.hpp).
  static constexpr bool holds_at_least(Kind) noexcept { return false; }

  SemaphoreProtocol(SitePtr site, const std::string& key, std::size_t permits,
                    const LockOptions& options, std::shared_ptr<Renewer> renewer)
      : SingleServer(std::move(site), key, companion_key(key, "released"), options),
        count_key_(companion_key(key, "permits")),
        permits_(static_cast<long long>(permits)),
        renewer_(std::move(renewer)) {}

  std::string id_for(Kind) const { return make_token(); }

  std::optional<Attempt> attempt(Kind kind, const std::string& id, SteadyClock::time_point deadline,
                                 bool /*waits*/) {
    return attempt_or_undo(
        *site_, deadline,
        [&](Connection& connection) {
          return attempt_answer(
              kind, connection.eval(scripts::semaphore_acquire, {this->key_, count_key_},
                                    {id, this->ttl_, permits_}));
        },
        [&](UndoWriter& write) {
          write.script(scripts::semaphore_release, {this->key_, this->channel_, count_key_}, {id});
        });
  }

  // The steps on a link (an event loop's, distlock/asio.hpp): each written,
  // its answer decoded apart; an attempt's undo written behind it.
  Link::Ticket send_attempt(Kind, Link& link, const std::string& id, Link::Sink sink) const {
    return link.send_script(scripts::semaphore_acquire, {this->key_, count_key_},
                            {id, this->ttl_, permits_}, std::move(sink));
  }
  // {1, _} granted; {0, pttl} refused, pttl the first live permit's lease;
  // {-1, count} the name's count is not this object's (InvalidArgument).
  Attempt attempt_answer(Kind, const Reply& reply) const {
    reply.throw_if_error();
    if (reply.size() != 2)
      throw ConnectionError(Errc::protocol_error, "bad semaphore acquire reply");
    const long long answer = reply[0].expect_integer("semaphore acquire");
    if (answer == -1) throw count_mismatch(reply[1].expect_integer("semaphore acquire"));
    Attempt attempt;
    attempt.acquired = answer == 1;
    if (!attempt.acquired) {
      attempt.holder = HolderLease::from_pttl(reply[1].expect_integer("semaphore acquire"));
    }
    return attempt;
  }
  void send_undo(Kind, Link& link, const std::string& id) const {
    link.undo_eval(scripts::semaphore_release, {this->key_, this->channel_, count_key_}, {id});
  }
  Link::Ticket send_release(Kind, Link& link, const std::string& id, Link::Sink sink) const {
    return link.send_script(scripts::semaphore_release, {this->key_, this->channel_, count_key_},
                            {id}, std::move(sink));
  }
  static TokenCheck release_answer(Kind, const Reply& reply) { return permit_check(reply); }
  // The undo on a connection of its own, answered (the connector's).
  void undo_on(Kind, Connection& connection, const std::string& id) const {
    static_cast<void>(connection.eval(scripts::semaphore_release,
                                      {this->key_, this->channel_, count_key_}, {id}));
  }
  // read_holder() on a link, from the replies to PTTL and TYPE of key():
  // the set's lease, as read_holder() reads it (the type is not checked).
  static HolderLease holder_answer(const Reply& pttl, const Reply&) {
    return HolderLease::from_pttl(pttl.throw_if_error().expect_integer("PTTL"));
  }

  TokenCheck release(Kind, const std::string& id) {
    return this->checked([&](Connection& connection) {
      return permit_check(connection.eval(scripts::semaphore_release,
                                          {this->key_, this->channel_, count_key_}, {id}));
    });
  }

  TokenCheck extend(Kind, const std::string& id, std::chrono::milliseconds ttl) {
    return this->checked([&](Connection& connection) {
      return permit_check(connection.eval(scripts::semaphore_extend, {this->key_, count_key_},
                                          {id, Decimal(ttl.count())}));
    });
  }

  std::shared_ptr<LeaseState> watched(Kind, const std::string& id, SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(this->key_, id, options.ttl(), sent, options.on_lost(),
                                        renewer_, count_key_);
  }

  static std::string describe(Kind) { return "permit"; }

 private:
  // The refusal of an acquire whose object's count is not the adopted one.
  InvalidArgument count_mismatch(long long adopted) const {
    return InvalidArgument("semaphore " + this->key_ + ": made with a count of " +
                           std::string(permits_.view()) + ", but the count in force is " +
                           std::to_string(adopted) + " (adopted at " + count_key_ +
                           " by the first acquire, kept while a permit is live); make every "
                           "object with " +
                           std::to_string(adopted) + ", or change the count with resize()");
  }

  const std::string count_key_;
  const Decimal permits_;
  std::shared_ptr<Renewer> renewer_;
};

/// What a Semaphore and every permit taken from it share (copies: a permit
/// may outlive its Semaphore).
struct SemaphoreCore {
  SitePtr site;
  std::string key;
  std::size_t permits;
  LockOptions options;
  AcquirePolicy policy;
  std::shared_ptr<Renewer> renewer;
  /// Shared by every permit lock taken from the Semaphore, so that its
  /// cancel_waits() reaches all their acquires.
  Cancellation cancellation;

  SemaphoreProtocol protocol() const {
    return SemaphoreProtocol(site, key, permits, options, renewer);
  }
};

}  // namespace distlock::detail
