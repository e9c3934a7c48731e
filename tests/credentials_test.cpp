// Tests for credentials.hpp (and detail/wire/authenticate.hpp, which sends the
// AUTH): a provider asked on every new connection, a stale answer retried
// once, a provider that throws, and a password rotated under load, against
// a real server with an ACL user.
#include "distlock/credentials.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/runtime/notifier_probe.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/mutex.hpp"
#include "support/faults.hpp"
#include "support/fixture.hpp"
#include "support/options.hpp"

namespace distlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A server whose default user needs a password (the harness's own commands
// use it) and an ACL user, "rot", whose password the tests change.
class CredentialsTest : public testing::RedisTest {
 protected:
  testing::RedisServerOptions server_options() const override {
    testing::RedisServerOptions o;
    o.requirepass = "default-secret";
    o.config_lines = {"user rot on >pw-0 ~* &* +@all"};
    return o;
  }
  ClientOptions options() { return testing::client_options(server()); }
};

// Where a provider reads the password a rotation made current. It lags as
// a replicated secret store may: the first read after a rotation answers the
// password that rotation removed.
class SecretStore {
 public:
  /// The current password, or once after a rotation the removed one.
  std::string read() {
    detail::MutexLock lock(mutex_);
    std::string answer = lagging_.empty() ? current_ : std::exchange(lagging_, std::string());
    if (answer != current_) ++stale_reads_;
    answered_.insert(answer);
    return answer;
  }
  void rotated(std::string current, std::string removed) {
    detail::MutexLock lock(mutex_);
    current_ = std::move(current);
    lagging_ = std::move(removed);
  }
  bool answered(const std::string& password) const {
    detail::MutexLock lock(mutex_);
    return answered_.count(password) > 0;
  }
  int stale_reads() const {
    detail::MutexLock lock(mutex_);
    return stale_reads_;
  }

 private:
  mutable detail::Mutex mutex_;
  std::string current_ DISTLOCK_GUARDED_BY(mutex_) = "pw-0";
  std::string lagging_ DISTLOCK_GUARDED_BY(mutex_);
  std::set<std::string> answered_ DISTLOCK_GUARDED_BY(mutex_);
  int stale_reads_ DISTLOCK_GUARDED_BY(mutex_) = 0;
};

TEST_F(CredentialsTest, AProviderIsAskedOnEveryNewConnection) {
  std::atomic<int> asked{0};
  ClientOptions where = options();
  where.password = "not-used-when-a-provider-is-set";
  where.credentials = [&] {
    ++asked;
    return Credentials{"rot", "pw-0"};
  };
  Client client(where);
  {
    auto a = client.borrow();
    auto b = client.borrow();
    EXPECT_EQ(a->command("ACL", "WHOAMI").str(), "rot");
    EXPECT_EQ(b->command("ACL", "WHOAMI").str(), "rot");
  }
  EXPECT_EQ(asked.load(), 2);
  client.command("PING");  // a pooled one again: nobody asked
  EXPECT_EQ(asked.load(), 2);
}

TEST_F(CredentialsTest, AProviderOfATokenAloneAuthenticatesTheOptionsUser) {
  ConnectionOptions where = options();
  where.username = "rot";
  where.credentials = [] { return std::string("pw-0"); };
  Connection connection(where);
  EXPECT_EQ(connection.command("ACL", "WHOAMI").str(), "rot");
  // And with no user at all, the legacy AUTH <password> of the default user.
  where.username.clear();
  where.credentials = [] { return "default-secret"; };
  Connection legacy(where);
  EXPECT_EQ(legacy.command("ACL", "WHOAMI").str(), "default");
}

TEST_F(CredentialsTest, AStaleAnswerIsAskedAgainAndSentAgainOnce) {
  std::atomic<int> asked{0};
  ConnectionOptions where = options();
  where.credentials = [&] {
    // The first answer is one a rotation has just removed.
    return Credentials{"rot", ++asked == 1 ? "pw-rotated-away" : "pw-0"};
  };
  Connection connection(where);
  EXPECT_EQ(connection.command("ACL", "WHOAMI").str(), "rot");
  EXPECT_EQ(asked.load(), 2);
}

TEST_F(CredentialsTest, TwoRefusedAnswersFailWithWrongPassShowingNeither) {
  std::atomic<int> asked{0};
  ConnectionOptions where = options();
  where.credentials = [&] {
    return Credentials{"rot", "secret-answer-" + std::to_string(++asked)};
  };
  try {
    Connection connection(where);
    FAIL() << "authenticated with wrong passwords";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::wrongpass);
    const std::string what = error.what();
    EXPECT_NE(what.find(where.endpoint()), std::string::npos) << what;
    EXPECT_NE(what.find("asked twice"), std::string::npos) << what;
    EXPECT_EQ(what.find("secret-answer"), std::string::npos) << what;
  }
  EXPECT_EQ(asked.load(), 2);  // once more, not in a loop
}

TEST_F(CredentialsTest, AProviderThatThrowsFailsTheConnectionNamingTheEndpoint) {
  ConnectionOptions where = options();
  where.credentials = []() -> Credentials { throw std::runtime_error("token service down"); };
  try {
    Connection connection(where);
    FAIL() << "connected without credentials";
  } catch (const ConnectionError& error) {
    EXPECT_EQ(error.code(), Errc::connect_failed);
    const std::string what = error.what();
    EXPECT_NE(what.find(where.endpoint()), std::string::npos) << what;
    EXPECT_NE(what.find("credentials provider threw: token service down"), std::string::npos)
        << what;
    // The provider's own exception is nested inside.
    try {
      std::rethrow_if_nested(error);
      ADD_FAILURE() << "nothing nested";
    } catch (const std::runtime_error& nested) {
      EXPECT_STREQ(nested.what(), "token service down");
    }
  }
  // Not even an exception of the standard's: still a ConnectionError.
  where.credentials = []() -> Credentials { throw 42; };
  EXPECT_THROW(Connection{where}, ConnectionError);
  // An empty answer is refused before any AUTH.
  where.credentials = [] { return Credentials{"rot", ""}; };
  try {
    Connection connection(where);
    FAIL() << "connected with an empty password";
  } catch (const ConnectionError& error) {
    EXPECT_NE(std::string(error.what()).find("answered no password"), std::string::npos);
  }
}

// The notifier thread connects with the provider too: an exception there
// must not escape the thread (std::terminate), and once the provider
// answers again, waiters are served.
TEST_F(CredentialsTest, AThrowingProviderNeverCrashesTheNotifierThread) {
  std::atomic<bool> failing{true};
  std::atomic<int> thrown{0};
  ClientOptions where = options();
  where.credentials = [&] {
    if (failing) {
      ++thrown;
      throw std::runtime_error("token service down");
    }
    return Credentials{"rot", "pw-0"};
  };
  Client client(where);
  Notifier& notifier = client.notifier();
  ASSERT_TRUE(testing::eventually([&] { return thrown >= 2; })) << "the thread never asked";
  EXPECT_THROW(client.command("PING"), ConnectionError);
  EXPECT_EQ(detail::NotifierProbe::connects(notifier), 0u);
  failing = false;
  EXPECT_TRUE(testing::eventually([&] { return detail::NotifierProbe::connects(notifier) >= 1; }));
  EXPECT_EQ(client.command("ACL", "WHOAMI").str(), "rot");
}

// The password of "rot" rotates while threads take and release locks over
// connections that live 30 ms each. Each rotation adds a new password,
// makes it current and removes the one before the previous (the previous
// stays valid a while, as a secrets manager's rotation allows); the store
// then answers the removed one once, so every rotation costs some new
// connection a WRONGPASS and a second ask. No call may fail and no two
// threads may hold a key at once.
TEST_F(CredentialsTest, RotationUnderLoadFailsNoCallAndNeverOverlapsHolders) {
  SecretStore store;
  ClientOptions where = options();
  where.pool_size = 4;
  where.max_connection_age = 30ms;
  where.credentials = [&] { return Credentials{"rot", store.read()}; };
  Client client(where);

  constexpr int threads = 4;
  constexpr int keys = 2;
  constexpr int locks_at_least = 40;
  constexpr int rotations_wanted = 40;
  std::atomic<int> inside[keys] = {};
  std::atomic<int> overlaps{0};
  std::atomic<int> failures{0};
  std::atomic<int> locks{0};
  std::atomic<int> done{0};
  std::atomic<int> rotations{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      // Until the rotations are over, and at least locks_at_least locks.
      for (int i = 0; !stop && (i < locks_at_least || rotations < rotations_wanted); ++i) {
        const int k = (t + i) % keys;
        try {
          Mutex lock(client, "rot:" + std::to_string(k), LockOptions{}.ttl(10s));
          if (!lock.try_lock_for(20s)) {
            ++failures;
            continue;
          }
          if (inside[k].fetch_add(1) != 0) ++overlaps;
          std::this_thread::sleep_for(1ms);  // held a moment: others wait
          inside[k].fetch_sub(1);
          if (lock.release() != Release::released) ++failures;
          ++locks;
        } catch (const std::exception& error) {
          std::cerr << "call failed: " << error.what() << "\n";
          ++failures;
        }
      }
      ++done;
    });
  }
  for (int n = 1; n <= rotations_wanted; ++n) {
    const std::string added = "pw-" + std::to_string(n);
    const std::string removed = n >= 2 ? "pw-" + std::to_string(n - 2) : std::string();
    std::vector<std::string> setuser{"ACL", "SETUSER", "rot", ">" + added};
    if (!removed.empty()) setuser.push_back("<" + removed);
    server().command(setuser);
    store.rotated(added, removed);
    ++rotations;
    // The next rotation once a new connection has read this one's password,
    // and after a pause far longer than a connect (a rotation in real life
    // comes hours apart, not while a connection authenticates).
    if (!testing::eventually([&] { return store.answered(added); })) {
      ADD_FAILURE() << "no connection was made after rotation " << n;
      stop = true;  // the workers end now rather than wait for rotations to come
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(done.load(), threads);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(rotations.load(), rotations_wanted);
  // Every rotation but the first served a removed password once (the first
  // removed none): each was refused, asked again and not failed.
  EXPECT_EQ(store.stale_reads(), rotations_wanted - 1);
  std::cout << locks << " locks over " << rotations << " rotations\n";
}

}  // namespace
}  // namespace distlock
