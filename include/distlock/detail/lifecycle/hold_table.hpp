// HoldTable: the holds one lock object knows it has, for the Lifecycle.
//
// A hold is what a grant left with this object: its id, fence, lease
// record and re-entry depth, and the thread that took it. With PerThread
// false the object has at most one, which any of its threads may give back;
// with PerThread true each thread has its own per kind. A hold that a failed
// extend() dropped is remembered as Ended until its holder's next release(),
// which then answers what the extend found rather than "not held".
//
// Not thread-safe: the Lifecycle keeps it under its mutex. Redis, not this
// table, decides who holds the lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/detail/base/lease_state.hpp"
#include "distlock/lock_options.hpp"

namespace distlock::detail {

template <class Kind, bool PerThread>
class HoldTable {
 public:
  using clock = std::chrono::steady_clock;

  struct Hold {
    std::thread::id thread;
    Kind kind;
    unsigned depth = 1;
    std::string id;
    long long fence = 0;
    clock::time_point acquired{};       // when the grant's attempt was sent
    clock::time_point granted{};        // when its reply was in: the minimum hold counts from here
    int replicas = -1;                  // that acknowledged the grant; -1 when not asked
    std::shared_ptr<LeaseState> lease;  // the record the Watchdog has; never null
    bool lost() const noexcept { return lease->lost; }
  };

  // A hold a failed extend() dropped, until its holder's next release()
  // (which answers `outcome`), unlock() or acquire of the kind.
  struct Ended {
    std::thread::id thread;
    Kind kind;
    Release outcome;
    clock::time_point acquired;
  };

  bool empty() const noexcept { return holds_.empty(); }

  /// The hold a release() of `kind` by the calling thread gives back: the
  /// thread's own, or the object's one hold.
  Hold* mine(Kind kind) noexcept {
    const std::thread::id me = std::this_thread::get_id();
    for (Hold& hold : holds_) {
      if (!PerThread || (hold.thread == me && hold.kind == kind)) return &hold;
    }
    return nullptr;
  }
  const Hold* mine(Kind kind) const noexcept { return const_cast<HoldTable*>(this)->mine(kind); }

  /// `thread`'s hold of `kind`, whatever PerThread says.
  Hold* of(std::thread::id thread, Kind kind) noexcept {
    for (Hold& hold : holds_) {
      if (hold.thread == thread && hold.kind == kind) return &hold;
    }
    return nullptr;
  }
  bool any_of(std::thread::id thread) const noexcept {
    return std::any_of(holds_.begin(), holds_.end(),
                       [&](const Hold& hold) { return hold.thread == thread; });
  }
  unsigned depth(std::thread::id thread, Kind kind) const noexcept {
    const Hold* hold = const_cast<HoldTable*>(this)->of(thread, kind);
    return hold == nullptr ? 0 : hold->depth;
  }

  /// The hold of `kind` with `id`, whichever thread has it.
  Hold* with_id(Kind kind, const std::string& id) noexcept {
    for (Hold& hold : holds_) {
      if (hold.kind == kind && hold.id == id) return &hold;
    }
    return nullptr;
  }

  const Hold* with_id(Kind kind, const std::string& id) const noexcept {
    return const_cast<HoldTable*>(this)->with_id(kind, id);
  }
  /// Records a new hold; an Ended its thread still had of the kind goes.
  void add(Hold hold) {
    static_cast<void>(take_ended(hold.kind, hold.thread));
    holds_.push_back(std::move(hold));
  }

  /// Removes `hold` (one of ours) and returns it.
  Hold take(Hold* hold) {
    Hold taken = std::move(*hold);
    holds_.erase(holds_.begin() + (hold - holds_.data()));
    return taken;
  }

  /// Removes every hold, for the object's destructor.
  std::vector<Hold> take_all() noexcept { return std::exchange(holds_, {}); }

  /// Drops `hold` as a failed extend found it gone (`outcome`, for the next
  /// release()); returns its lease record.
  std::shared_ptr<LeaseState> end(Hold* hold, Release outcome) {
    std::shared_ptr<LeaseState> lease = std::move(hold->lease);
    ended_.push_back(Ended{hold->thread, hold->kind, outcome, hold->acquired});
    static_cast<void>(take(hold));
    return lease;
  }

  /// `thread`'s Ended of `kind` (the object's one, if not PerThread),
  /// removed.
  std::optional<Ended> take_ended(Kind kind, std::thread::id thread = std::this_thread::get_id()) {
    const auto it = std::find_if(ended_.begin(), ended_.end(), [&](const Ended& ended) {
      return !PerThread || (ended.thread == thread && ended.kind == kind);
    });
    if (it == ended_.end()) return std::nullopt;
    const Ended ended = *it;
    ended_.erase(it);
    return ended;
  }

 private:
  std::vector<Hold> holds_;
  std::vector<Ended> ended_;
};

}  // namespace distlock::detail
