// SentinelOptions: what a SentinelClient needs to find its master: the
// master's name, the Sentinels to ask, the Sentinels' own credentials, and
// for the data nodes everything a ClientOptions says (their host and port
// are ignored: the Sentinels tell them).
//
// TLS is set apart the same way: `tls` (from ClientOptions) is the data
// nodes', `sentinel_tls` the Sentinels'. TLS to the data nodes does not
// turn it on to the Sentinels, since many deployments encrypt the data
// and leave the Sentinels, which hold no data and are often reached only
// from inside, in plain text (redis-py's sentinel_kwargs leave it out
// too); a Sentinel that speaks TLS only (tls-port, port 0) is asked for
// by setting sentinel_tls.enabled, with its own CA and certificates.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/client_options.hpp"
#include "distlock/connection_options.hpp"
#include "distlock/error.hpp"
#include "distlock/tls_options.hpp"

namespace distlock {

/// ClientOptions for the master (username, password, db, timeouts, pool),
/// plus the Sentinels'.
struct SentinelOptions : ClientOptions {
  /// The name the Sentinels monitor the master under (`sentinel monitor
  /// <name> ...`).
  std::string master_name;
  /// "host:port" of each Sentinel; asked in this order, the next one when
  /// one does not answer or does not know a master that says ROLE master.
  std::vector<std::string> sentinels;
  /// Credentials for the Sentinels, separate from the master's (username
  /// and password above); empty password: no AUTH.
  std::string sentinel_username;
  /// The Sentinels' password; empty: no AUTH to them.
  std::string sentinel_password;
  /// TLS to the Sentinels, separate from `tls` (the data nodes'): off
  /// unless enabled here, whatever `tls` says (see the top of this file).
  TlsOptions sentinel_tls;
  /// The pause between two rounds of asking the Sentinels while none names
  /// a master that answers (during a failover), doubled each round up to
  /// a second, within the caller's deadline.
  std::chrono::milliseconds retry_pause{50};

  SentinelOptions() = default;
  /// The master's name, the Sentinels' "host:port" addresses, and `data`
  /// for the master's pools; validate() checks them, not this.
  SentinelOptions(std::string master, std::vector<std::string> sentinel_addresses,
                  ClientOptions data = {})
      : ClientOptions(std::move(data)),
        master_name(std::move(master)),
        sentinels(std::move(sentinel_addresses)) {}

  /// Throws InvalidArgument naming what is wrong.
  void validate() const;

  /// The options of a connection to the Sentinel at `address`.
  ConnectionOptions sentinel_connection(std::string_view address) const;
};

inline ConnectionOptions SentinelOptions::sentinel_connection(std::string_view address) const {
  ConnectionOptions where;
  if (address.empty() || address.find('@') != std::string_view::npos ||
      address.find('/') != std::string_view::npos) {
    throw InvalidArgument("sentinel '" + std::string(address) +
                          "': expected host:port (credentials go in sentinel_username and "
                          "sentinel_password)");
  }
  try {
    detail::parse_authority(address, where);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument("sentinel '" + std::string(address) + "': " + error.what());
  }
  where.username = sentinel_username;
  where.password = sentinel_password;
  where.connect_timeout = connect_timeout;
  where.command_timeout = command_timeout;
  where.keepalive = keepalive;
  where.tls = sentinel_tls;
  return where;
}

inline void SentinelOptions::validate() const {
  if (master_name.empty()) throw InvalidArgument("a SentinelClient needs the master's name");
  if (sentinels.empty()) throw InvalidArgument("a SentinelClient needs at least one Sentinel");
  for (const std::string& address : sentinels) sentinel_connection(address).validate();
  if (!unix_socket.empty()) throw InvalidArgument("Sentinels name masters reached over TCP only");
  if (retry_pause.count() < 0) throw InvalidArgument("retry_pause must not be negative");
  ConnectionOptions check = *this;
  check.validate();
}

}  // namespace distlock
