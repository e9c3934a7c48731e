// LinkService: the AsioLinks (asio_link.hpp) of an Asio execution
// context, one per backend and lane: the steps of locks that wait for
// replicas (LockOptions::replicas) go on a lane of their own, since a WAIT
// holds up every step behind it on its connection. A link keeps nothing of
// its backend alive: the service lets it go once the backend is gone, when
// a new backend first asks for a link (the hot path only looks its own up)
// or the context shuts down.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/detail/strand_executor_service.hpp>
#include <asio/execution_context.hpp>

#include <array>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "distlock/detail/asio/asio_link.hpp"
#include "distlock/detail/asio/gate.hpp"
#include "distlock/detail/backend/site.hpp"

namespace distlock::detail {

/// Which of a backend's links a step goes on.
enum class Lane { plain, replicas };

/// One AsioLink per backend (its id) and lane on each execution context.
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

  /// The links of `site`'s backend on `lane`, made on first use with
  /// `executor` (of this service's context). Links of backends that are
  /// gone are let go when a backend is first seen.
  std::shared_ptr<AsioLink> link_for(const Site& site, const asio::any_io_executor& executor,
                                     Lane lane = Lane::plain) {
    std::lock_guard<std::mutex> guard(mutex_);
    std::map<std::string, Entry>& links = links_[lane == Lane::replicas ? 1 : 0];
    const auto found = links.find(site.id());
    if (found != links.end() && !found->second.backend.expired()) return found->second.link;
    // A backend new here: the links of backends gone are let go first.
    for (std::map<std::string, Entry>& each : links_) {
      for (auto it = each.begin(); it != each.end();) {
        it = it->second.backend.expired() ? each.erase(it) : std::next(it);
      }
    }
    Entry& entry = links[site.id()];
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
    for (std::map<std::string, Entry>& links : links_) {
      for (auto& [name, entry] : links) entry.link->abandon();
      links.clear();
    }
  }

  struct Entry {
    std::shared_ptr<AsioLink> link;
    std::weak_ptr<const void> backend;
  };

  std::mutex mutex_;
  std::array<std::map<std::string, Entry>, 2> links_;  // by lane, then backend id
  const std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

}  // namespace distlock::detail
