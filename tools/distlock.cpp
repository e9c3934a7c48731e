// distlock: the command-line tool. flock(1) for a fleet of machines.
//
//   distlock run [options] NAME -- CMD [ARGS...]   run CMD while holding NAME
//   distlock status [options] NAME                 who holds NAME, how, for how long
//   distlock release --force --yes [options] NAME  delete NAME whoever holds it
//   distlock wait [options] NAME                   block until NAME is free
//
// It uses only distlock's public API (distlock/distlock.hpp). `status` and
// `release` read the key layouts the README documents with plain commands.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <distlock/distlock.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "duration.hpp"
#include "process.hpp"

namespace distlock::cli {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// Every status the tool returns of its own; `run` otherwise returns CMD's.
namespace status {
constexpr int ok = 0;
constexpr int not_held = 1;   // status: NAME is free; release: nothing to delete
constexpr int usage = 64;     // bad command line, duration, URL, option value
constexpr int not_lock = 65;  // release: the key is not a lock's
constexpr int redis = 69;     // Redis unreachable, too slow, or refused a command
constexpr int internal = 70;  // a bug or an unexpected condition in distlock
constexpr int os = 71;        // the system refused a pipe or a fork
constexpr int busy = 75;      // NAME stayed held (run's --conflict-exit-code changes it)
constexpr int lost = 76;      // run: the lease was lost while CMD ran
constexpr int cannot_exec = 126;
constexpr int not_found = 127;
}  // namespace status

constexpr const char* exit_status_help = R"(Exit status:
  0        success (run: CMD exited 0; status: NAME is held; wait: NAME is free)
  1..255   run: CMD's own exit status (128+N when CMD was killed by signal N)
  1        status: NAME is not held; release: there was nothing to delete
  64       usage: bad command line, duration, URL, option value or password file
  65       release: the key exists but is not a lock (nothing was deleted)
  69       Redis unreachable, too slow (--command-timeout) or refusing a command
  70       internal error in distlock
  71       the system refused a pipe or a fork
  75       run: NAME is held by someone else (after --wait; --conflict-exit-code);
           wait: NAME was still held when --timeout ran out
  76       run: the lease was lost while CMD ran (CMD was stopped per --on-lost)
  126      run: CMD was found but could not be executed
  127      run: CMD was not found
  128+N    run: distlock was stopped by signal N before CMD started)";

// One line on stderr, then the status to exit with.
struct Failure {
  int code;
  std::string message;
};

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// what() of a distlock::Error without the ": <code's message>" that
// std::system_error appends.
std::string text_of(const Error& error) {
  std::string text = error.what();
  const std::string suffix = ": " + error.code().message();
  if (text.size() > suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    text.resize(text.size() - suffix.size());
  }
  return text;
}

void say(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "distlock: %s: %s\n", command.c_str(), one_line(message).c_str());
  std::fflush(stderr);
}

// ---------------------------------------------------------------- where

struct Where {
  std::string url;
  std::string user;
  std::string password_file;
  std::string command_timeout = "1s";
};

void add_where_options(CLI::App& app, Where& where) {
  app.add_option("--url", where.url,
                 "Redis to use: redis://[[user]:password@]host[:port][/db] or "
                 "unix:///path[?db=N]. Default: $DISTLOCK_URL, else $REDIS_URL, else "
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
}

// The URL with any credentials masked, for messages.
std::string redacted(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.rfind('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  return url.substr(0, scheme + 3) + "***" + url.substr(at);
}

milliseconds duration_option(const std::string& text, const char* option) {
  const std::optional<milliseconds> value = parse_duration(text);
  if (!value) {
    throw Failure{status::usage, std::string("bad duration '") + text + "' for " + option +
                                     " (use a whole number with ms, s, m or h: " + duration_forms +
                                     ")"};
  }
  return *value;
}

ClientOptions client_options(const Where& where) {
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

void check_name(const std::string& name) {
  if (name.empty()) throw Failure{status::usage, "the lock NAME must not be empty"};
  if (name.size() > max_name_size) {
    throw Failure{status::usage, "the lock NAME is " + std::to_string(name.size()) +
                                     " bytes; the limit is " + std::to_string(max_name_size)};
  }
}

// ---------------------------------------------------------------- key layouts
//
// The names below are the layouts the README documents; the tool rebuilds
// them here because the library keeps its own functions for them in detail::.

// "{key}:suffix", or "key:suffix" when key already has a non-empty hash tag.
std::string companion(const std::string& key, const std::string& suffix) {
  const std::size_t open = key.find('{');
  const std::size_t close = open == std::string::npos ? open : key.find('}', open + 1);
  const bool tagged = close != std::string::npos && close > open + 1;
  return (tagged ? key : "{" + key + "}") + ":" + suffix;
}

// Redisson's "prefix:{key}", or "prefix:key" when key contains a '{'.
std::string redisson_name(const std::string& prefix, const std::string& key) {
  return prefix + ":" + (key.find('{') != std::string::npos ? key : "{" + key + "}");
}

// The part of a token or owner id shown to people and put in DISTLOCK_TOKEN:
// enough to tell holders apart, not enough to release or extend a lease.
std::string id_prefix(std::string_view id) { return std::string(id.substr(0, 8)); }

enum class Layout { none, lease, reentrant, rwlock, other };

const char* layout_json(Layout layout) {
  switch (layout) {
    case Layout::lease: return "\"lease\"";
    case Layout::reentrant: return "\"reentrant\"";
    case Layout::rwlock: return "\"rwlock\"";
    case Layout::other: return "\"other\"";
    case Layout::none: break;
  }
  return "null";
}

const char* layout_text(Layout layout) {
  switch (layout) {
    case Layout::lease: return "string lease (Mutex, SimpleMutex, Redlock; SET key token PX ttl)";
    case Layout::reentrant: return "Redisson hash lock (ReentrantMutex, RLock)";
    case Layout::rwlock: return "Redisson read-write lock (SharedMutex, RReadWriteLock)";
    case Layout::other: return "not a lock (no expiry, or not a string or hash)";
    case Layout::none: break;
  }
  return "none";
}

struct Holder {
  std::string id;
  long long holds = 1;
  bool exclusive = true;  // false for a SharedMutex reader
};

struct LockState {
  Layout layout = Layout::none;
  std::string redis_type;       // TYPE's answer
  long long pttl = -2;          // PTTL's answer: -2 no key, -1 no expiry
  std::string mode;             // rwlock: "read" or "write"
  std::vector<Holder> holders;  // lease: one; Redisson layouts: one per field
  std::optional<long long> fence;
};

long long to_integer(std::string_view text) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : 0;
}

LockState read_state(Client& client, const std::string& key) {
  LockState state;
  state.redis_type = std::string(client.command("TYPE", key).str());
  state.pttl = client.command("PTTL", key).integer();
  if (state.redis_type == "none") {
    state.layout = Layout::none;
  } else if (state.pttl < 0) {
    // Every layout sets the key and its expiry in one step: a key that never
    // expires is not a lock's.
    state.layout = Layout::other;
  } else if (state.redis_type == "string") {
    state.layout = Layout::lease;
    const Reply value = client.command("GET", key);
    if (!value.is_nil()) state.holders.push_back({id_prefix(value.str()), 1, true});
  } else if (state.redis_type == "hash") {
    const Reply fields = client.command("HGETALL", key);
    state.layout = Layout::reentrant;
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      const std::string_view field = fields[i].str();
      const std::string_view value = fields[i + 1].str();
      if (field == "mode") {
        state.layout = Layout::rwlock;
        state.mode = std::string(value);
        continue;
      }
      constexpr std::string_view write_suffix = ":write";
      const bool write = field.size() > write_suffix.size() &&
                         field.substr(field.size() - write_suffix.size()) == write_suffix;
      state.holders.push_back({id_prefix(field), to_integer(value), write});
    }
    // A Redisson lock's owner holds it alone; in a read-write lock only the writer does.
    if (state.layout == Layout::reentrant) {
      for (Holder& h : state.holders) h.exclusive = true;
    }
  } else {
    state.layout = Layout::other;
  }
  if (state.redis_type == "none") state.pttl = -2;
  const Reply fence = client.command("GET", companion(key, "fence"));
  if (fence.is_string()) state.fence = to_integer(fence.str());
  return state;
}

// ---------------------------------------------------------------- the lock `run` holds

// Mutex, ReentrantMutex and SharedMutex's read side behind one face. Every
// call comes from the main thread (the Redisson-layout locks are held by a
// thread), except cancel(), which any thread may call.
class HeldLock {
 public:
  virtual ~HeldLock() = default;
  /// One attempt when timeout is zero; else try until it has passed.
  virtual bool try_acquire(milliseconds timeout) = 0;
  virtual void cancel() = 0;
  virtual Release release() = 0;
  virtual std::optional<long long> fence() const = 0;
  virtual std::string holder_id() const = 0;
};

template <class Lock>
class ExclusiveLock final : public HeldLock {
 public:
  ExclusiveLock(Client& client, const std::string& name, LockOptions options)
      : lock_(client, name, std::move(options)) {}
  bool try_acquire(milliseconds timeout) override {
    return timeout.count() == 0 ? lock_.try_lock() : lock_.try_lock_for(timeout);
  }
  void cancel() override { lock_.cancel_waits(); }
  Release release() override { return lock_.release(); }
  std::optional<long long> fence() const override {
    if (!lock_.options().fencing()) return std::nullopt;
    return lock_.fence();
  }
  std::string holder_id() const override {
    if constexpr (std::is_same_v<Lock, Mutex>) {
      return id_prefix(lock_.token());
    } else {
      return id_prefix(lock_.owner_id());
    }
  }

 private:
  Lock lock_;
};

class ReadLock final : public HeldLock {
 public:
  ReadLock(Client& client, const std::string& name, LockOptions options)
      : lock_(client, name, std::move(options)) {}
  bool try_acquire(milliseconds timeout) override {
    return timeout.count() == 0 ? lock_.try_lock_shared() : lock_.try_lock_shared_for(timeout);
  }
  void cancel() override { lock_.cancel_waits(); }
  Release release() override { return lock_.release_shared(); }
  std::optional<long long> fence() const override { return std::nullopt; }
  std::string holder_id() const override { return id_prefix(lock_.owner_id()); }

 private:
  SharedMutex lock_;
};

// ---------------------------------------------------------------- run

struct RunArgs {
  Where where;
  std::string name;
  std::vector<std::string> command;
  std::string wait = "0";
  int conflict_exit_code = status::busy;
  std::string ttl = "30s";
  std::string max_hold;
  std::string on_lost = "term";
  std::string grace = "10s";
  bool fencing = false;
  bool shared = false;
  bool reentrant = false;
  bool quiet = false;
};

// What the watchdog's thread tells the main thread.
std::atomic<int> lost_reason{-1};

std::string lost_cause(int reason, const RunArgs& args, steady::time_point acquired) {
  if (reason == static_cast<int>(LostReason::taken)) {
    return "the key was deleted or taken by another holder";
  }
  if (!args.max_hold.empty() &&
      steady::now() - acquired >= duration_option(args.max_hold, "--max-hold")) {
    return "--max-hold " + args.max_hold + " was reached";
  }
  return "the lease ran out without a renewal (Redis unreachable, paused or too slow)";
}

std::vector<std::string> child_environment(const RunArgs& args, const HeldLock& lock) {
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view key = text.substr(0, text.find('='));
    if (key == "DISTLOCK_NAME" || key == "DISTLOCK_TOKEN" || key == "DISTLOCK_FENCE") continue;
    out.emplace_back(text);
  }
  out.push_back("DISTLOCK_NAME=" + args.name);
  out.push_back("DISTLOCK_TOKEN=" + lock.holder_id());
  if (const std::optional<long long> fence = lock.fence()) {
    out.push_back("DISTLOCK_FENCE=" + std::to_string(*fence));
  }
  return out;
}

// For the paths that end without running the command: a release Redis
// cannot confirm lets the lease run out by itself.
void release_quietly(HeldLock& lock) noexcept {
  try {
    static_cast<void>(lock.release());
  } catch (...) {
  }
}

// Stops the acquire-phase watcher thread however the acquire ends.
class Watcher {
 public:
  explicit Watcher(HeldLock& lock)
      : thread_([this, &lock] {
          bool stop = false;
          while (!stop) {
            for (const unsigned char e : EventPipe::wait(milliseconds(-1))) {
              if (e == event::stop) {
                stop = true;
                continue;
              }
              const int signal_number = e & ~event::terminal_flag;
              if (std::find(std::begin(forwarded_signals), std::end(forwarded_signals),
                            signal_number) == std::end(forwarded_signals)) {
                continue;
              }
              interrupted_.store(signal_number);
              try {
                lock.cancel();
              } catch (...) {
                // The acquire loop also looks at interrupted() between attempts.
              }
            }
          }
        }) {}
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;
  ~Watcher() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    EventPipe::post(event::stop);
    thread_.join();
  }
  int interrupted() const { return interrupted_.load(); }

 private:
  std::atomic<int> interrupted_{0};
  std::thread thread_;
};

int run(const RunArgs& args, const Signals& signals, const InheritedFds& fds) {
  const char* const cmd = "run";
  check_name(args.name);
  if (args.command.empty()) {
    throw Failure{status::usage,
                  "no command given (usage: distlock run [options] NAME -- CMD "
                  "[ARGS...])"};
  }
  if (args.conflict_exit_code < 0 || args.conflict_exit_code > 255) {
    throw Failure{status::usage, "--conflict-exit-code must be in 0..255"};
  }
  if (args.shared && args.reentrant) {
    throw Failure{status::usage, "--shared and --reentrant exclude each other"};
  }
  if (args.shared && args.fencing) {
    throw Failure{status::usage,
                  "--fencing cannot be used with --shared: readers hold the lock together, so "
                  "there is no single fence"};
  }
  std::optional<milliseconds> wait;  // nullopt: forever
  if (args.wait != "forever") wait = duration_option(args.wait, "--wait");
  const milliseconds ttl = duration_option(args.ttl, "--ttl");
  const milliseconds grace = duration_option(args.grace, "--grace");
  int death_signal = SIGTERM;
  if (args.on_lost == "kill") {
    death_signal = SIGKILL;
  } else if (args.on_lost == "ignore") {
    death_signal = 0;
  } else if (args.on_lost != "term") {
    throw Failure{status::usage, "bad --on-lost '" + args.on_lost + "' (use term, kill or ignore)"};
  }

  LockOptions options;
  try {
    options.ttl(ttl).auto_renew(true).fencing(args.fencing).on_lost([](const LeaseInfo& info) {
      // The watchdog's thread: record and wake the main thread, nothing more.
      lost_reason.store(static_cast<int>(info.reason));
      EventPipe::post(event::lost);
    });
    if (!args.max_hold.empty()) options.max_hold(duration_option(args.max_hold, "--max-hold"));
  } catch (const InvalidArgument& error) {
    throw Failure{status::usage, text_of(error)};
  }

  if (!EventPipe::open()) throw Failure{status::os, std::string("pipe: ") + std::strerror(errno)};
  signals.install();

  Client client(client_options(args.where));
  std::unique_ptr<HeldLock> lock;
  if (args.shared) {
    lock = std::make_unique<ReadLock>(client, args.name, options);
  } else if (args.reentrant) {
    lock = std::make_unique<ExclusiveLock<ReentrantMutex>>(client, args.name, options);
  } else {
    lock = std::make_unique<ExclusiveLock<Mutex>>(client, args.name, options);
  }

  // Acquire. A forwarded signal meanwhile cancels the wait (the watcher
  // thread reads the event pipe while this thread is inside the library).
  bool acquired = false;
  int interrupted = 0;
  {
    Watcher watcher(*lock);
    if (!wait || wait->count() > 0) {
      const steady::time_point deadline = wait ? steady::now() + *wait : steady::time_point::max();
      do {
        // Slices of at most a second: a cancel that lands before a slice's
        // wait begins only delays the stop until the slice ends.
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now());
        acquired = lock->try_acquire(std::clamp(left, 0ms, milliseconds(1000)));
      } while (!acquired && watcher.interrupted() == 0 && steady::now() < deadline);
    } else {
      acquired = lock->try_acquire(0ms);
    }
    watcher.stop();
    interrupted = watcher.interrupted();
  }
  const steady::time_point acquired_at = steady::now();
  if (interrupted != 0) {
    if (acquired) release_quietly(*lock);
    if (!args.quiet) {
      say(cmd, "stopped by signal " + std::to_string(interrupted) + " before the command started");
    }
    return 128 + interrupted;
  }
  if (!acquired) {
    if (!args.quiet) {
      say(cmd,
          args.name + " is held by someone else" +
              (wait && wait->count() == 0
                   ? std::string()
                   : " (waited " + (wait ? format_duration(*wait) : std::string("forever")) + ")") +
              "; not running the command");
    }
    return args.conflict_exit_code;
  }

  // Run the command.
  SpawnRequest request;
  request.argv = args.command;
  request.environment = child_environment(args, *lock);
  request.reset_signals = signals.reset_in_child();
  request.close_fds = fds.opened_since();
  request.parent_death_signal = death_signal;
  const Spawned child = spawn(request);
  if (child.pid < 0) {
    release_quietly(*lock);
    const bool missing = child.error == ENOENT || child.error == ENOTDIR;
    say(cmd, "cannot run '" + args.command[0] + "': " + std::strerror(child.error));
    return missing ? status::not_found : status::cannot_exec;
  }

  bool lost_seen = false;
  // When --grace runs out after a SIGTERM for a lost lease; max(): no such wait.
  steady::time_point kill_at = steady::time_point::max();
  int wait_status = 0;
  for (;;) {
    const pid_t reaped = ::waitpid(child.pid, &wait_status, WNOHANG);
    if (reaped == child.pid) break;
    if (reaped < 0 && errno != EINTR) {
      say(cmd, std::string("waitpid: ") + std::strerror(errno));
      return status::internal;
    }
    milliseconds timeout(-1);
    if (kill_at != steady::time_point::max()) {
      timeout = std::max(0ms, std::chrono::ceil<milliseconds>(kill_at - steady::now()));
    }
    for (const unsigned char e : EventPipe::wait(timeout)) {
      if (e == event::lost) {
        if (lost_seen) continue;
        lost_seen = true;
        const std::string what = "lost the lock on " + args.name + ": " +
                                 lost_cause(lost_reason.load(), args, acquired_at);
        const std::string pid = std::to_string(child.pid);
        if (args.on_lost == "ignore") {
          say(cmd,
              what + "; --on-lost ignore: the command (pid " + pid + ") runs on WITHOUT the lock");
        } else if (args.on_lost == "kill") {
          ::kill(child.pid, SIGKILL);
          say(cmd, what + "; killed the command (pid " + pid + ") with SIGKILL");
        } else {
          ::kill(child.pid, SIGTERM);
          kill_at = steady::now() + grace;
          say(cmd, what + "; sent SIGTERM to the command (pid " + pid + "), SIGKILL in " +
                       format_duration(grace));
        }
        continue;
      }
      const int signal_number = e & ~event::terminal_flag;
      const bool forwarded = std::find(std::begin(forwarded_signals), std::end(forwarded_signals),
                                       signal_number) != std::end(forwarded_signals);
      // A terminal's ^C or hangup reached the command's process group already.
      if (forwarded && (e & event::terminal_flag) == 0) ::kill(child.pid, signal_number);
    }
    if (steady::now() >= kill_at) {
      kill_at = steady::time_point::max();
      if (::waitpid(child.pid, &wait_status, WNOHANG) == child.pid) break;
      ::kill(child.pid, SIGKILL);
      say(cmd, "the command (pid " + std::to_string(child.pid) + ") outlived --grace " +
                   format_duration(grace) + "; sent SIGKILL");
    }
  }

  // Release; the lease tells whether it was ours all along.
  Release released = Release::released;
  try {
    released = lock->release();
  } catch (const Error& error) {
    say(cmd, std::string("could not release ") + args.name + " (its lease runs out within " +
                 format_duration(ttl) + "): " + text_of(error));
  }
  if (lost_seen) return status::lost;
  if (released == Release::lost) {
    say(cmd, "lost the lock on " + args.name +
                 " before the command ended: " + lost_cause(lost_reason.load(), args, acquired_at));
    return status::lost;
  }
  if (released == Release::expired || released == Release::not_owner) {
    say(cmd, "the lease on " + args.name + " had " +
                 (released == Release::expired ? "run out" : "run out and been taken") +
                 " by the time the command ended");
    return status::lost;
  }
  return exit_code_of(wait_status);
}

// ---------------------------------------------------------------- status

struct StatusArgs {
  Where where;
  std::string name;
  bool json = false;
};

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

int show_status(const StatusArgs& args) {
  check_name(args.name);
  Client client(client_options(args.where));
  const LockState state = read_state(client, args.name);
  const bool held = state.layout != Layout::none;
  const bool expires = state.pttl >= 0;
  if (args.json) {
    std::ostringstream out;
    out << "{\"name\":" << json_string(args.name) << ",\"held\":" << (held ? "true" : "false")
        << ",\"kind\":" << layout_json(state.layout)
        << ",\"redis_type\":" << json_string(state.redis_type)
        << ",\"ttl_ms\":" << (expires ? std::to_string(state.pttl) : "null");
    if (state.layout == Layout::rwlock) out << ",\"mode\":" << json_string(state.mode);
    out << ",\"holders\":[";
    for (std::size_t i = 0; i < state.holders.size(); ++i) {
      const Holder& h = state.holders[i];
      out << (i == 0 ? "" : ",") << "{\"id\":" << json_string(h.id) << ",\"holds\":" << h.holds
          << ",\"exclusive\":" << (h.exclusive ? "true" : "false") << "}";
    }
    out << "],\"fence\":" << (state.fence ? std::to_string(*state.fence) : "null") << "}\n";
    std::fputs(out.str().c_str(), stdout);
  } else {
    std::printf("name:    %s\n", args.name.c_str());
    std::printf("state:   %s\n", held ? "held" : "free");
    if (held) {
      std::printf("layout:  %s\n", layout_text(state.layout));
      if (state.layout == Layout::other) std::printf("type:    %s\n", state.redis_type.c_str());
      if (state.layout == Layout::rwlock) std::printf("mode:    %s\n", state.mode.c_str());
      for (const Holder& h : state.holders) {
        std::printf("holder:  %s", h.id.c_str());
        if (state.layout != Layout::lease) {
          std::printf(" (%lld hold%s%s)", h.holds, h.holds == 1 ? "" : "s",
                      state.layout == Layout::rwlock ? (h.exclusive ? ", write" : ", read") : "");
        }
        std::printf("\n");
      }
      if (expires) {
        std::printf("ttl:     %lldms\n", state.pttl);
      } else {
        std::printf("ttl:     none (the key never expires)\n");
      }
    }
    if (state.fence) std::printf("fence:   %lld\n", *state.fence);
  }
  std::fflush(stdout);
  return held ? status::ok : status::not_held;
}

// ---------------------------------------------------------------- release

struct ReleaseArgs {
  Where where;
  std::string name;
  bool force = false;
  bool yes = false;
};

int force_release(const ReleaseArgs& args) {
  check_name(args.name);
  if (!args.force) {
    throw Failure{status::usage,
                  "release needs --force: distlock cannot release a lock it does not hold, "
                  "only delete it whoever holds it"};
  }
  if (!args.yes) {
    throw Failure{status::usage, "refusing to delete " + args.name +
                                     " without --yes (its holder, if any, is not stopped; it "
                                     "learns of the loss at its next renewal)"};
  }
  Client client(client_options(args.where));
  const LockState state = read_state(client, args.name);
  if (state.layout == Layout::none) {
    say("release", args.name + " is not held; nothing deleted");
    return status::not_held;
  }
  if (state.layout == Layout::other) {
    say("release", args.name + " is a Redis " + state.redis_type + ", not a lock; not deleted");
    return status::not_lock;
  }
  if (client.command("DEL", args.name).integer() == 0) {
    say("release", args.name + " went away before it could be deleted");
    return status::not_held;
  }
  // Waiters are woken as by an ordinary release of that layout.
  if (state.layout == Layout::lease) {
    client.command("PUBLISH", companion(args.name, "released"), "0");
  } else if (state.layout == Layout::reentrant) {
    client.command("PUBLISH", redisson_name("redisson_lock__channel", args.name), "0");
  } else {
    client.command("PUBLISH", redisson_name("redisson_rwlock", args.name), "1");
  }
  std::string holders;
  for (const Holder& h : state.holders) holders += (holders.empty() ? "" : ", ") + h.id;
  std::printf("deleted %s (%s; holder %s)\n", args.name.c_str(), layout_text(state.layout),
              holders.empty() ? "unknown" : holders.c_str());
  std::fflush(stdout);
  return status::ok;
}

// ---------------------------------------------------------------- wait

struct WaitArgs {
  Where where;
  std::string name;
  std::string timeout = "forever";
};

int wait_free(const WaitArgs& args) {
  check_name(args.name);
  std::optional<steady::time_point> deadline;
  if (args.timeout != "forever") {
    deadline = steady::now() + duration_option(args.timeout, "--timeout");
  }
  Client client(client_options(args.where));
  milliseconds pause = 10ms;
  for (;;) {
    const long long pttl = client.command("PTTL", args.name).integer();
    if (pttl == -2) return status::ok;
    const steady::time_point now = steady::now();
    if (deadline && now >= *deadline) {
      say("wait", args.name + " is still held after " + args.timeout);
      return status::busy;
    }
    // Poll, sooner when the lease is due to end sooner, never past the deadline.
    milliseconds sleep = pause;
    if (pttl >= 0) sleep = std::min(sleep, milliseconds(pttl + 1));
    if (deadline) sleep = std::min(sleep, std::chrono::ceil<milliseconds>(*deadline - now));
    std::this_thread::sleep_for(sleep);
    pause = std::min(pause * 2, milliseconds(250));
  }
}

// ---------------------------------------------------------------- main

int failure_from(const std::exception_ptr& raised, std::string& message) {
  try {
    std::rethrow_exception(raised);
  } catch (const Failure& failure) {
    message = failure.message;
    return failure.code;
  } catch (const InvalidArgument& error) {
    message = text_of(error);
    return status::usage;
  } catch (const ConnectionError& error) {
    message = "cannot reach Redis at " + text_of(error);
    return status::redis;
  } catch (const TimeoutError& error) {
    message = "Redis did not answer in time (--command-timeout): " + text_of(error);
    return status::redis;
  } catch (const ServerError& error) {
    message = "Redis refused: " + text_of(error);
    return status::redis;
  } catch (const std::exception& error) {
    message = std::string("internal error: ") + error.what();
    return status::internal;
  }
}

std::string version_text() {
  return "distlock " + std::to_string(DISTLOCK_VERSION_MAJOR) + "." +
         std::to_string(DISTLOCK_VERSION_MINOR) + "." + std::to_string(DISTLOCK_VERSION_PATCH);
}

int main_(int argc, char** argv) {
  // Before the Redis client sets SIGPIPE to ignored and opens sockets.
  Signals signals;
  signals.record_initial();
  InheritedFds fds;
  fds.record();

  CLI::App app{"distlock: Redis locks from the shell; flock(1) for a fleet of machines.",
               "distlock"};
  app.set_version_flag("--version", version_text(), "print the version and exit");
  app.require_subcommand(1);
  app.footer(std::string("Run 'distlock SUBCOMMAND --help' for each one's options.\n\n") +
             exit_status_help);

  RunArgs run_args;
  CLI::App* run_cmd = app.add_subcommand(
      "run",
      "distlock run [OPTIONS] NAME -- CMD [ARGS...]\n\nTake the lock NAME, run CMD with it held, "
      "release it when CMD exits, and exit with CMD's "
      "status. The lease is renewed (every ttl/3) while CMD runs; if it is lost anyway, CMD is "
      "stopped (--on-lost) and distlock exits 76. SIGINT, SIGTERM and SIGHUP sent to distlock "
      "are passed on to CMD. CMD gets DISTLOCK_NAME, DISTLOCK_TOKEN (the first 8 characters of "
      "the lease's token or owner id, as `status` shows it) and, with --fencing, DISTLOCK_FENCE "
      "in its environment. (Semaphore permits are not offered yet.)");
  add_where_options(*run_cmd, run_args.where);
  run_cmd
      ->add_option("--wait", run_args.wait,
                   std::string("how long to wait for the lock (") + duration_forms +
                       ", or forever); default 0: one attempt, as flock -n")
      ->type_name("DURATION|forever");
  run_cmd
      ->add_option("--conflict-exit-code", run_args.conflict_exit_code,
                   "exit status when the lock stays held by someone else (default 75)")
      ->type_name("N");
  run_cmd->add_option("--ttl", run_args.ttl, "the lease, renewed while CMD runs (default 30s)")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--max-hold", run_args.max_hold,
                   "stop renewing after this long: the lease then runs out and is lost")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--on-lost", run_args.on_lost,
                   "what to do to CMD when the lease is lost: term (SIGTERM, then SIGKILL after "
                   "--grace; the default), kill (SIGKILL), ignore (report only; distlock still "
                   "exits 76). If distlock itself dies, CMD gets SIGTERM (kill: SIGKILL) on Linux")
      ->type_name("term|kill|ignore");
  run_cmd
      ->add_option("--grace", run_args.grace,
                   "time between SIGTERM and SIGKILL for --on-lost term (default 10s)")
      ->type_name("DURATION");
  run_cmd->add_flag("--fencing", run_args.fencing,
                    "count a fencing token ({NAME}:fence) and pass it in DISTLOCK_FENCE");
  run_cmd->add_flag("--shared", run_args.shared,
                    "take the read side of a SharedMutex (Redisson RReadWriteLock layout)");
  run_cmd->add_flag("--reentrant", run_args.reentrant,
                    "take a ReentrantMutex (Redisson RLock layout) instead of a Mutex");
  run_cmd->add_flag("-q,--quiet", run_args.quiet,
                    "say nothing when the lock is busy (the exit status tells)");
  run_cmd->add_option("NAME", run_args.name, "the lock's name (its Redis key)")->required();
  run_cmd->add_option("CMD", run_args.command, "the command and its arguments, after --");
  run_cmd->footer(exit_status_help);

  StatusArgs status_args;
  CLI::App* status_cmd = app.add_subcommand(
      "status",
      "Show whether NAME is held, in which layout (string lease; Redisson hash lock; Redisson "
      "read-write lock), by whom (first 8 characters of the token or owner id), for how much "
      "longer, and the fence counter if there is one.");
  add_where_options(*status_cmd, status_args.where);
  status_cmd->add_flag("--json", status_args.json,
                       "one JSON object: name, held, kind (lease|reentrant|rwlock|other|null), "
                       "redis_type, ttl_ms, mode, holders [{id, holds, exclusive}], fence");
  status_cmd->add_option("NAME", status_args.name, "the lock's name")->required();
  status_cmd->footer(exit_status_help);

  ReleaseArgs release_args;
  CLI::App* release_cmd = app.add_subcommand(
      "release",
      "Delete the lock NAME whoever holds it (administrative), and wake its waiters. Its holder "
      "is not stopped by this: a distlock holder finds the lease gone at its next renewal and "
      "reports it lost. Needs --force and --yes.");
  add_where_options(*release_cmd, release_args.where);
  release_cmd->add_flag("--force", release_args.force, "delete the lock, whoever holds it");
  release_cmd->add_flag("--yes", release_args.yes, "confirm the deletion");
  release_cmd->add_option("NAME", release_args.name, "the lock's name")->required();
  release_cmd->footer(exit_status_help);

  WaitArgs wait_args;
  CLI::App* wait_cmd = app.add_subcommand(
      "wait",
      "Block until NAME is free (its key is gone: released, expired or deleted). It polls the "
      "key's PTTL every 10ms rising to 250ms, sooner when the lease is due to end; it does not "
      "take the lock, so another may take it first.");
  add_where_options(*wait_cmd, wait_args.where);
  wait_cmd
      ->add_option("--timeout", wait_args.timeout,
                   std::string("give up after this long with status 75 (") + duration_forms +
                       ", or forever; the default)")
      ->type_name("DURATION|forever");
  wait_cmd->add_option("NAME", wait_args.name, "the lock's name")->required();
  wait_cmd->footer(exit_status_help);

  std::string subcommand = "distlock";
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    if (run_cmd->parsed() && message.find("not expected") != std::string::npos) {
      message += " (put -- between NAME and the command)";
    }
    const auto parsed = app.get_subcommands();
    if (parsed.empty()) {
      std::fprintf(stderr, "distlock: %s (run, status, release or wait; see distlock --help)\n",
                   one_line(message).c_str());
    } else {
      say(parsed.front()->get_name(), message);
    }
    return status::usage;
  }

  try {
    if (run_cmd->parsed()) {
      subcommand = "run";
      return run(run_args, signals, fds);
    }
    if (status_cmd->parsed()) {
      subcommand = "status";
      return show_status(status_args);
    }
    if (release_cmd->parsed()) {
      subcommand = "release";
      return force_release(release_args);
    }
    subcommand = "wait";
    return wait_free(wait_args);
  } catch (...) {
    std::string message;
    const int code = failure_from(std::current_exception(), message);
    say(subcommand, message);
    return code;
  }
}

}  // namespace
}  // namespace distlock::cli

int main(int argc, char** argv) { return distlock::cli::main_(argc, argv); }
