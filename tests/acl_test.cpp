// Least privilege: every lock type run as a Redis ACL user that has exactly
// the rules docs/connecting.md's "Least privilege (ACL)" section lists for it, and
// nothing more. The rules are the guide's, written once in
// support/acl_rules.hpp (beside the Cluster's and Sentinel's extras,
// tested in cluster_acl_test.cpp and sentinel_acl_test.cpp), so a
// lock that starts sending a command (or touching a key or channel) the
// guide does not list fails these tests instead of an operator's
// deployment. Each test takes the lock through its real paths as that user:
// try_lock, a contended wait woken by the holder's release (another
// client), a Watchdog renewal, extend, unlock, the fencing token and
// min_hold where the type has them; the admin user runs inspect(),
// is_locked() and force_unlock(). The negative tests drop one listed
// rule and show some path then fails, so the lists are not padded; and
// the guide's ready-to-paste lines must be these lists word for word.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "distlock/distlock.hpp"
#include "support/acl_rules.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;

using testing::RedisServer;

// The guide's rules and the helpers around them (support/acl_rules.hpp).
using testing::acl::admin_rules;
using testing::acl::fair_rules;
using testing::acl::guide_rules;
using testing::acl::multi_rules;
using testing::acl::mutex_rules;
using testing::acl::rate_limiter_rules;
using testing::acl::redlock_rules;
using testing::acl::reentrant_rules;
using testing::acl::refusals;
using testing::acl::Rules;
using testing::acl::semaphore_rules;
using testing::acl::set_user;
using testing::acl::shared_rules;
using testing::acl::simple_mutex_rules;
using testing::acl::without;

ClientOptions as_user(const RedisServer& server, const std::string& user) {
  ClientOptions options = client_options(server);
  options.username = user;
  options.password = "pw";
  return options;
}

long long subscribers(const RedisServer& server, const std::string& channel) {
  const std::string answer = server.command({"PUBSUB", "NUMSUB", channel});
  return std::stoll(answer.substr(answer.find('\n') + 1));
}

// Whether `channel` gets a subscriber. A refused SUBSCRIBE never makes one,
// so a refusal in the ACL LOG (read, not reset) ends the wait at once.
bool subscribed(const RedisServer& server, const std::string& channel) {
  eventually([&] {
    return subscribers(server, channel) > 0 || !server.command({"ACL", "LOG"}).empty();
  });
  return subscribers(server, channel) > 0;
}

long long pttl(const RedisServer& server, const std::string& key) {
  return std::stoll(server.command({"PTTL", key}));
}

// A lease renewed by the Watchdog: its PTTL goes up between two looks
// (it only ever goes down otherwise).
bool renewed(const RedisServer& server, const std::string& key) {
  long long last = pttl(server, key);
  return eventually(
      [&] {
        const long long now = pttl(server, key);
        const bool up = now > last;
        last = now;
        return up;
      },
      5s);
}

// The paths every exclusive lock has, as the user: try_lock, the fence (if
// `fenced`), a second client's try_lock_for woken by the release (when the
// lock announces releases on `channel`), a Watchdog renewal of `key`,
// extend, unlock. `make(client)` makes the lock on a client.
template <class Make>
std::string exclusive_paths(const RedisServer& server, const std::string& user, Make make,
                            const std::string& key, const std::string& channel, bool fenced) {
  try {
    Client holder_client(as_user(server, user));
    Client waiter_client(as_user(server, user));
    auto holder = make(holder_client);
    auto waiter = make(waiter_client);
    DISTLOCK_STEP(holder->try_lock());
    long long fence = 0;
    if (fenced) fence = holder->fence();
    if (fenced) DISTLOCK_STEP(fence > 0);
    // The waiter's hold is its thread's (a ReentrantMutex's and a
    // SharedMutex's are), so that thread also gives it back.
    auto waited = testing::acl::wait_on(*waiter, [&] {
      const bool taken = waiter->try_lock_for(5s);
      const long long next = taken && fenced ? waiter->fence() : 0;
      if (taken) waiter->unlock();
      return std::make_pair(taken, next);
    });
    if (!channel.empty()) {
      DISTLOCK_STEP(subscribed(server, channel));
    }
    DISTLOCK_STEP(renewed(server, key));
    DISTLOCK_STEP(holder->extend(5s));
    DISTLOCK_STEP(pttl(server, key) > 4000);
    DISTLOCK_STEP(holder->release() == Release::released);
    const auto [taken, next] = waited.get();
    DISTLOCK_STEP(taken);
    if (fenced) DISTLOCK_STEP(next > fence);
    DISTLOCK_STEP(server.command({"EXISTS", key}) == "0");
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

const LockOptions renewed_fenced = LockOptions{}.ttl(600ms).auto_renew(true).fencing(true);
const LockOptions renewing = LockOptions{}.ttl(600ms).auto_renew(true);

std::string mutex_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<Mutex>(client, "jobs:nightly", renewed_fenced);
      },
      "jobs:nightly", "{jobs:nightly}:released", true);
}

// A Mutex without fencing or wake-on-release: the rules less those the
// guide lists as these options' extras.
std::string plain_mutex_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<Mutex>(
            client, "jobs:plain", LockOptions{}.ttl(600ms).auto_renew(true).wake_on_release(false));
      },
      "jobs:plain", "", false);
}

// min_hold: an unlock before it has passed is a token-checked extend to
// its end, not a delete.
std::string min_hold_paths(const RedisServer& server, const std::string& user) {
  try {
    Client client(as_user(server, user));
    Mutex cron(client, "jobs:cron", LockOptions{}.ttl(10s).min_hold(30s));
    DISTLOCK_STEP(cron.try_lock());
    cron.unlock();
    DISTLOCK_STEP(pttl(server, "jobs:cron") > 20000);
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

std::string simple_mutex_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<SimpleMutex>(client, "jobs:simple", renewed_fenced);
      },
      "jobs:simple", "{jobs:simple}:released", true);
}

std::string reentrant_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<ReentrantMutex>(client, "jobs:tree", renewed_fenced);
      },
      "jobs:tree", "redisson_lock__channel:{jobs:tree}", true);
}

// Two names, the waiter refused at the first.
std::string multi_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<MultiMutex>(client, std::vector<std::string>{"jobs:in", "jobs:out"},
                                            renewing);
      },
      "jobs:in", "{jobs:in}:released", false);
}

// A FairMutex waiter listens on a channel of its own (the ACL LOG shows a
// refused one), so no one channel is waited for here.
std::string fair_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) {
        return std::make_unique<FairMutex>(client, "jobs:turns", renewed_fenced);
      },
      "jobs:turns", "", true);
}

std::string shared_write_paths(const RedisServer& server, const std::string& user) {
  return exclusive_paths(
      server, user,
      [](Client& client) { return std::make_unique<SharedMutex>(client, "jobs:table", renewing); },
      "jobs:table", "redisson_rwlock:{jobs:table}", false);
}

// The read side: a reader holds, a writer waits until the reader's release
// wakes it; the reader's hold is renewed and extended in between.
std::string shared_read_paths(const RedisServer& server, const std::string& user) {
  try {
    Client reader_client(as_user(server, user));
    Client writer_client(as_user(server, user));
    SharedMutex reader(reader_client, "jobs:table", renewing);
    SharedMutex writer(writer_client, "jobs:table", renewing);
    DISTLOCK_STEP(reader.try_lock_shared());
    auto waited = testing::acl::wait_on(writer, [&] {
      const bool taken = writer.try_lock_for(5s);
      if (taken) writer.unlock();
      return taken;
    });
    DISTLOCK_STEP(subscribed(server, "redisson_rwlock:{jobs:table}"));
    DISTLOCK_STEP(renewed(server, "jobs:table"));
    DISTLOCK_STEP(reader.extend_shared(5s));
    DISTLOCK_STEP(pttl(server, "jobs:table") > 4000);
    DISTLOCK_STEP(reader.release_shared() == Release::released);
    DISTLOCK_STEP(waited.get());
    DISTLOCK_STEP(server.command({"EXISTS", "jobs:table"}) == "0");
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

// The score (deadline) of the semaphore's one permit: the renewal and
// extend move it later.
long long permit_deadline(const RedisServer& server, const std::string& key) {
  const std::string answer = server.command({"ZRANGE", key, "0", "0", "WITHSCORES"});
  const auto newline = answer.find('\n');
  return newline == std::string::npos ? 0 : std::stoll(answer.substr(newline + 1));
}

std::string semaphore_paths(const RedisServer& server, const std::string& user) {
  try {
    Client holder_client(as_user(server, user));
    Client waiter_client(as_user(server, user));
    Semaphore holder(holder_client, "jobs:exports", 1, renewing);
    Semaphore waiter(waiter_client, "jobs:exports", 1, renewing);
    {
      // The count the first acquire adopts goes with the last live permit.
      Permit once = holder.try_acquire();
      DISTLOCK_STEP(once);
      DISTLOCK_STEP(once.release() == Release::released);
    }
    Permit permit = holder.try_acquire();
    DISTLOCK_STEP(permit);
    auto waited = testing::acl::wait_on(waiter, [&] { return waiter.try_acquire_for(5s); });
    DISTLOCK_STEP(subscribed(server, "{jobs:exports}:released"));
    long long last = permit_deadline(server, "jobs:exports");
    DISTLOCK_STEP(eventually([&] {
      const long long now = permit_deadline(server, "jobs:exports");
      return now > std::exchange(last, now);
    }));
    DISTLOCK_STEP(permit.extend(5s));
    holder.resize(1);  // the stored count, and its read
    DISTLOCK_STEP(holder.available() == 0);
    DISTLOCK_STEP(permit.release() == Release::released);
    Permit second = waited.get();
    DISTLOCK_STEP(second);
    DISTLOCK_STEP(second.release() == Release::released);
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

std::string rate_limiter_paths(const RedisServer& server, const std::string& user) {
  try {
    Client client(as_user(server, user));
    RateLimiter window(client, "jobs:mails", RateOptions{}.fixed_window(2, 10s));
    DISTLOCK_STEP(window.try_acquire().allowed);
    DISTLOCK_STEP(window.try_acquire().allowed);
    DISTLOCK_STEP(!window.try_acquire().allowed);
    window.reset();
    DISTLOCK_STEP(window.try_acquire_for(1s).allowed);
    RateLimiter smooth(client, "jobs:calls", RateOptions{}.smooth(100, 1s));
    DISTLOCK_STEP(smooth.try_acquire().allowed);
    DISTLOCK_STEP(smooth.try_acquire_for(1s).allowed);
    smooth.reset();
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

// A StripedMutex is Mutexes named "<name>:<i>": stripe 1 through the
// exclusive paths, and the any-stripe calls.
struct StripeOne {
  std::unique_ptr<StripedMutex> stripes;
  Mutex* operator->() const { return &stripes->stripe(1); }
  Mutex& operator*() const { return stripes->stripe(1); }
};

std::string striped_paths(const RedisServer& server, const std::string& user) {
  const std::string failed = exclusive_paths(
      server, user,
      [](Client& client) {
        return StripeOne{std::make_unique<StripedMutex>(client, "jobs:seats", 4, renewed_fenced)};
      },
      "jobs:seats:1", "{jobs:seats:1}:released", true);
  if (!failed.empty()) return failed;
  try {
    Client client(as_user(server, user));
    StripedMutex seats(client, "jobs:seats", 4, renewed_fenced);
    DISTLOCK_STEP(seats.try_lock("seat-7"));
    seats.unlock("seat-7");
    auto [stripe, guard] = seats.try_lock_any_for(1s);
    DISTLOCK_STEP(guard.owns_lock());
    DISTLOCK_STEP(stripe < 4);
    return "";
  } catch (const std::exception& error) {
    return error.what();
  }
}

class AclTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    refusals(server());
  }

  // Runs `path` as a user with `rules`: every step must work, and the
  // server must have refused nothing on the way (not even a refusal the
  // library would shrug off).
  void expect_works(const Rules& rules,
                    std::string (*path)(const RedisServer&, const std::string&)) {
    set_user(server(), "app", rules);
    EXPECT_EQ(path(server(), "app"), "");
    EXPECT_EQ(refusals(server()), "");
  }

  // Runs `path` as a user with `rules` less `dropped`: some step fails.
  void expect_fails_without(const Rules& rules, const std::string& dropped,
                            std::string (*path)(const RedisServer&, const std::string&)) {
    server().command({"FLUSHALL"});
    set_user(server(), "app", without(rules, dropped));
    EXPECT_NE(path(server(), "app"), "") << "passed without " << dropped;
    EXPECT_NE(refusals(server()), "") << dropped;
  }
};

TEST_F(AclTest, Mutex) { expect_works(mutex_rules, mutex_paths); }
TEST_F(AclTest, MutexWithoutFencingOrWaking) {
  Rules rules = mutex_rules;
  for (const char* extra : {"+incr", "~{jobs:*}:fence", "+subscribe", "+unsubscribe"}) {
    rules = without(rules, extra);
  }
  expect_works(rules, plain_mutex_paths);
}
TEST_F(AclTest, MutexMinHold) { expect_works(mutex_rules, min_hold_paths); }
TEST_F(AclTest, SimpleMutex) { expect_works(simple_mutex_rules, simple_mutex_paths); }
TEST_F(AclTest, ReentrantMutex) { expect_works(reentrant_rules, reentrant_paths); }
TEST_F(AclTest, FairMutex) { expect_works(fair_rules, fair_paths); }
TEST_F(AclTest, MultiMutex) { expect_works(multi_rules, multi_paths); }
TEST_F(AclTest, SharedMutexWriteSide) { expect_works(shared_rules, shared_write_paths); }
TEST_F(AclTest, SharedMutexReadSide) { expect_works(shared_rules, shared_read_paths); }
TEST_F(AclTest, Semaphore) { expect_works(semaphore_rules, semaphore_paths); }
TEST_F(AclTest, RateLimiter) { expect_works(rate_limiter_rules, rate_limiter_paths); }
TEST_F(AclTest, StripedMutex) { expect_works(mutex_rules, striped_paths); }

// One dropped rule per lock type, each on a path the test above runs: the
// lists hold nothing that is never needed.
TEST_F(AclTest, MutexFailsWithoutItsRules) {
  expect_fails_without(mutex_rules, "+incr", mutex_paths);            // the fence
  expect_fails_without(mutex_rules, "+subscribe", mutex_paths);       // the wake-up
  expect_fails_without(mutex_rules, "~{jobs:*}:fence", mutex_paths);  // the fence's key
  expect_fails_without(mutex_rules, "+publish", mutex_paths);         // the release
}
TEST_F(AclTest, SimpleMutexFailsWithoutItsRules) {
  expect_fails_without(simple_mutex_rules, "+watch", simple_mutex_paths);
}
// Without +multi, a fenced SimpleMutex acquire is refused (its MULTI),
// and the SET that then ran on its own is deleted again at once rather
// than left to its lease: a key the caller was told it did not get.
TEST_F(AclTest, AFencedSimpleMutexWhoseMultiIsRefusedLeavesNoKey) {
  set_user(server(), "app", without(simple_mutex_rules, "+multi"));
  Client client(as_user(server(), "app"));
  SimpleMutex simple(client, "jobs:simple", LockOptions().ttl(30s).fencing(true));
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THROW(static_cast<void>(simple.try_lock()), ServerError) << attempt;
    EXPECT_EQ(server().command({"EXISTS", "jobs:simple"}), "0") << attempt;
  }
  EXPECT_FALSE(simple.owns_lock());
}

// Without +multi, an unfenced SimpleMutex is taken (SET NX PX), but no
// transaction can guard its token check: its release deletes the key on
// its own only while more than two command timeouts of the lease are left
// (nobody else can have set the key before then), and is refused
// otherwise, the key left to its lease. Never a change sent behind the
// refused MULTI, outside the check.
TEST_F(AclTest, ASimpleMutexWithoutMultiReleasesOnlyAYoungLease) {
  set_user(server(), "app", without(simple_mutex_rules, "+multi"));
  ClientOptions options = as_user(server(), "app");
  options.command_timeout = 1000ms;
  Client client(options);
  SimpleMutex young(client, "jobs:young", LockOptions().ttl(30s));
  ASSERT_TRUE(young.try_lock());
  EXPECT_EQ(young.release(), Release::released);
  EXPECT_EQ(server().command({"EXISTS", "jobs:young"}), "0");
  SimpleMutex old(client, "jobs:old", LockOptions().ttl(1500ms).auto_renew(false));
  ASSERT_TRUE(old.try_lock());
  EXPECT_THROW(static_cast<void>(old.release()), ServerError);
  EXPECT_EQ(server().command({"EXISTS", "jobs:old"}), "1");  // left to its lease
}

TEST_F(AclTest, ReentrantMutexFailsWithoutItsRules) {
  expect_fails_without(reentrant_rules, "&redisson_lock__channel:{jobs:*}", reentrant_paths);
}
TEST_F(AclTest, FairMutexFailsWithoutItsRules) {
  expect_fails_without(fair_rules, "~redisson_lock_queue:{jobs:*}", fair_paths);  // the queue
  expect_fails_without(fair_rules, "+time", fair_paths);  // the server's clock
}
TEST_F(AclTest, MultiMutexFailsWithoutItsRules) {
  expect_fails_without(multi_rules, "+exists", multi_paths);  // all free?
}
TEST_F(AclTest, SharedMutexFailsWithoutItsRules) {
  expect_fails_without(shared_rules, "~{jobs:*}:*rwlock_timeout*", shared_read_paths);
}
TEST_F(AclTest, SemaphoreFailsWithoutItsRules) {
  expect_fails_without(semaphore_rules, "+time", semaphore_paths);
  expect_fails_without(semaphore_rules, "+del", semaphore_paths);  // the adopted count's end
}
TEST_F(AclTest, RateLimiterFailsWithoutItsRules) {
  expect_fails_without(rate_limiter_rules, "+incrby", rate_limiter_paths);
}

// PING is the server watch's, every 500 ms while a lease is held (the
// paths above are shorter). Held longer, the watch pings as the user. One
// without +ping is refused once: the watch keeps its connection (it only
// notices closes from then on) rather than taking the refusal for a broken
// connection and making a new one every round.
TEST_F(AclTest, TheWatchPingsWhileALeaseIsHeld) {
  const auto pings = [&] {
    const std::string stats = server().command({"INFO", "commandstats"});
    return stats.find("cmdstat_ping:") != std::string::npos;
  };
  set_user(server(), "app", mutex_rules);
  {
    Client client(as_user(server(), "app"));
    Mutex lock(client, "jobs:long", LockOptions{}.ttl(30s));
    ASSERT_TRUE(lock.try_lock());
    EXPECT_TRUE(eventually(pings, 20s));  // a bound for a loaded machine: ~0.5 s idle
    EXPECT_EQ(lock.release(), Release::released);
  }
  EXPECT_EQ(refusals(server()), "");
  set_user(server(), "app", without(mutex_rules, "+ping"));
  Client client(as_user(server(), "app"));
  Mutex lock(client, "jobs:long", LockOptions{}.ttl(30s));
  ASSERT_TRUE(lock.try_lock());
  // Looked for without resetting the log: the refusal comes once, and a
  // reset between a read and the next would erase it unseen.
  EXPECT_TRUE(eventually(
      [&] {
        return server().command({"ACL", "LOG"}).find("ping") != std::string::npos;
      },
      20s));
  EXPECT_NE(refusals(server()).find("ping"), std::string::npos);
  // The newest connection of the user's (the test's own are the default user's).
  const auto newest = [&] {
    std::istringstream list(server().command({"CLIENT", "LIST"}));
    long long id = 0;
    for (std::string line; std::getline(list, line);) {
      if (line.find(" user=app ") == std::string::npos) continue;
      id = std::max(id, std::stoll(line.substr(line.find("id=") + 3)));
    }
    return id;
  };
  const long long after_refusal = newest();
  EXPECT_FALSE(eventually([&] { return newest() > after_refusal; }, 2s))
      << "the watch reconnects after every refused PING";
  EXPECT_EQ(lock.release(), Release::released);
}

// The rules these tests run with are the guide's, word for word.
TEST(AclGuide, ListsTheRulesTheTestsRunWith) {
  EXPECT_EQ(guide_rules("jobs"), mutex_rules);
  EXPECT_EQ(guide_rules("jobs-simple"), simple_mutex_rules);
  EXPECT_EQ(guide_rules("jobs-reentrant"), reentrant_rules);
  EXPECT_EQ(guide_rules("jobs-fair"), fair_rules);
  EXPECT_EQ(guide_rules("jobs-multi"), multi_rules);
  EXPECT_EQ(guide_rules("jobs-shared"), shared_rules);
  EXPECT_EQ(guide_rules("jobs-semaphore"), semaphore_rules);
  EXPECT_EQ(guide_rules("jobs-rate"), rate_limiter_rules);
  EXPECT_EQ(guide_rules("jobs-redlock"), redlock_rules);
  EXPECT_EQ(guide_rules("jobs-admin"), admin_rules);
  // The backends' (cluster_acl_test.cpp, sentinel_acl_test.cpp).
  EXPECT_EQ(guide_rules("jobs-cluster"), testing::acl::on_cluster(mutex_rules));
  EXPECT_EQ(guide_rules("jobs-sentinel"), testing::acl::on_sentinel_master(mutex_rules));
  EXPECT_EQ(guide_rules("jobs-sentinels"), testing::acl::sentinel_rules);
}

// Redlock: the same user on each of three masters.
TEST_F(AclTest, Redlock) {
  RedisServer second;
  RedisServer third;
  std::vector<const RedisServer*> servers = {&server(), &second, &third};
  std::vector<std::unique_ptr<Client>> holders;
  std::vector<std::unique_ptr<Client>> waiters;
  for (const RedisServer* each : servers) {
    set_user(*each, "app", redlock_rules);
    refusals(*each);
    holders.push_back(std::make_unique<Client>(as_user(*each, "app")));
    waiters.push_back(std::make_unique<Client>(as_user(*each, "app")));
  }
  const auto pointers = [](const std::vector<std::unique_ptr<Client>>& clients) {
    std::vector<Client*> out;
    for (const auto& client : clients) out.push_back(client.get());
    return out;
  };
  const RedlockOptions options = RedlockOptions{}.ttl(600ms).auto_renew(true);
  Redlock holder(pointers(holders), "jobs:billing", options);
  Redlock waiter(pointers(waiters), "jobs:billing", options);
  ASSERT_TRUE(holder.try_lock());
  auto waited = std::async(std::launch::async, [&] {
    const bool taken = waiter.try_lock_for(5s);
    if (taken) waiter.unlock();
    return taken;
  });
  EXPECT_TRUE(renewed(server(), "jobs:billing"));
  EXPECT_TRUE(holder.extend(5s));
  EXPECT_GT(pttl(third, "jobs:billing"), 4000);
  holder.unlock();
  EXPECT_TRUE(waited.get());
  for (const RedisServer* each : servers) {
    EXPECT_EQ(each->command({"EXISTS", "jobs:billing"}), "0");
    EXPECT_EQ(refusals(*each), "");
  }
}

// The admin user: inspect(), is_locked() and force_unlock() on a Mutex's
// lease, a ReentrantMutex's hash, a SharedMutex's read hold (which has a
// timeout key) and a FairMutex with a waiter queued (told on its own
// channel), all taken by the default user.
TEST_F(AclTest, AdminInspectsAndBreaksEveryLayout) {
  set_user(server(), "admin", admin_rules);
  Client owner(client_options(server()));
  Mutex lease(owner, "jobs:lease", LockOptions{}.ttl(30s));
  ReentrantMutex tree(owner, "jobs:tree", LockOptions{}.ttl(30s));
  SharedMutex table(owner, "jobs:table", LockOptions{}.ttl(30s));
  FairMutex line(owner, "jobs:line", LockOptions{}.ttl(30s));
  FairMutex next(owner, "jobs:line", LockOptions{}.ttl(30s));
  ASSERT_TRUE(lease.try_lock());
  ASSERT_TRUE(tree.try_lock());
  ASSERT_TRUE(table.try_lock_shared());
  ASSERT_TRUE(line.try_lock());
  auto waited = std::async(std::launch::async, [&] {
    const bool taken = next.try_lock_for(20s);
    if (taken) next.unlock();
    return taken;
  });
  ASSERT_TRUE(eventually([&] {
    return server().command({"LLEN", "redisson_lock_queue:{jobs:line}"}) == "1";
  }));
  ASSERT_NE(server().command({"KEYS", "{jobs:table}:*:rwlock_timeout:*"}), "");
  Client admin(as_user(server(), "admin"));
  for (const char* name : {"jobs:lease", "jobs:tree", "jobs:table", "jobs:line"}) {
    EXPECT_TRUE(inspect(admin, name).held) << name;
    EXPECT_TRUE(is_locked(admin, name)) << name;
    EXPECT_TRUE(force_unlock(admin, name)) << name;
    if (std::string(name) != "jobs:line") {  // the fair waiter may hold it already
      EXPECT_FALSE(is_locked(admin, name)) << name;
    }
  }
  EXPECT_EQ(waited.wait_for(10s), std::future_status::ready) << "the fair waiter was not told";
  EXPECT_TRUE(waited.get());
  EXPECT_TRUE(eventually([&] { return server().command({"KEYS", "*"}).empty(); }));
  EXPECT_EQ(line.release(), Release::expired);
  EXPECT_EQ(refusals(server()), "");
  EXPECT_EQ(lease.release(), Release::expired);
  EXPECT_EQ(tree.release(), Release::expired);
  EXPECT_EQ(table.release_shared(), Release::expired);
}

}  // namespace
}  // namespace distlock
