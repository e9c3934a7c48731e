// `distlock run NAME -- CMD`: take the lock, run CMD with it held while the
// watchdog renews the lease, stop CMD if the lease is lost anyway, release
// the lock when CMD exits (or, with --hold-at-least, keep it until that
// long after the acquire), and exit with CMD's status. Signals that reach
// distlock while it waits cancel the wait; once CMD runs they are passed on.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <distlock/distlock.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "duration.hpp"
#include "exit_status.hpp"
#include "lock_state.hpp"
#include "process.hpp"
#include "where.hpp"

namespace distlock::cli {

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
  ExclusiveLock(const Backend& backend, const std::string& name, LockOptions options)
      : lock_(backend, name, std::move(options)) {}
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
  ReadLock(const Backend& backend, const std::string& name, LockOptions options)
      : lock_(backend, name, std::move(options)) {}
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

// A Semaphore's permit, as the one lock the run holds.
class PermitHold final : public HeldLock {
 public:
  PermitHold(const Backend& backend, const std::string& name, std::size_t permits,
             LockOptions options)
      : semaphore_(backend, name, permits, std::move(options)) {}
  bool try_acquire(milliseconds timeout) override {
    permit_ = timeout.count() == 0 ? semaphore_.try_acquire() : semaphore_.try_acquire_for(timeout);
    return permit_.held();
  }
  void cancel() override { semaphore_.cancel_waits(); }
  Release release() override { return permit_.release(); }
  std::optional<long long> fence() const override { return std::nullopt; }
  std::string holder_id() const override { return id_prefix(permit_.id()); }

 private:
  Semaphore semaphore_;
  Permit permit_;
};

struct RunArgs {
  Where where;
  std::string name;
  std::vector<std::string> command;
  std::string wait = "0";
  int conflict_exit_code = status::busy;
  std::string ttl = "30s";
  std::string max_hold;
  std::string hold_at_least;
  std::string on_lost = "term";
  std::string grace = "10s";
  bool fencing = false;
  bool shared = false;
  bool reentrant = false;
  bool fair = false;
  std::size_t semaphore = 0;  // permits; 0: not a semaphore
  bool quiet = false;
};

// What the watchdog's thread tells the main thread.
inline std::atomic<int> lost_reason{-1};

inline std::string lost_cause(int reason, const RunArgs& args, steady::time_point acquired) {
  if (reason == static_cast<int>(LostReason::taken)) {
    return "the key was deleted or taken by another holder";
  }
  if (!args.max_hold.empty() &&
      steady::now() - acquired >= duration_option(args.max_hold, "--max-hold")) {
    return "--max-hold " + args.max_hold + " was reached";
  }
  return "the lease ran out without a renewal (Redis unreachable, paused or too slow)";
}

inline std::vector<std::string> child_environment(const RunArgs& args, const HeldLock& lock) {
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
inline void release_quietly(HeldLock& lock) noexcept {
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
            const milliseconds look =
                interrupted_.load() != 0 ? milliseconds(50) : milliseconds(-1);
            for (const unsigned char e : EventPipe::wait(look)) {
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
            }
            // Cancelled again every 50 ms until stopped: a cancel that lands
            // before the acquire's wait begins is not seen by that wait.
            if (interrupted_.load() != 0) {
              try {
                lock.cancel();
              } catch (...) {
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

inline int run(const RunArgs& args, const Signals& signals, const InheritedFds& fds) {
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
  if (int{args.shared} + int{args.reentrant} + int{args.fair} + int{args.semaphore > 0} > 1) {
    throw Failure{status::usage,
                  "--shared, --reentrant, --fair and --semaphore exclude each other"};
  }
  if (args.semaphore > 0 && (args.fencing || !args.hold_at_least.empty())) {
    throw Failure{status::usage,
                  "--fencing and --hold-at-least cannot be used with --semaphore: permits are "
                  "held together, so there is no single fence, and one is given back at once"};
  }
  if (args.shared && !args.hold_at_least.empty()) {
    throw Failure{status::usage,
                  "--hold-at-least cannot be used with --shared: a read hold keeps no reader out, "
                  "so it is released at once"};
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
    if (!args.hold_at_least.empty()) {
      const milliseconds least = duration_option(args.hold_at_least, "--hold-at-least");
      if (least.count() <= 0) throw Failure{status::usage, "--hold-at-least must be positive"};
      if (!args.max_hold.empty() && least > options.max_hold()) {
        throw Failure{status::usage, "--hold-at-least must not exceed --max-hold"};
      }
      options.min_hold(least);
    }
  } catch (const InvalidArgument& error) {
    throw Failure{status::usage, text_of(error)};
  }

  if (!EventPipe::open()) throw Failure{status::os, std::string("pipe: ") + std::strerror(errno)};
  signals.install();

  // The lock keeps the site of its key (sharing the backend's
  // connections), so it outlives the backend object made here.
  const std::unique_ptr<HeldLock> lock = [&]() -> std::unique_ptr<HeldLock> {
    const std::unique_ptr<Backend> backend = backend_of(args.where);
    if (args.shared) return std::make_unique<ReadLock>(*backend, args.name, options);
    if (args.reentrant) {
      return std::make_unique<ExclusiveLock<ReentrantMutex>>(*backend, args.name, options);
    }
    if (args.fair) return std::make_unique<ExclusiveLock<FairMutex>>(*backend, args.name, options);
    if (args.semaphore > 0) {
      return std::make_unique<PermitHold>(*backend, args.name, args.semaphore, options);
    }
    return std::make_unique<ExclusiveLock<Mutex>>(*backend, args.name, options);
  }();

  // Acquire. A forwarded signal meanwhile cancels the wait (the watcher
  // thread reads the event pipe while this thread is inside the library).
  bool acquired = false;
  int interrupted = 0;
  {
    Watcher watcher(*lock);
    // One wait (a FairMutex waiter that gave up would lose its place):
    // the watcher cancels it however late the signal comes.
    acquired = lock->try_acquire(wait ? *wait : milliseconds::max());
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
          (args.semaphore > 0
               ? "all " + std::to_string(args.semaphore) + " permits of " + args.name + " are held"
               : args.name + " is held by someone else") +
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

}  // namespace distlock::cli
