// Whether the test binary was built with AddressSanitizer or
// ThreadSanitizer: tests whose threads or wall time cost several times more
// there run a smaller size (see their uses).
//
// Defines distlock::testing::sanitized_build(). Depends on nothing.
#pragma once

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

}  // namespace distlock::testing
