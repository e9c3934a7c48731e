// TlsOptions: how a connection speaks TLS, when it does (a rediss:// URI,
// or ConnectionOptions::tls.enabled). Connection (detail/wire/socket.hpp) does
// the handshake with OpenSSL; hiredis only parses the replies.
//
// Verification is on by default: the server's certificate must chain to a
// trusted CA (the system's store, or ca_file / ca_dir) and name the host
// dialled (or server_name). The one way to turn it off is named so that it
// reads as what it is in any review: insecure_skip_verify.
#pragma once

#include <string>

namespace distlock {

/// TLS settings of a connection. Every file is PEM.
struct TlsOptions {
  bool enabled = false;  ///< rediss:// sets it
  /// CAs to trust instead of the system's store; either or both.
  std::string ca_file;
  std::string ca_dir;  ///< a c_rehash'ed folder
  /// The client's certificate (chain) and key, for a server that asks for
  /// one (mutual TLS: Redis's tls-auth-clients). Both or neither.
  std::string cert_file;
  /// The private key of cert_file.
  std::string key_file;
  /// The name sent as SNI and checked against the certificate; empty: the
  /// host dialled (an IP address is checked as one, and sent as no SNI).
  std::string server_name;
  /// Accepts any certificate from anyone. For a throwaway test server only:
  /// it lets a man in the middle read and forge every lock.
  bool insecure_skip_verify = false;

  /// Every field equal.
  bool operator==(const TlsOptions& other) const {
    return enabled == other.enabled && ca_file == other.ca_file && ca_dir == other.ca_dir &&
           cert_file == other.cert_file && key_file == other.key_file &&
           server_name == other.server_name && insecure_skip_verify == other.insecure_skip_verify;
  }
  /// Not operator==.
  bool operator!=(const TlsOptions& other) const { return !(*this == other); }
};

}  // namespace distlock
