// ReplicaCheck: a lock object's replica acknowledgement
// (LockOptions::replicas). After a write that counts only once replicated
// (a grant, an extend, a renewal round) comes WAIT on the same connection:
// pipelined behind a grant in the same write, so that a replicated acquire
// costs the round trips of an unreplicated one; its answer decides whether
// the grant stands. WAIT tells that replicas received the write, not that
// they fsynced it, and it is not consensus: a replica promoted before it
// acknowledged loses the write (docs/replicas.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// The error for a grant, extend or lock object too few replicas back.
inline NotReplicatedError not_replicated_error(std::string_view key, std::string_view what,
                                               int acknowledged, int wanted) {
  return NotReplicatedError(std::string(key) + ": " + std::string(what) + " acknowledged by " +
                                std::to_string(acknowledged) + " replica(s), " +
                                std::to_string(wanted) + " asked for (LockOptions::replicas)",
                            acknowledged, wanted);
}

/// Disarms a Connection::trail() that the command it was meant for did not
/// take (an exception before it was sent), so that the pooled connection
/// does not send it behind somebody else's command. (One sent and never
/// read leaves the connection owing a reply: the pool drops it.)
class TrailGuard {
 public:
  explicit TrailGuard(Connection& connection) noexcept : connection_(connection) {}
  TrailGuard(const TrailGuard&) = delete;
  TrailGuard& operator=(const TrailGuard&) = delete;
  ~TrailGuard() { connection_.untrail(); }

 private:
  Connection& connection_;
};

/// A lock object's replica acknowledgement (LockOptions::replicas): the
/// count WAIT asks for, read from INFO replication at the first step that
/// needs it (and again after a step too few replicas acknowledged), and
/// the WAIT itself. Shared by the lock's Protocol and its Renewer.
class ReplicaCheck {
 public:
  ReplicaCheck(int wanted, std::chrono::milliseconds timeout) noexcept
      : wanted_(wanted), timeout_(timeout) {}

  /// The count to WAIT for. The first time, and after reread(), asks the
  /// server in one round trip for INFO replication and a WAIT 0 (so that an
  /// ACL refusing either fails here, before anything is granted); throws
  /// NotReplicatedError when fewer replicas are connected than asked for.
  int needed(Connection& connection, std::string_view key) {
    if (const int count = known()) return count;
    connection.append("INFO", "replication");
    connection.append("WAIT", "0", "1");
    connection.flush();
    const Connected info = connected(connection.read_reply());
    return needed_from(info, connection.read_reply(), key);
  }

  /// The count needed() found, or 0 when it is to be asked (an event
  /// loop's step asks with the same two commands, in one write, and hands
  /// their answers to connected() and needed_from()).
  int known() const noexcept { return needed_.load(std::memory_order_acquire); }

  /// INFO replication's answer: the replicas the master counts, or why
  /// the server refused to tell.
  struct Connected {
    int replicas = 0;
    std::string refused;  // the error reply, if any
  };
  static Connected connected(const Reply& info) {
    if (info.is_error()) return {0, std::string(info.str())};
    return {connected_replicas(info.str()), {}};
  }

  /// The count to WAIT for, kept for the steps that follow, from INFO's
  /// answer and that of the WAIT 0 1 written behind it; throws as needed().
  int needed_from(const Connected& info, const Reply& wait, std::string_view key) {
    if (!info.refused.empty()) throw refused(info.refused, "INFO replication");
    if (wait.is_error()) throw refused(wait.str(), "WAIT");
    const int connected = info.replicas;
    const int count = wanted_ == LockOptions::majority ? connected / 2 + 1 : wanted_;
    if (connected == 0 || connected < count) {
      throw NotReplicatedError(
          std::string(key) + ": the master has " + std::to_string(connected) +
              " connected replica(s); LockOptions::replicas asks for " +
              (wanted_ == LockOptions::majority ? "a majority" : std::to_string(count)),
          connected, count);
    }
    needed_.store(count, std::memory_order_release);
    return count;
  }

  int wanted() const noexcept { return wanted_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  /// Makes the next needed() ask the server again.
  void reread() noexcept { needed_.store(0, std::memory_order_release); }

  /// WAIT for `count` replicas on the connection that just wrote, for the replica
  /// timeout cut to the caller's deadline; returns WAIT's answer. `cut`
  /// says whether the deadline shortened the wait.
  int wait(Connection& connection, int count, SteadyClock::time_point deadline,
           std::chrono::milliseconds command_timeout, bool& cut) const {
    cut = append_wait(connection, count, deadline, command_timeout);
    return read_wait(connection);
  }

  /// Queues WAIT for `count` replicas for the replica timeout cut to
  /// `deadline`, and sets the connection's reply timeout to cover it; true
  /// when the deadline shortened the wait.
  bool append_wait(Connection& connection, int count, SteadyClock::time_point deadline,
                   std::chrono::milliseconds command_timeout) const {
    const WaitTime time = wait_for(connection, deadline, command_timeout);
    connection.append("WAIT", Decimal(count), Decimal(time.waited.count()));
    return time.cut;
  }

  /// Reads the answer to a queued WAIT: the replicas that acknowledged.
  static int read_wait(Connection& connection) { return acknowledged_by(connection.read_reply()); }

  /// The replicas that acknowledged, by WAIT's answer.
  static int acknowledged_by(const Reply& wait) {
    if (wait.is_error()) throw refused(wait.str(), "WAIT");
    return static_cast<int>(wait.integer());
  }

  /// Arms WAIT for `count` replicas to go out behind the connection's next
  /// command, in the same write (Connection::trail), timed as append_wait()
  /// times it; true when the deadline shortened the wait. A refused attempt
  /// pays nothing for it while the replicas have acknowledged this
  /// connection's earlier writes (WAIT then answers at once); while they
  /// have not, it waits as a granted one would, and a grant could not be
  /// confirmed then anyway.
  bool trail_wait(Connection& connection, int count, SteadyClock::time_point deadline,
                  std::chrono::milliseconds command_timeout) const {
    const WaitTime time = wait_for(connection, deadline, command_timeout);
    const Decimal replicas(count);
    const Decimal milliseconds(time.waited.count());
    connection.trail({"WAIT", replicas, milliseconds});
    return time.cut;
  }

  /// The replicas that acknowledged a write sent with trail_wait(): the
  /// trailing WAIT's answer, or, when it was dropped (an EVALSHA answered
  /// NOSCRIPT), a WAIT of its own.
  int acknowledged(Connection& connection, int count, SteadyClock::time_point deadline,
                   std::chrono::milliseconds command_timeout, bool& cut) const {
    if (!connection.trailed()) return wait(connection, count, deadline, command_timeout, cut);
    return acknowledged_by(connection.read_trailing_reply());
  }

  /// Reads, and ignores, the trailing WAIT of a write that did not happen
  /// (a refused attempt), so that the connection can be used again.
  static void skip(Connection& connection) {
    if (connection.trailed()) connection.read_trailing_reply();
  }

  /// Throws NotReplicatedError for a `what` (an extend) of which fewer than
  /// `count` replicas acknowledged.
  void require(int acknowledged, int count, std::string_view key, std::string_view what) {
    if (acknowledged >= count) return;
    reread();
    throw not_replicated_error(key, what, acknowledged, count);
  }

  /// How long WAIT may wait: the replica timeout cut to `deadline`, and
  /// how long its answer may take (the waiting and the reply's trip).
  struct WaitTime {
    std::chrono::milliseconds waited;  // WAIT's own timeout
    std::chrono::milliseconds answer;  // for its reply
    bool cut;                          // the deadline shortened it
  };
  WaitTime wait_time(SteadyClock::time_point deadline,
                     std::chrono::milliseconds command_timeout) const {
    std::chrono::milliseconds waited = timeout_;
    std::chrono::milliseconds slack = command_timeout;  // for the reply, after WAIT's own wait
    bool cut = false;
    if (deadline != no_deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left <= waited) {
        waited = std::max(left, std::chrono::milliseconds(1));  // WAIT 0 would wait for ever
        cut = true;
      }
      slack = std::min(std::max(left - waited, std::chrono::milliseconds(10)), command_timeout);
    }
    return {waited, waited + slack, cut};
  }

 private:
  // wait_time(), with the connection's reply timeout set to cover it.
  WaitTime wait_for(Connection& connection, SteadyClock::time_point deadline,
                    std::chrono::milliseconds command_timeout) const {
    const WaitTime time = wait_time(deadline, command_timeout);
    connection.set_timeout(time.answer);
    return time;
  }

  static int connected_replicas(std::string_view info) {
    constexpr std::string_view field = "connected_slaves:";
    const std::size_t at = info.find(field);
    if (at == std::string_view::npos) return 0;
    int count = 0;
    for (std::size_t i = at + field.size(); i < info.size() && info[i] >= '0' && info[i] <= '9';
         ++i) {
      count = count * 10 + (info[i] - '0');
    }
    return count;
  }

  static ServerError refused(std::string_view reply, const char* command) {
    return ServerError(std::string(reply) + " (" + command +
                       ": LockOptions::replicas needs WAIT and INFO on the lock's server)");
  }

  const int wanted_;
  const std::chrono::milliseconds timeout_;
  std::atomic<int> needed_{0};
};

}  // namespace distlock::detail
