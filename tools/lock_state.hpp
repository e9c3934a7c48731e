// What `status` and `release` read of a lock: its key's layout (a string
// lease, Redisson's hash lock, Redisson's read-write lock, or not a lock),
// its holders, its lease and its fence counter, in one MULTI of reads.
//
// Which keys are locks is the library's rule (classify_lock(), as inspect()
// and force_unlock() apply it), so the tool and the library never disagree.
// The names below are the layouts docs/locks.md documents; the tool rebuilds
// them here because the library keeps its own functions for them in detail::.
#pragma once

#include <distlock/distlock.hpp>

#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace distlock::cli {

// "{key}:suffix", or "key:suffix" when key already has a non-empty hash tag.
inline std::string companion(const std::string& key, const std::string& suffix) {
  const std::size_t open = key.find('{');
  const std::size_t close = open == std::string::npos ? open : key.find('}', open + 1);
  const bool tagged = close != std::string::npos && close > open + 1;
  return (tagged ? key : "{" + key + "}") + ":" + suffix;
}

// Redisson's "prefix:{key}", or "prefix:key" when key contains a '{'.
inline std::string redisson_name(const std::string& prefix, const std::string& key) {
  return prefix + ":" + (key.find('{') != std::string::npos ? key : "{" + key + "}");
}

// The part of a token or owner id shown to people and put in DISTLOCK_TOKEN:
// enough to tell holders apart, not enough to release or extend a lease.
inline std::string id_prefix(std::string_view id) { return std::string(id.substr(0, 8)); }

enum class Layout { none, lease, reentrant, rwlock, other };

inline const char* layout_json(Layout layout) {
  switch (layout) {
    case Layout::lease: return "\"lease\"";
    case Layout::reentrant: return "\"reentrant\"";
    case Layout::rwlock: return "\"rwlock\"";
    case Layout::other: return "\"other\"";
    case Layout::none: break;
  }
  return "null";
}

inline const char* layout_text(Layout layout) {
  switch (layout) {
    case Layout::lease: return "string lease (Mutex, SimpleMutex, Redlock; SET key token PX ttl)";
    case Layout::reentrant: return "Redisson hash lock (ReentrantMutex, RLock)";
    case Layout::rwlock: return "Redisson read-write lock (SharedMutex, RReadWriteLock)";
    case Layout::other: return "not a lock";
    case Layout::none: break;
  }
  return "none";
}

struct Holder {
  std::string id;
  long long holds = 1;
  bool exclusive = true;  // false for a SharedMutex reader
};

struct LockState {
  Layout layout = Layout::none;
  std::string holds;            // what the key holds, in words (LockLayout::holds)
  std::string redis_type;       // TYPE's answer
  long long pttl = -2;          // PTTL's answer: -2 no key, -1 no expiry
  std::string mode;             // rwlock: "read" or "write"
  std::vector<Holder> holders;  // lease: one; Redisson layouts: one per field
  std::optional<long long> fence;
};

inline long long to_integer(std::string_view text) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : 0;
}

inline Layout layout_of(LockKind kind) {
  switch (kind) {
    case LockKind::none: return Layout::none;
    case LockKind::lease: return Layout::lease;
    case LockKind::reentrant: return Layout::reentrant;
    case LockKind::read:
    case LockKind::write: return Layout::rwlock;
    case LockKind::other: break;
  }
  return Layout::other;
}

// send(connection) where `key` lives, as a lock on it sends its steps: the
// one server of a Client, the master a SentinelClient follows, or the node
// of a cluster that owns the key's slot, following a MOVED or ASK (the
// fence counter shares the key's slot, see companion()).
template <class Send>
auto on_key(const Backend& backend, const std::string& key, Send&& send) {
  return detail::on_site(*backend.site_for(key), detail::no_deadline, std::forward<Send>(send));
}

// The answers of read_transaction()'s EXEC: TYPE, PTTL, HGETALL, GET, GET.
inline LockState state_of(const Reply& answers) {
  LockState state;
  state.redis_type = std::string(answers[0].str());
  state.pttl = answers[1].integer();
  const LockLayout layout = classify_lock(state.redis_type, state.pttl, answers[2]);
  state.layout = layout_of(layout.kind);
  state.holds = layout.holds;
  if (state.layout == Layout::lease) {
    if (answers[3].is_string()) state.holders.push_back({id_prefix(answers[3].str()), 1, true});
  } else if (state.layout == Layout::reentrant || state.layout == Layout::rwlock) {
    const ReplyView fields = answers[2];
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      const std::string_view field = fields[i].str();
      const std::string_view value = fields[i + 1].str();
      if (field == "mode") {
        state.mode = std::string(value);
        continue;
      }
      constexpr std::string_view write_suffix = ":write";
      const bool write = field.size() > write_suffix.size() &&
                         field.substr(field.size() - write_suffix.size()) == write_suffix;
      // A Redisson lock's owner holds it alone; in a read-write lock only the writer does.
      state.holders.push_back(
          {id_prefix(field), to_integer(value), write || state.layout == Layout::reentrant});
    }
  }
  if (answers[4].is_string()) state.fence = to_integer(answers[4].str());
  return state;
}

inline LockState read_transaction(Connection& connection, const std::string& key) {
  connection.append("MULTI");
  connection.append("TYPE", key);
  connection.append("PTTL", key);
  connection.append("HGETALL", key);  // an error for a key that is no hash: not read then
  connection.append("GET", key);      // likewise for one that is no string
  connection.append("GET", companion(key, "fence"));
  connection.append("EXEC");
  for (int queued = 0; queued < 6; ++queued) connection.read_reply().throw_if_error();
  const Reply& answers = connection.read_reply().throw_if_error();
  if (answers.size() != 5) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
  return state_of(answers);
}

inline LockState read_state(const Backend& backend, const std::string& key) {
  return on_key(backend, key,
                [&](Connection& connection) { return read_transaction(connection, key); });
}

}  // namespace distlock::cli
