// Link: one connection that carries many steps at once, for an event loop.
//
// A step is a command or a script sent with a sink that its answer goes
// to. Steps are pipelined: each is written as soon as the socket takes it,
// and replies, which Redis sends in the order of the commands, go to the
// sinks in the same order. Nothing here waits: the driver (an event loop)
// calls flush() until it returns true, waiting for fd() to be writable in
// between, and read() whenever fd() is readable (read() may queue writes
// too). Sinks run inside read(), flush() and fail(); they may send and
// forget steps on the link, but not destroy it.
//
// A step whose caller gave up is forgotten: its reply is read and dropped,
// and whatever the caller writes behind it (an undo) runs after it, as Redis
// runs one connection's commands in order. A script answered NOSCRIPT (the
// server lost its cache) is sent again by EVAL for a sink still waiting; a
// forgotten one is not, since an undo may already have run behind it. Any
// failure (I/O, a reply that does not parse, a reply a RESP2 connection is
// never sent, no reply within the command timeout) breaks the link: every
// waiting sink is told why, once, and the link takes no more steps.
#pragma once

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection_options.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// What a step comes back with: its reply (an error reply is a reply), or
/// why none will come (a ConnectionError or TimeoutError: the link broke).
struct LinkAnswer {
  std::optional<Reply> reply;
  std::exception_ptr failure;
};

class Link {
 public:
  using clock = std::chrono::steady_clock;
  using Sink = std::function<void(LinkAnswer)>;
  using Ticket = std::uint64_t;

  /// Connects as Connection does (blocking: run it where blocking is
  /// allowed).
  explicit Link(ConnectionOptions options) : connection_(std::move(options)) {}

  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  /// Queues a command; flush() writes it. Throws ConnectionError once the
  /// link is broken (make another).
  Ticket send(Args argv, Sink sink) { return send(argv, std::move(sink), command_timeout()); }
  /// As send(), for a command the server may take `timeout` to answer
  /// (WAIT); the steps behind it are given as long.
  Ticket send(Args argv, Sink sink, std::chrono::milliseconds timeout) {
    refuse_if_broken();
    connection_.append_argv(argv);
    return queued(std::move(sink), nullptr, {}, {}, timeout);
  }
  /// Queues a script by EVALSHA (EVAL where the server answers NOSCRIPT,
  /// so `script` must outlive the step: the library's are static).
  Ticket send_script(const Script& script, Args keys, Args args, Sink sink) {
    refuse_if_broken();
    connection_.append_evalsha(script, keys, args);
    return queued(std::move(sink), &script, keys, args, command_timeout());
  }

  /// Queues a script by EVAL, which is never answered NOSCRIPT: for a step
  /// that must run even if nobody waits for its reply (an undo; `sink` may
  /// be empty).
  Ticket send_eval(const Script& script, Args keys, Args args, Sink sink) {
    refuse_if_broken();
    connection_.append_eval(script, keys, args);
    return queued(std::move(sink), nullptr, {}, {}, command_timeout());
  }

  /// An undo: a script by EVAL, its reply dropped, behind every step
  /// queued. On a broken link it goes straight to the socket, best effort,
  /// as Connection::send_eval_behind() does: a late step applied after all
  /// is followed by it. Not when part of what was queued was never written:
  /// nothing from there on reached the server, so nothing is to be undone.
  void undo_eval(const Script& script, Args keys, Args args) noexcept {
    if (!broken()) {
      try {
        send_eval(script, keys, args, nullptr);
        return;
      } catch (...) {  // no memory: try the socket
      }
    }
    if (connection_.unsent() == 0) connection_.send_eval_behind(script, keys, args);
  }

  /// True if the server closed the idle link (restart, idle timeout) or
  /// sent something unasked: make another. Ask only when nothing is in
  /// flight. As the Client's pool does, it asks the kernel only once the
  /// link has been idle for 10 ms (the question is a system call).
  bool stale() noexcept { return connection_.stale_after_idle(std::chrono::milliseconds(10)); }

  /// Scripts publish a release by SPUBLISH, as on a cluster node.
  void publish_sharded() noexcept { connection_.set_sharded_publish(true); }

  /// The step's sink will not be called: its reply is read and dropped.
  /// Steps queued after it still run after it.
  void forget(Ticket ticket) noexcept {
    for (Pending& pending : pending_) {
      if (pending.ticket == ticket) pending.sink = nullptr;
    }
  }

  /// Writes what the socket takes now; true once everything queued is
  /// written. On a failure the link breaks (and it returns true: there is
  /// nothing left to wait for).
  bool flush() {
    if (broken()) return true;
    try {
      return connection_.flush_now();
    } catch (const Error&) {
      fail(std::current_exception());
      return true;
    }
  }

  /// Reads what the socket has, without waiting, and hands every complete
  /// reply to its sink. Call it when fd() is readable. Returns flush()'s
  /// answer: a sink, or a NOSCRIPT, may have queued more to write.
  bool read() {
    if (broken()) return true;
    try {
      connection_.read_available();
      while (std::optional<Reply> reply = connection_.next_buffered_reply()) {
        connection_.touch();
        if (!dispatch(std::move(*reply))) return true;
      }
    } catch (const Error&) {
      fail(std::current_exception());
      return true;
    }
    return flush();
  }

  /// Breaks the link if its oldest step's answer is overdue (its timeout,
  /// the command timeout unless send() was given one, has passed since it
  /// was queued, and it is not queued behind a step due later); the time
  /// to check again otherwise (nullopt: nothing waits).
  std::optional<clock::time_point> check_timeout(clock::time_point now) {
    if (broken() || pending_.empty()) return std::nullopt;
    const clock::time_point due = pending_.front().due;
    if (now < due) return due;
    const std::string text = connection_.options().endpoint() + ": no reply within " +
                             std::to_string(pending_.front().timeout.count()) + " ms";
    fail(std::make_exception_ptr(TimeoutError(Errc::timed_out, text)));
    return std::nullopt;
  }

  /// Breaks the link: every waiting sink gets `why`.
  void fail(std::exception_ptr why) {
    if (failure_ == nullptr) failure_ = why;
    std::deque<Pending> waiting;
    waiting.swap(pending_);
    for (Pending& pending : waiting) {
      if (pending.sink) pending.sink(LinkAnswer{std::nullopt, why});
    }
  }

  bool broken() const noexcept { return failure_ != nullptr || connection_.broken(); }
  /// Steps whose replies are still owed.
  std::size_t in_flight() const noexcept { return pending_.size(); }
  int fd() const noexcept { return connection_.fd(); }
  const ConnectionOptions& options() const noexcept { return connection_.options(); }

 private:
  struct Pending {
    Ticket ticket;
    Sink sink;  // null once forgotten
    // The server runs a connection's commands in turn: a step behind one
    // that may take long (WAIT) is not due before it.
    clock::time_point due;
    std::chrono::milliseconds timeout;
    // For a script: what an EVAL after NOSCRIPT needs.
    const Script* script;
    std::vector<std::string> keys;
    std::vector<std::string> args;
  };

  void refuse_if_broken() const {
    if (broken()) {
      throw ConnectionError(Errc::io_error,
                            options().endpoint() + ": not sent: the link broke earlier");
    }
  }

  std::chrono::milliseconds command_timeout() const noexcept {
    return connection_.options().command_timeout;
  }

  // When the answer to a step queued now with `timeout` is overdue.
  clock::time_point due_after(std::chrono::milliseconds timeout) const {
    const clock::time_point due = clock::now() + timeout;
    return pending_.empty() ? due : std::max(due, pending_.back().due);
  }

  Ticket queued(Sink sink, const Script* script, Args keys, Args args,
                std::chrono::milliseconds timeout) {
    Pending pending{++last_ticket_, std::move(sink), due_after(timeout), timeout, script, {}, {}};
    if (script != nullptr) {
      pending.keys.assign(keys.begin(), keys.end());
      pending.args.assign(args.begin(), args.end());
    }
    pending_.push_back(std::move(pending));
    return last_ticket_;
  }

  // Hands one reply to the oldest step's sink; false once the link broke.
  bool dispatch(Reply reply) {
    // A RESP2 connection is never sent RESP3 frames (hiredis 1.x reads
    // them): taken as an answer, one would shift every reply after it.
    if (reply.type() == ReplyType::other || pending_.empty()) {
      fail(std::make_exception_ptr(ConnectionError(
          Errc::protocol_error, options().endpoint() + ": a reply no command asked for")));
      return false;
    }
    Pending step = std::move(pending_.front());
    pending_.pop_front();
    if (step.script != nullptr && step.sink && reply.is_error() &&
        classify_server_error(reply.str()) == ServerErrorKind::noscript) {
      resend_by_eval(std::move(step));
      return !broken();
    }
    if (step.sink) step.sink(LinkAnswer{std::move(reply), nullptr});
    return !broken();
  }

  void resend_by_eval(Pending step) {
    const std::vector<std::string_view> keys(step.keys.begin(), step.keys.end());
    const std::vector<std::string_view> args(step.args.begin(), step.args.end());
    connection_.append_eval(*step.script, keys, args);
    step.script = nullptr;  // an EVAL is never answered NOSCRIPT
    step.due = due_after(step.timeout);
    pending_.push_back(std::move(step));
  }

  Connection connection_;
  std::deque<Pending> pending_;
  Ticket last_ticket_ = 0;
  std::exception_ptr failure_;
};

}  // namespace distlock::detail
