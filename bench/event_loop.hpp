// The event-loop floor of the async benchmarks (async_bench.cpp): raw
// commands sent the way an event loop sends them, on a context this
// thread runs. Each is written at once and its reply read once Asio says
// the socket is readable; a timed one also keeps a command timeout as
// distlock's links do: a timer armed while a reply is owed, cancelled when
// it comes.
#pragma once

#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <string>
#include <system_error>

#include "bench_support.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::bench {

/// A raw connection's commands, sent and answered on `io` one at a time.
class EventLoopCommands {
 public:
  EventLoopCommands(asio::io_context& io, redisContext* redis, bool timed)
      : io_(io), redis_(redis), socket_(io, redis->fd), timer_(io), timed_(timed) {}
  ~EventLoopCommands() { socket_.release(); }  // the descriptor is hiredis's
  EventLoopCommands(const EventLoopCommands&) = delete;
  EventLoopCommands& operator=(const EventLoopCommands&) = delete;

  /// `first` (answered with `first_type`), then `second` (an integer),
  /// run on the context until both are answered, as a cycle for
  /// run_paired(); false (recorded on `state`) on any other reply.
  auto cycle(benchmark::State& state, const RawCommand& first, int first_type,
             const RawCommand& second) {
    return [this, &state, &first, first_type, &second] {
      failed_ = nullptr;
      send(first, first_type, [this, &second] { send(second, REDIS_REPLY_INTEGER, [] {}); });
      io_.restart();
      io_.run();
      if (failed_ != nullptr) state.SkipWithError(failed_);
      return failed_ == nullptr;
    };
  }

 private:
  template <class Then>
  void send(const RawCommand& command, int type, Then then) {
    command.append(redis_);
    for (int done = 0; done == 0;) {
      if (redisBufferWrite(redis_, &done) != REDIS_OK) return fail("write failed");
    }
    if (timed_) {
      timer_.expires_after(std::chrono::seconds(1));
      timer_.async_wait([](const std::error_code&) {});
    }
    wait_reply(type, then);
  }

  template <class Then>
  void wait_reply(int type, Then then) {
    socket_.async_wait(asio::posix::stream_descriptor::wait_read,
                       [this, type, then](const std::error_code& ec) {
                         void* reply = nullptr;
                         if (ec || redisBufferRead(redis_) != REDIS_OK ||
                             redisGetReplyFromReader(redis_, &reply) != REDIS_OK) {
                           return fail("read failed");
                         }
                         if (reply == nullptr) return wait_reply(type, then);  // only a part
                         if (timed_) timer_.cancel();
                         const bool expected = static_cast<redisReply*>(reply)->type == type;
                         freeReplyObject(reply);
                         if (!expected) return fail("unexpected reply");
                         then();
                       });
  }

  void fail(const char* why) {
    failed_ = why;
    timer_.cancel();
  }

  asio::io_context& io_;
  redisContext* const redis_;
  asio::posix::stream_descriptor socket_;
  asio::steady_timer timer_;
  const bool timed_;
  const char* failed_ = nullptr;
};

// What Mutex sends for a try_lock() and its release, raw.
struct MutexCommands {
  const std::string token = std::string(32, 'f');
  const std::string sha = load_script(scripts::release.source);
  const RawCommand acquire{"SET", "bench:raw", token, "NX", "PX", "30000"};
  const RawCommand release{
      "EVALSHA", sha, "2", "bench:raw", detail::companion_key("bench:raw", "released"), token};
};

}  // namespace distlock::bench
