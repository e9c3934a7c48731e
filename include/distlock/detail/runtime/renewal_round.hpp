// One renewal round's sending: the Watchdog's leases due together, grouped
// by their renewers' batch keys, one renew() call per group, the group
// whose lease runs out first sent first.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "distlock/detail/base/lease_state.hpp"

namespace distlock::detail {

/// Renews `leases` (none of which may be changed meanwhile), kind by kind;
/// sets outcomes[i] for leases[i]. Never throws but for allocation.
inline void renew_by_kind(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes) {
  using clock = std::chrono::steady_clock;
  outcomes.assign(leases.size(), Renewed::unknown);
  std::map<Renewer::BatchKey, std::vector<std::size_t>> kinds;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    kinds[leases[i]->renewer->batch_key()].push_back(i);
  }
  // The batch whose lease runs out first goes first: an endpoint that
  // stalls then delays only leases that have longer left.
  std::vector<std::pair<clock::time_point, const std::vector<std::size_t>*>> order;
  for (const auto& [kind, positions] : kinds) {
    clock::time_point first = clock::time_point::max();
    for (const std::size_t i : positions) first = std::min(first, leases[i]->expires());
    order.emplace_back(first, &positions);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LeaseState*> batch;
  std::vector<Renewed> found;
  for (const auto& [first_expiry, positions] : order) {
    // A renewal that cannot be confirmed before a lease runs out is as good
    // as none: give up on it then, so the loss is reported on time.
    clock::time_point deadline = clock::time_point::max();
    batch.clear();
    for (const std::size_t i : *positions) {
      batch.push_back(leases[i]);
      deadline = std::min(deadline, leases[i]->expires());
    }
    deadline = std::max(deadline, clock::now() + std::chrono::milliseconds(1));
    found.assign(batch.size(), Renewed::unknown);
    batch.front()->renewer->renew(batch, found, deadline);
    for (std::size_t j = 0; j < positions->size(); ++j) outcomes[(*positions)[j]] = found[j];
  }
}

}  // namespace distlock::detail
