// Clang's thread-safety annotations, and the annotated Mutex and MutexLock
// every guarded member of distlock is guarded by.
//
// A member marked DISTLOCK_GUARDED_BY(m) may be touched only with m held;
// clang's -Wthread-safety checks that at compile time (the CI builds the
// tests once with it), so a forgotten lock is a compile error rather than a
// TSan report that only some test reaches. Other compilers see nothing.
// std::mutex carries no annotations in libstdc++, hence the thin wrappers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define DISTLOCK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DISTLOCK_THREAD_ANNOTATION(x)
#endif

#define DISTLOCK_CAPABILITY(x) DISTLOCK_THREAD_ANNOTATION(capability(x))
#define DISTLOCK_SCOPED_CAPABILITY DISTLOCK_THREAD_ANNOTATION(scoped_lockable)
#define DISTLOCK_GUARDED_BY(x) DISTLOCK_THREAD_ANNOTATION(guarded_by(x))
#define DISTLOCK_REQUIRES(...) DISTLOCK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DISTLOCK_ACQUIRE(...) DISTLOCK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DISTLOCK_RELEASE(...) DISTLOCK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DISTLOCK_EXCLUDES(...) DISTLOCK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define DISTLOCK_NO_THREAD_SAFETY_ANALYSIS DISTLOCK_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace distlock::detail {

/// std::mutex, as a capability the analysis knows.
class DISTLOCK_CAPABILITY("mutex") Mutex {
 public:
  void lock() DISTLOCK_ACQUIRE() { mutex_.lock(); }
  void unlock() DISTLOCK_RELEASE() { mutex_.unlock(); }
  std::mutex& native() noexcept { return mutex_; }

 private:
  std::mutex mutex_;
};

/// Holds a Mutex for its scope, as std::unique_lock does: it may let go and
/// take it again, and condition variables wait with it.
class DISTLOCK_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) DISTLOCK_ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~MutexLock() DISTLOCK_RELEASE() {}

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() DISTLOCK_RELEASE() { lock_.unlock(); }
  void lock() DISTLOCK_ACQUIRE() { lock_.lock(); }

  // The predicates run with the mutex held (inside the standard library,
  // where the analysis does not look): callers mark them with
  // DISTLOCK_REQUIRES where they read guarded members.
  template <class Predicate>
  void wait(std::condition_variable& condition, Predicate predicate) {
    condition.wait(lock_, predicate);
  }
  template <class Clock, class Duration, class Predicate>
  bool wait_until(std::condition_variable& condition,
                  const std::chrono::time_point<Clock, Duration>& until, Predicate predicate) {
    return condition.wait_until(lock_, until, predicate);
  }
  template <class Clock, class Duration>
  void wait_until(std::condition_variable& condition,
                  const std::chrono::time_point<Clock, Duration>& until) {
    condition.wait_until(lock_, until);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace distlock::detail
