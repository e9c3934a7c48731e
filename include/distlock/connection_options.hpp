// ConnectionOptions: where a Redis server is and how to talk to it, parsed
// from a URI or set field by field, and Script, a Lua script with its SHA-1.
// Connection (connection.hpp) takes them.
#pragma once

#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string>
#include <string_view>
#include <system_error>

#include "distlock/error.hpp"

namespace distlock {

/// Where a Redis server is and how to talk to it.
struct ConnectionOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_socket;  ///< when set, used instead of host and port
  std::string username;     ///< ACL user; empty sends the legacy AUTH <password>
  std::string password;     ///< empty: no AUTH
  int db = 0;
  std::chrono::milliseconds connect_timeout{1000};
  /// The longest one reply may take. A command that times out may still have
  /// been applied by the server.
  std::chrono::milliseconds command_timeout{1000};
  bool keepalive = true;

  /// Parses "redis://[[user]:password@]host[:port][/db]" or "unix:///path[?db=N]".
  /// Throws InvalidArgument on anything else.
  static ConnectionOptions from_uri(std::string_view uri);

  /// Throws InvalidArgument if a field is out of range.
  void validate() const;

  /// "host:port" or the socket path: for messages (never shows credentials).
  std::string endpoint() const {
    return unix_socket.empty() ? host + ":" + std::to_string(port) : unix_socket;
  }
};

/// A Lua script with its SHA-1, run by EVALSHA with an EVAL fallback.
struct Script {
  std::string_view source;
  std::string_view sha1;  ///< lower-case hex SHA-1 of source
};

namespace detail {

inline timeval to_timeval(std::chrono::milliseconds timeout) noexcept {
  // A timeval with zero in both fields means "block forever" to the kernel,
  // so the smallest timeout we ever hand over is 1 ms.
  const long long ms = std::max<long long>(timeout.count(), 1);
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms % 1000) * 1000);
  return tv;
}

inline int parse_int(std::string_view text, const char* what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw InvalidArgument(std::string("bad ") + what + " in Redis URI");
  }
  return value;
}

}  // namespace detail

inline ConnectionOptions ConnectionOptions::from_uri(std::string_view uri) {
  ConnectionOptions options;
  constexpr std::string_view redis_scheme = "redis://";
  constexpr std::string_view unix_scheme = "unix://";
  if (uri.substr(0, unix_scheme.size()) == unix_scheme) {
    std::string_view rest = uri.substr(unix_scheme.size());
    if (const auto q = rest.find("?db="); q != std::string_view::npos) {
      options.db = detail::parse_int(rest.substr(q + 4), "db");
      rest = rest.substr(0, q);
    }
    if (rest.empty()) throw InvalidArgument("Redis URI has no socket path");
    options.unix_socket = std::string(rest);
    return options;
  }
  if (uri.substr(0, redis_scheme.size()) != redis_scheme) {
    throw InvalidArgument("Redis URI must start with redis:// or unix://");
  }
  std::string_view rest = uri.substr(redis_scheme.size());
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (const auto colon = credentials.find(':'); colon != std::string_view::npos) {
      options.username = std::string(credentials.substr(0, colon));
      options.password = std::string(credentials.substr(colon + 1));
    } else {
      options.password = std::string(credentials);
    }
  }
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    if (slash + 1 < rest.size()) options.db = detail::parse_int(rest.substr(slash + 1), "db");
    rest = rest.substr(0, slash);
  }
  if (const auto colon = rest.rfind(':');
      colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
    options.port = detail::parse_int(rest.substr(colon + 1), "port");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) throw InvalidArgument("Redis URI has no host");
  options.host = std::string(rest);
  options.validate();
  return options;
}

inline void ConnectionOptions::validate() const {
  if (unix_socket.empty() && host.empty()) throw InvalidArgument("no host and no unix socket");
  if (unix_socket.empty() && (port <= 0 || port > 65535)) {
    throw InvalidArgument("port must be in 1..65535");
  }
  if (db < 0) throw InvalidArgument("db index must not be negative");
  if (connect_timeout.count() <= 0) throw InvalidArgument("connect_timeout must be positive");
  if (command_timeout.count() <= 0) throw InvalidArgument("command_timeout must be positive");
}

}  // namespace distlock
