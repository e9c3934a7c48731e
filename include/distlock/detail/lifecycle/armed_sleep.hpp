// A waiter's sleep with its next attempt armed: the part of the acquire
// loop (detail/lifecycle/lifecycle.hpp) that leaves a formatted attempt with the
// Notifier on a spare connection (detail/runtime/armed_attempt.hpp), sleeps on the
// subscription, and, if the notifier thread sent the attempt meanwhile,
// reads its reply as the waiter's own: by the same deadline rules, and
// undone if the reply never comes. Whatever ends the sleep, the attempt is
// disarmed and the spare connection given back, or dropped if it is left
// owing a reply nobody will read.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "distlock/connection.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/heard.hpp"
#include "distlock/detail/runtime/armed_attempt.hpp"
#include "distlock/error.hpp"
#include "distlock/notifier.hpp"

namespace distlock::detail {

/// Whether `Protocol` can leave an attempt armed for the notifier thread
/// to send (LeaseProtocol: Mutex, SimpleMutex).
template <class Protocol, class = void>
inline constexpr bool armable = false;
template <class Protocol>
inline constexpr bool armable<
    Protocol, std::void_t<decltype(std::declval<Protocol&>().armed_command(
                  std::declval<typename Protocol::Kind>(), std::declval<const std::string&>()))>> =
    true;

/// The answer to an attempt the notifier thread sent for a waiter, when it
/// was sent, and the channel's generation then.
struct Presented {
  std::optional<Attempt> answer;
  SteadyClock::time_point sent{};
  std::uint64_t seen = 0;
};

/// Ends the use of the spare connection an attempt was armed on, however
/// the sleep ends: disarmed, the connection given back (dropped if it is
/// left broken or owing the reply of a sent attempt nobody read).
struct SpareUse {
  Notifier& notifier;
  Notifier::Subscription& subscription;
  ArmedAttempt& attempt;
  std::unique_ptr<Connection>& connection;
  bool armed = false;
  ArmedAttempt::State state = ArmedAttempt::State::unsent;  // as disarmed
  bool settled = false;  // a sent attempt's reply read, or the attempt undone

  ArmedAttempt::State disarm() {
    if (std::exchange(armed, false)) state = subscription.disarm(attempt);
    return state;
  }
  ~SpareUse() {
    disarm();
    // Torn: part of a command is on the wire, and whatever is written
    // next would complete it. Sent and never read (only if the sleep
    // threw): its grant, if any, lives out its lease.
    if (state == ArmedAttempt::State::torn || (state == ArmedAttempt::State::sent && !settled)) {
      connection.reset();
    }
    notifier.give_back_spare(std::move(connection));
  }
};

/// Sleeps on `subscription` until `until` or a wake-up (as
/// Subscription::wait), with the next attempt of `protocol` armed on it
/// where the protocol allows. An attempt the notifier sent is read here
/// into `presented`. False if `deadline` cut that read short.
template <class Protocol>
bool sleep_armed(Protocol& protocol, Notifier::Subscription& subscription,
                 typename Protocol::Kind kind, const std::string& id, std::uint64_t seen,
                 SteadyClock::time_point until, SteadyClock::time_point deadline,
                 Presented& presented) {
  std::string command;
  if constexpr (armable<Protocol>) command = protocol.armed_command(kind, id);
  if (command.empty()) {
    subscription.wait(seen, until);
    return true;
  }
  if constexpr (armable<Protocol>) {
    Notifier& notifier = protocol.notifier();
    std::unique_ptr<Connection> connection = notifier.lend_spare(deadline);
    if (!connection) {
      subscription.wait(seen, until);
      return true;
    }
    ArmedAttempt armed(*connection, std::move(command));
    SpareUse use{notifier, subscription, armed, connection};
    if (subscription.arm(armed)) use.armed = true;
    subscription.wait(seen, until);
    if (use.disarm() != ArmedAttempt::State::sent) return true;
    const SteadyClock::time_point cut =
        armed.sent_at >= deadline ? std::max(deadline, armed.sent_at + last_step) : deadline;
    connection->set_timeout(reply_timeout(protocol.command_timeout(), cut));
    connection->expect_reply("SET");
    try {
      presented.answer = Protocol::armed_reply(connection->read_reply());
      use.settled = true;
    } catch (const Error& error) {
      use.settled = true;  // read (a refusal by the server), or undone below
      const std::error_code code = error.code();
      if (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error) {
        protocol.undo(kind, *connection, id);  // as attempt_or_undo() does
        if (code == Errc::timed_out && deadline_reached(cut)) return false;
      }
      throw;
    }
    presented.sent = armed.sent_at;
    presented.seen = armed.seen;
  }
  return true;
}

}  // namespace distlock::detail
