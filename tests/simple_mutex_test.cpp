// Tests for simple_mutex.hpp beyond the lease behaviour it shares with
// Mutex (those run for both in mutex_test.cpp): what changes without scripts.
#include "distlock/simple_mutex.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "distlock/mutex.hpp"
#include "support/fixture.hpp"
#include "support/lock_helpers.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::client_options;
using testing::RedisServerOptions;

class SimpleMutexTest : public testing::RedisClientTest {};

TEST_F(SimpleMutexTest, OomFailsAcquireAndReleaseLeavingTheLeaseToExpire) {
  SimpleMutex held(client(), "held", LockOptions{}.ttl(300ms));
  ASSERT_TRUE(held.try_lock());
  testing::expect_oom_refuses_acquire<SimpleMutex>(client());
  try {
    static_cast<void>(held.release());
    ADD_FAILURE() << "MULTI under OOM was not refused";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::oom);
  }
  EXPECT_FALSE(held.owns_lock());
  EXPECT_EQ(client().command("EXISTS", "held").integer(), 1);  // left to expire
  const auto deadline = Clock::now() + 3s;
  while (client().command("EXISTS", "held").integer() == 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(client().command("EXISTS", "held").integer(), 0);
}

// OOM refuses every command queued in a MULTI, the renewal's PEXPIRE ... GT
// included; that must not be taken for a server without GT.
TEST_F(SimpleMutexTest, RenewalRefusedByOomIsRetriedWithGtOnceMemoryIsBack) {
  SimpleMutex held(client(), "held");  // the default lease, renewed
  ASSERT_TRUE(held.try_lock());
  client().command("PEXPIRE", "held", "5000");
  client().command("CONFIG", "SET", "maxmemory-policy", "noeviction");
  client().command("CONFIG", "SET", "maxmemory", "1");
  client().watchdog().renew_all_now();
  EXPECT_LE(client().command("PTTL", "held").integer(), 5000);  // not renewed
  client().command("CONFIG", "SET", "maxmemory", "0");
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
