// Backend: what every lock type is made on. Client (one endpoint),
// ClusterClient (a Redis Cluster) and SentinelClient (a master Sentinel
// watches) are the three; any lock takes any of them:
//
//   distlock::ClusterClient cluster{"redis://10.0.0.5:7000,10.0.0.6:7000"};
//   distlock::Mutex stock{cluster, "stock:{42}"};
//
// A lock asks its backend once, when it is made, for the site of its key
// (detail/backend/site.hpp): where its steps go from then on, from any thread and
// from the Watchdog's renewals. The site keeps what the backend's copies
// share alive, so a lock may outlive the backend object it was made from.
#pragma once

#include <memory>
#include <string_view>

namespace distlock {

namespace detail {
class Site;
}

/// What every lock type is made on: the base of Client, ClusterClient and
/// SentinelClient. A lock asks it for its key's site once, when it is made.
class Backend {
 public:
  virtual ~Backend() = default;

  /// Where a lock on `key` sends its steps. Throws InvalidArgument if no
  /// lock may live on `key` there.
  virtual std::shared_ptr<detail::Site> site_for(std::string_view key) const = 0;

 protected:
  Backend() = default;
  /// Copied only as part of a derived handle; Backend has no state.
  Backend(const Backend&) = default;
  /// Moved only as part of a derived handle; Backend has no state.
  Backend(Backend&&) noexcept = default;
  /// Assigned only as part of a derived handle; Backend has no state.
  Backend& operator=(const Backend&) = default;
  /// Assigned only as part of a derived handle; Backend has no state.
  Backend& operator=(Backend&&) noexcept = default;
};

}  // namespace distlock
