// The owner ids of the hash-field locks (ReentrantMutex, SharedMutex), and
// the per-thread counts of their holds.
//
// Redisson names an owner "<client id>:<thread id>" and counts that owner's
// holds in a hash field of that name; every lock object of one thread on
// one Client is the same owner to Redis. distlock keeps re-entry through
// one lock object local (no round trip), so the Redis count is the number
// of lock objects of the thread that hold the lock.
//
// A write that names the owner and may land unseen, late (the undo written
// behind an attempt whose reply never came, a release that timed out),
// could take a hold the same owner is granted later over another
// connection: two connections are not ordered. So after one, the thread
// holds that key by a new number (ThreadNumbers::retire): the late write
// finds no field of its owner. A hold given back by another thread (a lock
// object's destructor gives back every thread's holds) is settled by its
// owner thread, whose numbers and counts these are (GivenBackElsewhere).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/detail/base/thread_annotations.hpp"

namespace distlock::detail {

/// The calling thread's numbers, in decimal: the thread part of its owner
/// ids (std::thread::id has no portable numeric value). One number for
/// every lock key, except keys whose number was retired; no number is
/// handed out twice in this process.
class ThreadNumbers {
 public:
  /// The thread's number for `key` on the Client `client_id`.
  static const std::string& of(std::string_view client_id, std::string_view key) {
    const State& state = mine();
    if (state.retired.empty()) return state.number;
    const auto it = state.retired.find(where(client_id, key));
    return it == state.retired.end() ? state.number : it->second;
  }

  /// From now on the thread holds `key` by a number not used before, so a
  /// write naming its old owner id that lands late takes no later hold.
  /// Only while the thread holds nothing on the key (its holds there keep
  /// their number: re-entry and a downgrade name one owner); when it holds
  /// nothing at all (`holds_none`), the thread is renumbered outright.
  static void retire(std::string_view client_id, std::string_view key, bool holds_none) {
    State& state = mine();
    if (holds_none) {
      state.number = fresh();
      state.retired.clear();
    } else {
      state.retired[where(client_id, key)] = fresh();
    }
  }

 private:
  struct State {
    std::string number = fresh();
    std::unordered_map<std::string, std::string> retired;  // by where()
  };
  static State& mine() {
    thread_local State state;
    return state;
  }
  static std::string fresh() {
    static std::atomic<unsigned long long> next{1};
    return std::to_string(next.fetch_add(1));
  }
  static std::string where(std::string_view client_id, std::string_view key) {
    std::string text(client_id);
    text += '\n';
    text += key;
    return text;
  }
};

/// The calling thread's owner id for `key` on a Client: "<client
/// id>:<thread number>".
inline std::string owner_id(std::string_view client_id, std::string_view key) {
  std::string owner(client_id);
  owner += ':';
  owner += ThreadNumbers::of(client_id, key);
  return owner;
}

/// An owner id that no thread holds by, for one async acquire: "<client
/// id>:a<number>", the number never handed out twice in this process.
inline std::string async_owner_id(std::string_view client_id) {
  static std::atomic<unsigned long long> next{1};
  std::string owner(client_id);
  owner += ":a";
  owner += std::to_string(next.fetch_add(1));
  return owner;
}

/// The hash-field holds that lock objects on the calling thread have, by an
/// id for (client, key, kind of field), and of any kind by one for (client,
/// key, "*"). The undo of an acquire whose reply
/// never came is a release of the owner's field, and the owner is the
/// thread, not the object: if another object of this thread holds a field
/// of the key, the undo could take that object's hold instead of ours (or
/// the owner id could not be retired). Then no
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
  /// Whether the thread holds no field at all.
  static bool none() { return holds().empty(); }

 private:
  static std::unordered_map<std::size_t, unsigned>& holds() {
    thread_local std::unordered_map<std::size_t, unsigned> by_id;
    return by_id;
  }
};

/// What a thread other than the owner did to the owner's holds: the
/// owner's counts (ThreadFieldHolds) and numbers (ThreadNumbers) are its
/// thread's own, so the giver leaves them here, under the owner id and key
/// the holds were by, and the owner settles them the next time it asks
/// about the key (HashFieldCore::settle). Owner ids are never used twice,
/// so no other thread takes what is left here; what an ended thread never
/// took stays (a few bytes per hold given back across threads).
class GivenBackElsewhere {
 public:
  struct Due {
    std::vector<std::size_t> ended;  // the hold ids (ThreadFieldHolds) given back
    bool retire = false;             // a release of one may land late
  };

  static void ended(const std::string& where, std::size_t hold_id) {
    post(where, [&](Due& due) { due.ended.push_back(hold_id); });
  }
  static void retire(const std::string& where) {
    post(where, [](Due& due) { due.retire = true; });
  }
  /// Whether anything waits for any owner: one load, on every acquire.
  static bool any() { return state().size.load(std::memory_order_relaxed) != 0; }
  static std::optional<Due> take(const std::string& where) {
    State& state = GivenBackElsewhere::state();
    MutexLock guard(state.mutex);
    const auto it = state.due.find(where);
    if (it == state.due.end()) return std::nullopt;
    Due due = std::move(it->second);
    state.due.erase(it);
    state.size.store(state.due.size(), std::memory_order_relaxed);
    return due;
  }

 private:
  struct State {
    Mutex mutex;
    std::unordered_map<std::string, Due> due DISTLOCK_GUARDED_BY(mutex);  // by owner id and key
    std::atomic<std::size_t> size{0};
  };
  // Never freed: a thread may give back a hold while the process exits.
  static State& state() {
    static State* const all = new State();
    return *all;
  }
  template <class Change>
  static void post(const std::string& where, Change change) {
    State& state = GivenBackElsewhere::state();
    MutexLock guard(state.mutex);
    change(state.due[where]);
    state.size.store(state.due.size(), std::memory_order_relaxed);
  }
};

}  // namespace distlock::detail
