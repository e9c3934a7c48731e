// Giving an async hold back: async_release() (distlock/asio.hpp) and an
// AsyncHold's unlock. The hold is taken out of the lock object at once and
// its release script goes on the link of the lock's backend and context
// (detail/asio/link_service.hpp), its answer to `done` on the link's
// strand. Where that would mean waiting (a renewal of the lease in flight,
// which a release may not overtake; a minimum hold, kept by an extend), or
// where the context is gone, the backend's connector thread gives it back
// as release() does.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"

namespace distlock::detail {

// Tells `done` what `give_back()` answered, or the error it threw.
template <class GiveBack, class Done>
void tell_release(GiveBack&& give_back, Done& done) {
  std::error_code ec;
  Release outcome = Release::lost;
  try {
    outcome = give_back();
  } catch (...) {
    ec = code_of(std::current_exception());
  }
  done(ec, outcome);
}

// On the connector thread: release() of the hold, its outcome to `done`;
// `link`'s context (if any) kept running until it is answered.
template <class Life, class Done>
void release_apart(std::shared_ptr<Life> life, typename Life::Kind kind, std::string id,
                   const std::shared_ptr<AsioLink>& link, Done done) {
  auto shared = std::make_shared<Done>(std::move(done));  // the connector's jobs copy
  std::shared_ptr<void> kept = link ? link->keep_running() : nullptr;
  life->protocol().site()->connector().post([life, kind, id = std::move(id), shared, kept] {
    tell_release([&] { return life->release_hold(kind, id); }, *shared);
  });
}

// Runs `apart` when the last copy of a write goes without being run.
template <class Apart>
struct Unsent {
  explicit Unsent(Apart then) : apart(std::move(then)) {}
  ~Unsent() {
    if (sent) return;
    try {
      apart();
    } catch (...) {  // no memory for it: the lease runs out
    }
  }
  Unsent(const Unsent&) = delete;
  Unsent& operator=(const Unsent&) = delete;
  Apart apart;
  bool sent = false;
};

// release_on_link() for a protocol that releases on a link.
template <class Life, class Done>
void write_release(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                   const std::string& id, const std::shared_ptr<AsioLink>& link, Done done) {
  std::optional<typename Life::Unheld> unheld;
  try {
    if (link) unheld = life->unhold(kind, id);
  } catch (...) {
    return done(code_of(std::current_exception()), Release::lost);
  }
  if (!unheld) return release_apart(life, kind, id, link, std::move(done));
  if (!unheld->send) return done(std::error_code(), Release::lost);
  auto shared = std::make_shared<Done>(std::move(done));  // for both of submit's callbacks
  const auto acquired = unheld->acquired;
  // Given back apart, on the connector thread through the backend's pool:
  // when the context is gone, or shuts down with the write still queued
  // (the write's last copy then goes unrun), or when a master demoted to a
  // replica refused it (READONLY: not applied), where the backend finds the
  // master again, or a cluster's node sent it elsewhere (MOVED, ASK), where
  // the backend follows the cluster.
  auto apart = [life, kind, id, acquired, shared] {
    life->protocol().site()->connector().post([life, kind, id, acquired, shared] {
      tell_release(
          [&] {
            const Release outcome = to_release(life->protocol().release(kind, id));
            life->told_released(acquired, outcome);
            return outcome;
          },
          *shared);
    });
  };
  auto answered = [life, kind, acquired, shared, on = std::weak_ptr<AsioLink>(link),
                   apart](LinkAnswer answer) {
    if (answer.reply && answer.reply->is_error()) {
      const std::shared_ptr<AsioLink> still = on.lock();
      const bool not_run =
          still != nullptr
              ? still->refused(*life->protocol().site(), answer.reply->str()).not_run()
              : classify_server_error(answer.reply->str()) == ServerErrorKind::readonly;
      if (not_run) return apart();
    }
    tell_release(
        [&] {
          if (answer.failure) std::rethrow_exception(answer.failure);
          const Release outcome = to_release(life->protocol().release_answer(kind, *answer.reply));
          life->told_released(acquired, outcome);
          return outcome;
        },
        *shared);
  };
  auto unsent = std::make_shared<Unsent<decltype(apart)>>(apart);
  const bool queued = link->submit_if_open(
      life->protocol().site(),
      [life, kind, id, answered, unsent](Link& on) {
        unsent->sent = true;
        life->protocol().send_release(kind, on, id, answered);
      },
      [shared, unsent](const std::exception_ptr& failure) {
        unsent->sent = true;  // no link to be had: told, and the lease runs out
        (*shared)(code_of(failure), Release::lost);
      });
  if (!queued) {
    unsent->sent = true;
    apart();
  }
}

/// Gives the hold `id` of `kind` back on `link` (see the top of file), or,
/// for a protocol without a release on a link (SimpleMutex), apart;
/// `done(ec, Release)` runs once, on the link's strand, on the connector
/// thread, or inside this call for a hold that is gone already.
template <class Life, class Done>
void release_on_link(const std::shared_ptr<Life>& life, typename Life::Kind kind,
                     const std::string& id, const std::shared_ptr<AsioLink>& link, Done done) {
  if constexpr (ReleasesOnLink<typename LifeTraits<Life>::Protocol>::value) {
    write_release(life, kind, id, link, std::move(done));
  } else {
    release_apart(life, kind, id, link, std::move(done));
  }
}

// A handler kept while work for it runs off its context (on the connector
// thread), the context kept running meanwhile through its Gate. It is
// called on its executor while the context is there; once the context is
// gone, it is only destroyed, and nothing of the context is touched.
template <class Handler>
class OffContext {
 public:
  OffContext(const asio::any_io_executor& executor, Handler handler, std::shared_ptr<Gate> gate)
      : executor_(asio::prefer(executor, asio::execution::outstanding_work.untracked)),
        handler_(std::move(handler)),
        gate_(std::move(gate)) {
    gate_->leave(executor_);
  }
  ~OffContext() {
    if (!completed_) gate_->come_back();
  }
  OffContext(const OffContext&) = delete;
  OffContext& operator=(const OffContext&) = delete;

  /// Calls the handler with `args` on its executor, if the context is there.
  template <class... Args>
  void complete(Args... args) {
    if (std::exchange(completed_, true)) return;
    try {
      gate_->run_if_open([&] {
        asio::post(executor_, [handler = std::move(*handler_), args...]() mutable {
          std::move(handler)(args...);
        });
        handler_.reset();
      });
    } catch (...) {  // no memory to post it: the handler is dropped
    }
    gate_->come_back();
  }

 private:
  asio::any_io_executor executor_;  // untracked: the Gate keeps the context running
  std::optional<Handler> handler_;
  const std::shared_ptr<Gate> gate_;
  bool completed_ = false;
};

/// async_release(): release_on_link() on the link of the handler's
/// context, completing on the handler's executor (kept running meanwhile).
template <class Life, class Handler>
void release_async(std::shared_ptr<Life> life, typename Life::Kind kind, std::string id,
                   Handler handler) {
  const asio::any_io_executor work =
      asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler)),
                   asio::execution::outstanding_work.tracked);
  if (!life) {
    asio::post(work, [handler = std::move(handler)]() mutable {
      std::move(handler)(make_error_code(Errc::not_held), Release::lost);
    });
    return;
  }
  LinkService& service =
      asio::use_service<LinkService>(asio::query(work, asio::execution::context));
  std::shared_ptr<AsioLink> link;
  if (life->protocol().site()->links()) {
    link = service.link_for(*life->protocol().site(),
                            asio::prefer(work, asio::execution::outstanding_work.untracked));
  }
  auto pending = std::make_shared<OffContext<Handler>>(work, std::move(handler), service.gate());
  release_on_link(life, kind, id, link, [pending](std::error_code ec, Release outcome) {
    pending->complete(ec, outcome);
  });
}

}  // namespace distlock::detail
