// Whether the test binary was built with AddressSanitizer or
// ThreadSanitizer: tests whose threads or wall time cost several times more
// there run a smaller size (see their uses), and a call's deadline bound
// gets the room a slower process needs.
//
// Defines distlock::testing::sanitized_build() and deadline_slack. Depends
// on nothing.
#pragma once

#include <chrono>

namespace distlock::testing {

/// True under -fsanitize=address or -fsanitize=thread: GCC says so by its
/// __SANITIZE_*__ macros, Clang by __has_feature.
constexpr bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/// How far past its deadline a test lets a call return: the scheduler's
/// share, not the lock's (the lock gives up at the deadline itself). In a
/// plain build 50 ms, tight enough to catch a wait the deadline does not
/// cut (a node timeout, a connect timeout). Under the sanitizers every
/// thread costs several times more, and beside another test on two cores a
/// call ready to return waited its turn for 58 ms (TSan, TLS through the
/// fault proxies): a bound there would measure the machine.
inline constexpr std::chrono::milliseconds deadline_slack{sanitized_build() ? 200 : 50};

}  // namespace distlock::testing
