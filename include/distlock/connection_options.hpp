// ConnectionOptions: where a Redis server is and how to talk to it, parsed
// from a URI or set field by field, and Script, a Lua script with its SHA-1.
// Connection (detail/wire/connection.hpp) takes them. The URI parser lives here too
// (detail::parse_uri); ClientOptions::from_uri (client.hpp) uses it and
// takes the pool's own options from what it leaves over.
#pragma once

#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/credentials.hpp"
#include "distlock/detail/base/duration.hpp"
#include "distlock/error.hpp"
#include "distlock/tls_options.hpp"

namespace distlock {

/// Where a Redis server is and how to talk to it.
struct ConnectionOptions {
  /// A name, or an IPv4 or IPv6 address (without brackets).
  std::string host = "127.0.0.1";
  /// 1 to 65535; unused with unix_socket.
  int port = 6379;
  std::string unix_socket;  ///< when set, used instead of host and port
  /// ACL user; needs a password or credentials (validate() refuses it
  /// alone). Empty sends the legacy `AUTH <password>`.
  std::string username;
  std::string password;  ///< empty: no AUTH
  /// When set, asked on every new connection in place of username and
  /// password: for credentials that rotate (credentials.hpp). Thread-safe
  /// it must be; set in code, never from a URI.
  CredentialsProvider credentials;
  /// The database, SELECTed on each new connection unless 0.
  int db = 0;
  /// The longest the connect itself may take: TCP or Unix socket, and the
  /// TLS handshake. AUTH and SELECT then run under command_timeout.
  std::chrono::milliseconds connect_timeout{1000};
  /// The longest one reply may take. A command that times out may still have
  /// been applied by the server.
  std::chrono::milliseconds command_timeout{1000};
  /// TCP keepalive (probing after 15 s idle where TCP_KEEPIDLE exists), so
  /// that a dead peer is found even on a connection nobody reads.
  bool keepalive = true;
  /// TLS, when tls.enabled (tls_options.hpp); verified by default.
  TlsOptions tls;
  /// The longest a kept connection is used: past it, a Client's pooled
  /// connection is closed when it comes back instead of lent again, and
  /// the Notifier's subscriber is replaced at its next safe point (with no
  /// release lost). So a connection never outlives the token that opened
  /// it by more than this. 0 (the default): kept until it breaks. A
  /// Connection of your own is yours to replace (Connection::aged()).
  std::chrono::milliseconds max_connection_age{0};

  /// Parses
  ///   redis://[user[:password]@]host[:port][/db][?option=value&...]
  ///   rediss://...  (the same, over TLS)
  ///   unix:///path[?option=value&...]
  /// host may be a name, an IPv4 address or an IPv6 address in brackets
  /// ("redis://[::1]:6380"); user and password are percent-decoded
  /// ("p%40ss" is "p@ss"), a password alone is written ":password@". The
  /// port defaults to 6379, the db to 0. Options: db, connect_timeout and
  /// command_timeout (a whole number with a unit, "250ms", "2s", "5m", "1h",
  /// or a bare number of milliseconds, "250"; the distlock tool's forms, at
  /// most 365 days); with rediss:// also TlsOptions' ca_file, ca_dir,
  /// cert_file, key_file, server_name (paths and names as they are) and
  /// insecure_skip_verify (true or false). Throws InvalidArgument, with a
  /// message that never shows the password, on anything else: another
  /// scheme, a TLS option without rediss://, an unknown or repeated option,
  /// a value out of range. The pool's options (pool_size, ...,
  /// max_connection_age) are ClientOptions::from_uri's and refused here.
  static ConnectionOptions from_uri(std::string_view uri);

  /// Throws InvalidArgument if a field is out of range.
  void validate() const;

  /// "host:port" ("[v6]:port" for an IPv6 address) or the socket path: for
  /// messages (never shows credentials).
  std::string endpoint() const {
    if (!unix_socket.empty()) return unix_socket;
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

/// A Lua script with its SHA-1, run by EVALSHA with an EVAL fallback.
struct Script {
  /// The Lua text, sent by EVAL when the server lacks the script.
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

/// One "name=value" of a URI's query (or its path's db, as "db").
struct UriOption {
  std::string name;
  std::string value;
};

/// A URI taken apart: the connection, and the options it did not know, in
/// the order given, for ClientOptions::from_uri to take its own from.
struct ParsedUri {
  ConnectionOptions connection;
  std::vector<UriOption> rest;
};

inline InvalidArgument uri_error(const std::string& what) {
  return InvalidArgument("Redis URI: " + what);
}

/// A whole number in [min, max]; names what and shows the text otherwise
/// (never called on credentials).
template <class Int>
Int parse_uri_number(std::string_view text, const char* what, Int min, Int max) {
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    throw uri_error(std::string("bad ") + what + " '" + std::string(text) + "': expected a " +
                    "whole number in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

/// A duration in detail::parse_duration's grammar ("250", "250ms", "2s",
/// "5m", "1h"); names the option and shows the value otherwise.
inline std::chrono::milliseconds parse_uri_duration(std::string_view text, const char* what) {
  const std::optional<std::chrono::milliseconds> value = parse_duration(text);
  if (!value) {
    throw uri_error(std::string("bad ") + what + " '" + std::string(text) + "': expected " +
                    duration_forms + ", at most 365 days");
  }
  return *value;
}

/// Percent-decodes a user name or password. The text is never shown: it may
/// be the password.
inline std::string percent_decode(std::string_view text, const char* what) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const char* const digits = text.data() + i + 1;
    unsigned char byte = 0;
    if (i + 2 >= text.size() || std::from_chars(digits, digits + 2, byte, 16).ptr != digits + 2) {
      throw uri_error(std::string("bad %-escape in the ") + what +
                      " (a % must be followed by two hex digits; write a literal % as %25)");
    }
    out += static_cast<char>(byte);
    i += 2;
  }
  return out;
}

inline bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

/// Splits "a=1&b=2" onto options, refusing an option given twice.
inline void split_query(std::string_view query, std::vector<UriOption>& options) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;  // "?a=1&&b=2", or a trailing '&'
    const auto eq = pair.find('=');
    const std::string name(pair.substr(0, eq));
    if (eq == std::string_view::npos || name.empty()) {
      throw uri_error("option '" + std::string(pair) + "' is not of the form name=value");
    }
    for (const UriOption& seen : options) {
      if (seen.name == name) {
        throw uri_error("option '" + name + "' given twice");
      }
    }
    options.push_back({name, std::string(pair.substr(eq + 1))});
  }
}

/// The TlsOptions field a URI option names, or null.
inline std::string* tls_field(TlsOptions& tls, const std::string& name) {
  if (name == "ca_file") return &tls.ca_file;
  if (name == "ca_dir") return &tls.ca_dir;
  if (name == "cert_file") return &tls.cert_file;
  if (name == "key_file") return &tls.key_file;
  if (name == "server_name") return &tls.server_name;
  return nullptr;
}

/// Applies the options that are the connection's; returns the others.
inline std::vector<UriOption> apply_connection_options(std::vector<UriOption> options,
                                                       ConnectionOptions& connection) {
  std::vector<UriOption> rest;
  for (UriOption& option : options) {
    if (option.name == "db") {
      connection.db = parse_uri_number(option.value, "db", 0, std::numeric_limits<int>::max());
    } else if (option.name == "connect_timeout") {
      connection.connect_timeout = parse_uri_duration(option.value, "connect_timeout");
    } else if (option.name == "command_timeout") {
      connection.command_timeout = parse_uri_duration(option.value, "command_timeout");
    } else if (std::string* field = tls_field(connection.tls, option.name)) {
      if (!connection.tls.enabled) throw uri_error("option '" + option.name + "' needs rediss://");
      if (option.value.empty()) throw uri_error("option '" + option.name + "' is empty");
      *field = std::move(option.value);
    } else if (option.name == "insecure_skip_verify") {
      if (!connection.tls.enabled) throw uri_error("option '" + option.name + "' needs rediss://");
      if (option.value != "true" && option.value != "false") {
        throw uri_error("insecure_skip_verify must be true or false");
      }
      connection.tls.insecure_skip_verify = option.value == "true";
    } else {
      rest.push_back(std::move(option));
    }
  }
  return rest;
}

/// The host, port and credentials of a redis:// URI (the part after the
/// scheme, before any '/' or '?').
inline void parse_authority(std::string_view authority, ConnectionOptions& connection) {
  // The last '@' ends the credentials, so a password may hold a raw '@'
  // (percent-encoding it as %40 works as well).
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (const auto colon = credentials.find(':'); colon != std::string_view::npos) {
      connection.username = percent_decode(credentials.substr(0, colon), "user name");
      connection.password = percent_decode(credentials.substr(colon + 1), "password");
    } else {
      connection.username = percent_decode(credentials, "user name");
    }
    // Connection sends AUTH only with a password, so a user alone would be
    // dropped silently (and "redis://secret@host" once meant a password).
    if (!connection.username.empty() && connection.password.empty()) {
      throw uri_error(
          "a user name without a password: write user:password@, or :password@ for a password "
          "alone");
    }
  }
  std::optional<std::string_view> port;  // after a ':', when there is one
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw uri_error("'[' without ']' around the IPv6 address");
    connection.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') {
      throw uri_error("unexpected '" + std::string(after) + "' after the IPv6 address");
    }
    if (!after.empty()) port = after.substr(1);
  } else {
    const auto colon = authority.find(':');
    if (colon != std::string_view::npos &&
        authority.find(':', colon + 1) != std::string_view::npos) {
      throw uri_error("an IPv6 address needs brackets, e.g. redis://[::1]:6379");
    }
    connection.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (connection.host.empty()) throw uri_error("no host");
  if (port && port->empty()) throw uri_error("empty port");
  if (port) connection.port = parse_uri_number(*port, "port", 1, 65535);
}

/// Parses a redis:// or unix:// URI (see ConnectionOptions::from_uri); the
/// options that are not the connection's are left in rest, unchecked.
inline ParsedUri parse_uri(std::string_view uri) {
  ParsedUri parsed;
  ConnectionOptions& connection = parsed.connection;
  std::vector<UriOption> options;
  std::string_view redis_scheme = "redis://";
  constexpr std::string_view unix_scheme = "unix://";
  if (starts_with_nocase(uri, "rediss://")) {
    redis_scheme = "rediss://";
    connection.tls.enabled = true;
  }
  if (starts_with_nocase(uri, unix_scheme)) {
    std::string_view rest = uri.substr(unix_scheme.size());
    const auto q = rest.find('?');
    if (q != std::string_view::npos) split_query(rest.substr(q + 1), options);
    rest = rest.substr(0, q);
    if (rest.empty()) throw uri_error("no socket path (unix:///path/to/redis.sock)");
    if (rest.front() != '/') {
      throw uri_error("the socket path must be absolute: unix:///path/to/redis.sock");
    }
    connection.unix_socket = std::string(rest);
  } else if (starts_with_nocase(uri, redis_scheme)) {
    std::string_view rest = uri.substr(redis_scheme.size());
    // Credentials first (up to the last '@'), so that a '/' or '?' in a raw
    // password is not taken for the path or the query.
    const auto at = rest.rfind('@');
    const std::size_t host_start = at == std::string_view::npos ? 0 : at + 1;
    const auto q = rest.find('?', host_start);
    if (q != std::string_view::npos) split_query(rest.substr(q + 1), options);
    rest = rest.substr(0, q);
    const auto slash = rest.find('/', host_start);
    if (slash != std::string_view::npos) {
      const std::string_view db = rest.substr(slash + 1);
      if (!db.empty()) {
        for (const UriOption& option : options) {
          if (option.name == "db") throw uri_error("db given both as /N and as ?db=");
        }
        options.insert(options.begin(), {"db", std::string(db)});
      }
      rest = rest.substr(0, slash);
    }
    parse_authority(rest, connection);
  } else {
    throw uri_error("must start with redis://, rediss:// or unix://");
  }
  parsed.rest = apply_connection_options(std::move(options), connection);
  connection.validate();
  return parsed;
}

}  // namespace detail

inline ConnectionOptions ConnectionOptions::from_uri(std::string_view uri) {
  detail::ParsedUri parsed = detail::parse_uri(uri);
  if (!parsed.rest.empty()) {
    const std::string& name = parsed.rest.front().name;
    if (name == "pool_size" || name == "pool_wait_timeout" || name == "max_waiters" ||
        name == "max_connection_age") {
      throw detail::uri_error("option '" + name +
                              "' is the pool's: parse the URI with ClientOptions::from_uri");
    }
    throw detail::uri_error("unknown option '" + name +
                            "' (known: db, connect_timeout, command_timeout; with rediss:// "
                            "ca_file, ca_dir, cert_file, key_file, server_name, "
                            "insecure_skip_verify)");
  }
  return std::move(parsed.connection);
}

inline void ConnectionOptions::validate() const {
  if (unix_socket.empty() && host.empty()) throw InvalidArgument("no host and no unix socket");
  if (unix_socket.empty() && (port <= 0 || port > 65535)) {
    throw InvalidArgument("port must be in 1..65535");
  }
  if (db < 0) throw InvalidArgument("db index must not be negative");
  if (connect_timeout.count() <= 0) throw InvalidArgument("connect_timeout must be positive");
  if (command_timeout.count() <= 0) throw InvalidArgument("command_timeout must be positive");
  if (max_connection_age.count() < 0) {
    throw InvalidArgument("max_connection_age must not be negative (0: no limit)");
  }
  // A connection sends AUTH only with a password (or a provider's answer):
  // a user alone would connect as the default user, silently.
  if (!username.empty() && password.empty() && !credentials) {
    throw InvalidArgument("a user name (" + username +
                          ") without a password or a credentials provider: AUTH is sent only "
                          "with a password");
  }
}

}  // namespace distlock
