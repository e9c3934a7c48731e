// Commands in the forms Connection (connection.hpp) hands them on: an argv
// laid out as the pointer and length arrays hiredis's argv calls take;
// commands formatted here and written straight to the socket, past hiredis;
// and one written that way on a connection whose hiredis context failed.
//
// Connection formats and writes every command itself (append_command,
// write_all): hiredis's printf-like formatter grows a fresh buffer per
// command, and its writer copies that into a second one; one buffer the
// connection keeps does for both. hiredis still reads and parses replies.
//
// The last is for a context that failed (a reply not in time): hiredis
// refuses to write on it, yet an undo written behind the late command must
// still reach the server. It runs in noexcept paths, so send_unread() and
// send_eval_unread() throw nothing and allocate nothing beyond hiredis's
// own formatting buffer.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distlock/connection_options.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/sharded_scripts.hpp"

namespace distlock::detail {

/// Commands are short (the longest is a script call): argv of up to this
/// many arguments is laid out on the stack, longer on the heap.
inline constexpr std::size_t stack_args = 16;

/// Calls use(ptrs, lens) with argv as hiredis takes it, and returns what
/// it returns.
template <class Use>
auto with_pointers(Args argv, Use&& use) {
  const char* stack_ptrs[stack_args];
  std::size_t stack_lens[stack_args];
  std::vector<const char*> heap_ptrs;
  std::vector<std::size_t> heap_lens;
  const char** ptrs = stack_ptrs;
  std::size_t* lens = stack_lens;
  if (argv.size() > stack_args) {
    heap_ptrs.resize(argv.size());
    heap_lens.resize(argv.size());
    ptrs = heap_ptrs.data();
    lens = heap_lens.data();
  }
  std::size_t i = 0;
  for (const std::string_view arg : argv) {
    ptrs[i] = arg.data();
    lens[i] = arg.size();
    ++i;
  }
  return use(ptrs, lens);
}

/// Appends argv to `out` as Redis's protocol has it: an array of bulk
/// strings, byte for byte what hiredis's formatting makes of it.
inline void append_command(Args argv, std::string& out) {
  std::size_t size = out.size() + 16;                               // "*<count>\r\n"
  for (const std::string_view arg : argv) size += arg.size() + 16;  // "$<length>\r\n" arg "\r\n"
  // Grown by doubling, not to the size asked: a reserve() that gives what
  // it is asked (libc++'s) would copy a long pipeline once per command.
  if (size > out.capacity()) out.reserve(std::max(size, 2 * out.capacity()));
  char digits[24];
  const auto header = [&](char mark, std::size_t count) {
    out.push_back(mark);
    out.append(digits, std::to_chars(digits, digits + sizeof digits, count).ptr);
    out.append("\r\n", 2);
  };
  header('*', argv.size());
  for (const std::string_view arg : argv) {
    header('$', arg.size());
    out.append(arg);
    out.append("\r\n", 2);
  }
}

/// append_command() into a string of its own (an armed attempt's).
inline std::string format_command(Args argv) {
  std::string formatted;
  append_command(argv, formatted);
  return formatted;
}

/// Writes all of `data` to the blocking socket `fd`; 0, or the errno of
/// the write that failed (EAGAIN: the socket's send timeout ran out). With
/// write(2), as hiredis writes, so SIGPIPE is handled as it always was
/// (ClientOptions::ignore_sigpipe).
inline int write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

/// Formats argv and writes it to `fd` without blocking, reading no reply
/// (Connection::send_behind). False if nothing was tried: argv too long to
/// lay out on the stack, or formatting failed. Best effort otherwise: a
/// full socket buffer drops the rest.
inline bool send_unread(int fd, Args argv) noexcept {
  // A connection writes nothing more once its hiredis context has an error,
  // so the command is written straight to the socket, after whatever the
  // connection still had queued (nothing: it flushes before reading).
  if (argv.size() > stack_args) return false;  // so that nothing below allocates or throws
  char* raw = nullptr;
  const long long size = with_pointers(argv, [&](const char** ptrs, const std::size_t* lens) {
    return static_cast<long long>(
        redisFormatCommandArgv(&raw, static_cast<int>(argv.size()), ptrs, lens));
  });
  struct FreeCommand {
    void operator()(char* command) const noexcept { redisFreeCommand(command); }
  };
  const std::unique_ptr<char, FreeCommand> formatted(raw);
  if (size <= 0 || !formatted) return false;
  std::size_t written = 0;
  const auto total = static_cast<std::size_t>(size);
  while (written < total) {
    const ssize_t n =
        ::send(fd, formatted.get() + written, total - written, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;  // a full socket buffer: the lease expires instead
    written += static_cast<std::size_t>(n);
  }
  // A reply already waiting here would make close() reset the connection,
  // and a reset can discard what the server has not read yet: our undo.
  char sink[4096];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  return true;
}

/// send_unread() of a script, by EVAL (no NOSCRIPT can be answered), in
/// its SPUBLISH twin when `sharded` (detail/sharded_scripts.hpp).
inline bool send_eval_unread(int fd, const Script& given, bool sharded, Args keys,
                             Args args) noexcept {
  if (3 + keys.size() + args.size() > stack_args) return false;  // nothing below allocates
  // The twin was made by the attempt this undoes, so this only looks it up.
  const Script* twin = &given;
  if (sharded) {
    try {
      twin = &with_sharded_publish(given);
    } catch (...) {
      return false;  // best effort, as the rest of it
    }
  }
  const Script& script = *twin;
  bool sent = false;
  // EVAL, not EVALSHA: nobody will read a NOSCRIPT.
  with_script_argv<stack_args>("EVAL", script.source, keys, args,
                               [&](Args argv) { sent = send_unread(fd, argv); });
  return sent;
}

}  // namespace distlock::detail
