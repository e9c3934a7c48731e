// Certificates made at test time, for TLS servers and clients started by
// the tests: a CA, certificates it signs (for a server at 127.0.0.1 and
// localhost, for a client, one long expired), and a second CA that nobody
// trusts. EC P-256 keys: made in microseconds, so every fixture makes its
// own. Written as PEM files into a folder the caller owns (TestPki), or
// into one of its own (TempPki).
#pragma once

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace distlock {
namespace testing {

/// A certificate and its key, as files.
struct CertFiles {
  std::string cert;
  std::string key;
};

namespace detail {

struct FreeKey {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct FreeX509 {
  void operator()(X509* cert) const { X509_free(cert); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;
using X509Ptr = std::unique_ptr<X509, FreeX509>;

inline KeyPtr make_key() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) throw std::runtime_error("test certs: EC key generation failed");
  return key;
}

inline void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr) throw std::runtime_error("test certs: bad extension");
  X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
}

inline void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("test certs: cannot write " + path);
  const bool ok = cert != nullptr
                      ? PEM_write_X509(file, cert) == 1
                      : PEM_write_PrivateKey(file, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(file);
  if (!ok) throw std::runtime_error("test certs: cannot write " + path);
}

}  // namespace detail

/// A certificate authority that signs certificates into `folder`.
class TestCa {
 public:
  TestCa(std::string folder, const std::string& name) : folder_(std::move(folder)) {
    key_ = detail::make_key();
    cert_ = sign(name, key_.get(), 0, 3650, /*is_ca=*/true, {}, nullptr);
    file_ = folder_ + "/" + name + ".crt";
    detail::write_pem(file_, cert_.get(), nullptr);
  }

  /// The CA's own certificate (what a client or server trusts).
  const std::string& file() const { return file_; }

  /// A certificate for `common_name`, valid from `from_days` to `to_days`
  /// (relative to now), naming `alt_names` ("IP:127.0.0.1",
  /// "DNS:localhost", ...).
  CertFiles issue(const std::string& common_name, const std::string& alt_names, long from_days = -1,
                  long to_days = 365) const {
    detail::KeyPtr key = detail::make_key();
    detail::X509Ptr cert =
        sign(common_name, key.get(), from_days, to_days, false, alt_names, cert_.get());
    CertFiles files{folder_ + "/" + common_name + ".crt", folder_ + "/" + common_name + ".key"};
    detail::write_pem(files.cert, cert.get(), nullptr);
    detail::write_pem(files.key, nullptr, key.get());
    return files;
  }

 private:
  detail::X509Ptr sign(const std::string& common_name, EVP_PKEY* subject_key, long from_days,
                       long to_days, bool is_ca, const std::string& alt_names, X509* issuer) const {
    detail::X509Ptr cert(X509_new());
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), ++serial_);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_days * 86400);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_days * 86400);
    X509_set_pubkey(cert.get(), subject_key);
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                               0);
    X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
    X509* authority = issuer != nullptr ? issuer : cert.get();
    if (is_ca) {
      detail::add_extension(cert.get(), authority, NID_basic_constraints, "critical,CA:TRUE");
      detail::add_extension(cert.get(), authority, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
      detail::add_extension(cert.get(), authority, NID_basic_constraints, "CA:FALSE");
      detail::add_extension(cert.get(), authority, NID_ext_key_usage, "serverAuth,clientAuth");
      if (!alt_names.empty()) {
        detail::add_extension(cert.get(), authority, NID_subject_alt_name, alt_names.c_str());
      }
    }
    if (X509_sign(cert.get(), key_ ? key_.get() : subject_key, EVP_sha256()) == 0) {
      throw std::runtime_error("test certs: signing failed");
    }
    return cert;
  }

  std::string folder_;
  detail::KeyPtr key_;
  detail::X509Ptr cert_;
  std::string file_;
  mutable long serial_ = 0;
};

/// The set a TLS test needs, made in `folder`.
struct TestPki {
  explicit TestPki(const std::string& folder)
      : ca(folder, "test-ca"),
        other_ca(folder, "other-ca"),
        server(ca.issue("server", "IP:127.0.0.1,DNS:localhost")),
        client(ca.issue("client", "DNS:client")),
        expired(ca.issue("expired", "IP:127.0.0.1,DNS:localhost", -30, -1)),
        stranger(other_ca.issue("stranger", "IP:127.0.0.1,DNS:localhost")),
        elsewhere(ca.issue("elsewhere", "DNS:redis.example.com")) {}

  TestCa ca;
  TestCa other_ca;      ///< trusted by nobody
  CertFiles server;     ///< 127.0.0.1 and localhost, signed by ca
  CertFiles client;     ///< a client certificate, signed by ca
  CertFiles expired;    ///< like server, expired yesterday
  CertFiles stranger;   ///< like server, signed by other_ca
  CertFiles elsewhere;  ///< signed by ca, for redis.example.com only
};

/// A TestPki in a temporary folder of its own, removed with it: for a
/// suite that starts TLS servers once (the cluster's, the Sentinels').
class TempPki {
 public:
  TempPki() : folder_(make_folder()), pki_(folder_) {}
  ~TempPki() {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  TempPki(const TempPki&) = delete;
  TempPki& operator=(const TempPki&) = delete;

  const TestPki& operator*() const { return pki_; }
  const TestPki* operator->() const { return &pki_; }

 private:
  static std::string make_folder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "distlock-pki-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("test certs: mkdtemp");
    return pattern;
  }

  std::string folder_;
  TestPki pki_;
};

}  // namespace testing
}  // namespace distlock
