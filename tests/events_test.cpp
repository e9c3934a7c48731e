// Tests for events.hpp: a Client's event hook is told, in order, what its
// locks do (acquired, renewed, lost, released), what unlock() could not do
// (a release the ACL refuses), and when the notifier reconnects; it runs
// with no internal lock held.
#include "distlock/events.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;

// What the hook was told, copied out of the events.
struct Seen {
  LockEventType type;
  std::string key;
  std::chrono::nanoseconds waited;
  unsigned attempts;
  std::chrono::nanoseconds held;
  Release outcome;
  LostReason reason;
  std::string error;
};

class Recorder {
 public:
  EventHook hook() {
    return [this](const LockEvent& e) {
      std::lock_guard<std::mutex> guard(mutex_);
      seen_.push_back(Seen{e.type, std::string(e.key), e.waited, e.attempts, e.held, e.outcome,
                           e.reason, std::string(e.error)});
    };
  }
  std::vector<Seen> seen() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return seen_;
  }
  std::size_t count(LockEventType type) const {
    std::lock_guard<std::mutex> guard(mutex_);
    std::size_t n = 0;
    for (const Seen& s : seen_) n += s.type == type ? 1 : 0;
    return n;
  }
  // Waits (at most 5 s) until `type` was told at least `n` times.
  bool wait_for(LockEventType type, std::size_t n = 1) const {
    const auto until = Clock::now() + 5s;
    while (count(type) < n && Clock::now() < until) std::this_thread::sleep_for(2ms);
    return count(type) >= n;
  }
  // The types told, in order, with runs of `collapsed` counted once.
  std::vector<LockEventType> sequence(LockEventType collapsed) const {
    std::vector<LockEventType> types;
    for (const Seen& s : seen()) {
      if (s.type == collapsed && !types.empty() && types.back() == collapsed) continue;
      types.push_back(s.type);
    }
    return types;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
};

class Events : public testing::RedisTest {
 protected:
  Client make_client(EventHook hook) {
    ClientOptions where = client_options(server());
    where.on_event = std::move(hook);
    return Client(where);
  }
  Recorder recorder_;
};

TEST_F(Events, AcquireRenewReleaseAreToldInOrder) {
  Client client = make_client(recorder_.hook());
  Mutex mutex(client, "k", LockOptions{}.ttl(150ms).auto_renew(true));
  mutex.lock();
  ASSERT_TRUE(recorder_.wait_for(LockEventType::renewed, 2));
  EXPECT_EQ(mutex.release(), Release::released);
  using T = LockEventType;
  const std::vector<T> expected{T::acquired, T::renewed, T::released};
  EXPECT_EQ(recorder_.sequence(T::renewed), expected);
  const std::vector<Seen> seen = recorder_.seen();
  EXPECT_EQ(seen.front().key, "k");
  EXPECT_EQ(seen.front().attempts, 1u);
  EXPECT_GT(seen.front().waited.count(), 0);
  EXPECT_EQ(seen.back().outcome, Release::released);
  EXPECT_GT(seen.back().held, std::chrono::nanoseconds(0));
}

TEST_F(Events, ALostLeaseIsToldThenItsRelease) {
  Client client = make_client(recorder_.hook());
  Mutex mutex(client, "k", LockOptions{}.ttl(150ms).auto_renew(true));
  mutex.lock();
  client.command("DEL", "k");
  ASSERT_TRUE(recorder_.wait_for(LockEventType::lost));
  EXPECT_EQ(mutex.release(), Release::lost);
  using T = LockEventType;
  const std::vector<T> expected{T::acquired, T::renewed, T::lost, T::released};
  std::vector<T> told = recorder_.sequence(T::renewed);
  if (told.size() == 3) told.insert(told.begin() + 1, T::renewed);  // lost before any renewal
  EXPECT_EQ(told, expected);
  const std::vector<Seen> seen = recorder_.seen();
  EXPECT_EQ(seen[seen.size() - 2].reason, LostReason::taken);
  EXPECT_EQ(seen.back().outcome, Release::lost);
}

TEST_F(Events, AContendedAcquireCountsItsAttempts) {
  Client client = make_client(recorder_.hook());
  Mutex holder(client, "k", LockOptions{}.ttl(200ms));  // not renewed: runs out
  Mutex waiter(client, "k", LockOptions{}.ttl(5s));
  ASSERT_TRUE(holder.try_lock());
  ASSERT_TRUE(waiter.try_lock_for(5s));
  const std::vector<Seen> seen = recorder_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].type, LockEventType::acquired);
  EXPECT_GE(seen[1].attempts, 2u);
  EXPECT_GT(seen[1].waited, seen[0].waited);
  waiter.unlock();
  EXPECT_EQ(recorder_.count(LockEventType::released), 1u);
  EXPECT_EQ(holder.release(), Release::expired);
  EXPECT_EQ(recorder_.seen().back().outcome, Release::expired);
}

TEST_F(Events, EveryLockTypeTellsAcquiredAndReleased) {
  Client client = make_client(recorder_.hook());
  {
    ReentrantMutex reentrant(client, "r");
    std::lock_guard<ReentrantMutex> outer(reentrant);
    std::lock_guard<ReentrantMutex> inner(reentrant);  // local re-entry: not told
  }
  {
    SharedMutex shared(client, "s");
    shared.lock_shared();
    shared.unlock_shared();
  }
  {
    Redlock quorum({client}, "q", RedlockOptions{}.ttl(5s));
    quorum.lock();
  }  // the destructor gives it back
  std::vector<std::string> told;
  for (const Seen& s : recorder_.seen())
    told.push_back(std::string(to_string(s.type)) + " " + s.key);
  const std::vector<std::string> expected{"acquired r", "released r", "acquired s",
                                          "released s", "acquired q", "released q"};
  EXPECT_EQ(told, expected);
}

// The hook may use the lock and the Client: it runs with no lock of
// distlock held (else these calls would deadlock on the lock's or the
// Watchdog's mutex).
TEST_F(Events, TheHookRunsWithNoInternalLockHeld) {
  Mutex* lock_in_use = nullptr;
  std::size_t leases = 0;
  bool owned_at_acquire = false;
  std::mutex mutex;
  ClientOptions where = client_options(server());
  Client* self = nullptr;
  where.on_event = [&](const LockEvent& e) {
    std::lock_guard<std::mutex> guard(mutex);
    if (e.type == LockEventType::acquired) owned_at_acquire = lock_in_use->owns_lock();
    if (e.type == LockEventType::renewed) leases = self->watchdog().size();
    if (e.type == LockEventType::released) static_cast<void>(lock_in_use->validity());
  };
  Client client(where);
  self = &client;
  Mutex held(client, "k", LockOptions{}.ttl(150ms).auto_renew(true));
  lock_in_use = &held;
  ASSERT_TRUE(held.try_lock());
  const auto until = Clock::now() + 5s;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (leases != 0 || Clock::now() > until) break;
    }
    std::this_thread::sleep_for(2ms);
  }
  held.unlock();
  std::lock_guard<std::mutex> guard(mutex);
  EXPECT_TRUE(owned_at_acquire);
  EXPECT_EQ(leases, 1u);
}

TEST_F(Events, AThrowingHookBreaksNothing) {
  Client client = make_client([](const LockEvent&) { throw std::runtime_error("hook"); });
  Mutex mutex(client, "k");
  ASSERT_TRUE(mutex.try_lock());
  EXPECT_EQ(mutex.release(), Release::released);
}

TEST_F(Events, NotifierReconnectIsTold) {
  Client client = make_client(recorder_.hook());
  Notifier::Subscription subscription = client.notifier().subscribe("c", Clock::now() + 5s);
  ASSERT_TRUE(subscription.active());
  client.command("CLIENT", "KILL", "TYPE", "pubsub");
  ASSERT_TRUE(recorder_.wait_for(LockEventType::notifier_reconnected));
  EXPECT_EQ(recorder_.seen().front().key, client.options().endpoint());
}

// A user whose ACL allows SET but not EVALSHA or EVAL: Mutex takes the
// lock (SET NX PX) but cannot release it.
class EventsAcl : public Events {
  testing::RedisServerOptions server_options() const override {
    testing::RedisServerOptions o;
    o.config_lines = {"user noscript on >pw ~* &* +@all -eval -evalsha -script"};
    return o;
  }

 protected:
  Client noscript_client(EventHook hook) {
    ClientOptions where = client_options(server());
    where.username = "noscript";
    where.password = "pw";
    where.on_event = std::move(hook);
    return Client(where);
  }
};

TEST_F(EventsAcl, ReleaseRefusedByTheAclSaysSoAndNamesTheLock) {
  Client client = noscript_client(nullptr);
  Mutex mutex(client, "stock:42", LockOptions{}.ttl(5s));
  ASSERT_TRUE(mutex.try_lock());
  try {
    static_cast<void>(mutex.release());
    FAIL() << "release() returned";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::noperm);
    const std::string what = error.what();
    EXPECT_NE(what.find("stock:42"), std::string::npos) << what;
    EXPECT_NE(what.find("until its lease runs out"), std::string::npos) << what;
  }
  EXPECT_FALSE(mutex.owns_lock());
  EXPECT_GT(client.command("PTTL", "stock:42").integer(), 0);  // held until it runs out
}

TEST_F(EventsAcl, UnlockRefusedByTheAclIsToldAsUnlockFailed) {
  Client client = noscript_client(recorder_.hook());
  {
    Mutex mutex(client, "k", LockOptions{}.ttl(5s));
    mutex.lock();
    mutex.unlock();                          // noexcept: the refusal goes to the hook
    ASSERT_TRUE(mutex.try_lock() == false);  // still held in Redis, by nobody here
  }
  using T = LockEventType;
  const std::vector<T> expected{T::acquired, T::unlock_failed};
  EXPECT_EQ(recorder_.sequence(T::renewed), expected);
  const Seen failed = recorder_.seen().back();
  EXPECT_EQ(failed.key, "k");
  EXPECT_NE(failed.error.find("NOPERM"), std::string::npos) << failed.error;
}

// Its acquire succeeds (SET NX PX) and nothing at acquire can tell; a
// renewed lease says so soon: every renewal is refused, and the lease is
// reported lost when it runs out.
TEST_F(EventsAcl, ARenewedLeaseOfAUserWithoutScriptsIsToldAsFailingThenLost) {
  Client client = noscript_client(recorder_.hook());
  Mutex mutex(client, "k", LockOptions{}.ttl(150ms).auto_renew(true));
  ASSERT_TRUE(mutex.try_lock());
  ASSERT_TRUE(recorder_.wait_for(LockEventType::lost));
  EXPECT_TRUE(mutex.lost());
  using T = LockEventType;
  const std::vector<T> expected{T::acquired, T::renewal_failed, T::lost};
  EXPECT_EQ(recorder_.sequence(T::renewal_failed), expected);
  EXPECT_EQ(recorder_.seen().back().reason, LostReason::expired);
}

}  // namespace
}  // namespace distlock
