// Which Redis the tool talks to and how: the --url, --user, --password-file,
// --command-timeout, --tls*, --cluster and --sentinel* options every
// subcommand shares, turned into the backend a lock takes (Client,
// ClusterClient or SentinelClient; $DISTLOCK_URL and $REDIS_URL as
// fallbacks for the URL), and the checks on a lock NAME and on a duration
// option.
//
// A URL may list several hosts ("redis://h1:7000,h2:7000"): the seeds of a
// cluster, or with --sentinel the Sentinels. Its credentials, db and TLS
// are always the data nodes'; the Sentinels' own come from --sentinel-*.
#pragma once

#include <CLI/CLI.hpp>
#include <distlock/distlock.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  bool cluster = false;
  std::string sentinel;  // the master's name: the URL's hosts are Sentinels
  std::string sentinel_user;
  std::string sentinel_password_file;
  bool sentinel_tls = false;
};

inline void add_where_options(CLI::App& app, Where& where) {
  struct TextOption {
    const char* name;
    std::string* field;
    std::string help;
    const char* type;
    const char* group;
  };
  struct Flag {
    const char* name;
    bool* field;
    const char* help;
    const char* group;
  };
  TlsOptions& tls = where.tls_options;
  // In --help's order: each group where its first option is.
  for (const TextOption& option :
       {TextOption{"--url", &where.url,
                   "Redis to use: redis://[[user]:password@]host[:port][/db], rediss://... "
                   "(TLS) or unix:///path[?db=N]; several hosts (h1:7000,h2:7000) are a "
                   "cluster's seeds, or the Sentinels with --sentinel. Default: "
                   "$DISTLOCK_URL, else $REDIS_URL, else redis://127.0.0.1:6379",
                   "URL", "Redis"},
        TextOption{"--user", &where.user, "ACL user name (AUTH user password)", "NAME", "Redis"},
        TextOption{"--password-file", &where.password_file,
                   "read the password from this file (its first line), so it is not in argv",
                   "PATH", "Redis"},
        TextOption{"--command-timeout", &where.command_timeout,
                   std::string("longest wait for a connect or a reply (") + duration_forms +
                       "; default 1s)",
                   "DURATION", "Redis"},
        TextOption{"--sentinel", &where.sentinel,
                   "Redis Sentinel: the master's name as the Sentinels monitor it; the URL's "
                   "hosts are the Sentinels, its credentials, db and TLS the master's",
                   "MASTER", "Sentinel"},
        TextOption{"--sentinel-user", &where.sentinel_user, "the Sentinels' ACL user name", "NAME",
                   "Sentinel"},
        TextOption{"--sentinel-password-file", &where.sentinel_password_file,
                   "the Sentinels' password, read from this file (its first line)", "PATH",
                   "Sentinel"},
        TextOption{"--tls-ca-file", &tls.ca_file, "trust these CAs (PEM) instead of the system's",
                   "PATH", "TLS"},
        TextOption{"--tls-ca-dir", &tls.ca_dir, "trust the CAs in this folder", "PATH", "TLS"},
        TextOption{"--tls-cert", &tls.cert_file,
                   "client certificate (PEM), for a server that asks for one", "PATH", "TLS"},
        TextOption{"--tls-key", &tls.key_file, "the client certificate's key (PEM)", "PATH", "TLS"},
        TextOption{"--tls-server-name", &tls.server_name,
                   "name to send (SNI) and to check the certificate against (default: the "
                   "host)",
                   "NAME", "TLS"}}) {
    app.add_option(option.name, *option.field, option.help)
        ->type_name(option.type)
        ->group(option.group);
  }
  for (const Flag& flag :
       {Flag{"--cluster", &where.cluster,
             "Redis Cluster: the URL's hosts are seeds; every node is found from them (implied "
             "by a URL with several hosts)",
             "Redis"},
        Flag{"--sentinel-tls", &where.sentinel_tls,
             "speak TLS to the Sentinels too, with the --tls-* files (by default only the "
             "master and replicas are reached over TLS)",
             "Sentinel"},
        Flag{"--tls", &where.tls, "use TLS (as rediss:// does); the server is verified", "TLS"},
        Flag{"--tls-insecure-skip-verify", &tls.insecure_skip_verify,
             "accept any server certificate (throwaway test servers only)", "TLS"}}) {
    app.add_flag(flag.name, *flag.field, flag.help)->group(flag.group);
  }
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

inline std::string password_from(const std::string& path, const char* option) {
  std::ifstream in(path);
  std::string password;
  if (!in || !std::getline(in, password)) {
    throw Failure{status::usage, std::string("cannot read ") + option + " " + path + ": " +
                                     (errno != 0 ? std::strerror(errno) : "empty file")};
  }
  if (!password.empty() && password.back() == '\r') password.pop_back();
  return password;
}

// A URL's parts around its host list: "redis://user:pw@" + hosts + "/0?..".
struct HostList {
  std::string before;
  std::vector<std::string> hosts;
  std::string after;
};

inline HostList split_hosts(const std::string& url) {
  HostList list;
  const std::size_t scheme = url.find("://");
  // A unix socket's path is one host, slashes and all.
  if (scheme == std::string::npos || url.rfind("unix:", 0) == 0) return {"", {url}, ""};
  const std::size_t at = url.rfind('@');
  const std::size_t begin = at == std::string::npos || at < scheme ? scheme + 3 : at + 1;
  const std::size_t end = std::min(url.find('/', begin), url.find('?', begin));
  list.before = url.substr(0, begin);
  list.after = end == std::string::npos ? "" : url.substr(end);
  const std::string hosts = url.substr(begin, end == std::string::npos ? end : end - begin);
  for (std::size_t start = 0;;) {
    const std::size_t comma = hosts.find(',', start);
    list.hosts.push_back(hosts.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return list;
}

// The URL to use and where it came from (for messages).
struct ChosenUrl {
  std::string url;
  std::string source;
};

inline ChosenUrl chosen_url(const Where& where) {
  if (!where.url.empty()) return {where.url, "--url"};
  for (const char* variable : {"DISTLOCK_URL", "REDIS_URL"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') return {value, std::string("$") + variable};
  }
  return {"redis://127.0.0.1:6379", "the default"};
}

// The options of one endpoint: the URL (with a single host) and the
// options that override it. A multi-host URL is read by the caller, which
// passes each host's URL in turn.
// The URL alone, its errors told as the tool's usage errors.
inline ClientOptions parsed_url(const std::string& url, const std::string& source) {
  try {
    return ClientOptions::from_uri(url);
  } catch (const InvalidArgument& error) {
    throw Failure{status::usage,
                  "bad Redis URL '" + redacted(url) + "' (from " + source + "): " + text_of(error)};
  }
}

inline ClientOptions client_options(const Where& where, const std::string& url,
                                    const std::string& source) {
  ClientOptions options = parsed_url(url, source);
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
    options.password = password_from(where.password_file, "--password-file");
  }
  const milliseconds timeout = duration_option(where.command_timeout, "--command-timeout");
  if (timeout.count() <= 0) throw Failure{status::usage, "--command-timeout must be positive"};
  options.command_timeout = timeout;
  options.connect_timeout = timeout;
  return options;
}

// The data nodes' options from the URL's first host (every host shares the
// credentials, db and TLS), and "host:port" of each host.
inline std::pair<ClientOptions, std::vector<std::string>> options_of_hosts(
    const Where& where, const HostList& list, const std::string& source) {
  std::pair<ClientOptions, std::vector<std::string>> out;
  for (const std::string& host : list.hosts) {
    if (host.empty()) {
      throw Failure{status::usage, "an empty host in the list of hosts in " + source};
    }
    // The first host's URL with every option applied (the password file
    // read once); the others' only for their address.
    const std::string url = list.before + host + list.after;
    ClientOptions one =
        out.second.empty() ? client_options(where, url, source) : parsed_url(url, source);
    if (!one.unix_socket.empty()) {
      throw Failure{status::usage,
                    "Redis Cluster nodes and Sentinels are reached over TCP, not " + redacted(url)};
    }
    out.second.push_back(one.endpoint());
    if (out.second.size() == 1) out.first = std::move(one);
  }
  return out;
}

// The Client, ClusterClient or SentinelClient the options ask for. A lock
// made on it keeps what it needs (the site of its key) past its life.
inline std::unique_ptr<Backend> backend_of(const Where& where) {
  const ChosenUrl chosen = chosen_url(where);
  const HostList list = split_hosts(chosen.url);
  const bool sentinel = !where.sentinel.empty();
  if (!sentinel && (!where.sentinel_user.empty() || !where.sentinel_password_file.empty() ||
                    where.sentinel_tls)) {
    throw Failure{status::usage, "--sentinel-* options need --sentinel MASTER"};
  }
  if (sentinel && where.cluster) {
    throw Failure{status::usage, "--cluster and --sentinel exclude each other"};
  }
  if (sentinel) {
    auto [data, sentinels] = options_of_hosts(where, list, chosen.source);
    SentinelOptions options(where.sentinel, std::move(sentinels), std::move(data));
    options.sentinel_username = where.sentinel_user;
    if (!where.sentinel_password_file.empty()) {
      options.sentinel_password =
          password_from(where.sentinel_password_file, "--sentinel-password-file");
    }
    if (where.sentinel_tls) {
      if (!options.tls.enabled) {
        throw Failure{status::usage, "--sentinel-tls needs TLS: a rediss:// URL, or --tls"};
      }
      options.sentinel_tls = options.tls;
    }
    return std::make_unique<SentinelClient>(std::move(options));
  }
  if (where.cluster || list.hosts.size() > 1) {
    auto [data, seeds] = options_of_hosts(where, list, chosen.source);
    if (data.db != 0) {
      throw Failure{status::usage, "a Redis Cluster has only db 0 (" + chosen.source + ")"};
    }
    return std::make_unique<ClusterClient>(ClusterOptions(std::move(seeds), std::move(data)));
  }
  return std::make_unique<Client>(client_options(where, chosen.url, chosen.source));
}

inline void check_name(const std::string& name) {
  if (name.empty()) throw Failure{status::usage, "the lock NAME must not be empty"};
  if (name.size() > max_name_size) {
    throw Failure{status::usage, "the lock NAME is " + std::to_string(name.size()) +
                                     " bytes; the limit is " + std::to_string(max_name_size)};
  }
}

}  // namespace distlock::cli
