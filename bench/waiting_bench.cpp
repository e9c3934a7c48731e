// Waiting and leases: how fast a waiter gets a released lock (with the
// notifier, with 50 ms polling, and the raw pub/sub floor), and what one
// watchdog round over 1,000 leases costs against 1,000 pipelined PEXPIREs
// (and, for read holds, against the three commands per lease their layout
// needs).
#include <benchmark/benchmark.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"

namespace distlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A thread that, on each go(), calls lock() on its own lock object and
// reports when it got it; then it unlocks before the next round.
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

  // Starts a lock() and returns once the waiter has found the lock held and
  // gone to sleep on it: once `asleep()` says so (it blocks until then), or
  // after 2 ms of idling without it.
  template <class Asleep>
  void go(Asleep&& asleep) {
    {
      std::lock_guard guard(mutex_);
      ++round_;
    }
    changed_.notify_all();
    asleep();
  }

  // Waits for the round's lock() to return; its moment of return.
  Clock::time_point acquired() {
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
      const Clock::time_point at = Clock::now();
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
  Clock::time_point acquired_at_{};
  std::thread thread_;
};

// Calls of one command the server has run (INFO commandstats); -1 if the
// reply does not say.
long long command_calls(redisContext* context, std::string_view command) {
  auto* reply = static_cast<redisReply*>(redisCommand(context, "INFO commandstats"));
  long long calls = -1;
  if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
    const std::string_view text(reply->str, reply->len);
    const std::string field = "cmdstat_" + std::string(command) + ":calls=";
    if (const std::size_t at = text.find(field); at != std::string_view::npos) {
      calls = std::atoll(text.data() + at + field.size());
    }
  }
  freeReplyObject(reply);
  return calls;
}

// Until the server has answered the waiting Mutex's last step before it
// sleeps (the holder's PTTL and the key's TYPE, read in one round trip),
// asked without pause so that nothing on the machine idles, as nothing does
// in BM_Raw_Handoff_PubSub; at most 2 ms (counted in gave_up: should the
// waiter's steps change, the bench says so rather than measure another
// start unseen).
class UntilTypeRead {
 public:
  UntilTypeRead() : stats_(raw_connect(server_options())) {}
  void operator()() {
    const Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(2);
    long long now = seen_;
    while ((now = command_calls(stats_.get(), "type")) <= seen_) {
      if (Clock::now() >= give_up) {
        ++gave_up;
        break;
      }
    }
    seen_ = now;
  }

  long gave_up = 0;

 private:
  const RawConnection stats_;
  long long seen_ = command_calls(stats_.get(), "type");
};

// Handoff latency: from the holder's unlock() call to the waiter's return.
// `asleep` returns once the waiter sleeps on the lock (see Waiter::go).
template <class Lock, class Asleep>
void handoff(benchmark::State& state, Lock& holder, Lock& waiting, Asleep&& asleep) {
  Waiter<Lock> waiter(waiting);
  for (auto _ : state) {
    holder.lock();
    waiter.go(asleep);
    const Clock::time_point released = Clock::now();
    holder.unlock();
    const Clock::time_point acquired = waiter.acquired();
    state.SetIterationTime(std::chrono::duration<double>(acquired - released).count());
  }
}

template <class Lock>
void handoff(benchmark::State& state, Lock& holder, Lock& waiting) {
  handoff(state, holder, waiting,
          [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
}

// The holder releases as soon as the waiter sleeps, from a busy machine: the
// same start as BM_Raw_Handoff_PubSub's.
void BM_Mutex_Handoff(benchmark::State& state) {
  Client client(server_options());
  const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(30));
  Mutex holder(client, "bench:handoff", options);
  Mutex waiting(client, "bench:handoff", options);
  UntilTypeRead asleep;
  handoff(state, holder, waiting, asleep);
  state.counters["gave_up"] = static_cast<double>(asleep.gave_up);
}
BENCHMARK(BM_Mutex_Handoff)->UseManualTime()->Iterations(2000);

// The holder idles 2 ms before each release: the same start as
// BM_Raw_Handoff_PubSub_Idle2ms's (the first handoff after a pause costs
// the raw floor twice what a busy one does).
template <class Lock>
void handoff_idle_2ms(benchmark::State& state) {
  Client client(server_options());
  const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(30));
  Lock holder(client, "bench:handoff", options);
  Lock waiting(client, "bench:handoff", options);
  handoff(state, holder, waiting);
}

void BM_Mutex_Handoff_Idle2ms(benchmark::State& state) { handoff_idle_2ms<Mutex>(state); }
BENCHMARK(BM_Mutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

// A FairMutex's release tells the waiter at the front on its own channel.
void BM_FairMutex_Handoff_Idle2ms(benchmark::State& state) { handoff_idle_2ms<FairMutex>(state); }
BENCHMARK(BM_FairMutex_Handoff_Idle2ms)->UseManualTime()->Iterations(2000);

void BM_Mutex_Handoff_Polling50ms(benchmark::State& state) {
  Client client(server_options());
  const LockOptions options = LockOptions{}.ttl(std::chrono::seconds(30)).wake_on_release(false);
  const FixedInterval every_50ms(std::chrono::milliseconds(50));
  Mutex holder(client, "bench:handoff", options, every_50ms);
  Mutex waiting(client, "bench:handoff", options, every_50ms);
  handoff(state, holder, waiting);
}
BENCHMARK(BM_Mutex_Handoff_Polling50ms)->UseManualTime()->Iterations(20);

// The floor: the holder releases with one EVALSHA that deletes and
// publishes; a thread blocked reading its subscribed connection gets the
// message and at once sends SET NX PX on its own connection. Measured from
// the release call to that SET's OK. With `idle`, the holder first pauses
// as long as Waiter::go() does before each of BM_Mutex_Handoff_Idle2ms's
// releases, so that both hand over from the same idle start.
void raw_handoff(benchmark::State& state, std::chrono::milliseconds idle) {
  const ClientOptions& where = server_options();
  const RawConnection holder = raw_connect(where);
  const RawConnection subscriber = raw_connect(where);
  const RawConnection taker = raw_connect(where);
  const std::string sha = load_script(compare_delete_publish_lua);
  const RawCommand take{"SET", "bench:raw-handoff", "taker", "NX", "PX", "30000"};
  const RawCommand give_back{"DEL", "bench:raw-handoff"};
  const RawCommand hold{"SET", "bench:raw-handoff", "holder", "NX", "PX", "30000"};
  const RawCommand release{"EVALSHA", sha, "2", "bench:raw-handoff", "bench:raw-channel", "holder"};
  const RawCommand subscribe{"SUBSCRIBE", "bench:raw-channel"};
  if (!subscribe.run(subscriber.get(), REDIS_REPLY_ARRAY, state)) return;

  std::mutex mutex;
  std::condition_variable changed;
  long round = 0;
  long done = 0;
  bool ok = true;
  Clock::time_point taken_at{};
  std::thread taker_thread([&] {
    for (;;) {
      void* message = nullptr;
      if (redisGetReply(subscriber.get(), &message) != REDIS_OK) return;  // closed at the end
      freeReplyObject(message);
      const bool took = take.run(taker.get(), REDIS_REPLY_STATUS);
      const Clock::time_point at = Clock::now();
      std::lock_guard guard(mutex);
      ok = ok && took;
      taken_at = at;
      ++done;
      changed.notify_all();
    }
  });
  for (auto _ : state) {
    if (!hold.run(holder.get(), REDIS_REPLY_STATUS, state)) break;
    ++round;
    if (idle.count() > 0) std::this_thread::sleep_for(idle);
    const Clock::time_point released = Clock::now();
    if (!release.run(holder.get(), REDIS_REPLY_INTEGER, state)) break;
    std::unique_lock guard(mutex);
    changed.wait(guard, [&] { return done == round; });
    if (!ok) break;
    state.SetIterationTime(std::chrono::duration<double>(taken_at - released).count());
    guard.unlock();
    if (!give_back.run(holder.get(), REDIS_REPLY_INTEGER, state)) break;
  }
  ::shutdown(subscriber->fd, SHUT_RDWR);  // ends the taker's blocking read
  taker_thread.join();
}

void BM_Raw_Handoff_PubSub(benchmark::State& state) {
  raw_handoff(state, std::chrono::milliseconds(0));
}
BENCHMARK(BM_Raw_Handoff_PubSub)->UseManualTime()->Iterations(2000);

void BM_Raw_Handoff_PubSub_Idle2ms(benchmark::State& state) {
  raw_handoff(state, std::chrono::milliseconds(2));
}
BENCHMARK(BM_Raw_Handoff_PubSub_Idle2ms)->UseManualTime()->Iterations(2000);

constexpr int leases = 1000;

// One watchdog round over 1,000 held leases of one lock type: batched
// renewal scripts (one transaction per batch for SimpleMutex). `take` takes
// one lease on a fresh lock object.
template <class Lock, class Take>
void watchdog_round(benchmark::State& state, Take take) {
  Client client(server_options());
  std::vector<std::unique_ptr<Lock>> held;
  for (int i = 0; i < leases; ++i) {
    held.push_back(std::make_unique<Lock>(client, "bench:lease:" + std::to_string(i)));
    if (!take(*held.back())) {
      state.SkipWithError("lease was not free");
      return;
    }
  }
  for (auto _ : state) client.watchdog().renew_all_now();
}

void BM_Watchdog_Renew1000(benchmark::State& state) {
  watchdog_round<Mutex>(state, [](Mutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000)->UseRealTime();

void BM_Watchdog_Renew1000_Simple(benchmark::State& state) {
  watchdog_round<SimpleMutex>(state, [](SimpleMutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000_Simple)->UseRealTime();

void BM_Watchdog_Renew1000_Reentrant(benchmark::State& state) {
  watchdog_round<ReentrantMutex>(state, [](ReentrantMutex& lock) { return lock.try_lock(); });
}
BENCHMARK(BM_Watchdog_Renew1000_Reentrant)->UseRealTime();

void BM_Watchdog_Renew1000_SharedRead(benchmark::State& state) {
  watchdog_round<SharedMutex>(state, [](SharedMutex& lock) { return lock.try_lock_shared(); });
}
BENCHMARK(BM_Watchdog_Renew1000_SharedRead)->UseRealTime();

// Its floor: 1,000 plain PEXPIREs sent as one pipeline.
void BM_Raw_Pexpire1000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> pexpires;
  for (int i = 0; i < leases; ++i) {
    const std::string key = "bench:raw-lease:" + std::to_string(i);
    RawCommand{"SET", key, "tok", "PX", "30000"}.run(redis.get(), REDIS_REPLY_STATUS, state);
    pexpires.push_back(RawCommand{"PEXPIRE", key, "30000"});
  }
  for (auto _ : state) {
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), leases, REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_Pexpire1000_Pipelined)->UseRealTime();

// The floor of a read hold's renewal in Redisson's layout, which no
// script can go under: per lease, read the owner's field, lengthen its
// timeout key and lengthen the hash. 3,000 plain commands in one pipeline.
void BM_Raw_ReadLayoutRenew1000_Pipelined(benchmark::State& state) {
  const RawConnection redis = raw_connect(server_options());
  std::vector<RawCommand> pexpires;
  std::vector<RawCommand> reads;
  for (int i = 0; i < leases; ++i) {
    const std::string hash = "{bench:raw-read:" + std::to_string(i) + "}";
    const std::string timeout = hash + ":owner:rwlock_timeout:1";
    RawCommand{"HSET", hash, "mode", "read", "owner", "1"}.run(redis.get(), REDIS_REPLY_INTEGER,
                                                               state);
    RawCommand{"SET", timeout, "1", "PX", "30000"}.run(redis.get(), REDIS_REPLY_STATUS, state);
    pexpires.push_back(RawCommand{"PEXPIRE", timeout, "30000", "GT"});
    pexpires.push_back(RawCommand{"PEXPIRE", hash, "30000", "GT"});
    reads.push_back(RawCommand{"HGET", hash, "owner"});
  }
  for (auto _ : state) {
    for (const RawCommand& read : reads) read.append(redis.get());
    for (const RawCommand& pexpire : pexpires) pexpire.append(redis.get());
    if (!read_replies(redis.get(), leases, REDIS_REPLY_STRING, state)) break;
    if (!read_replies(redis.get(), 2 * leases, REDIS_REPLY_INTEGER, state)) break;
  }
}
BENCHMARK(BM_Raw_ReadLayoutRenew1000_Pipelined)->UseRealTime();

}  // namespace
}  // namespace distlock::bench
