// The OpenSSL side of a TLS connection (detail/wire/socket.hpp): one SSL_CTX per
// distinct TlsOptions, kept for the life of the process, the handshake, and
// the words a failed one is reported in.
//
// Contexts are shared because loading a CA store costs milliseconds and a
// pool, a cluster or a renewal round opens connections by the dozen. A
// context is immutable once made, and OpenSSL lets threads share one.
// Every failure names its cause in a user's terms (unknown CA, name
// mismatch, expired certificate, a plaintext port) rather than as
// OpenSSL's error queue; the caller adds the endpoint.
#pragma once

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "distlock/connection_options.hpp"
#include "distlock/error.hpp"
#include "distlock/tls_options.hpp"

namespace distlock::detail {

struct FreeSslContext {
  void operator()(SSL_CTX* context) const noexcept { SSL_CTX_free(context); }
};
struct FreeSsl {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};
using SslPtr = std::unique_ptr<SSL, FreeSsl>;

/// The reason at the head of OpenSSL's error queue (emptied), or `otherwise`.
inline std::string take_ssl_error(const char* otherwise) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return otherwise;
  const char* reason = ERR_reason_error_string(code);
  std::string text = reason != nullptr ? reason : "error " + std::to_string(code);
  // A plaintext server answers a ClientHello with an error line, which
  // OpenSSL reads as a record of a version that does not exist.
  if (ERR_GET_LIB(code) == ERR_LIB_SSL && (ERR_GET_REASON(code) == SSL_R_WRONG_VERSION_NUMBER ||
                                           ERR_GET_REASON(code) == SSL_R_PACKET_LENGTH_TOO_LONG)) {
    text += " (the server does not speak TLS here: a plaintext port? use redis://)";
  }
  return text;
}

// Where an SSL notes that its server asked for a client certificate and
// none was configured: in TLS 1.3 the server refuses it only after the
// handshake, at the first command, with a reset or an alert that does not
// say why by itself.
inline int certificate_request_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
inline int note_certificate_request(SSL* ssl, X509**, EVP_PKEY**) {
  SSL_set_ex_data(ssl, certificate_request_index(), ssl);
  return 0;  // none to give
}
inline bool server_asked_for_certificate(SSL* ssl) {
  return ssl != nullptr && SSL_get_ex_data(ssl, certificate_request_index()) != nullptr;
}

inline SSL_CTX* make_ssl_context(const TlsOptions& tls) {
  std::unique_ptr<SSL_CTX, FreeSslContext> context(SSL_CTX_new(TLS_client_method()));
  if (!context) throw ConnectionError(Errc::connect_failed, "TLS: " + take_ssl_error("no memory"));
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  // Writes are whole or fail (the connection then breaks); the buffer may
  // move between calls (a pipeline's string grows).
  SSL_CTX_set_mode(context.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A reply's record in one read(2), not its header and then its body. What
  // is read ahead is drained by Socket::read_tls before poll() is asked.
  SSL_CTX_set_read_ahead(context.get(), 1);
  const auto refuse = [&](const std::string& what, const std::string& file) {
    return ConnectionError(Errc::connect_failed,
                           "TLS: " + what + " '" + file + "': " + take_ssl_error("unreadable"));
  };
  if (tls.insecure_skip_verify) {
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
    if (tls.ca_file.empty() && tls.ca_dir.empty()) {
      if (SSL_CTX_set_default_verify_paths(context.get()) != 1) {
        throw refuse("the system's CA store", "default");
      }
    } else if (SSL_CTX_load_verify_locations(
                   context.get(), tls.ca_file.empty() ? nullptr : tls.ca_file.c_str(),
                   tls.ca_dir.empty() ? nullptr : tls.ca_dir.c_str()) != 1) {
      throw refuse("cannot load the CAs from", tls.ca_file.empty() ? tls.ca_dir : tls.ca_file);
    }
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    throw InvalidArgument("TLS: a client certificate needs both cert_file and key_file");
  }
  if (tls.cert_file.empty()) SSL_CTX_set_client_cert_cb(context.get(), note_certificate_request);
  if (!tls.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(context.get(), tls.cert_file.c_str()) != 1) {
      throw refuse("cannot load the client certificate", tls.cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(context.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      throw refuse("cannot load the client key", tls.key_file);
    }
    if (SSL_CTX_check_private_key(context.get()) != 1) {
      throw refuse("the key does not match the certificate", tls.key_file);
    }
  }
  return context.release();
}

/// The shared context for `tls` (made on first use; a failure to load a
/// file is thrown each time, never cached).
inline SSL_CTX* ssl_context_for(const TlsOptions& tls) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, bool>;
  static std::mutex mutex;
  // Never destroyed: a detached thread may still open a connection while
  // static destructors run.
  static auto* contexts = new std::map<Key, SSL_CTX*>();
  const Key key{tls.ca_file, tls.ca_dir, tls.cert_file, tls.key_file, tls.insecure_skip_verify};
  const std::lock_guard<std::mutex> guard(mutex);
  SSL_CTX*& context = (*contexts)[key];
  if (context == nullptr) {
    try {
      context = make_ssl_context(tls);
    } catch (...) {
      contexts->erase(key);
      throw;
    }
  }
  return context;
}

/// Why a handshake failed: the certificate check's verdict when that is
/// what failed, else OpenSSL's reason.
inline std::string handshake_failure(SSL* ssl, int ssl_error, int saved_errno) {
  const long verdict = SSL_get_verify_result(ssl);
  if (verdict != X509_V_OK) {
    ERR_clear_error();
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verdict);
  }
  std::string text;
  if (ssl_error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    text = saved_errno == 0 ? "the server closed the connection (a plaintext port? use redis://)"
                            : std::string(std::strerror(saved_errno));
  } else {
    text = take_ssl_error("handshake failed");
  }
  if (server_asked_for_certificate(ssl)) {
    text += " (the server asks for a client certificate and none was given)";
  }
  return text;
}

/// The name a TLS connection checks the certificate against, and sends as
/// SNI where it is a name: `tls.server_name`, else the host dialled.
inline void name_the_peer(SSL* ssl, const TlsOptions& tls, const std::string& host) {
  const std::string& name = tls.server_name.empty() ? host : tls.server_name;
  const bool is_address = [&] {
    unsigned char ignored[16];
    return inet_pton(AF_INET, name.c_str(), ignored) == 1 ||
           inet_pton(AF_INET6, name.c_str(), ignored) == 1;
  }();
  if (!is_address) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (tls.insecure_skip_verify) return;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_address) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  }
}

inline int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

/// poll() of one descriptor for `events` up to `timeout_ms`, again (with the
/// same timeout) on EINTR: >0 ready, 0 timed out, <0 failed.
inline int poll_one(int fd, int events, int timeout_ms) noexcept {
  pollfd p{fd, static_cast<short>(events), 0};
  int ready = 0;
  while ((ready = ::poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return ready;
}

/// The TLS handshake on the connected, non-blocking socket `fd`, by
/// `deadline`. Throws ConnectionError naming the cause, or TimeoutError.
inline SslPtr start_tls(int fd, const ConnectionOptions& options,
                        std::chrono::steady_clock::time_point deadline) {
  SslPtr ssl(SSL_new(ssl_context_for(options.tls)));
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) {
    throw ConnectionError(Errc::connect_failed,
                          options.endpoint() + ": TLS: " + take_ssl_error("no memory"));
  }
  name_the_peer(ssl.get(), options.tls, options.host);
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int result = SSL_connect(ssl.get());
    if (result == 1) return ssl;
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl.get(), result);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      const int events = error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;  // what it asked
      if (poll_one(fd, events, remaining_ms(deadline)) > 0) continue;
      // A plaintext Redis reads a ClientHello as an inline command, and
      // waits for the rest of it: nothing at all came back.
      const bool unanswered = SSL_get_state(ssl.get()) == TLS_ST_CW_CLNT_HELLO;
      throw TimeoutError(Errc::timed_out,
                         options.endpoint() + ": TLS handshake: not done within " +
                             std::to_string(options.connect_timeout.count()) + " ms" +
                             (unanswered ? " (no answer: a plaintext port? use redis://)" : ""));
    }
    throw ConnectionError(Errc::connect_failed,
                          options.endpoint() + ": TLS handshake: " +
                              handshake_failure(ssl.get(), error, saved_errno));
  }
}

}  // namespace distlock::detail
