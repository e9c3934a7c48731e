// What ReentrantMutex and SharedMutex share: Redisson's names (owner ids,
// channels, companion keys), the local record of one owner's hold on a
// hash field, and the per-thread count that keeps an ambiguous acquire's
// undo from taking another lock object's hold.
//
// Redisson names an owner "<client id>:<thread id>" and counts that owner's
// holds in a hash field of that name; every lock object of one thread on
// one Client is the same owner to Redis. distlock keeps re-entry through
// one lock object local (no round trip), so the Redis count is the number
// of lock objects of the thread that hold the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "distlock/detail/time.hpp"
#include "distlock/lease.hpp"
#include "distlock/reply.hpp"
#include "distlock/watchdog.hpp"

namespace distlock::detail {

/// A number for the calling thread, unique in this process and fixed for
/// the thread's life, in decimal: the thread part of an owner id.
/// (std::thread::id has no portable numeric value.)
inline const std::string& this_thread_number() {
  static std::atomic<unsigned long long> next{1};
  thread_local const std::string number = std::to_string(next.fetch_add(1));
  return number;
}

/// The calling thread's owner id on a Client: "<client id>:<thread number>".
inline std::string owner_id(std::string_view client_id) {
  std::string owner(client_id);
  owner += ':';
  owner += this_thread_number();
  return owner;
}

/// The name as Redisson puts it in a companion name: as it is if it contains
/// a '{' anywhere, else wrapped in braces. (Redisson does not check that the
/// braces form a hash tag; a Java client names the same channel only if we
/// do not either. detail::companion_key, for distlock's own keys, does.)
inline std::string redisson_tagged(std::string_view name) {
  if (name.find('{') != std::string_view::npos) return std::string(name);
  std::string tagged;
  tagged.reserve(name.size() + 2);
  tagged += '{';
  tagged += name;
  tagged += '}';
  return tagged;
}

/// Redisson's prefixName: "prefix:{name}" ("prefix:name" if name has a '{').
inline std::string redisson_prefixed(std::string_view prefix, std::string_view name) {
  std::string out(prefix);
  out += ':';
  out += redisson_tagged(name);
  return out;
}

/// How the Redisson-layout scripts answer a release or extend: 1 (or 2)
/// done, 0 no hash (or the hold's own lease had run out), -1 another owner.
inline TokenCheck field_check(const Reply& reply) noexcept {
  const long long answer = reply.integer();
  if (answer >= 1) return TokenCheck::done;
  return answer == 0 ? TokenCheck::no_key : TokenCheck::other_token;
}

/// One owner's hold on one hash field, as a lock object records it.
struct FieldHold {
  unsigned depth = 0;   ///< holds through this object; Redis counts the first only
  std::string field;    ///< the hash field: the owner id, or "<owner>:write"
  long long fence = 0;  ///< with fencing
  SteadyClock::time_point expires{};
  std::shared_ptr<LeaseState> lease;  ///< set while the watchdog renews it

  bool lost() const noexcept { return lease && lease->lost; }
};

/// Stops the watchdog's renewal of a hold being given back. True when it
/// had already been reported lost: there is nothing left to release.
template <class Backend>
bool stop_watching(Backend& backend, const FieldHold& hold) noexcept {
  if (!hold.lease) return false;
  backend.watchdog().remove(*hold.lease);
  return hold.lease->lost;
}

/// The hash-field holds that lock objects on the calling thread have, by an
/// id for (client, key, kind of field). The undo of an acquire whose reply
/// never came is a release of the owner's field, and the owner is the
/// thread, not the object: if another object of this thread holds the same
/// field, the undo could take that object's hold instead of ours. Then no
/// undo is sent and an extra hold, if the attempt landed, runs out with its
/// lease. Equal ids for different fields only make that more cautious.
class ThreadFieldHolds {
 public:
  static std::size_t id(std::string_view client_id, std::string_view key, std::string_view kind) {
    std::string text;
    text.reserve(client_id.size() + key.size() + kind.size() + 2);
    text += client_id;
    text += '\n';
    text += key;
    text += '\n';
    text += kind;
    return std::hash<std::string>{}(text);
  }
  static void add(std::size_t id) { ++holds()[id]; }
  static void remove(std::size_t id) noexcept {
    auto& all = holds();
    const auto it = all.find(id);
    if (it != all.end() && --it->second == 0) all.erase(it);
  }
  static bool any(std::size_t id) { return holds().count(id) != 0; }

 private:
  static std::unordered_map<std::size_t, unsigned>& holds() {
    thread_local std::unordered_map<std::size_t, unsigned> by_id;
    return by_id;
  }
};

}  // namespace distlock::detail
