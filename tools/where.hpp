// Which Redis the tool talks to and how: the --url, --user, --password-file,
// --command-timeout and --tls* options every subcommand shares, turned into
// ClientOptions (with $DISTLOCK_URL and $REDIS_URL as fallbacks), and the
// checks on a lock NAME and on a duration option.
#pragma once

#include <CLI/CLI.hpp>
#include <distlock/distlock.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "duration.hpp"
#include "exit_status.hpp"

namespace distlock::cli {

struct Where {
  std::string url;
  std::string user;
  std::string password_file;
  std::string command_timeout = "1s";
  bool tls = false;
  TlsOptions tls_options;  // the files and names; enabled by rediss:// or --tls
};

inline void add_where_options(CLI::App& app, Where& where) {
  app.add_option("--url", where.url,
                 "Redis to use: redis://[[user]:password@]host[:port][/db], rediss://... "
                 "(TLS) or unix:///path[?db=N]. Default: $DISTLOCK_URL, else $REDIS_URL, else "
                 "redis://127.0.0.1:6379")
      ->type_name("URL")
      ->group("Redis");
  app.add_option("--user", where.user, "ACL user name (AUTH user password)")
      ->type_name("NAME")
      ->group("Redis");
  app.add_option("--password-file", where.password_file,
                 "read the password from this file (its first line), so it is not in argv")
      ->type_name("PATH")
      ->group("Redis");
  app.add_option(
         "--command-timeout", where.command_timeout,
         std::string("longest wait for a connect or a reply (") + duration_forms + "; default 1s)")
      ->type_name("DURATION")
      ->group("Redis");
  app.add_flag("--tls", where.tls, "use TLS (as rediss:// does); the server is verified")
      ->group("TLS");
  struct TextOption {
    const char* name;
    std::string* field;
    const char* help;
    const char* type;
  };
  TlsOptions& tls = where.tls_options;
  for (const TextOption& option :
       {TextOption{"--tls-ca-file", &tls.ca_file, "trust these CAs (PEM) instead of the system's",
                   "PATH"},
        TextOption{"--tls-ca-dir", &tls.ca_dir, "trust the CAs in this folder", "PATH"},
        TextOption{"--tls-cert", &tls.cert_file,
                   "client certificate (PEM), for a server that asks for one", "PATH"},
        TextOption{"--tls-key", &tls.key_file, "the client certificate's key (PEM)", "PATH"},
        TextOption{"--tls-server-name", &tls.server_name,
                   "name to send (SNI) and to check the certificate against (default: the "
                   "host)",
                   "NAME"}}) {
    app.add_option(option.name, *option.field, option.help)->type_name(option.type)->group("TLS");
  }
  app.add_flag("--tls-insecure-skip-verify", where.tls_options.insecure_skip_verify,
               "accept any server certificate (throwaway test servers only)")
      ->group("TLS");
}

// The URL with any credentials masked, for messages.
inline std::string redacted(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.rfind('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  return url.substr(0, scheme + 3) + "***" + url.substr(at);
}

inline milliseconds duration_option(const std::string& text, const char* option) {
  const std::optional<milliseconds> value = parse_duration(text);
  if (!value) {
    throw Failure{status::usage, std::string("bad duration '") + text + "' for " + option +
                                     " (use " + duration_forms + ", at most 365 days)"};
  }
  return *value;
}

inline ClientOptions client_options(const Where& where) {
  std::string url = where.url;
  std::string source = "--url";
  if (url.empty()) {
    for (const char* variable : {"DISTLOCK_URL", "REDIS_URL"}) {
      const char* value = std::getenv(variable);
      if (value != nullptr && *value != '\0') {
        url = value;
        source = std::string("$") + variable;
        break;
      }
    }
  }
  if (url.empty()) {
    url = "redis://127.0.0.1:6379";
    source = "the default";
  }
  ClientOptions options;
  try {
    options = ClientOptions::from_uri(url);
  } catch (const InvalidArgument& error) {
    throw Failure{status::usage,
                  "bad Redis URL '" + redacted(url) + "' (from " + source + "): " + text_of(error)};
  }
  if (where.tls) options.tls.enabled = true;
  const TlsOptions& given = where.tls_options;
  const bool tls_asked = !given.ca_file.empty() || !given.ca_dir.empty() ||
                         !given.cert_file.empty() || !given.key_file.empty() ||
                         !given.server_name.empty() || given.insecure_skip_verify;
  if (tls_asked && !options.tls.enabled) {
    throw Failure{status::usage, "--tls-* options need TLS: a rediss:// URL, or --tls"};
  }
  for (const auto& [field, value] : {std::pair{&options.tls.ca_file, &given.ca_file},
                                     {&options.tls.ca_dir, &given.ca_dir},
                                     {&options.tls.cert_file, &given.cert_file},
                                     {&options.tls.key_file, &given.key_file},
                                     {&options.tls.server_name, &given.server_name}}) {
    if (!value->empty()) *field = *value;
  }
  if (given.insecure_skip_verify) options.tls.insecure_skip_verify = true;
  if (!where.user.empty()) options.username = where.user;
  if (!where.password_file.empty()) {
    std::ifstream in(where.password_file);
    std::string password;
    if (!in || !std::getline(in, password)) {
      throw Failure{status::usage, "cannot read --password-file " + where.password_file + ": " +
                                       (errno != 0 ? std::strerror(errno) : "empty file")};
    }
    if (!password.empty() && password.back() == '\r') password.pop_back();
    options.password = password;
  }
  const milliseconds timeout = duration_option(where.command_timeout, "--command-timeout");
  if (timeout.count() <= 0) throw Failure{status::usage, "--command-timeout must be positive"};
  options.command_timeout = timeout;
  options.connect_timeout = timeout;
  return options;
}

inline void check_name(const std::string& name) {
  if (name.empty()) throw Failure{status::usage, "the lock NAME must not be empty"};
  if (name.size() > max_name_size) {
    throw Failure{status::usage, "the lock NAME is " + std::to_string(name.size()) +
                                     " bytes; the limit is " + std::to_string(max_name_size)};
  }
}

}  // namespace distlock::cli
