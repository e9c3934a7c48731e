// Helpers for tests that fault a server on purpose: a wait for the server
// to have run a command some number of times, and a MONITOR recorder that
// lists the commands a server executed, in its order.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/token.hpp"
#include "support/eventually.hpp"
#include "support/lock_helpers.hpp"

namespace distlock::testing {

/// Waits (boundedly) until the server has executed `command` (as INFO
/// commandstats names it: "set", "evalsha") at least `calls` times since
/// its last CONFIG RESETSTAT.
inline bool server_ran(const ConnectionOptions& where, std::string_view command, long long calls,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  return eventually(
      [&] {
        Connection probe(where);
        return CommandCalls{std::string(probe.command("INFO", "commandstats").str())}.of(command) >=
               calls;
      },
      limit);
}

/// A connection in MONITOR mode: everything the server executes from now
/// on, one line per command, in the server's order. lines() stops at a
/// marker it sends itself, so it returns what ran before the call.
class Monitor {
 public:
  explicit Monitor(ConnectionOptions where) : where_(where), connection_(std::move(where)) {
    connection_.set_timeout(std::chrono::milliseconds(10000));
    connection_.command("MONITOR");
  }

  /// The lines the server reported up to now (each like
  /// `1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "sha" "1" "k" ...`).
  std::vector<std::string> lines() {
    const std::string marker = "monitor-end-" + make_token();
    Connection(where_).command("ECHO", marker);
    for (;;) {
      // Replies that answer no command of ours: read them as a subscriber
      // reads its messages.
      std::optional<Reply> line = connection_.next_buffered_reply();
      if (!line) {
        connection_.read_available();
        continue;
      }
      std::string text(line->str());
      if (text.find(marker) != std::string::npos) return std::move(seen_);
      seen_.push_back(std::move(text));
    }
  }

 private:
  ConnectionOptions where_;
  Connection connection_;
  std::vector<std::string> seen_;
};

/// The arguments of one MONITOR line, unquoted: {"EVALSHA", "sha", "1", ...}.
/// Escapes other than \" and \\ are kept as written (tokens and key names
/// in these tests never need them).
inline std::vector<std::string> monitor_args(std::string_view line) {
  std::vector<std::string> args;
  const auto start = line.find("] ");
  if (start == std::string_view::npos) return args;
  bool inside = false;
  std::string arg;
  for (std::size_t i = start + 2; i < line.size(); ++i) {
    const char c = line[i];
    if (!inside) {
      if (c == '"') {
        inside = true;
        arg.clear();
      }
      continue;
    }
    if (c == '\\' && i + 1 < line.size() && (line[i + 1] == '"' || line[i + 1] == '\\')) {
      arg += line[++i];
    } else if (c == '"') {
      inside = false;
      args.push_back(arg);
    } else {
      arg += c;
    }
  }
  return args;
}

}  // namespace distlock::testing
