// The fixtures of the async tests (distlock/asio.hpp): a server, an
// asio::io_context run by four threads, async calls whose completions a
// test waits for through futures, and a fault proxy that can hold replies
// back while commands still reach the server.
#pragma once

#include <gtest/gtest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace testing {

using Hold = AsyncHold<Mutex>;

/// How an async acquire completed.
template <class Held>
struct Got {
  std::error_code ec;
  Held hold;
};
using Tried = Got<Hold>;

/// A completion that hands what it got to a promise. A named type rather
/// than a lambda in start(): a lambda there would be a type of its own for
/// every call site, and each would instantiate the async operations anew
/// (most of the async tests' compile time).
template <class Held>
struct Deliver {
  std::shared_ptr<std::promise<Got<Held>>> done;
  void operator()(std::error_code ec, Held hold) const {
    done->set_value(Got<Held>{ec, std::move(hold)});
  }
};

/// A handler written in place, as one type per signature (see Deliver).
template <class... Args>
using Completion = std::function<void(Args...)>;

/// The calls of the async tests and the context they run on, over the
/// servers of `Fixture` (a RedisTest's one server, a ClusterSuite's
/// cluster).
template <class Fixture>
class AsioOn : public Fixture {
 protected:
  void SetUp() override {
    Fixture::SetUp();
    if (this->HasFatalFailure()) return;
    for (int i = 0; i < 4; ++i) runners_.emplace_back([this] { io_.run(); });
  }
  void TearDown() override {
    stop_running();
    Fixture::TearDown();
  }
  // Lets run() return once nothing is left to do, and joins its threads.
  void stop_running() {
    work_.reset();
    for (std::thread& runner : runners_) runner.join();
    runners_.clear();
  }

  // async_try_lock(lock), its completion waited for here (10 s at most).
  template <class Lock>
  Got<AsyncHold<Lock>> try_lock(Lock& lock, asio::cancellation_slot slot = {}) {
    return wait_for(start_try_lock(lock, slot));
  }
  template <class Lock>
  std::future<Got<AsyncHold<Lock>>> start_try_lock(Lock& lock, asio::cancellation_slot slot = {}) {
    return start<AsyncHold<Lock>>([&](auto token) { async_try_lock(lock, std::move(token)); },
                                  slot);
  }
  // async_lock(lock), its completion given by the future.
  template <class Lock>
  std::future<Got<AsyncHold<Lock>>> start_lock(Lock& lock, asio::cancellation_slot slot = {}) {
    return start<AsyncHold<Lock>>([&](auto token) { async_lock(lock, std::move(token)); }, slot);
  }
  // Starts an async acquire, `initiate(token)`, whose completion (with a
  // `Held`) the future gives.
  template <class Held = Hold, class Initiate>
  std::future<Got<Held>> start(Initiate initiate, asio::cancellation_slot slot = {}) {
    auto done = std::make_shared<std::promise<Got<Held>>>();
    std::future<Got<Held>> result = done->get_future();
    initiate(asio::bind_cancellation_slot(slot, asio::bind_executor(io_, Deliver<Held>{done})));
    return result;
  }
  template <class T>
  static T wait_for(std::future<T> future) {
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "no completion within 10 s";
      return T{};
    }
    return future.get();
  }

  template <class Lock, distlock::detail::Side side>
  std::pair<std::error_code, Release> release(AsyncHold<Lock, side>& hold) {
    auto done = std::make_shared<std::promise<std::pair<std::error_code, Release>>>();
    std::future<std::pair<std::error_code, Release>> result = done->get_future();
    async_release(hold, asio::bind_executor(io_, [done](std::error_code ec, Release outcome) {
                    done->set_value({ec, outcome});
                  }));
    return wait_for(std::move(result));
  }

  bool key_exists(const std::string& key) { return this->server().command({"EXISTS", key}) == "1"; }
  // The clients subscribed to `channel` (a waiter's subscription, made).
  long long subscribers(const std::string& channel) {
    const std::string answer = this->server().command({"PUBSUB", "NUMSUB", channel});
    return std::stoll(answer.substr(answer.find('\n') + 1));
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::vector<std::thread> runners_;
};

using AsioTest = AsioOn<RedisTest>;

// Through the fault proxy, which can hold replies back while commands
// still reach the server.
class AsioFaultTest : public AsioTest {
 protected:
  void SetUp() override {
    AsioTest::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
    options_ = client_options(server());
    options_.port = proxy_->port();
  }
  void TearDown() override {
    if (proxy_) proxy_->heal();
    AsioTest::TearDown();
    proxy_.reset();
  }

  // Starts `initiate` (an async try completing with a `Held`) with its
  // replies held back, once a first one was answered and given back (the
  // link connected), and waits until `applied()` says the attempt reached
  // the server.
  template <class Held, class Initiate, class Applied>
  std::future<Got<Held>> attempt_unanswered(Initiate initiate, Applied applied,
                                            asio::cancellation_slot slot) {
    Got<Held> warmed = wait_for(start<Held>(initiate));
    EXPECT_TRUE(warmed.hold) << warmed.ec.message();
    EXPECT_EQ(release(warmed.hold).second, Release::released);
    proxy_->stall(FaultProxy::Direction::to_client);
    proxy_->sync();
    std::future<Got<Held>> result = start<Held>(initiate, slot);
    EXPECT_TRUE(eventually(applied));
    return result;
  }
  // The same for async_try_lock(lock), applied once the key is there.
  template <class Lock>
  std::future<Got<AsyncHold<Lock>>> try_unanswered(Lock& lock, asio::cancellation_slot slot) {
    return attempt_unanswered<AsyncHold<Lock>>(
        [&](auto token) { async_try_lock(lock, std::move(token)); },
        [&] { return key_exists(lock.key()); }, slot);
  }

  std::unique_ptr<FaultProxy> proxy_;
  ClientOptions options_;
};

}  // namespace testing
}  // namespace distlock
