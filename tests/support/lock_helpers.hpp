// Helpers for lock tests: a deliberately unsafe read-modify-write that only a
// working lock keeps exact, child processes for cross-process exclusion, the
// server's per-command call counts, out-of-memory checks, and a raw
// subscriber that sees what a lock publishes, and a driver that races
// extend() against the watchdog's renewal rounds; and an_hour, a policy that
// polls so rarely that only a release announcement wakes a waiter in time.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::testing {

/// GET, pause, SET counter+1: two holders at once lose an increment.
inline void unsafe_increment(Client& client, const std::string& counter) {
  const Reply value = client.command("GET", counter);
  const long long current = value.is_nil() ? 0 : std::stoll(std::string(value.str()));
  std::this_thread::sleep_for(std::chrono::microseconds(500));
  client.command("SET", counter, std::to_string(current + 1));
}

/// Forks `count` children that each run body() and exit 0, or 1 if it threw.
/// Call before this process starts threads of its own. Returns how many
/// children failed.
template <class Body>
int run_in_children(int count, Body body) {
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int status = 0;
      try {
        body();
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    if (pid > 0) children.push_back(pid);
  }
  int failed = count - static_cast<int>(children.size());
  for (const pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  return failed;
}

/// INFO commandstats, parsed enough to count calls.
struct CommandCalls {
  std::string text;

  /// Calls of one command ("set", "evalsha", "config|resetstat").
  long long of(std::string_view command) const {
    const std::string field = "cmdstat_" + std::string(command) + ":calls=";
    const auto at = text.find(field);
    return at == std::string::npos ? 0 : std::stoll(text.substr(at + field.size()));
  }

  /// Calls of every command but one (typically the INFO or CONFIG that
  /// frames the measurement).
  long long total_except(std::string_view command) const {
    long long total = 0;
    for (auto at = text.find("cmdstat_"); at != std::string::npos;
         at = text.find("cmdstat_", at + 1)) {
      const auto colon = text.find(':', at);
      const std::string name = text.substr(at + 8, colon - at - 8);
      if (name == command || name == "info") continue;
      total += std::stoll(text.substr(text.find("calls=", colon) + 6));
    }
    return total;
  }
};

inline CommandCalls command_calls(Client& client) {
  return CommandCalls{std::string(client.command("INFO", "commandstats").str())};
}

// Puts the server out of memory (noeviction) and checks that acquire fails
// with OOM and leaves nothing behind (with `options`: fencing, say).
template <class Lock>
inline void expect_oom_refuses_acquire(Client& client, const LockOptions& options = {}) {
  client.command("CONFIG", "SET", "maxmemory-policy", "noeviction");
  client.command("CONFIG", "SET", "maxmemory", "1");
  Lock other(client, "other", options);
  try {
    static_cast<void>(other.try_lock());
    ADD_FAILURE() << "acquire under OOM did not throw";
  } catch (const ServerError& error) {
    EXPECT_EQ(error.kind(), ServerErrorKind::oom);
  }
  EXPECT_FALSE(other.owns_lock());
  EXPECT_EQ(client.command("EXISTS", "other").integer(), 0);
}

// Whether the server, out of memory now, runs a MULTI of commands that need
// no memory. Redis 7.0 and 7.2 refuse every command queued in a MULTI under
// OOM (-OOM, then -EXECABORT); Valkey 8 refuses only the deny-oom ones (SET,
// INCR) and queues and runs DEL, PEXPIRE and PUBLISH. Asked of the server
// with a raw transaction on a key no lock uses.
inline bool transaction_runs_under_oom(const ConnectionOptions& where) {
  Connection connection(where);
  connection.append("MULTI");
  connection.append("DEL", "distlock-test:scratch");
  connection.append("EXEC");
  connection.flush();
  connection.read_reply().throw_if_error();  // MULTI
  const bool queued = !connection.read_reply().is_error();
  const bool ran = connection.read_reply().is_array();
  EXPECT_EQ(queued, ran) << "a queued DEL was refused only at EXEC";
  return ran;
}

/// A connection subscribed to one channel, as another language's client
/// would be: the payloads published there, in order.
class RawSubscriber {
 public:
  RawSubscriber(const ConnectionOptions& where, const std::string& channel) : connection_(where) {
    connection_.append("SUBSCRIBE", channel);
    connection_.flush();
    connection_.read_reply().throw_if_error();  // the server's confirmation
  }

  /// The next message's payload. Throws TimeoutError if none arrives within
  /// the connection's command timeout (the subscriber is unusable then).
  std::string next() {
    for (;;) {
      // A pushed message answers no command: owed, so read_reply() waits
      // for it by the connection's timeout.
      connection_.expect_reply("SUBSCRIBE");
      const Reply& reply = connection_.read_reply();
      if (reply.size() == 3 && reply[0].str() == "message") return std::string(reply[2].str());
    }
  }

 private:
  Connection connection_;
};

/// Races `lock.extend(long_lease)` against renewal rounds: each iteration
/// starts `renew_round()` (one watchdog round, run to its end) on another
/// thread, waits a few microseconds (a different number each time, so that
/// some extends land inside the round, before or after its renewal reaches
/// the server), extends to `long_lease`, waits for the round to end and
/// calls `check(iteration)`, then extends back to `short_lease` so that the
/// next round sends the short lease again. Stops after `iterations` or once
/// `limit` has passed, or at the first failed extend; returns the
/// iterations run.
template <class Lock, class RenewRound, class Check>
int extend_against_renewal_rounds(Lock& lock, std::chrono::milliseconds long_lease,
                                  std::chrono::milliseconds short_lease, RenewRound renew_round,
                                  Check check, int iterations = 2000,
                                  std::chrono::milliseconds limit = std::chrono::seconds(3)) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + limit;
  int i = 0;
  for (; i < iterations && Clock::now() < end; ++i) {
    auto round = std::async(std::launch::async, renew_round);
    const auto spin_until = Clock::now() + std::chrono::microseconds((i * 37) % 250);
    while (Clock::now() < spin_until) {
    }
    const bool extended = lock.extend(long_lease);
    round.get();
    if (!extended) {
      ADD_FAILURE() << "extend to the long lease failed in iteration " << i;
      break;
    }
    check(i);
    if (::testing::Test::HasFailure()) break;
    if (!lock.extend(short_lease)) {
      ADD_FAILURE() << "extend to the short lease failed in iteration " << i;
      break;
    }
  }
  return i;
}

/// An acquire policy that polls once an hour: a waiter woken in time was
/// woken by a release announcement.
inline const FixedInterval an_hour{std::chrono::hours(1)};

}  // namespace distlock::testing
