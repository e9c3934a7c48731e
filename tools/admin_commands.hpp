// The subcommands that do not hold a lock: `status` (who holds NAME, how,
// for how long; text or JSON), `release --force --yes` (delete NAME whoever
// holds it, and wake its waiters) and `wait` (block until NAME is free).
// A key that is no lock (the library's classify_lock) is reported as such
// by each, with status 65, and left alone.
#pragma once

#include <distlock/distlock.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "exit_status.hpp"
#include "lock_state.hpp"
#include "where.hpp"

namespace distlock::cli {

// ---------------------------------------------------------------- status

struct StatusArgs {
  Where where;
  std::string name;
  bool json = false;
};

inline std::string json_string(std::string_view text) {
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

inline int show_status(const StatusArgs& args) {
  check_name(args.name);
  const LockState state = read_state(*backend_of(args.where), args.name);
  const bool held = state.layout != Layout::none && state.layout != Layout::other;
  const bool expires = state.pttl >= 0;
  if (args.json) {
    std::ostringstream out;
    out << "{\"name\":" << json_string(args.name) << ",\"held\":" << (held ? "true" : "false")
        << ",\"kind\":" << layout_json(state.layout)
        << ",\"redis_type\":" << json_string(state.redis_type)
        << ",\"holds\":" << json_string(state.holds)
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
    if (state.layout == Layout::other) {
      std::printf("state:   not a lock (%s)\n", state.holds.c_str());
    } else {
      std::printf("state:   %s\n", held ? "held" : "free");
    }
    if (held) {
      std::printf("layout:  %s\n", layout_text(state.layout));
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
  if (state.layout == Layout::other) return status::not_lock;
  return held ? status::ok : status::not_held;
}

// ---------------------------------------------------------------- release

struct ReleaseArgs {
  Where where;
  std::string name;
  bool force = false;
  bool yes = false;
};

inline int force_release(const ReleaseArgs& args) {
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
  LockState state;
  const int deleted = [&] {
    const std::unique_ptr<Backend> backend = backend_of(args.where);
    state = read_state(*backend, args.name);
    if (state.layout == Layout::none) {
      say("release", args.name + " is not held; nothing deleted");
      return status::not_held;
    }
    // The library's force_unlock checks the layout in the step that
    // deletes, and wakes the waiters of every layout; the read above only
    // names the holders.
    try {
      if (!force_unlock(*backend, args.name)) {
        say("release", args.name + " went away before it could be deleted");
        return status::not_held;
      }
    } catch (const NotALockError& error) {
      say("release", text_of(error));
      return status::not_lock;
    }
    return status::ok;
  }();
  if (deleted != status::ok) return deleted;
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

inline int wait_free(const WaitArgs& args) {
  check_name(args.name);
  std::optional<steady::time_point> deadline;
  if (args.timeout != "forever") {
    deadline = steady::now() + duration_option(args.timeout, "--timeout");
  }
  const std::unique_ptr<Backend> backend = backend_of(args.where);
  milliseconds pause = 10ms;
  for (;;) {
    const long long pttl = on_key(*backend, args.name, [&](Connection& connection) {
      return connection.command("PTTL", args.name).integer();
    });
    if (pttl == -2) return status::ok;
    if (pttl == -1) {
      // A key that never expires is no lock (classify_lock): it would be waited for in vain.
      const LockState state = read_state(*backend, args.name);
      if (state.layout == Layout::other) {
        say("wait", "key '" + args.name + "' is " + state.holds + ", not a lock; not waited for");
        return status::not_lock;
      }
    }
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

}  // namespace distlock::cli
