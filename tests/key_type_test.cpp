// Tests for detail/key_type.hpp: every lock type, on a key that holds
// another type than the lock keeps there, fails its first acquire with a
// WrongTypeError naming the key and the type found instead of waiting; a
// string without expiry (another client's lock that never ends) is waited
// for until the caller's deadline.
#include "distlock/detail/key_type.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "distlock/mutex.hpp"
#include "distlock/redlock.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
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
  // try_lock() sends only SET NX, which any key refuses: false, with no
  // second round trip to ask why (the check runs where a call would wait).
  EXPECT_FALSE(plain.try_lock());
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

// A redis-py Lock(timeout=None) stores a string with no expiry: a holder
// like any other, waited for until the deadline, and taken once it is gone.
TEST_F(KeyType, StringWithoutExpiryIsWaitedForUntilTheDeadline) {
  client().command("SET", "k", "someone-elses-token");
  for (const bool fencing : {false, true}) {
    Mutex mutex(client(), "k", LockOptions{}.fencing(fencing));
    EXPECT_FALSE(mutex.try_lock_for(100ms)) << "fencing " << fencing;
    SimpleMutex simple(client(), "k", LockOptions{}.fencing(fencing));
    EXPECT_FALSE(simple.try_lock_for(100ms)) << "fencing " << fencing;
  }
  client().command("DEL", "k");
  Mutex mutex(client(), "k");
  EXPECT_TRUE(mutex.try_lock());
  mutex.unlock();
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
