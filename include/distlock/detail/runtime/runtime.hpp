// Runtime: the background parts beside one endpoint's transport, each
// started on first use: the release Notifier (a subscriber connection and
// its thread), the Connector (a thread for the blocking work of async
// locks) and the lease Watchdog (a thread that renews leases through
// each lease's own backend), with, for a backend on one server at a time,
// the ServerWatch beside it (detail/runtime/server_watch.hpp: a restarted server's
// leases are revalidated within about a second of its return).
//
// A Runtime made before fork() is left untouched in the child: its threads
// exist only in the parent, so stopping them there would wait forever on
// threads and locks that are not there. The child leaves the objects be
// (they stay reachable, so no leak is reported) and the Client refuses to be
// used (Errc::forked).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "distlock/detail/runtime/connector.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/server_watch.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/events.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

/// Objects a forked child must neither use nor destroy, kept reachable.
inline std::vector<void*>& left_behind_in_child() {
  static auto* kept = new std::vector<void*>();  // never freed: see above
  return *kept;
}

/// Whether a Runtime watches its server (detail/runtime/server_watch.hpp): a
/// backend on one server at a time does, and says what to do with its idle
/// connections when the watch's own broke (`drop_idle`, may be empty); a
/// cluster's nodes are followed by its slot map instead.
struct WatchServer {
  bool watch = false;
  std::function<void()> drop_idle;
};

class Runtime {
 public:
  Runtime(ConnectionOptions options, std::size_t max_waiters, SharedEventHook events = nullptr,
          WatchServer watch = {})
      : options_(std::move(options)),
        max_waiters_(max_waiters),
        events_(std::move(events)),
        generation_(fork_generation.load(std::memory_order_relaxed)),
        watch_(std::move(watch)) {}

  ~Runtime() {
    if (fork_generation.load(std::memory_order_relaxed) == generation_) return;
    if (notifier_) left_behind_in_child().push_back(notifier_.release());
    if (connector_) left_behind_in_child().push_back(connector_.release());
    if (server_watch_) left_behind_in_child().push_back(server_watch_.release());
    if (watchdog_) left_behind_in_child().push_back(watchdog_.release());
  }

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Notifier& notifier() {
    std::call_once(notifier_started_, [this] {
      std::lock_guard<std::mutex> guard(where_mutex_);
      notifier_ = std::make_unique<Notifier>(options_, max_waiters_, events_);
    });
    return *notifier_;
  }

  Watchdog& watchdog() {
    std::call_once(watchdog_started_, [this] {
      watchdog_ = std::make_unique<Watchdog>();
      if (watch_.watch) {
        std::lock_guard<std::mutex> guard(where_mutex_);
        Watchdog* watchdog = watchdog_.get();
        server_watch_ = std::make_unique<ServerWatch>(
            options_, ServerWatch::Hooks{[watchdog] { return watchdog->holding(); },
                                         watch_.drop_idle, [watchdog] { watchdog->revalidate(); }});
      }
      watchdog_ready_.store(watchdog_.get(), std::memory_order_release);
    });
    return *watchdog_;
  }

  Connector& connector() {
    std::call_once(connector_started_, [this] { connector_ = std::make_unique<Connector>(); });
    return *connector_;
  }

  /// The Watchdog if it was started, else null (then no lease is renewed).
  Watchdog* started_watchdog() const noexcept {
    return watchdog_ready_.load(std::memory_order_acquire);
  }

  /// The server moved (a failover followed by the backend): the Notifier,
  /// started or not, subscribes at `options` from now on.
  void retarget(ConnectionOptions options) {
    std::lock_guard<std::mutex> guard(where_mutex_);
    options_ = options;
    if (server_watch_) server_watch_->retarget(options);
    if (notifier_) notifier_->retarget(std::move(options));  // made under where_mutex_ too
  }

  /// The backend now talks to a server other than the one its leases were
  /// granted on: every lease the Watchdog holds (renewed, or of fixed ttl)
  /// is revalidated there at once (Watchdog::revalidate). Nothing to do
  /// before the Watchdog starts: no lease was taken.
  void revalidate() {
    if (Watchdog* watchdog = started_watchdog()) watchdog->revalidate();
  }

 private:
  std::mutex where_mutex_;     // options_, against retarget()
  ConnectionOptions options_;  // where the Notifier subscribes
  const std::size_t max_waiters_;
  const SharedEventHook events_;
  const unsigned generation_;
  std::once_flag notifier_started_;
  std::unique_ptr<Notifier> notifier_;  // made under where_mutex_
  std::once_flag connector_started_;
  std::unique_ptr<Connector> connector_;
  const WatchServer watch_;
  std::once_flag watchdog_started_;
  std::unique_ptr<Watchdog> watchdog_;
  // Declared after the Watchdog, so stopped before it: it asks it questions.
  std::unique_ptr<ServerWatch> server_watch_;  // set once, under where_mutex_
  std::atomic<Watchdog*> watchdog_ready_{nullptr};
};

}  // namespace distlock::detail
