// Commands as Connection (detail/wire/connection.hpp) hands them on: formatted into one
// buffer the connection keeps, or, on a connection that broke (a reply not
// in time), written at once by send_unread(): nothing more is written on it
// the usual way (Connection::append_argv() refuses), yet an undo written
// behind the late command must still reach the server.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>

#include "distlock/connection_options.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/wire/sharded_scripts.hpp"
#include "distlock/detail/wire/socket.hpp"

namespace distlock::detail {

/// Commands are short (the longest is a script call): a script call's argv
/// of up to this many arguments is laid out on the stack, longer on the
/// heap (with_script_argv in args.hpp).
inline constexpr std::size_t stack_args = 16;

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

/// Formats argv and writes it to `socket` without blocking, reading no reply
/// (Connection::send_behind). False if nothing was tried: formatting found
/// no memory. Best effort otherwise: a full socket buffer drops the rest.
inline bool send_unread(Socket& socket, Args argv) noexcept {
  // Written straight to the socket, after whatever the connection still had
  // queued (nothing: it flushes before reading).
  std::string formatted;
  try {
    append_command(argv, formatted);
  } catch (...) {
    return false;
  }
  std::string_view unsent = formatted;
  while (!unsent.empty()) {
    const long n = socket.send_now(unsent);
    if (n <= 0) break;  // a full socket buffer: the lease expires instead
    unsent.remove_prefix(static_cast<std::size_t>(n));
  }
  // A reply already waiting here would make close() reset the connection,
  // and a reset can discard what the server has not read yet: our undo.
  socket.drain();
  return true;
}

/// send_unread() of a script, by EVAL (no NOSCRIPT can be answered), in
/// its SPUBLISH twin when `sharded` (detail/wire/sharded_scripts.hpp).
inline bool send_eval_unread(Socket& socket, const Script& given, bool sharded, Args keys,
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
                               [&](Args argv) { sent = send_unread(socket, argv); });
  return sent;
}

}  // namespace distlock::detail
