// ClientOptions: a Client's connection options and the bounds of its pool
// (client.hpp), from code or from a redis:// or rediss:// URI.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <string_view>
#include <utility>

#include "distlock/connection_options.hpp"
#include "distlock/events.hpp"

namespace distlock {

/// ConnectionOptions plus the pool's bounds.
struct ClientOptions : ConnectionOptions {
  std::size_t pool_size = 8;  ///< most connections open at once
  /// The longest a borrower waits for a free connection when all are in use.
  std::chrono::milliseconds pool_wait_timeout{1000};
  /// A Connection writes with write(2), as hiredis does, so a write to a
  /// connection the server just closed raises SIGPIPE, whose default action
  /// kills the process. When set, a Client that finds SIGPIPE at its default
  /// sets it to ignored (a handler the application installed is left
  /// alone). Turn off to manage it yourself.
  bool ignore_sigpipe = true;
  /// Most acquirers of this Client waiting for a release at once; past it an
  /// acquire that would wait fails at once with Errc::too_many_waiters.
  std::size_t max_waiters = 10000;
  /// Told what this Client's locks do (acquired, released, renewed, lost,
  /// ...; see events.hpp). Empty: nothing is told, at the cost of a branch.
  EventHook on_event;

  ClientOptions() = default;
  /// `connection`, with the pool's fields at their defaults (implicit:
  /// ConnectionOptions may be given where ClientOptions are taken).
  ClientOptions(ConnectionOptions connection) : ConnectionOptions(std::move(connection)) {}
  /// ConnectionOptions::from_uri, plus the pool's options: pool_size (a
  /// whole number, at least 1), max_waiters (a whole number, 0 allowed),
  /// pool_wait_timeout and max_connection_age (durations as for
  /// command_timeout: "250", "250ms", "2s", "5m", "1h"; 0 allowed). Any other option is an
  /// InvalidArgument naming it. (A credentials provider is code: set it on
  /// the options made.)
  static ClientOptions from_uri(std::string_view uri);
};

inline ClientOptions ClientOptions::from_uri(std::string_view uri) {
  detail::ParsedUri parsed = detail::parse_uri(uri);
  ClientOptions options(std::move(parsed.connection));
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  for (const detail::UriOption& option : parsed.rest) {
    if (option.name == "pool_size") {
      options.pool_size = detail::parse_uri_number<std::size_t>(option.value, "pool_size", 1, most);
    } else if (option.name == "pool_wait_timeout") {
      options.pool_wait_timeout = detail::parse_uri_duration(option.value, "pool_wait_timeout");
    } else if (option.name == "max_waiters") {
      options.max_waiters =
          detail::parse_uri_number<std::size_t>(option.value, "max_waiters", 0, most);
    } else if (option.name == "max_connection_age") {
      options.max_connection_age = detail::parse_uri_duration(option.value, "max_connection_age");
    } else {
      throw detail::uri_error("unknown option '" + option.name +
                              "' (known: db, connect_timeout, command_timeout, pool_size, "
                              "pool_wait_timeout, max_waiters, max_connection_age; with "
                              "rediss:// ca_file, ca_dir, cert_file, key_file, server_name, "
                              "insecure_skip_verify)");
    }
  }
  return options;
}

}  // namespace distlock
