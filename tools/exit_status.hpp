// How the tool ends: the exit statuses of its own (every other status is
// the command's, for `run`), the Failure that carries one to main() with
// the one line said on stderr, and the helpers that shape that line.
#pragma once

#include <distlock/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace distlock::cli {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// Every status the tool returns of its own; `run` otherwise returns CMD's.
namespace status {
constexpr int ok = 0;
constexpr int not_held = 1;   // status: NAME is free; release: nothing to delete
constexpr int usage = 64;     // bad command line, duration, URL, option value
constexpr int not_lock = 65;  // the key is no lock (classify_lock): nothing done to it
constexpr int redis = 69;     // Redis unreachable, too slow, or refused a command
constexpr int internal = 70;  // a bug or an unexpected condition in distlock
constexpr int os = 71;        // the system refused a pipe or a fork
constexpr int busy = 75;      // NAME stayed held (run's --conflict-exit-code changes it)
constexpr int lost = 76;      // run: the lease was lost while CMD ran
constexpr int cannot_exec = 126;
constexpr int not_found = 127;
}  // namespace status

inline constexpr const char* exit_status_help = R"(Exit status:
  0        success (run: CMD exited 0; status: NAME is held; wait: NAME is free)
  1..255   run: CMD's own exit status (128+N when CMD was killed by signal N)
  1        status: NAME is not held; release: there was nothing to delete
  64       usage: bad command line, duration, URL, option value or password file
  65       the key exists but is not a lock (status, wait; release: nothing was
           deleted; run: no lock can be taken there)
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

inline std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// what() of a distlock::Error without the ": <code's message>" that
// std::system_error appends.
inline std::string text_of(const Error& error) {
  std::string text = error.what();
  const std::string suffix = ": " + error.code().message();
  if (text.size() > suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    text.resize(text.size() - suffix.size());
  }
  return text;
}

inline void say(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "distlock: %s: %s\n", command.c_str(), one_line(message).c_str());
  std::fflush(stderr);
}

}  // namespace distlock::cli
