// eventually(): waits for a condition to hold, looking every 2 ms, for the
// tests that wait on a server's state (a failover, a subscription, a key
// gone) rather than on a sleep. A bound, not a timing: the test goes on as
// soon as the condition is met.
#pragma once

#include <chrono>
#include <thread>

namespace distlock::testing {

/// True once `condition()` holds, looking every 2 ms for up to `limit`;
/// its last answer otherwise.
template <class Condition>
bool eventually(Condition&& condition,
                std::chrono::steady_clock::duration limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

}  // namespace distlock::testing
