// distlock/asio.hpp from C++20 coroutines (asio::use_awaitable): a hold
// taken by co_await, busy found busy, an outage thrown as a system_error
// with distlock's code, the hold moved across co_await and released, and
// coroutines waiting their turn on one lock.
// Built as C++20 (the library itself is C++17).
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <system_error>
#include <vector>

#include "distlock/asio.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using testing::client_options;
using Hold = AsyncHold<Mutex>;

class AsioAwaitableTest : public testing::RedisTest {};

TEST_F(AsioAwaitableTest, ACoroutineHoldsAcrossCoAwaitAndReleases) {
  Client client(client_options(server()));
  Mutex mine(client, "awaitable:job");
  Mutex theirs(client, "awaitable:job");
  asio::io_context io;
  bool ran_to_end = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        Hold hold = co_await async_try_lock(mine, asio::use_awaitable);
        EXPECT_TRUE(hold);
        const Hold busy = co_await async_try_lock(theirs, asio::use_awaitable);
        EXPECT_FALSE(busy);
        EXPECT_TRUE(hold.owns_lock());  // still held after two suspensions
        EXPECT_EQ(server().command({"GET", mine.key()}), hold.id());
        const Release outcome = co_await async_release(hold, asio::use_awaitable);
        EXPECT_EQ(outcome, Release::released);
        ran_to_end = true;
      },
      asio::detached);
  io.run();
  EXPECT_TRUE(ran_to_end);
  EXPECT_EQ(server().command({"EXISTS", mine.key()}), "0");
}

TEST_F(AsioAwaitableTest, AnOutageIsThrownAsTheErrorCode) {
  ClientOptions options = client_options(server());
  server().kill();
  Client client(options);
  Mutex mutex(client, "awaitable:nobody");
  asio::io_context io;
  std::error_code thrown;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await async_try_lock(mutex, asio::use_awaitable);
        } catch (const std::system_error& error) {
          thrown = error.code();
        }
      },
      asio::detached);
  io.run();
  EXPECT_EQ(thrown, Errc::connect_failed) << thrown.message();
}

// Coroutines that wait: each takes the job lock in turn, holds it across a
// co_await, and gives it back; none overlaps another.
TEST_F(AsioAwaitableTest, CoroutinesWaitingOnOneLockTakeTurns) {
  Client client(client_options(server()));
  constexpr int workers = 20;
  std::vector<std::unique_ptr<Mutex>> mutexes;
  for (int i = 0; i < workers; ++i) {
    mutexes.push_back(std::make_unique<Mutex>(client, "awaitable:turns"));
  }
  asio::io_context io;
  int inside = 0;
  int overlaps = 0;
  int done = 0;
  for (int i = 0; i < workers; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          Mutex& mutex = *mutexes[static_cast<std::size_t>(i)];
          Hold hold =
              co_await async_try_lock_for(mutex, std::chrono::seconds(30), asio::use_awaitable);
          EXPECT_TRUE(hold);
          if (++inside > 1) ++overlaps;
          asio::steady_timer pause(io, std::chrono::milliseconds(1));
          co_await pause.async_wait(asio::use_awaitable);
          --inside;
          EXPECT_EQ(co_await async_release(hold, asio::use_awaitable), Release::released);
          ++done;
        },
        asio::detached);
  }
  io.run();
  EXPECT_EQ(done, workers);
  EXPECT_EQ(overlaps, 0);
  EXPECT_EQ(server().command({"EXISTS", "awaitable:turns"}), "0");
}

}  // namespace
}  // namespace distlock
