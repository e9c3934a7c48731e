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
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/notifier.hpp"
#include "distlock/reply.hpp"
#include "distlock/scripts.hpp"
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

/// What every hash-field lock's Protocol has beyond SingleServer: the owner
/// id, and the count of this thread's holds of each kind of field (see
/// ThreadFieldHolds). `Kind` is the lock's kinds of hold, numbered from 0.
template <class Backend, class Kind>
class HashFieldCore : public SingleServer<Backend> {
 public:
  static constexpr bool per_thread = true;

  using SingleServer<Backend>::SingleServer;

  /// Counts the calling thread's holds of `kind` (+1 taken, -1 given back).
  void held(Kind kind, int change) noexcept {
    if (change > 0) {
      ThreadFieldHolds::add(hold_id(kind));
    } else {
      ThreadFieldHolds::remove(hold_id(kind));
    }
  }
  /// Whether another lock object of this thread holds a field of `kind`.
  bool held_here(Kind kind) const { return ThreadFieldHolds::any(hold_id(kind)); }

  std::string owner() const { return owner_id(this->backend_.id()); }

 protected:
  std::size_t hold_id(Kind kind) const {
    return ThreadFieldHolds::id(this->backend_.id(), this->key_,
                                std::to_string(static_cast<int>(kind)));
  }

  /// One attempt by `send`, whose undo (the script `release` on
  /// release_keys and release_args) is written behind it only if no other
  /// lock object of this thread holds `kind`: the owner is the thread, so
  /// that release could take the other's hold. A key that is not a hash
  /// fails the scripts with WRONGTYPE: thrown as WrongTypeError.
  template <class Send>
  std::optional<Attempt> attempt_field(Kind kind, const Script& release, Args release_keys,
                                       Args release_args, SteadyClock::time_point deadline,
                                       Send&& send) {
    const bool undo = !held_here(kind);
    return attempt_or_undo(
        this->backend_, deadline,
        [&](Connection& connection) {
          return naming_wrong_type(connection, this->key_, "hash",
                                   [&] { return send(connection); });
        },
        [&](Connection& connection) {
          if (undo) connection.send_eval_behind(release, release_keys, release_args);
        },
        this->replicas_.get(), this->key_);
  }
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
