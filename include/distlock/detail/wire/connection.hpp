// Connection: one connection to one server, plain or TLS (its options are
// in connection_options.hpp, its socket in detail/wire/socket.hpp, the
// members that do its I/O in detail/wire/connection_io.hpp).
//
// Commands are formatted and written by the connection itself, each argument
// with its explicit length (detail/wire/command_format.hpp), so keys and tokens
// may hold any bytes; hiredis's reader parses the replies. Every failure
// becomes a distlock exception (error.hpp). A connection that saw an I/O
// error or a timeout is marked broken and must not be used again: a late
// reply still on the wire would be read as the answer to the next command.
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection_options.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/wire/authenticate.hpp"
#include "distlock/detail/wire/command_format.hpp"
#include "distlock/detail/wire/sharded_scripts.hpp"
#include "distlock/detail/wire/socket.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock {

/// One connection to one server. Not thread-safe: use it from one thread at a
/// time (Client hands connections out one borrower at a time).
class Connection {
 public:
  /// Connects (with TLS where options.tls asks), authenticates (asking
  /// options.credentials when set: detail/wire/authenticate.hpp) and selects
  /// the db. Throws ConnectionError, TimeoutError or ServerError (e.g.
  /// WRONGPASS) on failure.
  explicit Connection(ConnectionOptions options);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// True after an I/O error, a timeout or a protocol error: discard it (it
  /// refuses further commands with a ConnectionError).
  bool broken() const noexcept { return broken_; }
  const ConnectionOptions& options() const noexcept { return options_; }

  /// Sends one command and waits for its reply. An error reply is thrown as
  /// ServerError; the connection stays usable after one.
  template <class... Arg>
  Reply command(const Arg&... args) {
    const std::string_view argv[] = {std::string_view(args)...};
    return command_argv(detail::Args(argv, sizeof...(Arg)));
  }
  Reply command_argv(detail::Args argv) {
    append_argv(argv);
    append_trailer();
    if (read_reply().is_error()) throw_error();
    return take_last();
  }

  /// Pipelines `argv` behind the next command() or eval(), in the same
  /// write, its reply left unread for the caller (trailed() says it was
  /// sent): a WAIT confirming a grant costs no round trip of its own. An
  /// EVALSHA answered NOSCRIPT reads and drops it (its answer would predate
  /// the EVAL that follows). untrail() disarms one not yet sent.
  void trail(detail::Args argv) { trailer_.assign(argv.begin(), argv.end()); }
  void untrail() noexcept { trailer_.clear(); }
  bool trailed() const noexcept { return trailed_; }
  /// Reads the reply of the trailed command.
  const Reply& read_trailing_reply() {
    trailed_ = false;
    return read_reply();
  }

  /// Queues a command without waiting (a pipeline); read its reply with
  /// read_reply(). flush() sends what is queued without reading.
  void append_argv(detail::Args argv);
  template <class... Arg>
  void append(const Arg&... args) {
    const std::string_view argv[] = {std::string_view(args)...};
    append_argv(detail::Args(argv, sizeof...(Arg)));
  }
  void flush();
  /// For an event loop: writes what the socket takes now without waiting;
  /// true once nothing is left unsent (else wait until fd() is writable and
  /// call it again). Throws as flush() does on a failure.
  bool flush_now();
  /// Bytes appended and not yet written.
  std::size_t unsent() const noexcept { return unsent_.size(); }

  /// Reads the reply to the oldest queued command. Error replies are returned,
  /// not thrown, so a pipeline can look at each one.
  const Reply& read_reply();
  /// For an event loop that waits on fd() itself (a subscriber): reads what
  /// the socket has, without blocking if poll() said it is readable, and
  /// returns the next complete reply, if there is one.
  void read_available();
  std::optional<Reply> next_buffered_reply();

  /// Owes a reply it did not ask for (a subscriber's next message), named
  /// `verb` in errors: read_reply() waits for it by the timeout.
  void expect_reply(std::string_view verb) noexcept {
    if (pending_++ == 0) remember_verb(verb);
  }

  /// Moves the reply read last out of the connection.
  Reply take_last() noexcept { return std::move(last_); }

  /// Runs a script: EVALSHA, and on NOSCRIPT one EVAL (which also caches it).
  Reply eval(const Script& script, detail::Args keys, detail::Args args);
  /// For a Redis Cluster's ASK redirect, whose ASKING lets only the next
  /// command in: while set, eval() sends ASKING again before the EVAL that
  /// follows a NOSCRIPT.
  void set_asking(bool on) noexcept { asking_ = on; }
  /// Whether set_asking() is on: a second command written in the same step
  /// needs an ASKING of its own.
  bool asking() const noexcept { return asking_; }
  /// For a Redis Cluster (7.0 or later): while set, scripts run here
  /// announce releases with SPUBLISH instead of PUBLISH
  /// (detail/wire/sharded_scripts.hpp), and publish_verb() says SPUBLISH.
  void set_sharded_publish(bool on) noexcept { sharded_publish_ = on; }
  bool sharded_publish() const noexcept { return sharded_publish_; }
  /// The command that announces a release on this connection.
  std::string_view publish_verb() const noexcept {
    return sharded_publish_ ? "SPUBLISH" : "PUBLISH";
  }
  /// Queues the EVALSHA of a script (the caller handles NOSCRIPT replies).
  void append_evalsha(const Script& script, detail::Args keys, detail::Args args);
  /// The same by EVAL (the script's source): for where a NOSCRIPT was met,
  /// or cannot be read. It loads the variant append_evalsha() names.
  void append_eval(const Script& script, detail::Args keys, detail::Args args);

  /// After a command on this connection failed to answer in time: writes
  /// argv behind it, without waiting and without a reply ever being read.
  /// Redis runs one connection's commands in order, so if the late command
  /// is applied, this one is applied right after it. Best effort (a full
  /// socket buffer drops it); the connection stays broken.
  void send_behind(detail::Args argv) noexcept;
  /// send_behind() of a script, by EVAL (no NOSCRIPT can be answered).
  void send_eval_behind(const Script& script, detail::Args keys, detail::Args args) noexcept;

  /// Changes the reply timeout of this connection (a no-op if unchanged).
  /// One shorter than the usual (a step cut to a caller's deadline) is kept
  /// by poll(), to the millisecond; the usual one by the socket.
  void set_timeout(std::chrono::milliseconds timeout);
  /// The usual reply timeout, when it is not the options' (a connection
  /// made in a hurry, its options cut to a caller's deadline).
  void set_usual_timeout(std::chrono::milliseconds usual) noexcept { usual_timeout_ = usual; }
  std::chrono::milliseconds usual_timeout() const noexcept { return usual_timeout_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  /// Replies still owed by the server for appended commands.
  std::size_t pending() const noexcept { return pending_; }

  /// True if the server closed this idle connection (restart, CLIENT KILL,
  /// idle timeout) or sent something unasked: it must not be reused. One
  /// poll() with a zero timeout.
  bool stale() noexcept {
    if (broken_ || pending_ != 0) return true;
    return socket_.sent_unasked();
  }

  /// stale(), but only asks the kernel if the connection has been idle for
  /// at least `idle`; a connection used moments ago is taken as live.
  bool stale_after_idle(std::chrono::steady_clock::duration idle) noexcept {
    if (broken_ || pending_ != 0) return true;
    return std::chrono::steady_clock::now() - last_used_ >= idle && stale();
  }

  /// Records that the connection was just used (Client does so on return).
  void touch() noexcept { last_used_ = std::chrono::steady_clock::now(); }

  /// True once it has been open options().max_connection_age (never when
  /// that is 0): whoever keeps it should replace it.
  bool aged() const noexcept {
    // The clock is read only when there is an age: the pool asks twice a call.
    return options_.max_connection_age.count() > 0 && std::chrono::steady_clock::now() >= aged_at();
  }
  /// When it ages (meaningful only with a max_connection_age).
  std::chrono::steady_clock::time_point aged_at() const noexcept {
    return opened_ + options_.max_connection_age;
  }

  /// The socket, for callers that wait on several connections with poll().
  /// What poll() calls readable has been read by read_available() once it
  /// returns: nothing is kept back where poll() cannot see it (TLS).
  int fd() const noexcept { return socket_.fd(); }
  bool tls() const noexcept { return socket_.tls(); }

 private:
  struct FreeReader {
    void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
  };
  static const ConnectionOptions& validated(const ConnectionOptions& options) {
    options.validate();
    return options;
  }

  // Reads from the socket into the reader; waits for something unless
  // `wait` is false.
  void fill(bool wait);
  // Marks the connection broken and throws what went wrong: TimeoutError,
  // or ConnectionError (io_error; protocol_error for a reply that does not
  // parse).
  [[noreturn]] void fail(const char* during, const detail::IoStatus& status);
  [[noreturn]] void fail_to_parse();
  std::string blame() const;
  void remember_verb(std::string_view verb) noexcept {
    verb_size_ = std::min(verb.size(), sizeof verb_);
    std::memcpy(verb_, verb.data(), verb_size_);
  }
  void append_script(std::string_view verb, std::string_view body, detail::Args keys,
                     detail::Args args);
  // The script as this connection runs it: its SPUBLISH twin on a cluster
  // node (set_sharded_publish), the script itself elsewhere.
  const Script& as_run(const Script& given) const {
    return sharded_publish_ ? detail::with_sharded_publish(given) : given;
  }
  // Throws the error reply read last as ServerError. A Redis Cluster's
  // redirect met here, off a ClusterClient (whose connections publish
  // sharded and follow redirects themselves), says what would follow it.
  [[noreturn]] void throw_error() const {
    const std::string_view reply = last_.str();
    const std::string_view word = reply.substr(0, reply.find(' '));
    if (sharded_publish_ || (word != "MOVED" && word != "ASK")) throw ServerError(reply);
    throw ServerError(std::string(reply) +
                      " (a Redis Cluster node: Client follows no redirects; use ClusterClient)");
  }
  // The trail()ed command, once, behind the command or script just appended.
  void append_trailer() {
    if (trailer_.empty()) return;
    append_argv(std::vector<std::string_view>(trailer_.begin(), trailer_.end()));
    trailer_.clear();
    trailed_ = true;
  }

  ConnectionOptions options_;
  detail::Socket socket_;
  std::unique_ptr<redisReader, FreeReader> reader_{redisReaderCreate()};
  std::chrono::milliseconds timeout_{};
  std::size_t pending_ = 0;
  bool broken_ = false;
  bool asking_ = false;
  bool sharded_publish_ = false;
  std::chrono::steady_clock::time_point last_used_{};
  const std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  Reply last_{nullptr};
  std::string unsent_;                // appended commands, formatted, not yet written
  std::vector<std::string> trailer_;  // trail()ed, not yet sent
  bool trailed_ = false;              // sent, its reply not yet read
  bool exact_ = false;                // the timeout is cut short: poll() keeps it
  bool answered_ = false;             // a reply has been read (for a hint on the first)
  std::chrono::milliseconds usual_timeout_{options_.command_timeout};
  char verb_[16] = {};  // the first command of the pipeline in flight, for messages
  std::size_t verb_size_ = 0;
};

}  // namespace distlock

// The bodies of the members that do I/O: in every unit header-only, in the
// compiled unit only when compiled separately (detail/base/config.hpp).
#if DISTLOCK_DEFINES_BODIES
#include "distlock/detail/wire/connection_io.hpp"  // IWYU pragma: export
#endif
