// Tests for distlock/asio.hpp: async_try_lock and async_release over a real
// asio::io_context (run by four threads) and real servers, with callbacks
// and asio::use_future, and faults put between the client and the server
// by the fault proxy (replies held, connections reset).
#include "distlock/asio.hpp"

#include <gtest/gtest.h>

#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/acl_rules.hpp"
#include "support/asio_fixture.hpp"
#include "support/eventually.hpp"
#include "support/fault_proxy.hpp"
#include "support/hostile_server.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using testing::client_options;
using testing::eventually;
using testing::FaultProxy;
using Direction = FaultProxy::Direction;
using testing::AsioFaultTest;
using testing::AsioTest;
using testing::Hold;
using testing::Tried;

TEST_F(AsioTest, TryLockTakesAFreeLockAndFindsABusyOneBusy) {
  Client client(client_options(server()));
  Mutex first(client, "async:free");
  Mutex second(client, "async:free");

  Tried taken = try_lock(first);
  ASSERT_FALSE(taken.ec) << taken.ec.message();
  ASSERT_TRUE(taken.hold);
  EXPECT_EQ(server().command({"GET", first.key()}), taken.hold.id());
  EXPECT_GT(taken.hold.validity(), 0ms);
  EXPECT_TRUE(first.owns_lock());

  const Tried busy = try_lock(second);
  EXPECT_FALSE(busy.ec) << busy.ec.message();
  EXPECT_FALSE(busy.hold);
  EXPECT_FALSE(second.try_lock());

  const auto [ec, outcome] = release(taken.hold);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(outcome, Release::released);
  EXPECT_FALSE(taken.hold);
  EXPECT_FALSE(key_exists(first.key()));
  EXPECT_FALSE(first.owns_lock());
}

// Fenced: the acquire is a script (EVALSHA, or EVAL once the server lost
// its cache), refused with the holder's lease in its answer.
// The ids of the server's client connections whose last command ran a
// script: a Mutex's async link, whose release is a script (its pool's,
// unused here, ran none).
std::set<std::string> script_connections(const testing::RedisServer& server) {
  std::set<std::string> ids;
  std::istringstream listed(server.command({"CLIENT", "LIST"}));
  for (std::string line; std::getline(listed, line);) {
    if (line.find(" cmd=eval") == std::string::npos && line.find(" cmd=set") == std::string::npos) {
      continue;
    }
    if (line.rfind("id=", 0) != 0) continue;
    ids.insert(line.substr(3, line.find(' ') - 3));
  }
  return ids;
}

// A master demoted to a replica refuses the attempt (READONLY, here from
// a hostile proxy: nothing applied), which fails with server_error; the
// link it went on is let go, and the next call connects again (to where a
// SentinelClient's site names the master then).
TEST_F(AsioTest, AnAttemptRefusedAsAReplicaFailsAndItsLinkIsMadeAgain) {
  testing::HostileServer hostile(server().host(), server().port());
  ClientOptions through = client_options(server());
  through.host = hostile.host();
  through.port = hostile.port();
  Client client(through);
  Mutex mutex(client, "async:readonly");
  Tried warm = try_lock(mutex);
  ASSERT_TRUE(warm.hold) << warm.ec.message();
  EXPECT_EQ(release(warm.hold).second, Release::released);
  const std::set<std::string> before = script_connections(server());
  ASSERT_EQ(before.size(), 1u) << server().command({"CLIENT", "LIST"});

  testing::HostileServer::Script readonly;
  readonly.verb = "SET";  // the attempt: SET NX PX
  readonly.arg = mutex.key();
  readonly.bytes = "-READONLY You can't write against a read only replica.\r\n";
  hostile.script(readonly);
  const Tried refused = try_lock(mutex);
  hostile.clear();
  EXPECT_EQ(hostile.hits(), 1u);
  EXPECT_EQ(refused.ec, Errc::server_error) << refused.ec.message();
  EXPECT_FALSE(refused.hold);
  // The proxy passed the SET on: a real replica would have applied nothing.
  server().command({"DEL", mutex.key()});

  Tried again = try_lock(mutex);
  ASSERT_TRUE(again.hold) << again.ec.message();
  // The old link's close may reach the server a moment later.
  EXPECT_TRUE(eventually([&] {
    const std::set<std::string> after = script_connections(server());
    return after.size() == 1 && after.count(*before.begin()) == 0;
  })) << "the refused link was used again";
  EXPECT_EQ(release(again.hold).second, Release::released);
}

TEST_F(AsioTest, AFencedHoldHasTheFenceOfItsGrant) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:fenced", LockOptions().fencing(true));
  Mutex other(client, "async:fenced", LockOptions().fencing(true));
  Tried first = try_lock(mutex);
  ASSERT_TRUE(first.hold) << first.ec.message();
  const long long fence = first.hold.fence();
  EXPECT_GT(fence, 0);
  const Tried busy = try_lock(other);
  EXPECT_FALSE(busy.ec) << busy.ec.message();
  EXPECT_FALSE(busy.hold);
  ASSERT_EQ(release(first.hold).second, Release::released);
  EXPECT_THROW(static_cast<void>(first.hold.fence()), NotHeldError);

  server().command({"SCRIPT", "FLUSH"});
  Tried second = try_lock(other);
  ASSERT_TRUE(second.hold) << second.ec.message();
  EXPECT_GT(second.hold.fence(), fence);
}

TEST_F(AsioTest, UseFutureGivesTheHoldAndItsDestructorGivesItBack) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:future");
  std::future<Hold> taken = async_try_lock(mutex, asio::bind_executor(io_, asio::use_future));
  ASSERT_EQ(taken.wait_for(10s), std::future_status::ready);
  {
    Hold hold = taken.get();
    ASSERT_TRUE(hold);
    EXPECT_TRUE(key_exists(mutex.key()));
  }
  // Sent without blocking by the connector thread: waited for here.
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
  EXPECT_TRUE(eventually([&] { return !mutex.owns_lock(); }));
}

// An async hold belongs to no thread: sync lockers of the same object wait
// for it, and an async try of an object a thread holds finds it busy.
TEST_F(AsioTest, SyncAndAsyncHoldersOfOneObjectExcludeEachOther) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:mixed");

  mutex.lock();
  const Tried behind_sync = try_lock(mutex);
  EXPECT_FALSE(behind_sync.ec) << behind_sync.ec.message();
  EXPECT_FALSE(behind_sync.hold);
  mutex.unlock();

  Tried taken = try_lock(mutex);
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  EXPECT_FALSE(mutex.try_lock());  // the object is held, if by no thread
  EXPECT_FALSE(mutex.try_lock_for(50ms));
  taken.hold.unlock();
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
  EXPECT_TRUE(mutex.try_lock_for(5s));
  mutex.unlock();
}

TEST_F(AsioTest, AHoldGivenBackByAnotherThreadIsNoLongerOwned) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:unlocked-elsewhere");
  Tried taken = try_lock(mutex);
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  mutex.unlock();  // any thread may unlock a single-holder object
  EXPECT_FALSE(taken.hold.owns_lock());
  ASSERT_TRUE(mutex.try_lock());
  const std::string mine = server().command({"GET", mutex.key()});
  // The old hold's release names its own token: the new hold stays.
  const auto [ec, outcome] = release(taken.hold);
  EXPECT_FALSE(ec);
  EXPECT_EQ(outcome, Release::lost);
  EXPECT_EQ(server().command({"GET", mutex.key()}), mine);
  mutex.unlock();
}

// An idle link keeps no work: run() returns once the calls completed, as
// for any Asio I/O object, and a context of one thread is enough.
TEST_F(AsioTest, RunReturnsOnceNothingIsInFlight) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:run-returns");
  asio::io_context single;
  std::error_code released{make_error_code(Errc::io_error)};
  async_try_lock(
      mutex,
      asio::bind_executor(
          single, testing::Completion<std::error_code, Hold>([&](std::error_code ec, Hold hold) {
            ASSERT_FALSE(ec) << ec.message();
            ASSERT_TRUE(hold);
            auto shared = std::make_shared<Hold>(std::move(hold));
            async_release(*shared,
                          asio::bind_executor(
                              single, [&, shared](std::error_code rc, Release) { released = rc; }));
          })));
  std::future<void> ran = std::async(std::launch::async, [&] { single.run(); });
  if (ran.wait_for(10s) != std::future_status::ready) {
    single.stop();
    FAIL() << "run() did not return";
  }
  EXPECT_FALSE(released) << released.message();
  EXPECT_FALSE(key_exists(mutex.key()));
}

TEST_F(AsioTest, AReleaseOfNothingIsNotHeld) {
  Hold empty;
  const auto [ec, outcome] = release(empty);
  EXPECT_EQ(ec, Errc::not_held);
  EXPECT_EQ(outcome, Release::lost);
}

// A release the server refuses (here its ACL: no scripts) completes with
// the server's error, as the blocking release throws it, not as a reply
// the library misread.
TEST_F(AsioTest, AReleaseTheServerRefusesIsTheServersError) {
  testing::acl::set_user(server(), "app", {"+@all", "-evalsha", "-eval", "~*", "&*"});
  ClientOptions options = client_options(server());
  options.username = "app";
  options.password = "pw";
  Client client(options);
  Mutex mutex(client, "async:refused", LockOptions().ttl(30s).wake_on_release(false));
  Tried taken = try_lock(mutex);  // SET NX PX: no script
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  const auto [ec, outcome] = release(taken.hold);
  EXPECT_EQ(ec, Errc::server_error) << ec.message();
  EXPECT_EQ(outcome, Release::lost);
  EXPECT_TRUE(key_exists(mutex.key()));  // left to its lease
}

// A minimum hold is kept by an extend, not a release: async_release
// answers kept, and the key stays for what is left of it.
TEST_F(AsioTest, AReleaseWithinAMinimumHoldKeepsTheKey) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:min-hold", LockOptions().min_hold(30s));
  Tried taken = try_lock(mutex);
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  const auto [ec, outcome] = release(taken.hold);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(outcome, Release::kept);
  EXPECT_TRUE(key_exists(mutex.key()));
  EXPECT_FALSE(mutex.owns_lock());
}

// A hold that outlives the context it was acquired on is given back all
// the same (by the connector thread: the link's context is gone).
TEST_F(AsioTest, AHoldOutlivingItsContextIsStillGivenBack) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:outlives");
  Hold kept;
  {
    asio::io_context own;
    async_try_lock(mutex, asio::bind_executor(own, testing::Completion<std::error_code, Hold>(
                                                       [&](std::error_code ec, Hold hold) {
                                                         EXPECT_FALSE(ec) << ec.message();
                                                         kept = std::move(hold);
                                                       })));
    own.run();
  }
  ASSERT_TRUE(kept);
  EXPECT_TRUE(key_exists(mutex.key()));
  kept.unlock();  // without blocking: the connector gives it back
  EXPECT_TRUE(eventually([&] { return !mutex.owns_lock() && !key_exists(mutex.key()); }));
}

// Destroyed with its context (the handler that kept it pending then), a
// hold whose release was queued on the link is given back all the same.
TEST_F(AsioTest, AHoldDestroyedWithItsContextIsStillGivenBack) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:teardown");
  {
    asio::io_context own;
    bool taken = false;
    async_try_lock(
        mutex,
        asio::bind_executor(
            own, testing::Completion<std::error_code, Hold>([&](std::error_code ec, Hold hold) {
              EXPECT_FALSE(ec) << ec.message();
              taken = static_cast<bool>(hold);
              auto held = std::make_shared<Hold>(std::move(hold));
              auto timer = std::make_shared<asio::steady_timer>(own, 60s);
              timer->async_wait([held, timer](std::error_code) {});
            })));
    while (!taken && own.run_one() > 0) {
    }
    ASSERT_TRUE(taken);
    EXPECT_TRUE(key_exists(mutex.key()));
  }  // the pending timer's handler, and the hold in it, go with the context
  EXPECT_TRUE(eventually([&] { return !mutex.owns_lock() && !key_exists(mutex.key()); }));
}

// A release answered after its context is gone touches nothing of it (the
// connector gives a minimum hold back; ASan watches the rest).
TEST_F(AsioTest, AReleaseOutlivingItsContextTouchesNothingOfIt) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:gone", LockOptions().min_hold(30s));
  Tried taken = try_lock(mutex);
  ASSERT_TRUE(taken.hold) << taken.ec.message();
  {
    asio::io_context own;
    async_release(
        taken.hold,
        asio::bind_executor(
            own, testing::Completion<std::error_code, Release>([](std::error_code, Release) {
              ADD_FAILURE() << "completed after its context was gone";
            })));
  }
  EXPECT_TRUE(eventually([&] { return !mutex.owns_lock(); }));
}

// The guard's release goes out on the link it was acquired on: given back
// from another thread than the context's, it is gone from the server.
TEST_F(AsioTest, AGuardDestroyedOnAnyThreadReleasesTheKey) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:guard");
  {
    Tried taken = try_lock(mutex);
    ASSERT_TRUE(taken.hold) << taken.ec.message();
  }  // destroyed here, on the test's thread
  EXPECT_FALSE(mutex.owns_lock());
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
  Tried again = try_lock(mutex);
  EXPECT_TRUE(again.hold) << again.ec.message();
}

// A master with no replica connected: fewer than asked for, an error
// before anything is granted (tests/asio_replicas_test.cpp has the rest).
TEST_F(AsioTest, ALockWithReplicasOnALoneMasterIsNotReplicatedAndTakesNothing) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:replicas", LockOptions().replicas(1, 100ms).auto_renew(false));
  const Tried tried = try_lock(mutex);
  EXPECT_EQ(tried.ec, Errc::not_replicated) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  EXPECT_FALSE(key_exists(mutex.key()));
}

TEST_F(AsioTest, NoServerIsAnErrorCodeNotABusyLock) {
  ClientOptions options = client_options(server());
  server().kill();
  Client client(options);
  Mutex mutex(client, "async:nobody");
  const Tried tried = try_lock(mutex);
  EXPECT_EQ(tried.ec, Errc::connect_failed) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
}

TEST_F(AsioTest, AServerRestartedBetweenCallsIsReconnectedTo) {
  Client client(client_options(server()));
  Mutex mutex(client, "async:restart");
  Tried first = try_lock(mutex);
  ASSERT_TRUE(first.hold) << first.ec.message();
  ASSERT_EQ(release(first.hold).second, Release::released);
  server().restart();
  // The idle link's server closed it: found stale, replaced.
  Tried second = try_lock(mutex);
  ASSERT_FALSE(second.ec) << second.ec.message();
  EXPECT_TRUE(second.hold);
  EXPECT_EQ(release(second.hold).second, Release::released);
}

TEST_F(AsioFaultTest, ACancelledAttemptIsUndoneBehindItself) {
  options_.command_timeout = 30s;  // the undo must not wait for the link to time out
  Client client(options_);
  Mutex mutex(client, "async:cancelled", LockOptions().ttl(60s));
  asio::cancellation_signal cancel;
  std::future<Tried> pending = try_unanswered(mutex, cancel.slot());

  asio::post(io_, [&] { cancel.emit(asio::cancellation_type::terminal); });
  const Tried tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, asio::error::operation_aborted);
  EXPECT_FALSE(tried.hold);
  // Replies still held: the undo went out behind the attempt, and ran.
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
  EXPECT_FALSE(mutex.owns_lock());

  // Once the replies flow, the forgotten one is dropped: the link is in step.
  proxy_->release(Direction::to_client);
  Tried again = try_lock(mutex);
  ASSERT_FALSE(again.ec) << again.ec.message();
  EXPECT_TRUE(again.hold);
}

TEST_F(AsioFaultTest, NoReplyWithinTheCommandTimeoutIsTimedOutAndUndone) {
  options_.command_timeout = 300ms;
  Client client(options_);
  Mutex mutex(client, "async:silent", LockOptions().ttl(60s));
  const auto sent = std::chrono::steady_clock::now();
  const Tried tried = wait_for(try_unanswered(mutex, {}));
  EXPECT_EQ(tried.ec, Errc::timed_out) << tried.ec.message();
  EXPECT_GE(std::chrono::steady_clock::now() - sent, options_.command_timeout);
  EXPECT_FALSE(tried.hold);
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));

  proxy_->release(Direction::to_client);
  Tried again = try_lock(mutex);  // on a new link
  ASSERT_FALSE(again.ec) << again.ec.message();
  EXPECT_TRUE(again.hold);
}

TEST_F(AsioFaultTest, AConnectionResetUnderAnAttemptIsAnErrorAndUndoneApart) {
  Client client(options_);
  Mutex mutex(client, "async:reset", LockOptions().ttl(60s));
  std::future<Tried> pending = try_unanswered(mutex, {});
  proxy_->reset_all();
  proxy_->sync();
  proxy_->release(Direction::to_client);  // for the connection the grant is given back on
  const Tried tried = wait_for(std::move(pending));
  EXPECT_EQ(tried.ec, Errc::io_error) << tried.ec.message();
  EXPECT_FALSE(tried.hold);
  // Nothing written behind on a reset connection arrives: the connector
  // gave the grant back on a connection of its own.
  EXPECT_TRUE(eventually([&] { return !key_exists(mutex.key()); }));
}

// Many operations on few names from four threads: at most one hold per name
// at any time, and every one given back.
TEST_F(AsioTest, ConcurrentTriesOnFourThreadsExcludeEachOther) {
  Client client(client_options(server()));
  constexpr int names = 5;
  constexpr int per_name = 8;
  constexpr int rounds = 25;
  std::vector<std::unique_ptr<Mutex>> mutexes;
  for (int i = 0; i < names * per_name; ++i) {
    mutexes.push_back(std::make_unique<Mutex>(client, "async:many:" + std::to_string(i % names)));
  }
  std::vector<std::atomic<int>> holders(names);
  std::atomic<int> overlaps{0};
  std::atomic<int> acquired{0};
  std::atomic<int> ended{0};
  std::atomic<int> errors{0};
  std::function<void(int, int)> round = [&](int index, int left) {
    if (left == 0) {
      ++ended;
      return;
    }
    async_try_lock(
        *mutexes[static_cast<std::size_t>(index)],
        asio::bind_executor(
            io_, testing::Completion<std::error_code, Hold>([&, index, left](std::error_code ec,
                                                                             Hold hold) {
              if (ec) ++errors;
              const int name = index % names;
              if (!hold) return round(index, left - 1);
              ++acquired;
              // Counted from the grant until its release is asked for;
              // meanwhile the key holds this hold's token.
              if (++holders[static_cast<std::size_t>(name)] > 1) ++overlaps;
              const std::string& key = mutexes[static_cast<std::size_t>(index)]->key();
              if (server().command({"GET", key}) != hold.id()) ++overlaps;
              --holders[static_cast<std::size_t>(name)];
              auto shared = std::make_shared<Hold>(std::move(hold));
              async_release(
                  *shared,
                  asio::bind_executor(io_, testing::Completion<std::error_code, Release>(
                                               [&, index, left, shared](std::error_code, Release) {
                                                 round(index, left - 1);
                                               })));
            })));
  };
  for (int i = 0; i < names * per_name; ++i) round(i, rounds);
  ASSERT_TRUE(eventually([&] { return ended.load() == names * per_name; }, 60s));
  stop_running();  // no callback runs `round` once it is gone
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(acquired.load(), 0);
  for (int i = 0; i < names; ++i)
    EXPECT_FALSE(key_exists(mutexes[static_cast<std::size_t>(i)]->key()));
}

// A context's services shut down newest first, and a strand being shut
// down takes no post. A connect ending on the connector thread posts to
// its link's strand only while the LinkService's Gate is open, so the Gate
// must close before any strand is shut down (TSan saw the connector post
// into a strand of a context being destroyed, its link still connecting).
// A handler left queued on a strand, destroyed at the strand's shutdown,
// looks at the Gate then.
TEST(AsioLinkService, ItsGateClosesBeforeAnyStrandIsShutDown) {
  struct Probe {
    std::shared_ptr<detail::Gate> gate;
    std::optional<bool>* open;
    Probe(std::shared_ptr<detail::Gate> g, std::optional<bool>* seen)
        : gate(std::move(g)), open(seen) {}
    Probe(Probe&& other) noexcept = default;
    Probe& operator=(Probe&&) = delete;
    ~Probe() {
      if (gate) *open = gate->run_if_open([] {});
    }
    void operator()() const {}
  };
  std::optional<bool> open_then;
  {
    asio::io_context io;
    detail::LinkService& service = asio::use_service<detail::LinkService>(io);
    asio::post(asio::make_strand(io), Probe(service.gate(), &open_then));  // never run
  }
  ASSERT_TRUE(open_then.has_value());
  EXPECT_FALSE(*open_then);
}

}  // namespace
}  // namespace distlock
