// Counts, process-wide and across all threads, what the bench's counters
// report per cycle (see counters.hpp):
//
// - heap allocations: every malloc, calloc and realloc (hiredis's reply
//   objects and buffers included) and, of those, the ones C++ code asked
//   for through operator new. malloc and friends are replaced here by
//   counting wrappers around glibc's own entry points; operator new and
//   delete by ones that go through them.
// - mutex locks: every pthread_mutex_lock that goes through the dynamic
//   linker (std::mutex, condition variables re-locking after a wait, and
//   hiredis's and libstdc++'s calls; not glibc's internal ones), forwarded
//   to glibc's (found once with dlsym).
//
// Only distlock_bench links this file; the library and its tests never do.
// Under a sanitizer, which has its own malloc, only operator new is
// counted (as allocs and new alike) and mutex locks are not.
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "counters.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DISTLOCK_BENCH_OWN_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DISTLOCK_BENCH_OWN_MALLOC 0
#endif
#endif
#ifndef DISTLOCK_BENCH_OWN_MALLOC
#define DISTLOCK_BENCH_OWN_MALLOC 1
#endif

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* pointer, std::size_t size);
void __libc_free(void* pointer);
}

namespace distlock::bench {
namespace {
std::atomic<std::uint64_t> mallocs{0};
std::atomic<std::uint64_t> news{0};
std::atomic<std::uint64_t> mutex_locks{0};

using MutexLockFunction = int (*)(pthread_mutex_t*);
std::atomic<MutexLockFunction> real_mutex_lock{nullptr};

void* counted_new(std::size_t size) {
  news.fetch_add(1, std::memory_order_relaxed);
  if (!DISTLOCK_BENCH_OWN_MALLOC) mallocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* counted_new(std::size_t size, std::align_val_t alignment) {
  news.fetch_add(1, std::memory_order_relaxed);
  mallocs.fetch_add(1, std::memory_order_relaxed);
  // Rounded up to a multiple of the alignment, as aligned_alloc asks.
  const auto align = static_cast<std::size_t>(alignment);
  const std::size_t rounded = (size + align - 1) / align * align;
  if (void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded)) return p;
  throw std::bad_alloc();
}
}  // namespace

ProcessCounts process_counts() noexcept {
  return {mallocs.load(std::memory_order_relaxed), news.load(std::memory_order_relaxed),
          mutex_locks.load(std::memory_order_relaxed)};
}

}  // namespace distlock::bench

using distlock::bench::counted_new;

#if DISTLOCK_BENCH_OWN_MALLOC
extern "C" {
void* malloc(std::size_t size) {
  distlock::bench::mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) {
  distlock::bench::mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(count, size);
}
void* realloc(void* pointer, std::size_t size) {
  distlock::bench::mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(pointer, size);
}
int pthread_mutex_lock(pthread_mutex_t* mutex) {
  distlock::bench::mutex_locks.fetch_add(1, std::memory_order_relaxed);
  using distlock::bench::MutexLockFunction;
  MutexLockFunction real = distlock::bench::real_mutex_lock.load(std::memory_order_acquire);
  if (real == nullptr) {
    // Several threads may look it up at once; they all find the same.
    real = reinterpret_cast<MutexLockFunction>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
    distlock::bench::real_mutex_lock.store(real, std::memory_order_release);
  }
  return real(mutex);
}
}
#endif

void* operator new(std::size_t size) { return counted_new(size); }
void* operator new[](std::size_t size) { return counted_new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  return counted_new(size, alignment);
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return counted_new(size, alignment);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
