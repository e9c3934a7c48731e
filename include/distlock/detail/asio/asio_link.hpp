// AsioLink: the Links (detail/wire/link.hpp) of one backend run by an
// Asio execution context, one per server its keys live on (a Client's, a
// SentinelClient's master, each node of a cluster).
//
// Everything an AsioLink does happens on its strand: a step goes to the
// link of the server its site routes it to now, written as the socket
// takes it; replies are read when it is readable, and the command timeout
// is kept by a timer. A socket is waited on only while a step is in
// flight, so an idle link keeps no io_context::run() from returning;
// before it is used again after a pause it is asked whether the server
// closed it meanwhile, as the Client's pool asks.
//
// Connecting blocks (TCP, TLS, AUTH, a credentials callback), so it runs on
// the backend's Connector thread; steps submitted meanwhile wait for it.
// So does finding where a key lives when the site cannot tell without
// asking (a cluster whose slot map was not read yet). A connect that ends
// after its context shut down posts nothing there: the Gate says so under
// its mutex.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/bind_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "distlock/detail/asio/gate.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/connector.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

class AsioLink : public std::enable_shared_from_this<AsioLink> {
 public:
  using Strand = asio::strand<asio::any_io_executor>;
  using Write = std::function<void(Link&)>;
  using Failed = std::function<void(std::exception_ptr)>;

  AsioLink(const asio::any_io_executor& executor, std::shared_ptr<Gate> gate)
      : strand_(asio::make_strand(executor)), gate_(std::move(gate)) {}

  ~AsioLink() {
    for (auto& [route, channel] : channels_) drop_link(*channel);
  }

  AsioLink(const AsioLink&) = delete;
  AsioLink& operator=(const AsioLink&) = delete;

  const Strand& strand() const noexcept { return strand_; }

  /// Runs `write` on the strand with the link to where `site` sends the
  /// key's steps now, once it is connected (it sends steps; their sinks run
  /// on the strand too), or `failed` with why no link could be had. Neither
  /// runs inside submit(). `site` (the caller's backend, kept until then)
  /// connects where needed.
  void submit(std::shared_ptr<Site> site, Write write, Failed failed) {
    post_job({std::move(site), std::move(write), std::move(failed), nullptr, 0});
  }

  /// As submit(), to the node an ASK reply named (`asked`, a route of
  /// `site`), with ASKING written before the step.
  void submit_asked(std::shared_ptr<Site> site, const void* asked, Write write, Failed failed) {
    post_job({std::move(site), std::move(write), std::move(failed), asked, 0});
  }

  /// submit() from outside the context's own work (a guard given back on
  /// any thread, maybe once the context is gone): false, with nothing
  /// done, if the context shut down.
  bool submit_if_open(std::shared_ptr<Site> site, Write write, Failed failed) {
    return gate_->run_if_open(
        [&] { submit(std::move(site), std::move(write), std::move(failed)); });
  }

  /// Keeps the context's run() going (through its Gate) until the last
  /// copy of what this returns goes: for work done on its behalf off the
  /// context (a release on the connector thread), so that a program that
  /// runs the context until it has nothing left to do does not end first.
  /// Null once the context shut down. Any thread.
  std::shared_ptr<void> keep_running() {
    if (!gate_->leave(strand_.get_inner_executor())) return nullptr;
    return std::shared_ptr<void>(nullptr, [gate = gate_](void*) { gate->come_back(); });
  }

  /// The link whose sink, or write, is running now (on the strand only).
  Link* current() noexcept { return current_ != nullptr ? current_->link.get() : nullptr; }

  /// What a step refused by an error reply does next.
  struct Refused {
    bool moved = false;           // the site routes the key elsewhere now: send it again
    const void* asked = nullptr;  // else this node takes it once, behind ASKING
    bool readonly = false;        // a replica answered: the master is looked for again
    bool for_now = false;         // TRYAGAIN, CLUSTERDOWN: the same again after a pause

    /// The step was not applied, wherever it may go next.
    bool not_run() const noexcept { return moved || asked != nullptr || readonly || for_now; }
  };

  /// In the sink of a step sent through `site` that met the error reply
  /// `reply` (on the strand). MOVED (a cluster's slot moved for good) and
  /// ASK (a key of a slot being migrated) say where the step may go again,
  /// TRYAGAIN and CLUSTERDOWN that it may go again later: it was not run.
  /// READONLY (a master demoted to a replica: the step was not applied)
  /// has the site look for the master again, and this link let go once
  /// nothing is owed on it: the next step connects to where the site
  /// names then.
  Refused refused(Site& site, std::string_view reply) {
    Refused next;
    next.moved = site.saw_error(reply);
    if (!next.moved) next.asked = site.asked_route(reply);
    next.for_now = site.refused_for_now(reply);
    next.readonly = classify_server_error(reply) == ServerErrorKind::readonly;
    if (current_ != nullptr && next.readonly) current_->retired = true;
    return next;
  }

  /// On the strand: writes what is queued on every link, and waits for
  /// what each needs next (see pump(Channel&)). For a step queued on a link
  /// outside a sink (a cancellation's undo).
  void pump() {
    for (auto& [route, channel] : channels_) pump(*channel);
  }

  /// For the context's shutdown, when no thread runs it: drops the links
  /// and what waits, without calling anyone (their handlers are destroyed
  /// with the context's).
  void abandon() noexcept {
    unrouted_.clear();
    for (auto& [route, channel] : channels_) {
      channel->queued.clear();
      drop_link(*channel);
    }
  }

 private:
  struct Job {
    std::shared_ptr<Site> site;
    Write write;
    Failed failed;
    const void* asked;      // an ASK's node, or null: where the site routes
    unsigned rerouted = 0;  // times sent elsewhere after its server was unreachable
  };

  // One server's connection: made on the connector thread, then written
  // and read on the strand. Channels are never dropped (their handlers
  // point at them), only their links.
  struct Channel {
    Channel(const void* to, const Strand& strand) : route(to), timer(strand) {}
    const void* const route;
    std::unique_ptr<Link> link;
    std::optional<asio::posix::stream_descriptor> socket;
    asio::steady_timer timer;
    std::deque<Job> queued;  // while the link connects, or drains to be made again
    bool connecting = false;
    bool writing = false;
    bool reading = false;
    bool timing = false;
    bool retired = false;     // let go once nothing is owed on it (refused(), a later epoch)
    std::uint64_t epoch = 0;  // the site's endpoint_epoch() when the link was made
  };

  void post_job(Job job) {
    asio::post(strand_, [self = shared_from_this(), job = std::move(job)]() mutable {
      self->route(std::move(job));
    });
  }

  // On the strand from here on: the job to its channel.
  void route(Job job) {
    const void* to = job.asked != nullptr ? job.asked : job.site->route();
    if (to == nullptr) return find_route(std::move(job));
    Channel& channel = channel_at(to);
    // Made before the site's server may have moved: let go, once drained.
    if (channel.link && job.site->endpoint_epoch() != channel.epoch) channel.retired = true;
    if (channel.link && (channel.link->broken() || (channel.link->in_flight() == 0 &&
                                                    (channel.retired || channel.link->stale())))) {
      drop_link(channel);
    }
    if (!channel.link || channel.retired) {
      // Pumped, a retired link is dropped once nothing is owed, and made again.
      channel.queued.push_back(std::move(job));
      if (!channel.link) return connect(channel);
      return pump(channel);
    }
    write(channel, job);
    pump(channel);
  }

  void write(Channel& channel, Job& job) {
    const Serving serving(*this, channel);
    try {
      if (job.asked != nullptr) channel.link->send({"ASKING"}, nullptr);
      job.write(*channel.link);
    } catch (...) {
      job.failed(std::current_exception());
    }
  }

  // current() names `channel`'s link while a write or sink of it runs.
  class Serving {
   public:
    Serving(AsioLink& link, Channel& channel) noexcept
        : link_(link), before_(std::exchange(link.current_, &channel)) {}
    ~Serving() { link_.current_ = before_; }
    Serving(const Serving&) = delete;
    Serving& operator=(const Serving&) = delete;

   private:
    AsioLink& link_;
    Channel* const before_;
  };

  Channel& channel_at(const void* to) {
    std::unique_ptr<Channel>& channel = channels_[to];
    if (!channel) channel = std::make_unique<Channel>(to, strand_);
    return *channel;
  }

  // A site that names no server without asking around (a cluster's map
  // not read yet) asks on the connector thread; its jobs wait meanwhile,
  // and fail with what the asking threw.
  void find_route(Job job) {
    unrouted_.push_back(std::move(job));
    if (finding_) return;
    finding_ = true;
    const std::shared_ptr<Site> site = unrouted_.back().site;
    site->connector().post([weak = weak_from_this(), site, gate = gate_] {
      std::exception_ptr failure;
      try {
        static_cast<void>(site->endpoint_now(SteadyClock::now() + site->options().connect_timeout));
      } catch (...) {
        failure = std::current_exception();
      }
      gate->run_if_open([&] {
        std::shared_ptr<AsioLink> self = weak.lock();
        if (!self) return;
        const Strand strand = self->strand_;
        asio::post(strand, [self = std::move(self), failure] { self->route_found(failure); });
      });
    });
  }

  void route_found(const std::exception_ptr& failure) {
    finding_ = false;
    std::deque<Job> jobs;
    jobs.swap(unrouted_);
    for (Job& job : jobs) {
      if (job.site->route() != nullptr) {
        route(std::move(job));
      } else {
        job.failed(failure ? failure
                           : std::make_exception_ptr(ServerError(
                                 job.site->describe() + ": no server serves the key now")));
      }
    }
  }

  void connect(Channel& channel) {
    if (channel.connecting || channel.queued.empty()) return;
    channel.connecting = true;
    // The job holds no reference: should the context be gone when it
    // ends, nothing of it (strand, timer, socket) may be touched. The site
    // names the server (a SentinelClient's master may have moved).
    const std::shared_ptr<Site>& site = channel.queued.front().site;
    site->connector().post([weak = weak_from_this(), site, gate = gate_, to = channel.route] {
      std::unique_ptr<Link> made;
      std::exception_ptr failure;
      // Read first: a move during the connect is a later epoch.
      const std::uint64_t epoch = site->endpoint_epoch();
      const SteadyClock::time_point deadline = SteadyClock::now() + site->options().connect_timeout;
      try {
        made = std::make_unique<Link>(site->endpoint_of(to, deadline));
        if (site->redirects()) made->publish_sharded();
      } catch (...) {
        failure = std::current_exception();
        site->unreachable(to, deadline);
      }
      gate->run_if_open([&] {
        std::shared_ptr<AsioLink> self = weak.lock();
        if (!self) return;
        const Strand strand = self->strand_;
        // The failure moves too: were this thread to drop the last copy, it
        // would destroy the exception while the strand may still read it,
        // through a count TSan does not see in an uninstrumented libstdc++.
        asio::post(strand,
                   [self = std::move(self), made = std::move(made), failure = std::move(failure),
                    epoch, to]() mutable { self->connected(to, std::move(made), failure, epoch); });
      });
    });
  }

  void connected(const void* to, std::unique_ptr<Link> made, const std::exception_ptr& failure,
                 std::uint64_t epoch) {
    Channel& channel = channel_at(to);
    channel.connecting = false;
    std::deque<Job> jobs;
    jobs.swap(channel.queued);
    if (failure) {
      // Not sent: where the site routes the key elsewhere now (a cluster's
      // map, read again, names a promoted replica), the job goes there.
      for (Job& job : jobs) {
        const void* now = job.site->route();
        if (job.asked == nullptr && now != nullptr && now != to &&
            job.rerouted++ < job.site->max_redirects()) {
          route(std::move(job));
        } else {
          job.failed(failure);
        }
      }
      return;
    }
    channel.link = std::move(made);
    channel.epoch = epoch;
    channel.socket.emplace(strand_, channel.link->fd());
    for (Job& job : jobs) route(std::move(job));
  }

  // Writes what is queued, and waits for what the link needs next: the
  // socket writable while writes are left, readable while replies are
  // owed, and the command timeout.
  void pump(Channel& channel) {
    if (!channel.link) return;
    if (channel.link->broken() || (channel.retired && channel.link->in_flight() == 0)) {
      drop_link(channel);
      connect(channel);  // for what waits on it
      return;
    }
    if (!channel.writing && !channel.link->flush()) {
      wait_then(channel, asio::posix::stream_descriptor::wait_write, &Channel::writing,
                &Link::flush);
    }
    if (channel.link && !channel.reading && channel.link->in_flight() > 0) {
      wait_then(channel, asio::posix::stream_descriptor::wait_read, &Channel::reading, &Link::read);
    }
    if (channel.link && channel.timing && channel.link->in_flight() == 0) {
      channel.timer.cancel();  // nothing to time: let run() return
    } else if (channel.link && !channel.timing) {
      const Serving serving(*this, channel);  // a timeout fails the sinks waiting
      if (const std::optional<Link::clock::time_point> due =
              channel.link->check_timeout(Link::clock::now())) {
        channel.timing = true;
        channel.timer.expires_at(*due);
        channel.timer.async_wait(
            asio::bind_executor(strand_, [self = shared_from_this(), on = &channel](auto) {
              on->timing = false;
              self->pump(*on);
            }));
      }
    }
  }

  // Waits until the socket is ready for `what` (with `*waiting` set
  // meanwhile), then has the link `step` (write or read) and pumps again.
  void wait_then(Channel& channel, asio::posix::stream_descriptor::wait_type what,
                 bool Channel::*waiting, bool (Link::*step)()) {
    channel.*waiting = true;
    channel.socket->async_wait(
        what, asio::bind_executor(strand_, [self = shared_from_this(), on = &channel, waiting,
                                            step](const std::error_code&) {
          on->*waiting = false;
          if (on->link) {
            const Serving serving(*self, *on);
            static_cast<void>((on->link.get()->*step)());
          }
          self->pump(*on);
        }));
  }

  // The descriptor is the Link's: Asio lets go of it before the Link closes
  // it. Its command timeout is not kept any longer (nor run() kept going).
  void drop_link(Channel& channel) noexcept {
    if (channel.socket) {
      channel.socket->release();
      channel.socket.reset();
    }
    channel.link.reset();
    channel.retired = false;
    try {
      channel.timer.cancel();
    } catch (...) {  // the timer is then let run out
    }
  }

  Strand strand_;
  const std::shared_ptr<Gate> gate_;
  std::map<const void*, std::unique_ptr<Channel>> channels_;  // by route
  std::deque<Job> unrouted_;  // waiting for the site to find where the key lives
  bool finding_ = false;
  Channel* current_ = nullptr;  // whose write or sink runs now
};

}  // namespace distlock::detail
