// distlock/asio.hpp from C++20 coroutines (asio::use_awaitable): a hold
// taken by co_await, busy found busy, an outage thrown as a system_error
// with distlock's code, and the hold moved across co_await and released.
// Built as C++20 (the library itself is C++17).
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <system_error>

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

}  // namespace
}  // namespace distlock
