// The hash-field core ReentrantMutex and SharedMutex share: Redisson's
// names (owner ids, channels, companion keys), the Protocol parts every
// hash-field lock has (the backend, waiting, renewal of a field's hold in
// batches), and the per-thread count that keeps an ambiguous acquire's
// undo from taking another lock object's hold. Each lock keeps only its
// scripts, its names and its rules.
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
// finds no field of its owner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/acquire.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/detail/batch_renewal.hpp"
#include "distlock/detail/key_type.hpp"
#include "distlock/detail/single_server.hpp"
#include "distlock/detail/time.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/reply.hpp"
#include "distlock/scripts.hpp"
#include "distlock/watchdog.hpp"

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

/// What every hash-field lock's Protocol has beyond SingleServer: the owner
/// id, and the count of this thread's holds of each kind of field (see
/// ThreadFieldHolds). `Kind` is the lock's kinds of hold, numbered from 0.
template <class Backend, class Kind>
class HashFieldCore : public SingleServer<Backend> {
 public:
  static constexpr bool per_thread = true;

  HashFieldCore(Backend backend, std::string key, std::string channel, const LockOptions& options)
      : SingleServer<Backend>(std::move(backend), std::move(key), std::move(channel), options),
        key_id_(ThreadFieldHolds::id(this->backend_.id(), this->key_, "*")) {}

  /// Counts the calling thread's holds of `kind` (+1 taken, -1 given back),
  /// and of any kind on the key.
  void held(Kind kind, int change) noexcept {
    if (change > 0) {
      ThreadFieldHolds::add(hold_id(kind));
      ThreadFieldHolds::add(key_id());
    } else {
      ThreadFieldHolds::remove(hold_id(kind));
      ThreadFieldHolds::remove(key_id());
    }
  }
  /// Whether another lock object of this thread holds a field of the key.
  bool held_here() const { return ThreadFieldHolds::any(key_id()); }

  /// The calling thread's owner id for this lock's key.
  std::string owner() const { return owner_id(this->backend_.id(), this->key_); }

 protected:
  // Both ids are fixed for the object (its Client and key do not change),
  // so the key's is hashed once and a kind's is mixed from it: no string is
  // built on the acquire and release paths.
  std::size_t hold_id(Kind kind) const noexcept {
    const auto number = static_cast<std::size_t>(kind) + 1;
    return key_id_ ^ (number * static_cast<std::size_t>(0x9e3779b97f4a7c15ULL));
  }
  std::size_t key_id() const noexcept { return key_id_; }

  /// A write naming the thread's owner id here may land late: the thread
  /// takes a new number for the key (see ThreadNumbers::retire). Only
  /// while it holds nothing on the key.
  void retire_owner() {
    if (!held_here()) {
      ThreadNumbers::retire(this->backend_.id(), this->key_, ThreadFieldHolds::none());
    }
  }

  /// A release by checked(); one whose reply never came may land late, so
  /// the owner id it names is retired for the key (see retire_owner()).
  template <class Send>
  TokenCheck released(Send&& send) {
    try {
      return this->checked(std::forward<Send>(send));
    } catch (const Error& error) {
      const std::error_code code = error.code();
      if (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error) {
        retire_owner();
      }
      throw;
    }
  }

  /// One attempt by `send`, whose undo (the script `release` on
  /// release_keys and release_args) is written behind it only if no other
  /// lock object of this thread holds a field of the key: the owner is the
  /// thread, so that release could take the other's hold (and a downgrade's
  /// read hold would keep the owner id the undo names). An undo written
  /// retires that owner id for the key: the thread's next attempt, on
  /// another connection, may reach Redis before it. A key that is not a
  /// hash fails the scripts with WRONGTYPE: thrown as WrongTypeError.
  template <class Send>
  std::optional<Attempt> attempt_field(Kind, const Script& release, Args release_keys,
                                       Args release_args, SteadyClock::time_point deadline,
                                       Send&& send) {
    const bool undo = !held_here();
    return attempt_or_undo(
        this->backend_, deadline,
        [&](Connection& connection) {
          return naming_wrong_type(connection, this->key_, "hash",
                                   [&] { return send(connection); });
        },
        [&](Connection& connection) {
          if (!undo) return;
          retire_owner();
          connection.send_eval_behind(release, release_keys, release_args);
        },
        this->replicas_.get(), this->key_);
  }

 private:
  std::size_t key_id_;  // of (Client, key, any kind): see ThreadFieldHolds
};

/// Renewal of hash-field holds (a ReentrantMutex hold, a SharedMutex write
/// hold: the field is the lease's token), one hash_field_renew per batch.
template <class Backend>
using FieldRenewer = ScriptRenewer<Backend, KeyTokenLeases<scripts::hash_field_renew>>;

/// Renewal of SharedMutex read holds (the lease's aux is the owner's
/// timeout-key stem), one read_renew per batch.
struct ReadLeases {
  static constexpr const Script& script = scripts::read_renew;
  static void add(const LeaseState& lease, std::vector<std::string_view>& keys,
                  std::vector<std::string_view>& args) {
    keys.push_back(lease.key);
    keys.push_back(lease.aux);
    args.push_back(lease.token);
    args.push_back(lease.ttl_text);
  }
};
template <class Backend>
using ReadRenewer = ScriptRenewer<Backend, ReadLeases>;

}  // namespace distlock::detail
