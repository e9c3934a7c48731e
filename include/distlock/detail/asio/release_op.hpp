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

// On the connector thread: release() of the hold, its outcome to `done`.
template <class Life, class Done>
void release_apart(std::shared_ptr<Life> life, std::string id, Done done) {
  auto shared = std::make_shared<Done>(std::move(done));  // the connector's jobs copy
  life->protocol().site()->connector().post([life, id = std::move(id), shared] {
    std::error_code ec;
    Release outcome = Release::lost;
    try {
      outcome = life->release_hold(LifeTraits<Life>::exclusive, id);
    } catch (...) {
      ec = code_of(std::current_exception());
    }
    (*shared)(ec, outcome);
  });
}

/// Gives the hold `id` back on `link` (see the top of file); `done(ec,
/// Release)` runs once, on the link's strand, on the connector thread, or
/// inside this call for a hold that is gone already.
template <class Life, class Done>
void release_on_link(const std::shared_ptr<Life>& life, const std::string& id,
                     const std::shared_ptr<AsioLink>& link, Done done) {
  constexpr auto kind = LifeTraits<Life>::exclusive;
  std::optional<typename Life::Unheld> unheld;
  try {
    if (link) unheld = life->unhold(kind, id);
  } catch (...) {
    return done(code_of(std::current_exception()), Release::lost);
  }
  if (!unheld) return release_apart(life, id, std::move(done));
  if (!unheld->send) return done(std::error_code(), Release::lost);
  auto shared = std::make_shared<Done>(std::move(done));  // for both of submit's callbacks
  const auto acquired = unheld->acquired;
  auto answered = [life, acquired, shared](LinkAnswer answer) {
    std::error_code ec;
    Release outcome = Release::lost;
    try {
      if (answer.failure) std::rethrow_exception(answer.failure);
      outcome = to_release(life->protocol().release_answer(*answer.reply));
      life->told_released(acquired, outcome);
    } catch (...) {
      ec = code_of(std::current_exception());
    }
    (*shared)(ec, outcome);
  };
  const bool sent = link->submit_if_open(
      life->protocol().site(),
      [life, id, answered](Link& on) { life->protocol().send_release(on, id, answered); },
      [shared](const std::exception_ptr& failure) { (*shared)(code_of(failure), Release::lost); });
  if (sent) return;
  // The context is gone: the hold, out of the object already, is given back
  // on the connector thread, through the backend's pool.
  life->protocol().site()->connector().post([life, id, acquired, shared] {
    std::error_code ec;
    Release outcome = Release::lost;
    try {
      outcome = to_release(life->protocol().release(kind, id));
      life->told_released(acquired, outcome);
    } catch (...) {
      ec = code_of(std::current_exception());
    }
    (*shared)(ec, outcome);
  });
}

/// async_release(): release_on_link() on the link of the handler's
/// context, completing on the handler's executor (kept running meanwhile;
/// should its context shut down all the same, nothing is posted to it).
template <class Life, class Handler>
void release_async(std::shared_ptr<Life> life, std::string id, Handler handler) {
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
  if (life->protocol().site()->one_endpoint()) {
    link = service.link_for(*life->protocol().site(),
                            asio::prefer(work, asio::execution::outstanding_work.untracked));
  }
  auto shared = std::make_shared<Handler>(std::move(handler));
  release_on_link(
      life, id, link, [work, gate = service.gate(), shared](std::error_code ec, Release outcome) {
        gate->run_if_open(
            [&] { asio::post(work, [shared, ec, outcome] { std::move (*shared)(ec, outcome); }); });
      });
}

}  // namespace distlock::detail
