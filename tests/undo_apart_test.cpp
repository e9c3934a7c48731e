// Tests for the undo of an attempt whose connection broke under it
// (detail/lifecycle/acquire.hpp): nothing written behind the attempt can
// arrive, so the undo goes apart, on a fresh connection made by the
// backend's connector thread. The call returns by its deadline however long
// that connection takes, and the grant is still given back. A credentials
// provider the test can hold up stands for a slow connect (a token fetched
// from an identity service), over every lock type whose attempt can be cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/credentials.hpp"
#include "distlock/detail/asio/undo_apart.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/undo.hpp"
#include "distlock/detail/wire/link.hpp"
#include "distlock/error.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/multi_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"
#include "support/sanitized.hpp"

namespace distlock {
// Named, so that its lock kinds hold in any company (a unity batch).
namespace undo_apart_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::deadline_slack;
using testing::eventually;
using Direction = testing::FaultProxy::Direction;

// The password the server asks for, as a provider answers it: at once while
// open, and while closed only once opened (or after `hold`, so that a
// defect cannot hang the test).
class Gate {
 public:
  Credentials ask() {
    detail::MutexLock guard(mutex_);
    if (closed_) {
      guard.wait_until(opened_, Clock::now() + hold,
                       [&]() DISTLOCK_REQUIRES(mutex_) { return !closed_; });
    }
    return Credentials{"", "gate-secret"};
  }
  void close() {
    detail::MutexLock guard(mutex_);
    closed_ = true;
  }
  void open() {
    {
      detail::MutexLock guard(mutex_);
      closed_ = false;
    }
    opened_.notify_all();
  }
  static constexpr std::chrono::seconds hold{5};

 private:
  detail::Mutex mutex_;
  std::condition_variable opened_;
  bool closed_ DISTLOCK_GUARDED_BY(mutex_) = false;
};

// A lock type: its object, one acquire and release while all is well (the
// pool's connection is made then), and the timed attempt the test cuts.
template <class Lock>
struct LockKind {
  using Object = Lock;
  static std::unique_ptr<Lock> make(Client& client, const std::string& name) {
    return std::make_unique<Lock>(client, name);
  }
  static bool cycle(Lock& lock) {
    if (!lock.try_lock()) return false;
    lock.unlock();
    return true;
  }
  static bool attempt(Lock& lock, std::chrono::milliseconds timeout) {
    return lock.try_lock_for(timeout);
  }
};

struct MutexKind : LockKind<Mutex> {
  static constexpr const char* name = "Mutex";
};
struct SimpleMutexKind : LockKind<SimpleMutex> {
  static constexpr const char* name = "SimpleMutex";
};
struct ReentrantKind : LockKind<ReentrantMutex> {
  static constexpr const char* name = "ReentrantMutex";
};
struct FairKind : LockKind<FairMutex> {
  static constexpr const char* name = "FairMutex";
};
struct SharedWriteKind : LockKind<SharedMutex> {
  static constexpr const char* name = "SharedMutexWrite";
};
struct SharedReadKind : LockKind<SharedMutex> {
  static constexpr const char* name = "SharedMutexRead";
  static bool cycle(SharedMutex& lock) {
    if (!lock.try_lock_shared()) return false;
    lock.unlock_shared();
    return true;
  }
  static bool attempt(SharedMutex& lock, std::chrono::milliseconds timeout) {
    return lock.try_lock_shared_for(timeout);
  }
};
struct SemaphoreKind {
  using Object = Semaphore;
  static constexpr const char* name = "Semaphore";
  static std::unique_ptr<Semaphore> make(Client& client, const std::string& name_in) {
    return std::make_unique<Semaphore>(client, name_in, 2);
  }
  static bool cycle(Semaphore& semaphore) { return static_cast<bool>(semaphore.try_acquire()); }
  static bool attempt(Semaphore& semaphore, std::chrono::milliseconds timeout) {
    return static_cast<bool>(semaphore.try_acquire_for(timeout));
  }
};
struct MultiKind {
  using Object = MultiMutex;
  static constexpr const char* name = "MultiMutex";
  static std::unique_ptr<MultiMutex> make(Client& client, const std::string& name_in) {
    return std::make_unique<MultiMutex>(client,
                                        std::vector<std::string>{name_in + ":a", name_in + ":b"});
  }
  static bool cycle(MultiMutex& lock) { return LockKind<MultiMutex>::cycle(lock); }
  static bool attempt(MultiMutex& lock, std::chrono::milliseconds timeout) {
    return lock.try_lock_for(timeout);
  }
};

struct KindName {
  template <class Kind>
  static std::string GetName(int) {
    return Kind::name;
  }
};

using Kinds = ::testing::Types<MutexKind, SimpleMutexKind, ReentrantKind, FairKind, SharedWriteKind,
                               SharedReadKind, SemaphoreKind, MultiKind>;

// A server that asks for a password, reached through a fault proxy by a
// Client whose every new connection asks the gate for it.
template <class Kind>
class UndoApartTest : public testing::RedisTest {
 protected:
  testing::RedisServerOptions server_options() const override {
    testing::RedisServerOptions options;
    options.requirepass = "gate-secret";
    return options;
  }

  void SetUp() override {
    testing::RedisTest::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<testing::FaultProxy>(server().host(), server().port());
    ClientOptions options = testing::client_options(server());
    options.host = proxy_->host();
    options.port = proxy_->port();
    options.credentials = [gate = gate_] { return gate->ask(); };
    client_ = std::make_unique<Client>(options);
  }

  void TearDown() override {
    gate_->open();
    client_.reset();
    proxy_.reset();
    testing::RedisTest::TearDown();
  }

  // The server's keys (KEYS answers one a line).
  std::set<std::string> keys() {
    const std::string listed = server().command({"KEYS", "*"});
    std::set<std::string> out;
    for (std::size_t start = 0; start < listed.size();) {
      const std::size_t end = std::min(listed.find('\n', start), listed.size());
      out.insert(listed.substr(start, end - start));
      start = end + 1;
    }
    return out;
  }

  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  std::unique_ptr<testing::FaultProxy> proxy_;
  std::unique_ptr<Client> client_;
};
TYPED_TEST_SUITE(UndoApartTest, Kinds, KindName);

// Defect: the undo of an attempt whose connection broke went on a fresh
// connection made on the caller's thread, past the caller's deadline: up to
// 40 ms, or as long as the credentials provider took to answer.
TYPED_TEST(UndoApartTest, ACallWhoseConnectionBreaksUnderItsAttemptReturnsByItsDeadline) {
  auto lock = TypeParam::make(*this->client_, "undo:apart");
  ASSERT_TRUE(TypeParam::cycle(*lock));  // the pool's connection, made while all is well
  const std::set<std::string> before = this->keys();

  this->gate_->close();                       // from now on a connection waits for its password
  this->proxy_->stall(Direction::to_client);  // the attempt's reply never comes
  constexpr std::chrono::milliseconds timeout = 1s;
  const Clock::time_point began = Clock::now();
  std::future<std::error_code> call = std::async(std::launch::async, [&] {
    try {
      return TypeParam::attempt(*lock, timeout)
                 ? std::error_code()
                 : std::make_error_code(std::errc::device_or_resource_busy);
    } catch (const Error& error) {
      return error.code();
    }
  });
  ASSERT_TRUE(eventually([&] { return this->keys() != before; }))
      << "the attempt was never granted on the server";
  this->proxy_->reset_all();  // the server closes the connection mid-reply
  this->proxy_->release(Direction::to_client);
  const bool returned = call.wait_for(timeout + 2 * Gate::hold / 5) == std::future_status::ready;
  const Clock::duration took = Clock::now() - began;
  this->gate_->open();

  EXPECT_TRUE(returned && took <= timeout + deadline_slack)
      << "the call " << (returned ? "returned " : "had not returned ")
      << std::chrono::duration_cast<std::chrono::milliseconds>(took - timeout).count()
      << " ms past its deadline";
  EXPECT_EQ(call.get(), Errc::io_error);
  EXPECT_TRUE(eventually([&] { return this->keys() == before; }))
      << "the grant the broken connection never reported was not given back";
}

// The undo is handed over best effort: whatever the hand-over throws (an
// allocation failing while the undo copies what it will send), the caller
// gets the attempt's own error.
class UndoHandOverTest : public testing::RedisTest {};

TEST_F(UndoHandOverTest, WhatTheHandOverThrowsLeavesTheAttemptsErrorAsItWas) {
  Client client(testing::client_options(server()));
  const std::shared_ptr<detail::Site> site = client.site_for("undo:hand-over");
  int handed_over = 0;
  const auto attempt_cut_mid_reply = [](Connection&) -> detail::Attempt {
    throw ConnectionError(Errc::io_error, "the server closed the connection mid-reply");
  };
  const auto undo_out_of_memory = [&](detail::UndoWriter&) {
    ++handed_over;
    throw std::bad_alloc();
  };
  try {
    static_cast<void>(detail::attempt_or_undo(*site, Clock::now() + 2s, attempt_cut_mid_reply,
                                              undo_out_of_memory));
    ADD_FAILURE() << "the attempt's error was lost";
  } catch (const ConnectionError& error) {
    EXPECT_EQ(error.code(), Errc::io_error);
  } catch (const std::bad_alloc&) {
    ADD_FAILURE() << "the hand-over's bad_alloc replaced the attempt's error";
  }
  EXPECT_GE(handed_over, 1);
}

// The same for an async attempt's undo (detail/asio/undo_apart.hpp), which
// runs where nothing may throw: a protocol whose undo behind the attempt
// cannot be written (an allocation) and whose undo apart counts its runs.
struct ThrowingUndoProtocol {
  enum class Kind { exclusive };
  std::shared_ptr<detail::Site> site_;
  std::shared_ptr<std::atomic<int>> undone_apart = std::make_shared<std::atomic<int>>(0);
  const std::shared_ptr<detail::Site>& site() const { return site_; }
  void send_undo(Kind, detail::Link&, const std::string&) const { throw std::bad_alloc(); }
  void undo_on(Kind, Connection&, const std::string&) const { ++*undone_apart; }
};
struct ThrowingUndoLife {
  using Kind = ThrowingUndoProtocol::Kind;
  ThrowingUndoProtocol protocol_;
  ThrowingUndoProtocol& protocol() { return protocol_; }
};

}  // namespace
}  // namespace undo_apart_test

template <>
struct detail::LifeTraits<undo_apart_test::ThrowingUndoLife> {
  using Protocol = undo_apart_test::ThrowingUndoProtocol;
};

namespace undo_apart_test {
namespace {

TEST_F(UndoHandOverTest, AnAsyncUndoThatCannotBeWrittenBehindStillGoesApart) {
  Client client(testing::client_options(server()));
  auto life = std::make_shared<ThrowingUndoLife>();
  life->protocol_.site_ = client.site_for("undo:async-hand-over");
  detail::Link link(testing::client_options(server()));
  using Kind = ThrowingUndoLife::Kind;
  // Behind only: dropped, and the call goes on (it may not throw).
  detail::undo_attempt(life, Kind::exclusive, "token", &link, /*apart=*/false);
  // Behind and apart: the apart one still goes.
  detail::undo_attempt(life, Kind::exclusive, "token", &link, /*apart=*/true);
  EXPECT_TRUE(eventually([&] { return life->protocol_.undone_apart->load() == 1; }));
}

}  // namespace
}  // namespace undo_apart_test
}  // namespace distlock
