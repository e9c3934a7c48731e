// Tests for simple_mutex.hpp beyond the lease behaviour it shares with
// Mutex (those run for both in mutex_test.cpp): what changes without scripts.
#include "distlock/simple_mutex.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "distlock/mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::RedisServerOptions;

class SimpleMutexTest : public testing::RedisClientTest {};

// Under OOM (noeviction) an acquire, fenced or not, fails with OOM and leaves
// no key. A release either deletes the lock, where the server runs a DEL
// queued in a MULTI (Valkey 8: a DEL frees memory), or fails with OOM where
// it refuses every queued command (Redis 7); then the lease, no longer
// renewed, runs out even with memory back, and the next holder gets the
// lock. Never "released" with the key still there.
TEST_F(SimpleMutexTest, OomFailsAcquireAndReleaseDeletesOrLeavesTheLeaseToExpire) {
  SimpleMutex held(client(), "held", LockOptions{}.ttl(300ms).auto_renew(true));
  ASSERT_TRUE(held.try_lock());
  testing::expect_oom_refuses_acquire<SimpleMutex>(client());
  testing::expect_oom_refuses_acquire<SimpleMutex>(client(), LockOptions{}.fencing(true));
  const bool runs = testing::transaction_runs_under_oom(client_options(server()));
  std::optional<Release> outcome;
  try {
    outcome = held.release();
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::oom) << error.what();
  }
  EXPECT_FALSE(held.owns_lock());
  const long long exists = client().command("EXISTS", "held").integer();
  if (runs) {
    EXPECT_EQ(outcome, Release::released) << "the server runs a queued DEL under OOM";
    EXPECT_EQ(exists, 0);
  } else {
    EXPECT_FALSE(outcome.has_value()) << "release() reported success; the server refuses it";
    EXPECT_EQ(exists, 1);  // left to expire
  }
  client().command("CONFIG", "SET", "maxmemory", "0");  // renewals would land again
  EXPECT_TRUE(
      testing::eventually([&] { return client().command("EXISTS", "held").integer() == 0; }, 3s))
      << "the lease of a failed release is still being renewed";
  SimpleMutex next(client(), "held");
  EXPECT_TRUE(next.try_lock());
}

// Under OOM an extend either lands (Valkey 8 runs a queued PEXPIRE) or fails
// with OOM and leaves the lease as it was (Redis 7); the lock stays held.
TEST_F(SimpleMutexTest, OomExtendLandsOrFailsLeavingTheLeaseAsItWas) {
  SimpleMutex held(client(), "held", LockOptions{}.auto_renew(false));
  ASSERT_TRUE(held.try_lock());
  client().command("PEXPIRE", "held", "5000");
  client().command("CONFIG", "SET", "maxmemory-policy", "noeviction");
  client().command("CONFIG", "SET", "maxmemory", "1");
  const bool runs = testing::transaction_runs_under_oom(client_options(server()));
  std::optional<bool> extended;
  try {
    extended = held.extend(60s);
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::oom) << error.what();
  }
  const long long pttl = client().command("PTTL", "held").integer();
  if (runs) {
    EXPECT_EQ(extended, true) << "the server runs a queued PEXPIRE under OOM";
    EXPECT_GT(pttl, 55000);
  } else {
    EXPECT_FALSE(extended.has_value()) << "extend() reported an answer; the server refuses it";
    EXPECT_LE(pttl, 5000);
  }
  EXPECT_TRUE(held.owns_lock());
  client().command("CONFIG", "SET", "maxmemory", "0");
  EXPECT_EQ(held.release(), Release::released);
}

// A renewal under OOM either lands (Valkey 8) or is refused (Redis 7 refuses
// every command queued in a MULTI, the renewal's PEXPIRE ... GT included).
// A refusal must not be taken for a server without GT: once memory is back
// the next round lengthens the lease with GT, reading no PTTL.
TEST_F(SimpleMutexTest, RenewalUnderOomLandsOrIsRetriedWithGtOnceMemoryIsBack) {
  SimpleMutex held(client(), "held");  // the default lease, renewed
  ASSERT_TRUE(held.try_lock());
  client().command("PEXPIRE", "held", "5000");
  client().command("CONFIG", "SET", "maxmemory-policy", "noeviction");
  client().command("CONFIG", "SET", "maxmemory", "1");
  const bool runs = testing::transaction_runs_under_oom(client_options(server()));
  client().watchdog().renew_all_now();
  if (runs) {
    EXPECT_GT(client().command("PTTL", "held").integer(), 25000) << "not renewed";
  } else {
    EXPECT_LE(client().command("PTTL", "held").integer(), 5000) << "renewed";
  }
  client().command("CONFIG", "SET", "maxmemory", "0");
  client().command("PEXPIRE", "held", "5000");  // so that the next round has to lengthen it
  client().command("CONFIG", "RESETSTAT");
  client().watchdog().renew_all_now();
  EXPECT_EQ(testing::command_calls(client()).of("pttl"), 0);  // still lengthened by GT
  EXPECT_GT(client().command("PTTL", "held").integer(), 25000);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(held.release(), Release::released);
}

class SimpleMutexAclTest : public testing::RedisTest {
  RedisServerOptions server_options() const override {
    RedisServerOptions o;
    o.config_lines = {"user noscript on >pw ~* &* +@all -eval -evalsha -script"};
    return o;
  }
};

TEST_F(SimpleMutexAclTest, SimpleMutexWorksWhereScriptsAreForbiddenAndMutexSaysWhy) {
  ClientOptions where = client_options(server());
  where.username = "noscript";
  where.password = "pw";
  Client client(where);
  SimpleMutex simple(client, "k", LockOptions{}.fencing(true));
  ASSERT_TRUE(simple.try_lock());
  EXPECT_GT(simple.fence(), 0);
  ASSERT_TRUE(simple.extend(5s));
  EXPECT_EQ(simple.release(), Release::released);

  Mutex scripted(client, "k");
  ASSERT_TRUE(scripted.try_lock());  // SET needs no script
  try {
    static_cast<void>(scripted.release());
    FAIL() << "EVALSHA ran for a user without scripting";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::noperm);
  }
}

}  // namespace
}  // namespace distlock
