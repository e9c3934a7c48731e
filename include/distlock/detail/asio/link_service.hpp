// AsioLink: a Link (detail/wire/link.hpp) run by an Asio execution
// context, and LinkService, which keeps one per backend and context.
//
// Everything an AsioLink does happens on its strand: steps are written as
// the socket takes them, replies are read when it is readable, and the
// command timeout is kept by a timer. The socket is waited on only while
// a step is in flight, so an idle link keeps no io_context::run() from
// returning; before it is used again after a pause it is asked whether the
// server closed it meanwhile, as the Client's pool asks.
//
// Connecting blocks (TCP, TLS, AUTH, a credentials callback), so it runs on
// the backend's Connector thread; steps submitted meanwhile wait for it.
// A connect that ends after its context shut down posts nothing there:
// the Gate says so under its mutex. A link keeps nothing of its backend
// alive: the service lets it go once the backend is gone, when a new
// backend first asks for a link (the hot path only looks its own up) or
// the context shuts down.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/bind_executor.hpp>
#include <asio/detail/strand_executor_service.hpp>
#include <asio/execution.hpp>
#include <asio/execution_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/connection_options.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/connector.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

// Whether a context is still there to post to, and the work it is kept
// running for off its threads (a release on the connector thread): counted
// here, by an executor of the gate's own, so that nothing of the context
// is touched once it is gone.
struct Gate {
  std::mutex mutex;
  bool open = true;
  unsigned away = 0;                          // jobs off the context
  std::optional<asio::any_io_executor> kept;  // tracked while any are

  // Runs `post` (which posts to the context) unless the context shut
  // down; false then.
  template <class Post>
  bool run_if_open(Post&& post) {
    std::lock_guard<std::mutex> guard(mutex);
    if (!open) return false;
    std::forward<Post>(post)();
    return true;
  }
  // A job leaves the context (`executor` of it), and comes back.
  void leave(const asio::any_io_executor& executor) {
    std::lock_guard<std::mutex> guard(mutex);
    if (open && away++ == 0) {
      kept.emplace(asio::prefer(executor, asio::execution::outstanding_work.tracked));
    }
  }
  void come_back() noexcept {
    std::lock_guard<std::mutex> guard(mutex);
    if (open && away > 0 && --away == 0) kept.reset();
  }
  // The context shuts down (while it is still there).
  void close() noexcept {
    std::lock_guard<std::mutex> guard(mutex);
    open = false;
    kept.reset();
  }
};

class AsioLink : public std::enable_shared_from_this<AsioLink> {
 public:
  using Strand = asio::strand<asio::any_io_executor>;
  using Write = std::function<void(Link&)>;
  using Failed = std::function<void(std::exception_ptr)>;

  AsioLink(const asio::any_io_executor& executor, std::shared_ptr<Gate> gate)
      : strand_(asio::make_strand(executor)), gate_(std::move(gate)), timer_(strand_) {}

  ~AsioLink() { drop_link(); }

  AsioLink(const AsioLink&) = delete;
  AsioLink& operator=(const AsioLink&) = delete;

  const Strand& strand() const noexcept { return strand_; }

  /// Runs `write` on the strand with the link once it is connected (it
  /// sends steps; their sinks run on the strand too), or `failed` with why
  /// no link could be had. Neither runs inside submit(). `site` (the
  /// caller's backend, kept until then) connects where needed.
  void submit(std::shared_ptr<Site> site, Write write, Failed failed) {
    asio::post(strand_, [self = shared_from_this(), site = std::move(site),
                         write = std::move(write), failed = std::move(failed)]() mutable {
      self->queued_.push_back({std::move(site), std::move(write), std::move(failed)});
      self->serve();
    });
  }

  /// submit() from outside the context's own work (a guard given back on
  /// any thread, maybe once the context is gone): false, with nothing
  /// done, if the context shut down.
  bool submit_if_open(std::shared_ptr<Site> site, Write write, Failed failed) {
    return gate_->run_if_open(
        [&] { submit(std::move(site), std::move(write), std::move(failed)); });
  }

  /// The link the sink now running was called by (on the strand only).
  Link* current() noexcept { return link_.get(); }

  /// On the strand: an error reply `reply` to a step sent through `site`.
  /// READONLY (a master demoted to a replica: the step was not applied)
  /// has the site look for the master again, and the link let go once
  /// nothing is owed on it: the next step connects to where the site
  /// names then.
  void refused(Site& site, std::string_view reply) {
    static_cast<void>(site.saw_error(reply));
    if (classify_server_error(reply) == ServerErrorKind::readonly) retired_ = true;
  }

  /// On the strand: writes what is queued, and waits for what the link
  /// needs next: the socket writable while writes are left, readable while
  /// replies are owed, and the command timeout. For a step queued on
  /// current() outside a sink (a cancellation's undo).
  void pump() {
    if (!link_) return;
    if (link_->broken() || (retired_ && link_->in_flight() == 0)) {
      drop_link();
      if (!queued_.empty()) connect();
      return;
    }
    if (!writing_ && !link_->flush()) {
      wait_then(asio::posix::stream_descriptor::wait_write, &AsioLink::writing_, &Link::flush);
    }
    if (link_ && !reading_ && link_->in_flight() > 0) {
      wait_then(asio::posix::stream_descriptor::wait_read, &AsioLink::reading_, &Link::read);
    }
    if (link_ && timing_ && link_->in_flight() == 0) {
      timer_.cancel();  // nothing to time: let run() return
    } else if (link_ && !timing_) {
      if (const std::optional<Link::clock::time_point> due =
              link_->check_timeout(Link::clock::now())) {
        timing_ = true;
        timer_.expires_at(*due);
        timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](auto) {
          self->timing_ = false;
          self->pump();
        }));
      }
    }
  }

  /// For the context's shutdown, when no thread runs it: drops the link
  /// and what waits, without calling anyone (their handlers are destroyed
  /// with the context's).
  void abandon() noexcept {
    queued_.clear();
    drop_link();
  }

 private:
  struct Job {
    std::shared_ptr<Site> site;
    Write write;
    Failed failed;
  };

  // On the strand from here on.
  void serve() {
    // Made before the site's server may have moved: let go, once drained.
    if (link_ && !queued_.empty() && queued_.front().site->endpoint_epoch() != epoch_) {
      retired_ = true;
    }
    if (link_ && (link_->broken() || (link_->in_flight() == 0 && (retired_ || link_->stale())))) {
      drop_link();
    }
    if (!link_) {
      connect();
      return;
    }
    if (retired_) return pump();  // which drops it once nothing is owed, and connects again
    while (!queued_.empty()) {
      Job job = std::move(queued_.front());
      queued_.pop_front();
      try {
        job.write(*link_);
      } catch (...) {
        job.failed(std::current_exception());
      }
    }
    pump();
  }

  void connect() {
    if (connecting_ || queued_.empty()) return;
    connecting_ = true;
    // The job holds no reference: should the context be gone when it
    // ends, nothing of it (strand, timer, socket) may be touched. The site
    // names the server (a SentinelClient's master may have moved).
    const std::shared_ptr<Site>& site = queued_.front().site;
    site->connector().post([weak = weak_from_this(), site, gate = gate_] {
      std::unique_ptr<Link> made;
      std::exception_ptr failure;
      // Read first: a move during the connect is a later epoch.
      const std::uint64_t epoch = site->endpoint_epoch();
      try {
        made = std::make_unique<Link>(
            site->endpoint_now(SteadyClock::now() + site->options().connect_timeout));
      } catch (...) {
        failure = std::current_exception();
      }
      gate->run_if_open([&] {
        std::shared_ptr<AsioLink> self = weak.lock();
        if (!self) return;
        const Strand strand = self->strand_;
        asio::post(strand, [self = std::move(self), made = std::move(made), failure,
                            epoch]() mutable { self->connected(std::move(made), failure, epoch); });
      });
    });
  }

  void connected(std::unique_ptr<Link> made, const std::exception_ptr& failure,
                 std::uint64_t epoch) {
    connecting_ = false;
    if (failure) {
      std::deque<Job> jobs;
      jobs.swap(queued_);
      for (Job& job : jobs) job.failed(failure);
      return;
    }
    link_ = std::move(made);
    epoch_ = epoch;
    socket_.emplace(strand_, link_->fd());
    serve();
  }

  // Waits until the socket is ready for `what` (with `*waiting` set
  // meanwhile), then has the link `step` (write or read) and pumps again.
  void wait_then(asio::posix::stream_descriptor::wait_type what, bool AsioLink::*waiting,
                 bool (Link::*step)()) {
    this->*waiting = true;
    socket_->async_wait(what, asio::bind_executor(strand_, [self = shared_from_this(), waiting,
                                                            step](const std::error_code&) {
                          self.get()->*waiting = false;
                          if (self->link_) static_cast<void>((self->link_.get()->*step)());
                          self->pump();
                        }));
  }

  // The descriptor is the Link's: Asio lets go of it before the Link closes
  // it. Its command timeout is not kept any longer (nor run() kept going).
  void drop_link() noexcept {
    if (socket_) {
      socket_->release();
      socket_.reset();
    }
    link_.reset();
    retired_ = false;
    try {
      timer_.cancel();
    } catch (...) {  // the timer is then let run out
    }
  }

  Strand strand_;
  const std::shared_ptr<Gate> gate_;
  asio::steady_timer timer_;
  std::unique_ptr<Link> link_;
  std::optional<asio::posix::stream_descriptor> socket_;
  std::deque<Job> queued_;
  bool connecting_ = false;
  bool writing_ = false;
  bool reading_ = false;
  bool timing_ = false;
  bool retired_ = false;     // let go once nothing is owed on it (refused(), a later epoch)
  std::uint64_t epoch_ = 0;  // the site's endpoint_epoch() when the link was made
};

/// One AsioLink per backend (its id) on each execution context.
class LinkService : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;

  // A context shuts its services down newest first, and a strand being
  // shut down must take no post: the strands' service is made first, so
  // that this one's shutdown closes the Gate (which every post from the
  // connector thread passes) before any strand goes.
  explicit LinkService(asio::execution_context& context)
      : asio::execution_context::service(context) {
    asio::use_service<asio::detail::strand_executor_service>(context);
  }

  /// The link to the server of `site` (a backend on one server), made
  /// on first use with `executor` (of this service's context). Links of
  /// backends that are gone are let go when a link is made.
  std::shared_ptr<AsioLink> link_for(const Site& site, const asio::any_io_executor& executor) {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto found = links_.find(site.id());
    if (found != links_.end() && !found->second.backend.expired()) return found->second.link;
    // A backend new here: the links of backends gone are let go first.
    for (auto it = links_.begin(); it != links_.end();) {
      it = it->second.backend.expired() ? links_.erase(it) : std::next(it);
    }
    Entry& entry = links_[site.id()];
    entry.link = std::make_shared<AsioLink>(executor, gate_);
    entry.backend = site.lifetime();
    return entry.link;
  }

  /// Whether this context is still there to post to.
  const std::shared_ptr<Gate>& gate() const noexcept { return gate_; }

 private:
  void shutdown() override {
    gate_->close();
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto& [name, entry] : links_) entry.link->abandon();
    links_.clear();
  }

  struct Entry {
    std::shared_ptr<AsioLink> link;
    std::weak_ptr<const void> backend;
  };

  std::mutex mutex_;
  std::map<std::string, Entry> links_;  // by backend id
  const std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

}  // namespace distlock::detail
