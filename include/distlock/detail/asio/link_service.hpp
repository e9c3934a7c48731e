// LinkService: the AsioLinks (asio_link.hpp) of an Asio execution
// context, one per backend. A link keeps nothing of its backend alive: the
// service lets it go once the backend is gone, when a new backend first
// asks for a link (the hot path only looks its own up) or the context
// shuts down.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/detail/strand_executor_service.hpp>
#include <asio/execution_context.hpp>

#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "distlock/detail/asio/asio_link.hpp"
#include "distlock/detail/asio/gate.hpp"
#include "distlock/detail/backend/site.hpp"

namespace distlock::detail {

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

  /// The links of `site`'s backend, made on first use with `executor`
  /// (of this service's context). Links of backends that are gone are let
  /// go when a backend is first seen.
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
