// What `status` and `release` read of a lock: its key's layout (a string
// lease, Redisson's hash lock, Redisson's read-write lock, or not a lock),
// its holders, its lease and its fence counter, with plain commands.
//
// The names below are the layouts the README documents; the tool rebuilds
// them here because the library keeps its own functions for them in detail::.
#pragma once

#include <distlock/distlock.hpp>

#include <charconv>
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
    case Layout::other: return "not a lock (no expiry, or not a string or hash)";
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

inline LockState read_state(Client& client, const std::string& key) {
  LockState state;
  state.redis_type = std::string(client.command("TYPE", key).str());
  state.pttl = client.command("PTTL", key).integer();
  if (state.redis_type == "none") {
    state.layout = Layout::none;
  } else if (state.pttl < 0) {
    // Every layout sets the key and its expiry in one step: a key that never
    // expires is not a lock's.
    state.layout = Layout::other;
  } else if (state.redis_type == "string") {
    state.layout = Layout::lease;
    const Reply value = client.command("GET", key);
    if (!value.is_nil()) state.holders.push_back({id_prefix(value.str()), 1, true});
  } else if (state.redis_type == "hash") {
    const Reply fields = client.command("HGETALL", key);
    state.layout = Layout::reentrant;
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      const std::string_view field = fields[i].str();
      const std::string_view value = fields[i + 1].str();
      if (field == "mode") {
        state.layout = Layout::rwlock;
        state.mode = std::string(value);
        continue;
      }
      constexpr std::string_view write_suffix = ":write";
      const bool write = field.size() > write_suffix.size() &&
                         field.substr(field.size() - write_suffix.size()) == write_suffix;
      state.holders.push_back({id_prefix(field), to_integer(value), write});
    }
    // A Redisson lock's owner holds it alone; in a read-write lock only the writer does.
    if (state.layout == Layout::reentrant) {
      for (Holder& h : state.holders) h.exclusive = true;
    }
  } else {
    state.layout = Layout::other;
  }
  if (state.redis_type == "none") state.pttl = -2;
  const Reply fence = client.command("GET", companion(key, "fence"));
  if (fence.is_string()) state.fence = to_integer(fence.str());
  return state;
}

}  // namespace distlock::cli
