// The hash-field core ReentrantMutex, FairMutex and SharedMutex share:
// names (channels, companion keys), the Protocol parts every hash-field
// lock has (the backend, waiting, renewal of a field's hold in batches),
// and the use of the per-thread owner ids and counts (thread_owners.hpp)
// that keep an ambiguous acquire's undo or a late release from taking
// another hold. Each lock keeps only its scripts, its names and its rules.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/lifecycle/batch_renewal.hpp"
#include "distlock/detail/lifecycle/key_type.hpp"
#include "distlock/detail/lifecycle/single_server.hpp"
#include "distlock/detail/lifecycle/thread_owners.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/scripts.hpp"
#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

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

/// How the Redisson-layout scripts answer a release or extend.
inline TokenCheck field_check(const Reply& reply) {
  return token_check(reply, "hold release or extend");
}

/// What every hash-field lock's Protocol has beyond SingleServer: the owner
/// id, and the count of this thread's holds of each kind of field (see
/// ThreadFieldHolds). `Kind` is the lock's kinds of hold, numbered from 0.
template <class Kind>
class HashFieldCore : public SingleServer {
 public:
  static constexpr bool per_thread = true;

  HashFieldCore(const Backend& backend, std::string key, std::string channel,
                const LockOptions& options)
      : SingleServer(backend, std::move(key), std::move(channel), options),
        key_id_(ThreadFieldHolds::id(this->site_->id(), this->key_, "*")) {}

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
  /// The hold `id` of another thread was given back by this one: its
  /// owner settles its count (see GivenBackElsewhere). If that fails, the
  /// owner counts the hold as still held, which only makes it more
  /// cautious.
  void held_elsewhere(Kind kind, const std::string& id) noexcept {
    try {
      GivenBackElsewhere::ended(where(owner_in(id)), hold_id(kind));
    } catch (...) {
    }
  }

  /// Whether another lock object of this thread holds a field of the key.
  bool held_here() const {
    settle();
    return ThreadFieldHolds::any(key_id());
  }

  /// The calling thread's owner id for this lock's key.
  std::string owner() const {
    settle();
    return owner_id(this->site_->id(), this->key_);
  }

  /// An owner id for one async acquire (distlock/asio.hpp), which no
  /// thread holds by: "<client id>:a<number>", a number never used twice in
  /// the process. Unlike a thread's, it never re-enters and is never
  /// reused, so a write naming it that lands late finds no later hold: it
  /// needs none of the retiring and counting a thread's owner id needs.
  std::string async_owner() const { return async_owner_id(this->site_->id()); }

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
      ThreadNumbers::retire(this->site_->id(), this->key_, ThreadFieldHolds::none());
    }
  }

  /// A release of the hold `id` by checked(); one whose reply never came
  /// may land late, so the owner id it names is retired for the key: by
  /// this thread if the hold is its own (see retire_owner()), else by the
  /// owner thread when it settles (a destructor gives back every thread's
  /// holds).
  template <class Send>
  TokenCheck released(const std::string& id, Send&& send) {
    try {
      return this->checked(std::forward<Send>(send));
    } catch (const Error& error) {
      const std::error_code code = error.code();
      if (!is_async(id) &&
          (code == Errc::timed_out || code == Errc::io_error || code == Errc::protocol_error)) {
        retire_owner_of(id);
      }
      throw;
    }
  }

 public:
  /// The hold `id` stays on the server after its release, until its
  /// minimum hold (LockOptions::min_hold) ends: its owner id is retired
  /// for the key as after a release that may land late, so the thread's
  /// next acquire is refused meanwhile instead of entering it again. While
  /// another lock object of the thread holds the key the id stays (the
  /// hold is that object's too), and the hash's lease then only lengthens.
  void keeping(Kind, const std::string& id) {
    if (!is_async(id)) retire_owner_of(id);
  }

 protected:
  // retire_owner() for the thread that owns the hold `id`: this one now,
  // another when it next settles.
  void retire_owner_of(const std::string& id) {
    const std::string holder = owner_in(id);
    if (holder == owner()) {
      retire_owner();
    } else {
      GivenBackElsewhere::retire(where(holder));
    }
  }

  /// One attempt by `send`, whose undo (`undo_behind(write)`, which gives
  /// the release to attempt_or_undo's writer) is written only if no other
  /// lock object of this thread holds a field of the key: the owner is the
  /// thread, so that release could take the other's hold (and a downgrade's read hold
  /// would keep the owner id the undo names). An undo written retires that
  /// owner id for the key: the thread's next attempt, on another
  /// connection, may reach Redis before it. A key that is not a hash fails
  /// the scripts with WRONGTYPE: thrown as WrongTypeError; a refusal by a
  /// hash that never expires (PTTL -1) as NotALockError.
  template <class Send, class UndoBehind>
  std::optional<Attempt> attempt_field(SteadyClock::time_point deadline, Send&& send,
                                       UndoBehind&& undo_behind) {
    const bool undo = !held_here();
    return attempt_or_undo(
        *this->site_, deadline,
        [&](Connection& connection) {
          return naming_wrong_type(connection, this->key_, "hash", [&] {
            Attempt attempt = send(connection);
            if (!attempt.acquired) check_expires(this->key_, "hash", attempt.holder);
            return attempt;
          });
        },
        [&](UndoWriter& write) {
          if (!undo) return;
          retire_owner();
          undo_behind(write);
        },
        this->replicas_.get(), this->key_);
  }

 private:
  // Whether the hold id is an async owner's (see async_owner()).
  bool is_async(const std::string& id) const noexcept {
    const std::string& client = this->site_->id();
    return id.size() > client.size() + 1 && id.compare(0, client.size(), client) == 0 &&
           id[client.size()] == ':' && id[client.size() + 1] == 'a';
  }

  // The owner id in a hold id: "<client id>:<number>", which a write
  // hold's id follows with ":write".
  std::string owner_in(const std::string& id) const {
    std::size_t end = std::min(this->site_->id().size() + 1, id.size());
    while (end < id.size() && id[end] >= '0' && id[end] <= '9') ++end;
    return id.substr(0, end);
  }
  std::string where(const std::string& owner) const { return owner + '\n' + this->key_; }

  // Takes what another thread left for this thread's holds of the key
  // (GivenBackElsewhere): their counts, and a retirement of the owner id
  // if a release of one may land late (only while the thread holds nothing
  // on the key, as retire_owner()). Before every use of the counts or the
  // owner id; the owner id cannot change before, as the counts left here
  // say the key is held.
  void settle() const {
    if (!GivenBackElsewhere::any()) return;
    const std::optional<GivenBackElsewhere::Due> due =
        GivenBackElsewhere::take(where(owner_id(this->site_->id(), this->key_)));
    if (!due) return;
    for (const std::size_t ended : due->ended) {
      ThreadFieldHolds::remove(ended);
      ThreadFieldHolds::remove(key_id_);
    }
    if (due->retire && !ThreadFieldHolds::any(key_id_)) {
      ThreadNumbers::retire(this->site_->id(), this->key_, ThreadFieldHolds::none());
    }
  }

  std::size_t key_id_;  // of (Client, key, any kind): see ThreadFieldHolds
};

/// Renewal of hash-field holds (a ReentrantMutex hold, a SharedMutex write
/// hold: the field is the lease's token), one hash_field_renew per batch.
using FieldRenewer = ScriptRenewer<scripts::hash_field_renew>;

/// Renewal of SharedMutex read holds (the lease's aux is the owner's
/// timeout-key stem), one read_renew per batch.
using ReadRenewer = ScriptRenewer<scripts::read_renew, /*WithAux=*/true>;

/// What the exclusive hash-field locks (ReentrantMutex, FairMutex) share
/// beyond the core: one kind of hold, counted in its owner's field, which
/// is the hold's id and its lease's token for extend and renewal.
template <class KindT>
class OwnerFieldCore : public HashFieldCore<KindT> {
 public:
  using Kind = KindT;
  static constexpr Kind exclusive = Kind::exclusive;
  static constexpr bool given_back_first(Kind) noexcept { return false; }
  static constexpr bool holds_at_least(Kind) noexcept { return true; }

  OwnerFieldCore(const Backend& backend, std::string key, std::string channel,
                 const LockOptions& options)
      : HashFieldCore<KindT>(backend, std::move(key), std::move(channel), options),
        fence_key_(companion_key(this->key_, "fence")),
        fencing_(options.fencing()),
        renewer_(this->template make_renewer<FieldRenewer>()) {}

  std::string id_for(Kind) const { return this->owner(); }
  std::string async_id_for(Kind) const { return this->async_owner(); }
  template <class DepthOf>
  void before_first(Kind, DepthOf&&) const noexcept {}

  TokenCheck extend(Kind, const std::string& owner, std::chrono::milliseconds ttl) {
    return this->extended([&](Connection& connection) {
      return field_check(
          connection.eval(scripts::hash_field_extend, {this->key_}, {owner, Decimal(ttl.count())}));
    });
  }

  std::shared_ptr<LeaseState> watched(Kind, const std::string& owner, SteadyClock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(this->key_, owner, options.ttl(), sent, options.on_lost(),
                                        renewer_);
  }

  static std::string describe(Kind) { return "hold"; }

 protected:
  // An acquire script's answer: granted nil, or [1, fence] with fencing;
  // refused the holder's PTTL, or [0, PTTL]. `what` names the script.
  Attempt acquire_answer(const Reply& reply, const char* what) const {
    if (!fencing_) return granted_on_nil(reply, what);
    reply.throw_if_error();
    if (reply.size() != 2) throw ConnectionError(Errc::protocol_error, "bad fenced acquire reply");
    return fenced_attempt(reply);
  }

  const std::string fence_key_;  // {key}:fence
  const bool fencing_;

 private:
  std::shared_ptr<Renewer> renewer_;
};

}  // namespace distlock::detail
