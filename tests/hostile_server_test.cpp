// The library against a hostile server (tests/support/hostile_server.hpp):
// every main call, with the reply to the command it sends mangled in each
// way a real server never would, ends in a distlock error by its deadline
// (or, for a reply that is only slow, succeeds), and leaves no key behind
// on the real server beneath.
#include "support/hostile_server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/inspect.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::HostileServer;
using Act = HostileServer::Act;
using Clock = std::chrono::steady_clock;

constexpr auto command_timeout = 300ms;
// A call sends a handful of commands, each waiting at most one command
// timeout; the slack is for a loaded machine. The bound checks that the call
// ends at all (no hang), not how fast.
constexpr auto bound = 5 * command_timeout + 2s;

// The ways a reply is mangled. `expect_success` for a reply that is only
// slow; every other one must end in a distlock error.
struct Hostility {
  const char* name;
  HostileServer::Script script;  // its verb is filled in by the call
  bool expect_success = false;
};

HostileServer::Script replace(std::string bytes) {
  HostileServer::Script script;
  script.bytes = std::move(bytes);
  return script;
}
HostileServer::Script act(Act how) {
  HostileServer::Script script;
  script.act = how;
  return script;
}

const std::vector<Hostility>& hostilities() {
  static const std::vector<Hostility> all = {
      {"Array", replace("*2\r\n:1\r\n:2\r\n")},
      {"Integer", replace(":7\r\n")},
      {"Status", replace("+QUEUED\r\n")},
      {"Bulk", replace("$7\r\nhostile\r\n")},
      {"Nil", replace("$-1\r\n")},
      {"HugeBulk", replace("$4611686018427387904\r\n")},
      {"HugeArray", replace("*4611686018427387904\r\n")},
      {"Error", replace("-ERR hostile: not a number\r\n")},
      {"Garbage", replace(std::string("\x01\xff garbage\r\n", 12))},
      {"Drip", act(Act::drip), /*expect_success=*/true},
      {"CloseMidReply", act(Act::close_mid_reply)},
      {"PushFirst", act(Act::push_first)},
      {"Silence", act(Act::silence)},
  };
  return all;
}

// One call of the library, against the Client the fixture made. `prepare`
// runs before the mangling starts (to hold a lock the call then releases);
// `run` is the call, and returns whether it succeeded.
struct Call {
  const char* name;
  const char* verb;
  std::function<void(Client&)> prepare;
  std::function<bool(Client&)> run;
  // Reply shapes a real server may send this call: those hostilities are
  // not hostile here, and are left out.
  std::vector<std::string> natural;
  // A call that reports nothing (unlock(), noexcept): it must only return
  // in time and leave nothing behind.
  bool quiet = false;
};

// The locks live beyond prepare(), so that run() releases what it held.
struct Held {
  std::unique_ptr<Mutex> mutex;
};
Held& held() {
  static Held h;
  return h;
}

const std::vector<Call>& calls() {
  static const std::vector<Call> all = {
      {"MutexTryLock",
       "SET",
       nullptr,
       [](Client& c) { return Mutex(c, "k", LockOptions{}.ttl(10s)).try_lock(); },
       {"Status", "Nil"}},
      {"MutexTryLockFor",
       "SET",
       nullptr,
       [](Client& c) { return Mutex(c, "k", LockOptions{}.ttl(10s)).try_lock_for(1s); },
       {"Status", "Nil"}},
      {"FencedMutexTryLock",
       "EVALSHA",
       nullptr,
       [](Client& c) { return Mutex(c, "k", LockOptions{}.ttl(10s).fencing(true)).try_lock(); },
       {"Array"}},
      {"MutexRelease",
       "EVALSHA",
       [](Client& c) {
         held().mutex = std::make_unique<Mutex>(c, "k", LockOptions{}.ttl(10s));
         if (!held().mutex->try_lock()) throw std::runtime_error("prepare: not acquired");
       },
       [](Client&) { return held().mutex->release() == Release::released; },
       {"Integer"}},
      {"MutexUnlock",
       "EVALSHA",
       [](Client& c) {
         held().mutex = std::make_unique<Mutex>(c, "k", LockOptions{}.ttl(10s));
         if (!held().mutex->try_lock()) throw std::runtime_error("prepare: not acquired");
       },
       [](Client&) {
         held().mutex->unlock();
         return true;
       },
       {"Integer"},
       /*quiet=*/true},
      {"MutexExtend",
       "EVALSHA",
       [](Client& c) {
         held().mutex = std::make_unique<Mutex>(c, "k", LockOptions{}.ttl(10s));
         if (!held().mutex->try_lock()) throw std::runtime_error("prepare: not acquired");
       },
       [](Client&) { return held().mutex->extend(20s); },
       {"Integer"}},
      {"ReentrantMutexTryLock",
       "EVALSHA",
       nullptr,
       [](Client& c) { return ReentrantMutex(c, "k", LockOptions{}.ttl(10s)).try_lock(); },
       {"Nil", "Integer"}},
      {"SharedMutexTryLockShared",
       "EVALSHA",
       nullptr,
       [](Client& c) { return SharedMutex(c, "k", LockOptions{}.ttl(10s)).try_lock_shared(); },
       {"Nil", "Integer"}},
      {"SemaphoreTryAcquire",
       "EVALSHA",
       nullptr,
       [](Client& c) {
         Semaphore semaphore(c, "k", 2, LockOptions{}.ttl(10s));
         return static_cast<bool>(semaphore.try_acquire());
       },
       {"Integer", "Array"}},
      {"Inspect",
       "EXEC",
       nullptr,
       [](Client& c) {
         inspect(c, "k");
         return true;
       },
       {"Nil"}},
  };
  return all;
}

struct Case {
  std::size_t call;
  std::size_t hostility;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (std::size_t c = 0; c < calls().size(); ++c) {
    for (std::size_t h = 0; h < hostilities().size(); ++h) {
      const auto& natural = calls()[c].natural;
      if (std::find(natural.begin(), natural.end(), hostilities()[h].name) == natural.end()) {
        all.push_back({c, h});
      }
    }
  }
  return all;
}

class HostileServerTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    hostile_ = std::make_unique<HostileServer>(server().host(), server().port());
    ClientOptions options;
    options.host = hostile_->host();
    options.port = hostile_->port();
    options.connect_timeout = command_timeout;
    options.command_timeout = command_timeout;
    client_ = std::make_unique<Client>(options);
    ClientOptions direct = options;
    direct.host = server().host();
    direct.port = server().port();
    direct_ = std::make_unique<Client>(direct);
  }
  void TearDown() override {
    held().mutex.reset();
    client_.reset();
    hostile_.reset();
    RedisTest::TearDown();
  }

  // Keys on the real server, but the fence counters that outlive every
  // lock by design.
  long long lock_keys() {
    const Reply keys = direct_->command("KEYS", "*");
    long long count = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].str().find("fence") == std::string_view::npos) ++count;
    }
    return count;
  }

  std::unique_ptr<HostileServer> hostile_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Client> direct_;
};

class Hostile : public HostileServerTest, public ::testing::WithParamInterface<Case> {};

TEST_P(Hostile, EndsInAClearErrorByTheDeadline) {
  const Call& call = calls()[GetParam().call];
  const Hostility& hostility = hostilities()[GetParam().hostility];
  // Once untouched first, so that the server has the scripts cached and an
  // EVALSHA under test runs its script (a NOSCRIPT mangled runs nothing).
  if (call.prepare) call.prepare(*client_);
  ASSERT_TRUE(call.run(*client_));
  held().mutex.reset();
  ASSERT_EQ(lock_keys(), 0);
  if (call.prepare) call.prepare(*client_);
  HostileServer::Script script = hostility.script;
  script.verb = call.verb;
  hostile_->script(script);

  const auto start = Clock::now();
  std::optional<bool> succeeded;
  std::string error;
  try {
    succeeded = call.run(*client_);
  } catch (const Error& e) {
    error = e.what();
  }
  const auto took = Clock::now() - start;
  hostile_->clear();

  EXPECT_GE(hostile_->hits(), 1u) << "the hostile reply was never sent";
  EXPECT_LT(took, bound) << "took "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms";
  if (call.quiet) {
    EXPECT_EQ(succeeded, std::optional<bool>(true)) << error;
  } else if (hostility.expect_success) {
    EXPECT_EQ(succeeded, std::optional<bool>(true)) << error;
  } else {
    EXPECT_FALSE(succeeded.has_value()) << "returned " << *succeeded << " instead of an error";
    EXPECT_FALSE(error.empty());
  }
  std::cout << "  " << call.name << " x " << hostility.name << ": "
            << (succeeded ? (*succeeded ? "true" : "false") : "error: " + error) << " ("
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms)\n";
  // An error reply says the command was not applied: the real server
  // beneath did apply it, but a client that believes the error has no
  // reason to undo it, so the key may stay (for its lease).
  if (!hostility.expect_success && std::string_view(hostility.name) != "Error") {
    held().mutex.reset();  // gives back what a failed release left held, as a user's scope would
    EXPECT_TRUE(testing::eventually([&] { return lock_keys() == 0; }, 3s))
        << lock_keys() << " key(s) left behind";
  }
}

// A RESP3 push before a reply is not the reply: hiredis 1.x reads it as
// one (of a type RESP2 has not), and taking it as the answer left the real
// answer on the wire for the next command on that connection.
TEST_F(HostileServerTest, APushFrameIsNeverTakenForTheAnswer) {
  HostileServer::Script script;
  script.verb = "GET";
  script.act = Act::push_first;
  hostile_->script(script);
  EXPECT_THROW(client_->command("GET", "a"), ConnectionError);
  hostile_->clear();
  EXPECT_EQ(hostile_->hits(), 1u);
  EXPECT_EQ(client_->command("ECHO", "echoed").str(), "echoed");
}

// A renewal answered with anything but the script's array of gone
// positions renews nothing: the holder must not go on believing a lease
// whose key may have expired on the server. Here every renewal is answered
// with an integer, so the lease runs out unrenewed and is reported lost.
TEST_F(HostileServerTest, ARenewalAnsweredWithTheWrongTypeRenewsNothing) {
  Mutex lock(*client_, "k", LockOptions{}.ttl(600ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  HostileServer::Script script;
  script.verb = "EVALSHA";
  script.arg = std::string(scripts::renew_batch.sha1);
  script.bytes = ":1\r\n";
  hostile_->script(script);
  EXPECT_TRUE(testing::eventually([&] { return lock.lost(); }, 5s))
      << "a lease was believed renewed on a reply that renews nothing";
  EXPECT_GE(hostile_->hits(), 1u);
  hostile_->clear();
}

// The same for SimpleMutex, whose renewal is a WATCH and a MULTI/EXEC.
TEST_F(HostileServerTest, ATransactionalRenewalAnsweredWithTheWrongTypeRenewsNothing) {
  SimpleMutex lock(*client_, "k", LockOptions{}.ttl(600ms).auto_renew(true));
  ASSERT_TRUE(lock.try_lock());
  HostileServer::Script script;
  script.verb = "EXEC";
  script.bytes = ":1\r\n";
  hostile_->script(script);
  EXPECT_TRUE(testing::eventually([&] { return lock.lost(); }, 5s))
      << "a lease was believed renewed on a reply that renews nothing";
  EXPECT_GE(hostile_->hits(), 1u);
  hostile_->clear();
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(calls()[info.param.call].name) + "_" +
         hostilities()[info.param.hostility].name;
}

INSTANTIATE_TEST_SUITE_P(Calls, Hostile, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace distlock
