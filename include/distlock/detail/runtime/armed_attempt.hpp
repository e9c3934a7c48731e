// ArmedAttempt: an acquire attempt a sleeping waiter leaves with the
// Notifier, for the notifier thread to write the moment the release is
// announced: the attempt reaches Redis one thread hop sooner (the waiter's
// wake-up then overlaps the server's work instead of preceding it).
//
// The waiter formats its attempt and arms it on its subscription, on a
// connection nobody else touches meanwhile (SpareConnection: one per
// Notifier, so a sleeping waiter never holds a pooled connection another
// caller may wait for). On a release message of that channel the notifier
// thread only writes it, without blocking (a few bytes into an idle
// socket), and notes when; it never reads the reply, so it never waits on
// a waiter. Under the Notifier's mutex the attempt goes from armed to sent,
// unsent (nothing was written) or torn (part of it was: the connection is
// dropped, and Redis never runs a command cut short by a close), or the
// waiter disarms it when it wakes for any other reason. From then on the
// connection is the waiter's again, and a sent attempt is read and settled
// as one the waiter sent itself at sent_at.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/connection.hpp"
#include "distlock/connection_options.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/wire/command_format.hpp"

namespace distlock::detail {

class ArmedAttempt {
 public:
  enum class State { armed, sent, unsent, torn };

  /// `command` is the attempt in the wire format (format_command()),
  /// written on `connection` when fired.
  ArmedAttempt(Connection& connection, std::string command) noexcept
      : connection_(connection), command_(std::move(command)) {}

  /// The notifier thread, under its mutex, on a release message that took
  /// the channel's generation to `generation`.
  void fire(std::uint64_t generation) noexcept {
    sent_at = SteadyClock::now();
    seen = generation;
    const long written = connection_.send_now(command_);
    if (written == static_cast<long>(command_.size())) {
      state = State::sent;
    } else {
      state = written <= 0 ? State::unsent : State::torn;
    }
  }

  // Guarded by the Notifier's mutex while armed; the waiter's after.
  State state = State::armed;
  SteadyClock::time_point sent_at{};
  std::uint64_t seen = 0;  ///< the channel's generation when it was sent

 private:
  Connection& connection_;
  const std::string command_;
};

/// The connection armed attempts go out on: one per Notifier, lent to one
/// waiter at a time, connected by the first waiter that needs it.
class SpareConnection {
 public:
  /// The connection, or null if another waiter has it (or it cannot be
  /// made before `deadline`: the waiter then waits as it would without).
  std::unique_ptr<Connection> lend(const ConnectionOptions& where,
                                   SteadyClock::time_point deadline) noexcept {
    std::unique_ptr<Connection> connection;
    {
      MutexLock guard(mutex_);
      if (lent_) return nullptr;
      lent_ = true;
      connection = std::move(idle_);
    }
    // One past max_connection_age is made again, as a pooled one would be.
    if (connection && !connection->stale() && !connection->aged()) return connection;
    try {
      connection = std::make_unique<Connection>(cut_to(where, deadline));
      connection->set_usual_timeout(where.command_timeout);
      return connection;
    } catch (...) {
      MutexLock guard(mutex_);
      lent_ = false;
      return nullptr;
    }
  }

  /// Takes it back after use; one left broken or owing a reply is dropped.
  void give_back(std::unique_ptr<Connection> connection) noexcept {
    if (connection && (connection->broken() || connection->pending() != 0)) connection.reset();
    MutexLock guard(mutex_);
    idle_ = std::move(connection);
    lent_ = false;
  }

 private:
  Mutex mutex_;
  std::unique_ptr<Connection> idle_ DISTLOCK_GUARDED_BY(mutex_);
  bool lent_ DISTLOCK_GUARDED_BY(mutex_) = false;
};

}  // namespace distlock::detail
