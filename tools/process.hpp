// What `distlock run` needs from the operating system: an event pipe that
// signal handlers and the lost-lease callback write to and the main thread
// reads (EventPipe), the signal dispositions distlock was started with and
// the handlers it installs (Signals), the file descriptors it inherited
// (InheritedFds), and the start of the command as a child process (spawn).
//
// Signal handlers and the lost-lease callback (which runs on the library's
// watchdog thread) only write one byte to the pipe; everything they stand
// for is done by the main thread when it reads that byte.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace distlock::cli {

/// One byte per event. A signal is its number, with terminal_flag set when
/// the kernel sent it (a terminal's ^C or hangup, which reaches the whole
/// foreground process group, the command included); other events use values
/// no signal number reaches.
namespace event {
inline constexpr unsigned char terminal_flag = 0x80;
inline constexpr unsigned char lost = 0x7f;  ///< the watchdog reported the lease lost
inline constexpr unsigned char stop = 0x7e;  ///< the acquire phase is over (see main)
}  // namespace event

/// A non-blocking, close-on-exec pipe; post() is async-signal-safe and
/// thread-safe. One per process (signal handlers reach it through a global).
class EventPipe {
 public:
  /// Opens the pipe; false (errno set) if the system refused.
  static bool open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    return true;
  }

  /// Writes one event. A full pipe drops it, which is harmless: the reader
  /// has that many events to read already, and every reader re-checks the
  /// state (waitpid, lost()) rather than count events.
  static void post(unsigned char byte) noexcept {
    const int saved = errno;
    [[maybe_unused]] const ssize_t written = ::write(write_fd_, &byte, 1);
    errno = saved;
  }

  /// Waits up to `timeout` (negative: no limit) for events and returns all
  /// that are there; empty on a timeout.
  static std::vector<unsigned char> wait(std::chrono::milliseconds timeout) {
    pollfd p{read_fd_, POLLIN, 0};
    const int ms = timeout.count() < 0
                       ? -1
                       : static_cast<int>(std::min<long long>(timeout.count(), 1000 * 1000));
    std::vector<unsigned char> events;
    if (::poll(&p, 1, ms) <= 0) return events;
    unsigned char buffer[64];
    for (;;) {
      const ssize_t n = ::read(read_fd_, buffer, sizeof buffer);
      if (n <= 0) break;
      events.insert(events.end(), buffer, buffer + n);
    }
    return events;
  }

 private:
  static inline int read_fd_ = -1;
  static inline int write_fd_ = -1;
};

extern "C" inline void distlock_cli_on_signal(int signal_number, siginfo_t* info, void*) {
  auto byte = static_cast<unsigned char>(signal_number);
#ifdef SI_KERNEL
  if (info != nullptr && info->si_code == SI_KERNEL) byte |= event::terminal_flag;
#else
  static_cast<void>(info);
#endif
  EventPipe::post(byte);
}

/// The signals `run` forwards to its command.
inline constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};

/// Dispositions at start-up and the handlers distlock installs.
class Signals {
 public:
  /// Records how SIGPIPE and the forwarded signals were set when distlock
  /// started; call before anything (the Redis client) changes them.
  void record_initial() {
    pipe_was_default_ = is_default(SIGPIPE);
    for (const int s : forwarded_signals) {
      if (is_ignored(s)) ignored_.push_back(s);
    }
  }

  /// Routes the forwarded signals (except those distlock was started with
  /// ignored: `nohup distlock run` keeps ignoring SIGHUP, and so does its
  /// command) and SIGCHLD to the event pipe.
  void install() const {
    struct sigaction action {};
    action.sa_sigaction = distlock_cli_on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (const int s : forwarded_signals) {
      if (!was_ignored(s)) ::sigaction(s, &action, nullptr);
    }
    action.sa_flags |= SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &action, nullptr);
  }

  /// Signals the command must start with at their default action: those
  /// distlock catches, and SIGPIPE unless distlock itself was started with
  /// it ignored (the Redis client ignores it in distlock, and a command in a
  /// shell pipeline must die of it as usual).
  std::vector<int> reset_in_child() const {
    std::vector<int> out{SIGCHLD};
    for (const int s : forwarded_signals) {
      if (!was_ignored(s)) out.push_back(s);
    }
    if (pipe_was_default_) out.push_back(SIGPIPE);
    return out;
  }

  bool was_ignored(int s) const {
    return std::find(ignored_.begin(), ignored_.end(), s) != ignored_.end();
  }

 private:
  static bool is_default(int s) {
    struct sigaction current {};
    return ::sigaction(s, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
           current.sa_handler == SIG_DFL;
  }
  static bool is_ignored(int s) {
    struct sigaction current {};
    return ::sigaction(s, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
           current.sa_handler == SIG_IGN;
  }

  bool pipe_was_default_ = true;
  std::vector<int> ignored_;
};

/// The descriptors open when distlock started: the command inherits these
/// (a `3>file` of the crontab line keeps working) and no others. The Redis
/// client's sockets are not close-on-exec, so without this a command would
/// hold distlock's connections open, even after distlock is gone.
class InheritedFds {
 public:
  void record() { fds_ = open_fds(); }

  /// Open now and not inherited: to close in the child.
  std::vector<int> opened_since() const {
    std::vector<int> out;
    for (const int fd : open_fds()) {
      if (!std::binary_search(fds_.begin(), fds_.end(), fd)) out.push_back(fd);
    }
    return out;
  }

 private:
  static std::vector<int> open_fds() {
    std::vector<int> fds;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
      const int own = ::dirfd(dir);
      while (const dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        const int fd = std::atoi(entry->d_name);
        if (fd != own) fds.push_back(fd);
      }
      ::closedir(dir);
    } else {
      // No /proc: ask each descriptor up to a bound that covers ours.
      for (int fd = 0; fd < 1024; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1) fds.push_back(fd);
      }
    }
    std::sort(fds.begin(), fds.end());
    return fds;
  }

  std::vector<int> fds_;
};

/// How the command is started.
struct SpawnRequest {
  std::vector<std::string> argv;         ///< argv[0] is looked up on PATH unless it has a '/'
  std::vector<std::string> environment;  ///< "NAME=value" entries, the whole environment
  std::vector<int> reset_signals;        ///< set to SIG_DFL in the child
  std::vector<int> close_fds;            ///< closed in the child before exec
  int parent_death_signal = 0;           ///< sent to the child if distlock dies (Linux); 0: none
};

/// A started child, or why it could not start (errno of the failed exec
/// or fork; pid is then -1).
struct Spawned {
  pid_t pid = -1;
  int error = 0;
};

namespace detail {

inline std::vector<std::string> exec_candidates(const std::string& file) {
  if (file.find('/') != std::string::npos) return {file};
  const char* path = std::getenv("PATH");
  const std::string search = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = search.find(':', begin);
    std::string dir = search.substr(begin, end == std::string::npos ? end : end - begin);
    if (dir.empty()) dir = ".";
    out.push_back(dir + "/" + file);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

inline std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace detail

/// Starts the command with fork and execve. Everything the child needs is
/// built before the fork; between fork and exec the child makes only
/// async-signal-safe calls. An exec failure comes back through a
/// close-on-exec pipe, so the caller learns ENOENT or EACCES at once.
inline Spawned spawn(SpawnRequest request) {
  std::vector<std::string> candidates = detail::exec_candidates(request.argv.at(0));
  std::vector<char*> argv = detail::pointers(request.argv);
  std::vector<char*> envp = detail::pointers(request.environment);
  std::vector<const char*> paths;
  for (const std::string& c : candidates) paths.push_back(c.c_str());

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {-1, errno};
  const pid_t parent = ::getpid();

  // Blocked across the fork so that no handler of ours runs in the child
  // before it has put the defaults back.
  sigset_t all;
  sigset_t saved;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    for (const int s : request.reset_signals) ::sigaction(s, &default_action, nullptr);
    for (const int fd : request.close_fds) {
      if (fd != report[1]) ::close(fd);
    }
#ifdef __linux__
    if (request.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, request.parent_death_signal);
      if (::getppid() != parent) ::_exit(128 + request.parent_death_signal);
    }
#endif
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int error = ENOENT;
    for (const char* path : paths) {
      ::execve(path, argv.data(), envp.data());
      // As execvp: a missing entry moves on; a found but refused one is
      // remembered (EACCES) unless a later entry runs.
      if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) {
        error = errno;
        break;
      }
      if (errno == EACCES) error = EACCES;
    }
    [[maybe_unused]] const ssize_t written = ::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  const int fork_error = errno;
  ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    return {-1, fork_error};
  }
  int error = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return {-1, error};
  }
  return {pid, 0};
}

/// A wait status as a shell reports it: the exit code, or 128 + the signal.
inline int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace distlock::cli
