// A throwaway redis-server for tests and benchmarks.
//
// Defines distlock::testing::RedisServerOptions and
// distlock::testing::RedisServer, which starts a private redis-server on a
// free loopback port (and optionally a unix socket) with its own temporary
// directory and config, lets a test pause, kill, stop and restart it, and
// runs one-off commands against it. It depends only on POSIX and hiredis, not
// on GoogleTest, so the benchmark binary can use it as well.
#pragma once

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Not every libc declares it in <unistd.h> (macOS does not); a redeclaration
// is harmless where it does.
extern char** environ;

namespace distlock {
namespace testing {

// A server that speaks TLS only: port() is its tls-port, and the harness's
// own commands go through its unix socket.
struct RedisServerTls {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;              // the CA that client certificates must chain to
  std::string auth_clients = "no";  // tls-auth-clients: no, yes or optional
};

struct RedisServerOptions {
  bool unix_socket = false;               // also listen on <dir>/redis.sock
  std::optional<RedisServerTls> tls;      // TLS only (unix_socket implied)
  std::string requirepass;                // empty = no password
  std::vector<std::string> config_lines;  // appended verbatim to redis.conf
  bool sentinel = false;                  // run as `redis-server <conf> --sentinel`
};

namespace detail {

struct RedisContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

inline timeval to_timeval(std::chrono::milliseconds duration) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(duration.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((duration.count() % 1000) * 1000);
  return tv;
}

inline std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

inline bool is_executable_file(const std::string& path) {
  std::error_code ignored;
  return ::access(path.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(path, ignored);
}

// The folder named by DISTLOCK_TEST_SERVER_BIN (a server build to test
// against, as CI's matrix does), or else the redis-server on PATH, with the
// /usr/bin fallback when PATH does not contain it. Resolved up front so that
// available() and the spawn agree on which binary is meant. A folder that is
// named but holds no server yields "": the test fails rather than quietly
// running against another server.
inline std::string find_redis_server() {
  if (const char* folder = std::getenv("DISTLOCK_TEST_SERVER_BIN"); folder && *folder) {
    const std::string candidate = std::string(folder) + "/redis-server";
    return is_executable_file(candidate) ? candidate : std::string();
  }
  if (const char* path_env = std::getenv("PATH")) {
    std::stringstream entries(path_env);
    std::string entry;
    while (std::getline(entries, entry, ':')) {
      if (entry.empty()) entry = ".";
      const std::string candidate = entry + "/redis-server";
      if (is_executable_file(candidate)) return candidate;
    }
  }
  const std::string fallback = "/usr/bin/redis-server";
  return is_executable_file(fallback) ? fallback : std::string();
}

// The port is only reserved while the probe socket is open, so a racing
// process can still take it; start() handles that by retrying.
inline int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(errno_text("RedisServer: socket()"));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string message = errno_text("RedisServer: bind/getsockname");
    ::close(fd);
    throw std::runtime_error(message);
  }
  ::close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

// redis.conf values go through sdssplitargs, so paths with spaces or quotes
// must be double-quoted with C-style escapes.
inline std::string quote_config_value(const std::string& value) {
  std::string quoted = "\"";
  for (const char c : value) {
    switch (c) {
      case '\\': quoted += "\\\\"; break;
      case '"': quoted += "\\\""; break;
      case '\n': quoted += "\\n"; break;
      case '\r': quoted += "\\r"; break;
      case '\t': quoted += "\\t"; break;
      default: quoted += c; break;
    }
  }
  quoted += '"';
  return quoted;
}

inline std::uintmax_t file_size_or_zero(const std::string& path) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  return error ? 0 : size;
}

inline std::string read_file_from(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

inline std::string last_lines(const std::string& text, std::size_t max_lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t begin = end;
  std::size_t lines = 0;
  while (begin > 0) {
    if (text[begin - 1] == '\n' && ++lines == max_lines) break;
    --begin;
  }
  return text.substr(begin, end - begin);
}

// Renders a reply roughly the way redis-cli does, minus the type decorations,
// so tests can compare against plain strings.
inline std::string render_reply(const redisReply* reply) {
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: return std::string(reply->str, reply->len);
    case REDIS_REPLY_INTEGER: return std::to_string(reply->integer);
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_ERROR: return "(error) " + std::string(reply->str, reply->len);
    case REDIS_REPLY_ARRAY: {
      std::string joined;
      for (std::size_t i = 0; i < reply->elements; ++i) {
        if (i != 0) joined += '\n';
        joined += render_reply(reply->element[i]);
      }
      return joined;
    }
    default:
      // RESP3-only types (hiredis 1.x) never arrive on a RESP2 connection,
      // but their payload is still in str when they do.
      if (reply->str != nullptr) return std::string(reply->str, reply->len);
      return std::to_string(reply->integer);
  }
}

inline RedisReplyPtr run_argv(redisContext* context, const std::vector<std::string>& argv) {
  std::vector<const char*> pointers;
  std::vector<std::size_t> lengths;
  pointers.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const std::string& arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  return RedisReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(argv.size()), pointers.data(), lengths.data())));
}

}  // namespace detail

class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {}) : options_(std::move(options)) {
    executable_ = detail::find_redis_server();
    if (executable_.empty()) {
      throw std::runtime_error(
          "RedisServer: redis-server not found in $DISTLOCK_TEST_SERVER_BIN, on PATH or at "
          "/usr/bin/redis-server");
    }
    make_temp_dir();
    try {
      start_on_fresh_port();
    } catch (...) {
      kill();
      remove_temp_dir();
      throw;
    }
  }

  ~RedisServer() {
    try {
      kill();
    } catch (...) {
    }
    try {
      remove_temp_dir();
    } catch (...) {
    }
  }

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  const std::string& unix_path() const { return unix_path_; }
  // -1 once the process has been reaped, so callers never signal a pid that
  // the kernel may already have handed to someone else.
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

  bool running() const {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t result = ::waitpid(pid_, &status, WNOHANG);
    if (result == pid_ || (result < 0 && errno == ECHILD)) {
      pid_ = -1;
      paused_ = false;
      return false;
    }
    return true;
  }

  void pause() {
    if (!running() || paused_) return;
    if (::kill(pid_, SIGSTOP) != 0) return;
    // SIGSTOP takes effect asynchronously; waiting for the stop report makes
    // "paused" mean "no longer answering" when pause() returns.
    int status = 0;
    pid_t result;
    do {
      result = ::waitpid(pid_, &status, WUNTRACED);
    } while (result < 0 && errno == EINTR);
    if (result == pid_ && WIFSTOPPED(status)) {
      paused_ = true;
    } else if (result == pid_ || (result < 0 && errno == ECHILD)) {
      pid_ = -1;
    }
  }

  void resume() {
    if (!running()) return;
    // The kernel resumes a stopped process while delivering SIGCONT, so there
    // is nothing to wait for.
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }

  void kill() {
    if (pid_ <= 0) return;
    // SIGKILL also ends a SIGSTOPped process, without needing SIGCONT.
    ::kill(pid_, SIGKILL);
    reap_blocking();
  }

  void stop() {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    // A stopped process leaves SIGTERM pending until it is continued.
    if (paused_) ::kill(pid_, SIGCONT);
    paused_ = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
  }

  void restart() {
    kill();
    const StartResult result = start_once();
    if (result != StartResult::ready) {
      kill();
      throw std::runtime_error(
          "RedisServer: restart on port " + std::to_string(port_) + " failed" +
          (result == StartResult::port_in_use ? " (port taken by another process)" : "") + "\n" +
          failure_details());
    }
  }

  std::string command(const std::vector<std::string>& argv) const {
    detail::RedisContextPtr context = connect(std::chrono::seconds(2));
    if (!context || context->err != 0) {
      throw std::runtime_error("RedisServer: cannot connect to " + host_ + ":" +
                               std::to_string(port_) + ": " +
                               (context ? context->errstr : "out of memory"));
    }
    // Generous, so DEBUG SLEEP and friends work, yet bounded so a command
    // against a paused server fails instead of hanging the test run.
    redisSetTimeout(context.get(), detail::to_timeval(std::chrono::seconds(30)));
    if (const std::string error = authenticate(context.get()); !error.empty()) {
      throw std::runtime_error("RedisServer: AUTH failed on " + host_ + ":" +
                               std::to_string(port_) + ": " + error);
    }
    detail::RedisReplyPtr reply = detail::run_argv(context.get(), argv);
    if (!reply) {
      throw std::runtime_error("RedisServer: no reply from " + host_ + ":" + std::to_string(port_) +
                               ": " + context->errstr);
    }
    return detail::render_reply(reply.get());
  }

  static bool available() { return !detail::find_redis_server().empty(); }

  // The last lines of the server's log and captured stdout/stderr, for
  // failure messages.
  std::string log_tail(std::size_t max_lines = 30) const {
    std::string tail = detail::last_lines(detail::read_file_from(log_path(), 0), max_lines);
    const std::string output =
        detail::last_lines(detail::read_file_from(output_path(), 0), max_lines);
    if (!output.empty()) tail += "\n--- stdout/stderr ---\n" + output;
    return tail;
  }

 private:
  enum class StartResult { ready, port_in_use, failed };

  std::string config_path() const { return dir_ + "/redis.conf"; }
  std::string log_path() const { return dir_ + "/redis.log"; }
  std::string output_path() const { return dir_ + "/output.log"; }

  void make_temp_dir() {
    std::string base = "/tmp";
    if (const char* tmpdir = std::getenv("TMPDIR"); tmpdir != nullptr && *tmpdir != '\0') {
      base = tmpdir;
    }
    // A unix socket path must fit in sun_path; a deep $TMPDIR would make
    // redis-server refuse to start, so fall back to /tmp.
    const std::size_t needed = base.size() + std::strlen("/distlock-redis-XXXXXX/redis.sock");
    if ((options_.unix_socket || options_.tls) && needed >= sizeof(sockaddr_un{}.sun_path))
      base = "/tmp";
    std::string pattern = base + "/distlock-redis-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) {
      throw std::runtime_error(errno_text_for("mkdtemp(" + pattern + ")"));
    }
    dir_ = buffer.data();
    if (options_.unix_socket || options_.tls) unix_path_ = dir_ + "/redis.sock";
  }

  void remove_temp_dir() {
    if (dir_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }

  static std::string errno_text_for(const std::string& what) {
    return detail::errno_text("RedisServer: " + what);
  }

  void write_config() const {
    std::ofstream out(config_path(), std::ios::trunc);
    if (options_.tls) {
      out << "port 0\n"
          << "tls-port " << port_ << "\n"
          << "tls-cert-file " << detail::quote_config_value(options_.tls->cert_file) << "\n"
          << "tls-key-file " << detail::quote_config_value(options_.tls->key_file) << "\n"
          << "tls-ca-cert-file " << detail::quote_config_value(options_.tls->ca_file) << "\n"
          << "tls-auth-clients " << options_.tls->auth_clients << "\n";
    } else {
      out << "port " << port_ << "\n";
    }
    out << "bind 127.0.0.1\n"
        << "save \"\"\n"
        << "appendonly no\n"
        << "dir " << detail::quote_config_value(dir_) << "\n"
        << "daemonize no\n"
        << "logfile " << detail::quote_config_value(log_path()) << "\n"
        << "enable-debug-command yes\n"
        << "protected-mode no\n";
    if (!unix_path_.empty()) {
      out << "unixsocket " << detail::quote_config_value(unix_path_) << "\n"
          << "unixsocketperm 700\n";
    }
    if (!options_.requirepass.empty()) {
      out << "requirepass " << detail::quote_config_value(options_.requirepass) << "\n";
    }
    for (const std::string& line : options_.config_lines) out << line << "\n";
    out.flush();
    if (!out) throw std::runtime_error(errno_text_for("writing " + config_path()));
  }

  void start_on_fresh_port() {
    constexpr int max_attempts = 5;
    for (int attempt = 1;; ++attempt) {
      port_ = detail::pick_free_port();
      write_config();
      const StartResult result = start_once();
      if (result == StartResult::ready) return;
      kill();
      if (result == StartResult::failed || attempt == max_attempts) {
        throw std::runtime_error("RedisServer: redis-server failed to start on port " +
                                 std::to_string(port_) + " (attempt " + std::to_string(attempt) +
                                 ")\n" + failure_details());
      }
    }
  }

  // Inlines the config as well as the logs because the temp dir is gone by
  // the time anyone reads the exception.
  std::string failure_details() const {
    std::string details =
        "--- " + config_path() + " ---\n" + detail::read_file_from(config_path(), 0);
    const std::string log = detail::last_lines(detail::read_file_from(log_path(), log_offset_), 30);
    const std::string output =
        detail::last_lines(detail::read_file_from(output_path(), output_offset_), 30);
    if (!log.empty()) details += "--- redis.log (tail) ---\n" + log + "\n";
    if (!output.empty()) details += "--- stdout/stderr (tail) ---\n" + output + "\n";
    if (log.empty() && output.empty()) details += "(redis-server wrote no output)\n";
    return details;
  }

  void spawn() {
    // Only this start's output matters for diagnosing a failed start; the
    // files themselves keep every run for post-mortems.
    log_offset_ = detail::file_size_or_zero(log_path());
    output_offset_ = detail::file_size_or_zero(output_path());

    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    struct Cleanup {
      posix_spawn_file_actions_t* actions;
      posix_spawnattr_t* attributes;
      ~Cleanup() {
        posix_spawn_file_actions_destroy(actions);
        posix_spawnattr_destroy(attributes);
      }
    } cleanup{&actions, &attributes};

    // Config errors are printed to stderr before the logfile is opened, so
    // capture both streams in the temp dir instead of the test's output.
    const std::string output = output_path();
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
    // An inherited client socket would keep that connection open after the
    // test closes it, hiding disconnects from the other servers in a test.
    posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
#endif

    // The child inherits the spawning thread's signal mask and ignored
    // signals; a blocked or ignored SIGTERM would make stop() time out.
    sigset_t empty_mask;
    sigset_t all_signals;
    sigemptyset(&empty_mask);
    sigfillset(&all_signals);
    posix_spawnattr_setsigmask(&attributes, &empty_mask);
    posix_spawnattr_setsigdefault(&attributes, &all_signals);
    // Deliberately no new process group: Ctrl-C on the test run then reaches
    // redis-server too, which is the only cleanup when destructors never run.
    posix_spawnattr_setflags(&attributes,
                             static_cast<short>(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));

    const std::string config = config_path();
    std::string sentinel_flag = "--sentinel";
    std::vector<char*> argv = {const_cast<char*>(executable_.c_str()),
                               const_cast<char*>(config.c_str()), nullptr, nullptr};
    if (options_.sentinel) argv[2] = sentinel_flag.data();
    pid_t child = -1;
    const int error =
        ::posix_spawnp(&child, executable_.c_str(), &actions, &attributes, argv.data(), environ);
    if (error != 0) {
      throw std::runtime_error("RedisServer: posix_spawnp(" + executable_ +
                               ") failed: " + std::strerror(error));
    }
    pid_ = child;
    paused_ = false;
  }

  StartResult start_once() {
    spawn();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) {
        const std::string log = detail::read_file_from(log_path(), log_offset_);
        return log.find("Address already in use") != std::string::npos ? StartResult::port_in_use
                                                                       : StartResult::failed;
      }
      if (answers_as_our_child()) return StartResult::ready;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return StartResult::failed;
  }

  // PONG alone is not proof: if our child lost the port race, another server
  // on that port answers, so confirm the pid when INFO is allowed.
  bool answers_as_our_child() const {
    detail::RedisContextPtr context = connect(std::chrono::milliseconds(100));
    if (!context || context->err != 0) return false;
    redisSetTimeout(context.get(), detail::to_timeval(std::chrono::milliseconds(500)));
    if (!authenticate(context.get()).empty()) return false;
    detail::RedisReplyPtr pong = detail::run_argv(context.get(), {"PING"});
    if (!pong || pong->type != REDIS_REPLY_STATUS || std::string(pong->str, pong->len) != "PONG") {
      return false;
    }
    detail::RedisReplyPtr info = detail::run_argv(context.get(), {"INFO", "server"});
    if (!info || info->type != REDIS_REPLY_STRING) return true;
    const std::string text(info->str, info->len);
    const std::string key = "process_id:";
    const std::size_t at = text.find(key);
    if (at == std::string::npos) return true;
    return std::strtol(text.c_str() + at + key.size(), nullptr, 10) == static_cast<long>(pid_);
  }

  detail::RedisContextPtr connect(std::chrono::milliseconds timeout) const {
    if (options_.tls) {
      return detail::RedisContextPtr(
          redisConnectUnixWithTimeout(unix_path_.c_str(), detail::to_timeval(timeout)));
    }
    return detail::RedisContextPtr(
        redisConnectWithTimeout(host_.c_str(), port_, detail::to_timeval(timeout)));
  }

  // Returns why AUTH failed, or an empty string when it succeeded or no
  // password is configured.
  std::string authenticate(redisContext* context) const {
    if (options_.requirepass.empty()) return {};
    detail::RedisReplyPtr reply = detail::run_argv(context, {"AUTH", options_.requirepass});
    if (!reply) return context->errstr[0] != '\0' ? context->errstr : "no reply";
    if (reply->type == REDIS_REPLY_ERROR) return std::string(reply->str, reply->len);
    return {};
  }

  void reap_blocking() {
    int status = 0;
    pid_t result;
    do {
      result = ::waitpid(pid_, &status, 0);
    } while (result < 0 && errno == EINTR);
    pid_ = -1;
    paused_ = false;
  }

  RedisServerOptions options_;
  std::string executable_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  std::string dir_;
  std::string unix_path_;
  std::uintmax_t log_offset_ = 0;
  std::uintmax_t output_offset_ = 0;
  mutable pid_t pid_ = -1;
  mutable bool paused_ = false;
};

}  // namespace testing
}  // namespace distlock
