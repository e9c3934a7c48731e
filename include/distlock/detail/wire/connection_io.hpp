// The members of Connection (detail/wire/connection.hpp) that do its I/O: connecting,
// writing what is appended, reading and parsing replies, running scripts
// (EVALSHA, and EVAL on NOSCRIPT), timeouts cut to a deadline, and turning
// every failure into the error that names the endpoint, the command and
// the timeout. detail/wire/connection.hpp includes it; nothing else should.
#pragma once

#include <hiredis/hiredis.h>
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "distlock/detail/base/config.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/tls.hpp"

namespace distlock {

DISTLOCK_DECL Connection::Connection(ConnectionOptions options)
    : options_(std::move(options)),
      socket_(validated(options_), std::chrono::steady_clock::now() + options_.connect_timeout) {
  if (!reader_) throw ConnectionError(Errc::connect_failed, options_.endpoint() + ": no memory");
  set_timeout(options_.command_timeout);
  detail::authenticate(options_, [this](const std::string& user, const std::string& password) {
    if (user.empty()) {
      command("AUTH", password);
    } else {
      command("AUTH", user, password);
    }
  });
  if (options_.db != 0) command("SELECT", detail::Decimal(options_.db));
}

DISTLOCK_DECL void Connection::append_argv(detail::Args argv) {
  const std::string_view verb = argv.size() == 0 ? std::string_view() : *argv.begin();
  // What broke it (a timeout, most often) may still be answered: a command
  // written now would read that late reply as its own.
  if (broken_) {
    throw ConnectionError(Errc::io_error, options_.endpoint() + ": " + std::string(verb) +
                                              ": not sent: the connection broke earlier");
  }
  if (pending_ == 0) remember_verb(verb);
  detail::append_command(argv, unsent_);
  ++pending_;
}

DISTLOCK_DECL void Connection::flush() {
  if (unsent_.empty()) return;
  const detail::IoStatus status = socket_.write_all(unsent_);
  // A pipeline of thousands (a renewal round) leaves no large buffer behind.
  if (unsent_.capacity() > 64 * 1024) {
    std::string().swap(unsent_);
  } else {
    unsent_.clear();
  }
  if (status.kind != detail::IoStatus::ok) fail("write", status);
}

DISTLOCK_DECL bool Connection::flush_now() {
  if (unsent_.empty()) return true;
  detail::IoStatus status;
  unsent_.erase(0, socket_.write_now(unsent_, status));
  if (status.kind != detail::IoStatus::ok) fail("write", status);
  return unsent_.empty();
}

DISTLOCK_DECL const Reply& Connection::read_reply() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) fail_to_parse();
  if (raw == nullptr) {
    flush();
    // A timeout cut short (by a caller's deadline) is kept by poll(), to the
    // millisecond: the socket's own timeout is rounded up to the kernel's
    // tick, and returns 4 to 10 ms late.
    if (exact_ && detail::poll_one(socket_.fd(), POLLIN, static_cast<int>(timeout_.count())) == 0) {
      fail("read", {detail::IoStatus::timed_out, {}});
    }
    do {
      fill(/*wait=*/true);
      if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) fail_to_parse();
    } while (raw == nullptr);
  }
  // hiredis 1.x reads RESP3 frames (a push, a map, a double...), which a
  // RESP2 connection is never sent (0.14 refuses them as it parses). Taken
  // as the answer, a push would leave the real one on the wire for the next
  // command: the connection breaks, as at a reply that does not parse.
  if (const int type = static_cast<redisReply*>(raw)->type;
      type < REDIS_REPLY_STRING || type > REDIS_REPLY_ERROR) {
    freeReplyObject(raw);
    broken_ = true;
    throw ConnectionError(Errc::protocol_error, blame() + "parse: a reply of RESP3 type " +
                                                    std::to_string(type) +
                                                    ", which a RESP2 connection is never sent");
  }
  --pending_;
  answered_ = true;
  last_ = Reply(static_cast<redisReply*>(raw));
  return last_;
}

DISTLOCK_DECL void Connection::fill(bool wait) {
  char buffer[16 * 1024];
  detail::IoStatus status;
  const std::size_t got = socket_.read(buffer, sizeof buffer, wait, status);
  if (status.kind != detail::IoStatus::ok) fail("read", status);
  if (got > 0 && redisReaderFeed(reader_.get(), buffer, got) != REDIS_OK) fail_to_parse();
}

DISTLOCK_DECL void Connection::read_available() { fill(/*wait=*/false); }

DISTLOCK_DECL std::optional<Reply> Connection::next_buffered_reply() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) fail_to_parse();
  if (raw == nullptr) return std::nullopt;
  if (pending_ > 0) --pending_;
  answered_ = true;
  return Reply(static_cast<redisReply*>(raw));
}

DISTLOCK_DECL void Connection::append_script(std::string_view verb, std::string_view body,
                                             detail::Args keys, detail::Args args) {
  detail::with_script_argv<detail::stack_args>(verb, body, keys, args,
                                               [&](detail::Args argv) { append_argv(argv); });
}

DISTLOCK_DECL void Connection::append_evalsha(const Script& script, detail::Args keys,
                                              detail::Args args) {
  append_script("EVALSHA", as_run(script).sha1, keys, args);
}

DISTLOCK_DECL void Connection::append_eval(const Script& script, detail::Args keys,
                                           detail::Args args) {
  append_script("EVAL", as_run(script).source, keys, args);
}

DISTLOCK_DECL Reply Connection::eval(const Script& given, detail::Args keys, detail::Args args) {
  const auto sent = std::chrono::steady_clock::now();
  const Script& script = as_run(given);
  append_script("EVALSHA", script.sha1, keys, args);
  append_trailer();
  if (read_reply().is_error() && classify_server_error(last_.str()) == ServerErrorKind::noscript) {
    if (trailed_) read_trailing_reply();
    // The server lost its script cache (restart, failover, SCRIPT FLUSH):
    // EVAL runs the script and caches it for the next EVALSHA. The reply
    // timeout was set for the whole step (a caller's deadline cuts it), so
    // the EVAL gets only what the EVALSHA left of it, not a second one.
    const std::chrono::milliseconds whole = timeout_;
    const auto left = whole - std::chrono::ceil<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - sent);
    if (left < std::chrono::milliseconds(1)) {
      throw TimeoutError(Errc::timed_out, options_.endpoint() +
                                              ": EVAL after NOSCRIPT: no time left of " +
                                              std::to_string(whole.count()) + " ms");
    }
    set_timeout(left);
    if (asking_) command("ASKING");
    append_script("EVAL", script.source, keys, args);
    read_reply();
    set_timeout(whole);
  }
  if (last_.is_error()) throw_error();
  return take_last();
}

DISTLOCK_DECL void Connection::set_timeout(std::chrono::milliseconds timeout) {
  exact_ = timeout < usual_timeout_;
  if (timeout == timeout_) return;
  try {
    socket_.set_timeout(timeout);
  } catch (...) {
    broken_ = true;
    throw;
  }
  timeout_ = timeout;
}

DISTLOCK_DECL std::string Connection::blame() const {
  // The endpoint and the command that was waiting, so that a timeout in a
  // log says what it was and against whom, not just "EAGAIN".
  std::string reason = options_.endpoint() + ": ";
  if (verb_size_ > 0) reason.append(verb_, verb_size_).append(": ");
  return reason;
}

DISTLOCK_DECL void Connection::fail(const char* during, const detail::IoStatus& status) {
  broken_ = true;
  if (status.kind == detail::IoStatus::timed_out) {
    throw TimeoutError(Errc::timed_out,
                       blame() + "no reply within " + std::to_string(timeout_.count()) + " ms");
  }
  std::string reason = blame() + during + ": " + status.what;
  // A TLS port closes (or resets) on a plaintext command without a word.
  if (!answered_ && !socket_.tls()) reason += " before any reply (a TLS port? use rediss://)";
  throw ConnectionError(Errc::io_error, reason);
}

DISTLOCK_DECL void Connection::fail_to_parse() {
  broken_ = true;
  std::string reason = blame() + "parse: " + reader_->errstr;
  // What a TLS port answers a plaintext command with, where it answers.
  if (!answered_ && !socket_.tls()) reason += " (a TLS port? use rediss://)";
  throw ConnectionError(Errc::protocol_error, reason);
}

DISTLOCK_DECL void Connection::send_behind(detail::Args argv) noexcept {
  if (detail::send_unread(socket_, argv)) broken_ = true;
}

DISTLOCK_DECL void Connection::send_eval_behind(const Script& given, detail::Args keys,
                                                detail::Args args) noexcept {
  if (detail::send_eval_unread(socket_, given, sharded_publish_, keys, args)) broken_ = true;
}

}  // namespace distlock
