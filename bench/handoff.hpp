// One handoff at a time, a lock's and the raw floor's, for the handoff
// benchmarks (waiting_bench.cpp) to time alone or in turns (paired.hpp):
// each returns the time from the holder's release call to the moment the
// waiting thread knows it holds the lock.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "bench_support.hpp"
#include "distlock/client.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::bench {

/// A thread that, on each go(), calls lock() on its own lock object and
/// reports when it got it; then it unlocks before the next round.
template <class Lock>
class Waiter {
 public:
  explicit Waiter(Lock& lock) : lock_(lock), thread_([this] { run(); }) {}
  ~Waiter() {
    {
      std::lock_guard guard(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  /// Starts a lock() and returns once `asleep()` does: once the waiter has
  /// found the lock held and gone to sleep on it (see UntilTypeRead), or
  /// after the idle time it sleeps.
  template <class Asleep>
  void go(Asleep&& asleep) {
    {
      std::lock_guard guard(mutex_);
      ++round_;
    }
    changed_.notify_all();
    asleep();
  }

  /// Waits for the round's lock() to return; its moment of return.
  std::chrono::steady_clock::time_point acquired() {
    std::unique_lock guard(mutex_);
    changed_.wait(guard, [&] { return done_ == round_; });
    return acquired_at_;
  }

 private:
  void run() {
    std::unique_lock guard(mutex_);
    for (;;) {
      changed_.wait(guard, [&] { return stop_ || round_ > done_; });
      if (stop_) return;
      guard.unlock();
      lock_.lock();
      const std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
      lock_.unlock();
      guard.lock();
      acquired_at_ = at;
      ++done_;
      changed_.notify_all();
    }
  }

  Lock& lock_;
  std::mutex mutex_;
  std::condition_variable changed_;
  long round_ = 0;
  long done_ = 0;
  bool stop_ = false;
  std::chrono::steady_clock::time_point acquired_at_{};
  std::thread thread_;
};

/// A holder and a waiting lock object on one name, through one Client,
/// with leases that outlast any round.
template <class Lock>
struct HandoffLocks {
  Client client{server_options()};
  Lock holder{client, "bench:handoff", LockOptions{}.ttl(std::chrono::seconds(30))};
  Lock waiting{client, "bench:handoff", LockOptions{}.ttl(std::chrono::seconds(30))};
};

/// The idle start: the holder pauses 2 ms while the waiter goes to sleep.
inline void idle_2ms() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

/// One handoff of `Lock`: `holder` takes it, `waiter` starts waiting and
/// `asleep` returns, then `holder` releases it.
template <class Lock, class Asleep>
std::chrono::steady_clock::duration lock_handoff(Lock& holder, Waiter<Lock>& waiter,
                                                 Asleep&& asleep) {
  holder.lock();
  waiter.go(asleep);
  const std::chrono::steady_clock::time_point released = std::chrono::steady_clock::now();
  holder.unlock();
  return waiter.acquired() - released;
}

/// The floor: the holder releases with one EVALSHA that deletes and
/// publishes; a thread blocked reading its subscribed connection gets the
/// message and at once sends SET NX PX on its own connection. A handoff is
/// measured from the release call to that SET's OK. With `idle`, the holder
/// first pauses as long as a lock's idle handoff does before its release,
/// so that both hand over from the same idle start.
class RawHandoff {
 public:
  explicit RawHandoff(benchmark::State& state)
      : state_(state),
        holder_(raw_connect(server_options())),
        subscriber_(raw_connect(server_options())),
        taker_(raw_connect(server_options())),
        sha_(load_script(compare_delete_publish_lua)) {
    if (!RawCommand{"SUBSCRIBE", "bench:raw-channel"}.run(subscriber_.get(), REDIS_REPLY_ARRAY,
                                                          state)) {
      return;
    }
    thread_ = std::thread([this] { take_on_each_message(); });
  }
  ~RawHandoff() {
    ::shutdown(subscriber_->fd, SHUT_RDWR);  // ends the taker's blocking read
    if (thread_.joinable()) thread_.join();
  }
  RawHandoff(const RawHandoff&) = delete;
  RawHandoff& operator=(const RawHandoff&) = delete;

  /// One handoff; nothing if a command failed (recorded on the state).
  std::optional<std::chrono::steady_clock::duration> handoff(std::chrono::milliseconds idle) {
    if (!thread_.joinable() || !hold_.run(holder_.get(), REDIS_REPLY_STATUS, state_)) return {};
    ++round_;
    if (idle.count() > 0) std::this_thread::sleep_for(idle);
    const std::chrono::steady_clock::time_point released = std::chrono::steady_clock::now();
    if (!release_.run(holder_.get(), REDIS_REPLY_INTEGER, state_)) return {};
    std::unique_lock guard(mutex_);
    changed_.wait(guard, [&] { return done_ == round_; });
    if (!ok_) return {};
    const std::chrono::steady_clock::duration took = taken_at_ - released;
    guard.unlock();
    if (!give_back_.run(holder_.get(), REDIS_REPLY_INTEGER, state_)) return {};
    return took;
  }

 private:
  void take_on_each_message() {
    for (;;) {
      void* message = nullptr;
      if (redisGetReply(subscriber_.get(), &message) != REDIS_OK) return;  // closed at the end
      freeReplyObject(message);
      const bool took = take_.run(taker_.get(), REDIS_REPLY_STATUS);
      const std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
      std::lock_guard guard(mutex_);
      ok_ = ok_ && took;
      taken_at_ = at;
      ++done_;
      changed_.notify_all();
    }
  }

  benchmark::State& state_;
  const RawConnection holder_;
  const RawConnection subscriber_;
  const RawConnection taker_;
  const std::string sha_;
  const RawCommand take_{"SET", "bench:raw-handoff", "taker", "NX", "PX", "30000"};
  const RawCommand give_back_{"DEL", "bench:raw-handoff"};
  const RawCommand hold_{"SET", "bench:raw-handoff", "holder", "NX", "PX", "30000"};
  const RawCommand release_{"EVALSHA",           sha_,    "2", "bench:raw-handoff",
                            "bench:raw-channel", "holder"};
  std::mutex mutex_;
  std::condition_variable changed_;
  long round_ = 0;
  long done_ = 0;
  bool ok_ = true;
  std::chrono::steady_clock::time_point taken_at_{};
  std::thread thread_;
};

}  // namespace distlock::bench
