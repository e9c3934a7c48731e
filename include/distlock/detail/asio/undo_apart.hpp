// Giving back a grant an async attempt may have had: behind the attempt
// on its link, where the protocol has an undo that may follow an attempt
// unread, and apart from the link where it has none (a SimpleMutex, whose
// delete checks the token first) or where nothing written behind can reach
// the server (it closed the connection mid-reply), as the blocking path
// does.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "distlock/connection_options.hpp"
#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/link.hpp"

namespace distlock::detail {

/// Undoes the attempt `id` of `kind` of `life` on the backend's connector
/// thread, on a connection of its own (a pooled one may have been closed
/// with the link), connected and answered within one command timeout each:
/// the connector's other jobs (the links' connects) wait behind it. Best
/// effort: the lease runs out otherwise.
template <class Life>
void undo_apart(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                const std::string& id) noexcept {
  try {
    life->protocol().site()->connector().post([life, kind, id] {
      try {
        const std::shared_ptr<Site>& site = life->protocol().site();
        const SteadyClock::time_point deadline =
            SteadyClock::now() + site->options().command_timeout;
        Connection fresh(cut_to(site->endpoint_now(deadline), deadline));
        fresh.set_sharded_publish(site->redirects());  // a cluster node's scripts
        life->protocol().undo_on(kind, fresh, id);
      } catch (...) {
      }
    });
  } catch (...) {
  }
}

/// Undoes the attempt `id` of `kind`: behind itself on `on` (the link it
/// went on; null if none) where the protocol can, and apart too when
/// `apart` or when it cannot.
template <class Life>
void undo_attempt(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                  const std::string& id, Link* on, bool apart) noexcept {
  if constexpr (UndoesBehind<typename LifeTraits<Life>::Protocol>::value) {
    if (on != nullptr) {
      try {
        life->protocol().send_undo(kind, *on, id);
      } catch (...) {  // not written (an allocation): the apart undo, or the lease's end
      }
    }
    if (!apart) return;
  }
  undo_apart(life, kind, id);
}

/// The answer to an attempt nobody waits for any longer: a grant (or an
/// answer that may hide one, or none at all) is given back apart.
template <class Life>
void undo_late_grant(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                     const std::string& id, const LinkAnswer& answer) noexcept {
  bool granted = true;
  if (answer.reply) {
    try {
      granted = life->protocol().attempt_answer(kind, *answer.reply).acquired;
    } catch (...) {  // an answer that may hide a grant
    }
  }
  if (granted) undo_apart(life, kind, id);
}

/// Where no undo can be written behind an attempt, its sink is the only way
/// a late grant comes back: this, shared by the sink, undoes the attempt
/// apart if the link lets the sink go unrun (its context shut down with the
/// attempt queued). unanswered_guard() makes one where it is needed.
template <class Life>
class UndoUnlessAnswered {
 public:
  UndoUnlessAnswered(std::shared_ptr<Life> life, typename Life::Kind kind, std::string id) noexcept
      : life_(std::move(life)), kind_(kind), id_(std::move(id)) {}
  ~UndoUnlessAnswered() {
    if (!answered) undo_apart(life_, kind_, id_);
  }
  UndoUnlessAnswered(const UndoUnlessAnswered&) = delete;
  UndoUnlessAnswered& operator=(const UndoUnlessAnswered&) = delete;

  bool answered = false;

 private:
  std::shared_ptr<Life> life_;
  typename Life::Kind kind_;
  std::string id_;
};

/// An UndoUnlessAnswered for the attempt `id` of `kind` where the protocol
/// cannot undo behind it; null where it can.
template <class Life>
auto unanswered_guard(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                      const std::string& id) {
  if constexpr (UndoesBehind<typename LifeTraits<Life>::Protocol>::value) {
    return nullptr;
  } else {
    return std::make_shared<UndoUnlessAnswered<Life>>(life, kind, id);
  }
}

}  // namespace distlock::detail
