// Tests for a SharedMutex's async acquires (distlock/asio.hpp), both sides,
// over a real io_context and a real server: each async acquire is an owner
// of its own in Redisson's RReadWriteLock layout (its read lease in a key
// of its own, its write field named after it), readers share with each
// other and with threads, a writer excludes both, waiters are woken by the
// releases (every waiting reader at once by a writer's), the side of a
// hold decides its release, a cancelled read attempt leaves no lease key
// behind, and the Watchdog renews and loses a read hold as a thread's.
#include <gtest/gtest.h>

#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstddef>
#include <future>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/asio.hpp"
#include "distlock/shared_mutex.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using ReadHold = AsyncSharedHold<SharedMutex>;
using WriteHold = AsyncHold<SharedMutex>;
using GotRead = testing::Got<ReadHold>;
using GotWrite = testing::Got<WriteHold>;

class AsioSharedTest : public testing::AsioTest {
 protected:
  std::future<GotRead> start_read(SharedMutex& lock, asio::cancellation_slot slot = {}) {
    return start<ReadHold>([&](auto token) { async_try_lock_shared(lock, std::move(token)); },
                           slot);
  }
  GotRead try_read(SharedMutex& lock) { return wait_for(start_read(lock)); }
  GotWrite try_write(SharedMutex& lock) { return try_lock(lock); }  // the write side
  std::future<GotRead> start_lock_shared(SharedMutex& lock) {
    return start<ReadHold>([&](auto token) { async_lock_shared(lock, std::move(token)); });
  }

  std::string field(const SharedMutex& lock, const std::string& name) {
    return server().command({"HGET", lock.key(), name});
  }
  // The read lease key of an owner's first read hold.
  static std::string lease_key(const SharedMutex& lock, const std::string& owner) {
    return "{" + lock.key() + "}:" + owner + ":rwlock_timeout:1";
  }
  long long pttl(const std::string& key) { return std::stoll(server().command({"PTTL", key})); }
  long long keys_in_db() { return std::stoll(server().command({"DBSIZE"})); }
  bool subscribed(const SharedMutex& lock) { return subscribers(lock.channel()) > 0; }
};

TEST_F(AsioSharedTest, AsyncReadersAreOwnersOfTheirOwnAndShareWithThreads) {
  Client client(client_options(server()));
  SharedMutex catalog(client, "async:catalog", LockOptions().ttl(30s));
  GotRead first = try_read(catalog);
  ASSERT_FALSE(first.ec) << first.ec.message();
  ASSERT_TRUE(first.hold);
  GotRead second = try_read(catalog);
  ASSERT_TRUE(second.hold) << second.ec.message();
  const std::string owner = first.hold.id();
  EXPECT_EQ(owner.rfind(client.id() + ":a", 0), 0u) << owner;
  EXPECT_NE(second.hold.id(), owner);
  EXPECT_EQ(field(catalog, "mode"), "read");
  EXPECT_EQ(field(catalog, owner), "1");
  EXPECT_EQ(field(catalog, second.hold.id()), "1");
  EXPECT_GT(pttl(lease_key(catalog, owner)), 20000);  // its lease, in a key of its own
  EXPECT_FALSE(catalog.owns_lock_shared());           // no thread's
  ASSERT_TRUE(catalog.try_lock_shared());             // readers share, a thread's too
  EXPECT_FALSE(try_write(catalog).hold);
  catalog.unlock_shared();
  EXPECT_EQ(release(first.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_FALSE(first.hold);
  EXPECT_EQ(field(catalog, owner), "(nil)");
  EXPECT_EQ(pttl(lease_key(catalog, owner)), -2);
  EXPECT_EQ(release(second.hold).second, Release::released);
  EXPECT_EQ(keys_in_db(), 0);  // the hash and every lease key gone
}

TEST_F(AsioSharedTest, AnAsyncWriterExcludesReadersAndWritersOfEveryKind) {
  Client client(client_options(server()));
  SharedMutex catalog(client, "async:written", LockOptions().ttl(30s));
  GotWrite writer = try_write(catalog);
  ASSERT_TRUE(writer.hold) << writer.ec.message();
  EXPECT_EQ(field(catalog, "mode"), "write");
  const std::string written = writer.hold.id();
  EXPECT_EQ(written.rfind(client.id() + ":a", 0), 0u) << written;
  EXPECT_EQ(written.substr(written.size() - 6), ":write");
  EXPECT_EQ(field(catalog, written), "1");
  GotRead reader = try_read(catalog);
  EXPECT_FALSE(reader.ec) << reader.ec.message();
  EXPECT_FALSE(reader.hold);
  EXPECT_FALSE(try_write(catalog).hold);
  EXPECT_FALSE(catalog.try_lock_shared());
  EXPECT_FALSE(catalog.try_lock());
  EXPECT_EQ(release(writer.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_EQ(keys_in_db(), 0);
  // And a thread's write hold keeps async readers out.
  ASSERT_TRUE(catalog.try_lock());
  EXPECT_FALSE(try_read(catalog).hold);
  catalog.unlock();
  EXPECT_EQ(keys_in_db(), 0);
}

// A writer's release ("1" on the channel) wakes every waiting reader, and
// they all get in together, long before the writer's 60 s lease.
TEST_F(AsioSharedTest, AWritersReleaseLetsEveryWaitingReaderInTogether) {
  Client client(client_options(server()));
  SharedMutex writer(client, "async:many", LockOptions().ttl(60s));
  SharedMutex readers(client, "async:many", LockOptions().ttl(30s));
  ASSERT_TRUE(writer.try_lock());
  constexpr std::size_t count = 200;
  std::vector<std::future<GotRead>> waiting;
  for (std::size_t i = 0; i < count; ++i) waiting.push_back(start_lock_shared(readers));
  ASSERT_TRUE(eventually([&] { return subscribed(readers); }));
  EXPECT_EQ(waiting.front().wait_for(100ms), std::future_status::timeout);
  for (std::future<GotRead>& one : waiting) {  // none got in beside the writer
    EXPECT_EQ(one.wait_for(0ms), std::future_status::timeout);
  }
  writer.unlock();
  std::vector<ReadHold> holds;
  for (std::future<GotRead>& one : waiting) {
    GotRead got = wait_for(std::move(one));
    ASSERT_TRUE(got.hold) << got.ec.message();
    holds.push_back(std::move(got.hold));
  }
  EXPECT_EQ(server().command({"HLEN", readers.key()}), std::to_string(count + 1));  // and mode
  for (ReadHold& hold : holds) hold.unlock();
  EXPECT_TRUE(eventually([&] { return keys_in_db() == 0; }));
}

// An async writer waits for the last reader, async or a thread, and is
// woken by its release ("0" on the channel).
TEST_F(AsioSharedTest, AnAsyncWriterWaitsForTheLastReader) {
  Client client(client_options(server()));
  SharedMutex catalog(client, "async:last", LockOptions().ttl(60s));
  GotRead reader = try_read(catalog);
  ASSERT_TRUE(reader.hold) << reader.ec.message();
  ASSERT_TRUE(catalog.try_lock_shared());
  std::future<GotWrite> waiting = start_lock(catalog);
  ASSERT_TRUE(eventually([&] { return subscribed(catalog); }));
  reader.hold.unlock();
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);  // a thread still reads
  catalog.unlock_shared();
  GotWrite got = wait_for(std::move(waiting));
  ASSERT_TRUE(got.hold) << got.ec.message();
  EXPECT_EQ(field(catalog, "mode"), "write");
  got.hold.unlock();
  EXPECT_TRUE(eventually([&] { return keys_in_db() == 0; }));
}

// The side of a hold decides its release: within a minimum hold a write
// hold is kept until it ends, a read hold (which keeps no reader out) is
// given back at once.
TEST_F(AsioSharedTest, AMinimumHoldKeepsTheWriteSideOnly) {
  Client client(client_options(server()));
  SharedMutex report(client, "async:report", LockOptions().ttl(10s).min_hold(30s));
  GotRead reader = try_read(report);
  ASSERT_TRUE(reader.hold) << reader.ec.message();
  EXPECT_EQ(release(reader.hold), std::make_pair(std::error_code(), Release::released));
  EXPECT_EQ(keys_in_db(), 0);
  GotWrite writer = try_write(report);
  ASSERT_TRUE(writer.hold) << writer.ec.message();
  const std::string written = writer.hold.id();
  EXPECT_EQ(release(writer.hold), std::make_pair(std::error_code(), Release::kept));
  EXPECT_EQ(field(report, written), "1");
  EXPECT_GT(pttl(report.key()), 20000);
  EXPECT_FALSE(try_read(report).hold);  // kept: nobody reads meanwhile
}

// The Watchdog renews an async reader's own lease key, and finds it gone.
TEST_F(AsioSharedTest, AnAsyncReadHoldIsRenewedAndItsLossNoticed) {
  Client client(client_options(server()));
  SharedMutex catalog(client, "async:renewed", LockOptions().ttl(600ms).auto_renew(true));
  GotRead got = try_read(catalog);
  ASSERT_TRUE(got.hold) << got.ec.message();
  const std::string lease = lease_key(catalog, got.hold.id());
  long long last = pttl(lease);
  EXPECT_TRUE(eventually([&] {
    const long long now = pttl(lease);
    return now > std::exchange(last, now);
  }));
  server().command({"DEL", catalog.key()});
  EXPECT_TRUE(eventually([&] { return got.hold.lost(); }));
  EXPECT_EQ(release(got.hold).second, Release::lost);
}

// A key of another type is an error on either side, and stays as it was.
TEST_F(AsioSharedTest, AKeyThatIsNoLockIsAnErrorAndUntouched) {
  Client client(client_options(server()));
  server().command({"SET", "async:string", "data"});
  SharedMutex on_string(client, "async:string");
  GotRead read = try_read(on_string);
  EXPECT_TRUE(read.ec);
  EXPECT_FALSE(read.hold);
  GotWrite write = try_write(on_string);
  EXPECT_TRUE(write.ec);
  EXPECT_FALSE(write.hold);
  EXPECT_EQ(server().command({"GET", "async:string"}), "data");
  EXPECT_EQ(keys_in_db(), 1);
}

// Through the fault proxy: a read attempt whose answer does not come is
// undone behind itself, lease key and all.
class AsioSharedFaultTest : public testing::AsioFaultTest {};

TEST_F(AsioSharedFaultTest, ACancelledReadAttemptIsUndoneBehindItself) {
  options_.command_timeout = 30s;  // the undo must not wait for the link to time out
  Client client(options_);
  SharedMutex catalog(client, "async:cancelled", LockOptions().ttl(60s));
  asio::cancellation_signal cancel;
  std::future<GotRead> pending = attempt_unanswered<ReadHold>(
      [&](auto token) { async_try_lock_shared(catalog, std::move(token)); },
      [&] { return key_exists(catalog.key()); }, cancel.slot());
  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const GotRead tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  // Replies still held: the undo went out behind the attempt, and ran.
  EXPECT_TRUE(eventually([&] { return server().command({"DBSIZE"}) == "0"; }));
  proxy_->release(testing::FaultProxy::Direction::to_client);
}

}  // namespace
}  // namespace distlock
