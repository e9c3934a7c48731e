// Tests for detail/lifecycle/key_type.hpp: every lock type, on a key that holds
// another type than the lock keeps there, fails its first acquire with a
// WrongTypeError naming the key and the type found instead of waiting, and
// so does try_lock(); a string or hash without expiry is no lock, refused
// the same way.
#include "distlock/detail/lifecycle/key_type.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/striped_mutex.hpp"
#include "support/fixture.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;

class KeyType : public testing::RedisClientTest {
 protected:
  // Runs try_lock(), and fails unless it throws WrongTypeError for `key`
  // holding `found`. (Before the check, a refused SET NX waited instead,
  // and try_lock_for() returned false at its deadline.)
  template <class Acquire>
  void expect_wrong_type(Acquire acquire, const std::string& key, const std::string& found) {
    try {
      const bool acquired = acquire();
      ADD_FAILURE() << "acquire returned " << acquired << " instead of throwing WrongTypeError";
    } catch (const WrongTypeError& error) {
      EXPECT_EQ(error.key(), key);
      EXPECT_EQ(error.found(), found);
      EXPECT_EQ(error.kind(), ServerErrorKind::wrongtype);
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(found), std::string::npos) << error.what();
    }
  }

  void make_hash(const std::string& key) { client().command("HSET", key, "field", "1"); }
  void make_string(const std::string& key) { client().command("SET", key, "value", "PX", "60000"); }
};

TEST_F(KeyType, MutexOnAHashThrowsWrongType) {
  make_hash("k");
  Mutex plain(client(), "k");
  expect_wrong_type([&] { return plain.try_lock_for(3s); }, "k", "hash");
  Mutex fenced(client(), "k", LockOptions{}.fencing(true));
  expect_wrong_type([&] { return fenced.try_lock_for(3s); }, "k", "hash");
  EXPECT_EQ(client().command("TYPE", "k").str(), "hash");  // left as it was
}

TEST_F(KeyType, MutexWithoutWakeOnReleaseOnAListThrowsWrongType) {
  client().command("RPUSH", "k", "item");
  Mutex polling(client(), "k", LockOptions{}.wake_on_release(false));
  expect_wrong_type([&] { return polling.try_lock_for(3s); }, "k", "list");
}

TEST_F(KeyType, SimpleMutexOnAHashThrowsWrongType) {
  make_hash("k");
  SimpleMutex plain(client(), "k");
  expect_wrong_type([&] { return plain.try_lock_for(3s); }, "k", "hash");
  SimpleMutex fenced(client(), "k", LockOptions{}.fencing(true));
  expect_wrong_type([&] { return fenced.try_lock_for(3s); }, "k", "hash");
}

TEST_F(KeyType, ReentrantMutexOnAStringThrowsWrongType) {
  make_string("k");
  ReentrantMutex plain(client(), "k");
  expect_wrong_type([&] { return plain.try_lock_for(3s); }, "k", "string");
  ReentrantMutex fenced(client(), "k", LockOptions{}.fencing(true));
  expect_wrong_type([&] { return fenced.try_lock_for(3s); }, "k", "string");
  EXPECT_EQ(client().command("GET", "k").str(), "value");
}

TEST_F(KeyType, SharedMutexReadAndWriteOnAStringThrowWrongType) {
  make_string("k");
  SharedMutex rw(client(), "k");
  expect_wrong_type([&] { return rw.try_lock_shared_for(3s); }, "k", "string");
  expect_wrong_type([&] { return rw.try_lock_for(3s); }, "k", "string");
  EXPECT_EQ(client().command("GET", "k").str(), "value");
}

TEST_F(KeyType, RedlockOnAHashThrowsWrongType) {
  make_hash("k");
  Redlock quorum({client()}, "k", RedlockOptions{}.ttl(2s));
  expect_wrong_type([&] { return quorum.try_lock_for(3s); }, "k", "hash");
}

TEST_F(KeyType, RedlockGetsItsQuorumPastAMinorityOfWrongTypes) {
  testing::RedisServer second_server;
  testing::RedisServer third_server;
  Client second(testing::client_options(second_server));
  Client third(testing::client_options(third_server));
  make_hash("k");  // on the first master only
  Redlock quorum({client(), second, third}, "k", RedlockOptions{}.ttl(2s));
  EXPECT_TRUE(quorum.try_lock_for(3s));
  EXPECT_EQ(quorum.release(), Release::released);
}

// A key that never expires is no lock: every lock's layout sets the key
// and its expiry in one step. A redis-py Lock(timeout=None) holder, a SET by
// hand or a peer's bug look the same, and are refused rather than waited
// for: as a wrong type, naming the key and what it holds.
class NotALockKey : public KeyType {
 protected:
  template <class Acquire>
  void expect_not_a_lock(const char* label, Acquire acquire, const std::string& key,
                         const std::string& holds) {
    try {
      const bool acquired = acquire();
      ADD_FAILURE() << label << ": returned " << acquired << " instead of throwing";
    } catch (const NotALockError& error) {
      EXPECT_EQ(error.key(), key) << label;
      EXPECT_EQ(error.holds(), holds) << label;
      EXPECT_EQ(std::string(error.what()).find("key '" + key + "' is " + holds + ", not a lock"),
                0u)
          << label << ": " << error.what();
    }
  }
};

TEST_F(NotALockKey, LeaseLocksRefuseAStringWithoutExpiry) {
  client().command("SET", "k", R"({"user":42})");
  for (const bool fencing : {false, true}) {
    const LockOptions options = LockOptions{}.fencing(fencing);
    Mutex mutex(client(), "k", options);
    expect_not_a_lock(
        "Mutex::try_lock", [&] { return mutex.try_lock(); }, "k", "a string without expiry");
    expect_not_a_lock(
        "Mutex::try_lock_for", [&] { return mutex.try_lock_for(3s); }, "k",
        "a string without expiry");
    SimpleMutex simple(client(), "k", options);
    expect_not_a_lock(
        "SimpleMutex::try_lock", [&] { return simple.try_lock(); }, "k", "a string without expiry");
    expect_not_a_lock(
        "SimpleMutex::try_lock_for", [&] { return simple.try_lock_for(3s); }, "k",
        "a string without expiry");
  }
  client().command("SET", "stripes:0", "plain");  // stripe 0 of one
  StripedMutex stripes(client(), "stripes", 1);
  expect_not_a_lock(
      "StripedMutex::try_lock", [&] { return stripes.try_lock("any"); }, "stripes:0",
      "a string without expiry");
  EXPECT_EQ(client().command("GET", "k").str(), R"({"user":42})");
}

TEST_F(NotALockKey, HashLocksRefuseAHashWithoutExpiry) {
  client().command("HSET", "k", "user", "42");
  for (const bool fencing : {false, true}) {
    ReentrantMutex reentrant(client(), "k", LockOptions{}.fencing(fencing));
    expect_not_a_lock(
        "ReentrantMutex::try_lock", [&] { return reentrant.try_lock(); }, "k",
        "a hash without expiry");
    expect_not_a_lock(
        "ReentrantMutex::try_lock_for", [&] { return reentrant.try_lock_for(3s); }, "k",
        "a hash without expiry");
  }
  SharedMutex rw(client(), "k");
  expect_not_a_lock(
      "SharedMutex::try_lock_shared", [&] { return rw.try_lock_shared(); }, "k",
      "a hash without expiry");
  expect_not_a_lock(
      "SharedMutex::try_lock", [&] { return rw.try_lock(); }, "k", "a hash without expiry");
  expect_not_a_lock(
      "SharedMutex::try_lock_for", [&] { return rw.try_lock_for(3s); }, "k",
      "a hash without expiry");
  EXPECT_EQ(client().command("HGET", "k", "user").str(), "42");
}

// try_lock() of every lock type on a key of another type: an error, as
// try_lock_for() gives, never a false that looks like a busy lock.
TEST_F(KeyType, TryLockOfEveryTypeRefusesAWrongType) {
  make_hash("h");
  client().command("RPUSH", "l", "item");
  make_string("s");
  for (const bool fencing : {false, true}) {
    const LockOptions options = LockOptions{}.fencing(fencing);
    for (const char* key : {"h", "l"}) {
      Mutex mutex(client(), key, options);
      expect_wrong_type([&] { return mutex.try_lock(); }, key,
                        key == std::string("h") ? "hash" : "list");
      SimpleMutex simple(client(), key, options);
      expect_wrong_type([&] { return simple.try_lock(); }, key,
                        key == std::string("h") ? "hash" : "list");
    }
    ReentrantMutex reentrant(client(), "s", options);
    expect_wrong_type([&] { return reentrant.try_lock(); }, "s", "string");
  }
  SharedMutex rw(client(), "l");
  expect_wrong_type([&] { return rw.try_lock_shared(); }, "l", "list");
  expect_wrong_type([&] { return rw.try_lock(); }, "l", "list");
  Redlock quorum({client()}, "h", RedlockOptions{}.ttl(2s));
  expect_wrong_type([&] { return quorum.try_lock(); }, "h", "hash");
}

TEST(KeyTypeCheck, AcceptsTheExpectedTypeAndAGoneKey) {
  EXPECT_NO_THROW(detail::check_key_type("k", "string", "string"));
  EXPECT_NO_THROW(detail::check_key_type("k", "none", "hash"));
  EXPECT_THROW(detail::check_key_type("k", "zset", "hash"), WrongTypeError);
  EXPECT_TRUE(detail::is_wrong_type(ServerError("ERR Error running script: WRONGTYPE Operation")));
  EXPECT_FALSE(detail::is_wrong_type(ServerError("NOPERM this user has no permissions")));
}

}  // namespace
}  // namespace distlock
