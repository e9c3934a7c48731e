// Watchdog: keeps held leases alive while their holders work, and tells a
// holder at once when its lease is gone.
//
// One per Client, started on first use: one thread (waiting on a condition
// variable, never spinning) and one connection of its own. Each registered
// lease is renewed about every TTL/3 with a token-checked renewal; leases
// that fall due together are renewed together, up to 100 per script call and
// all calls in one pipeline, so a round over N leases costs one round trip,
// not N. A lease is lost when a renewal finds its token gone, or when its
// validity (from the last successful renewal, on the steady clock) reaches
// zero with no renewal confirmed: server unreachable, paused, or the
// renewal cap reached. Lost leases are never re-acquired; their holder's
// callback runs on this thread with no internal lock held.
//
// A lock unregisters in unlock() before it sends the release; if a renewal
// of that lease is in flight, unregistering waits for it, so no renewal of a
// released lease is ever sent.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distlock/connection.hpp"
#include "distlock/detail/args.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/scripts.hpp"

namespace distlock {

/// Renews the leases of one Redis endpoint. Thread-safe.
class Watchdog {
 public:
  using clock = std::chrono::steady_clock;
  /// Renews one lease that cannot share the batch script (e.g. without
  /// scripting); runs on the watchdog's connection.
  using RenewAlone = std::function<detail::TokenCheck(Connection&, const detail::LeaseState&,
                                                      std::string_view ttl)>;

  /// Leases renewed by one script call.
  static constexpr std::size_t batch_size = 100;
  /// The longest the thread sleeps without looking at its leases.
  static constexpr std::chrono::seconds idle_look{1};

  explicit Watchdog(ConnectionOptions options);
  ~Watchdog();

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Starts renewing `lease` until remove(); none after `hold_until`
  /// (clock::time_point::max() for no cap). renew_alone empty: the batch
  /// script (a Mutex-style string key holding the token).
  void add(std::shared_ptr<detail::LeaseState> lease, RenewAlone renew_alone,
           clock::time_point hold_until);

  /// Stops renewing `lease`; waits for a renewal of it that is in flight.
  void remove(const detail::LeaseState& lease) noexcept;

  /// After the holder extended the lease itself: renew with `ttl` from now on.
  void extended(const detail::LeaseState& lease, std::chrono::milliseconds ttl,
                clock::time_point sent);

  /// Runs one renewal round over every lease now and returns when it is done.
  void renew_all_now();

  /// Leases being renewed.
  std::size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<detail::LeaseState> lease;
    RenewAlone renew_alone;
    std::string ttl;  // lease->ttl in ms, as sent
    clock::time_point next_renewal;
    clock::time_point hold_until;
    bool in_flight = false;
  };
  // One lease's part in a round. The round runs unlocked; an entry in
  // flight is never erased (remove() waits), so the pointer stays valid.
  struct Work {
    Entry* entry;
    enum class Outcome { unknown, renewed, gone } outcome = Outcome::unknown;
  };

  void run();
  void renew(std::vector<Work>& work, clock::time_point earliest_expiry);
  void renew_batches(std::vector<Work*>& batched);
  static clock::time_point renewal_after(clock::time_point sent, std::chrono::milliseconds ttl) {
    return sent + ttl / 3;
  }

  const ConnectionOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;     // wakes the thread
  std::condition_variable round_done_;  // wakes remove() and renew_all_now()
  std::unordered_map<const detail::LeaseState*, Entry> entries_;
  std::uint64_t changes_ = 0;         // leases added or rescheduled: recompute the wake-up
  clock::time_point planned_wake_{};  // when the thread wakes next, unless notified
  std::uint64_t forced_rounds_ = 0;   // rounds run for renew_all_now()
  bool force_round_ = false;
  bool stopping_ = false;

  std::unique_ptr<Connection> connection_;  // the thread's own
  std::thread thread_;
};

inline Watchdog::Watchdog(ConnectionOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

inline Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

inline void Watchdog::add(std::shared_ptr<detail::LeaseState> lease, RenewAlone renew_alone,
                          clock::time_point hold_until) {
  bool sooner;
  {
    std::lock_guard lock(mutex_);
    Entry entry;
    entry.next_renewal = renewal_after(lease->acquired, lease->ttl);
    entry.hold_until = hold_until;
    entry.renew_alone = std::move(renew_alone);
    entry.ttl = std::to_string(lease->ttl.count());
    // Waking the thread costs a system call and a context switch, as much as
    // the rest of a lock's client-side work: only when it would otherwise
    // sleep past this lease's first renewal.
    sooner = entry.next_renewal < planned_wake_;
    const detail::LeaseState* key = lease.get();
    entry.lease = std::move(lease);
    entries_[key] = std::move(entry);
    if (sooner) ++changes_;
  }
  if (sooner) changed_.notify_all();
}

inline void Watchdog::remove(const detail::LeaseState& lease) noexcept {
  std::unique_lock lock(mutex_);
  const auto it = entries_.find(&lease);
  if (it == entries_.end()) return;
  round_done_.wait(lock, [&] { return !it->second.in_flight; });
  entries_.erase(it);
}

inline void Watchdog::extended(const detail::LeaseState& lease, std::chrono::milliseconds ttl,
                               clock::time_point sent) {
  {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(&lease);
    if (it == entries_.end()) return;
    it->second.lease->ttl = ttl;
    it->second.ttl = std::to_string(ttl.count());
    it->second.next_renewal = renewal_after(sent, ttl);
    ++changes_;
  }
  changed_.notify_all();
}

inline void Watchdog::renew_all_now() {
  std::unique_lock lock(mutex_);
  force_round_ = true;
  const std::uint64_t target = forced_rounds_ + 1;
  changed_.notify_all();
  round_done_.wait(lock, [&] { return forced_rounds_ >= target || stopping_; });
}

inline std::size_t Watchdog::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

inline void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    // Sleep until the next renewal or expiry falls due.
    clock::time_point wake = clock::time_point::max();
    for (const auto& [key, entry] : entries_) {
      wake = std::min({wake, entry.next_renewal, entry.lease->expires()});
    }
    // With nothing due it still looks once a second, so a lease added with
    // a long TTL need not wake it (see add()).
    wake = std::min(wake, clock::now() + idle_look);
    planned_wake_ = wake;
    const std::uint64_t seen = changes_;
    const auto woken = [&] { return stopping_ || force_round_ || changes_ != seen; };
    changed_.wait_until(lock, wake, woken);
    if (stopping_) break;

    const clock::time_point now = clock::now();
    const bool all = std::exchange(force_round_, false);
    std::vector<Work> work;
    clock::time_point earliest_expiry = clock::time_point::max();
    for (auto& [key, entry] : entries_) {
      if (entry.hold_until <= now) {
        entry.next_renewal = clock::time_point::max();  // capped: only its expiry is left
        continue;
      }
      if (entry.lease->lost || (!all && entry.next_renewal > now)) continue;
      entry.in_flight = true;
      earliest_expiry = std::min(earliest_expiry, entry.lease->expires());
      work.push_back(Work{&entry});
    }

    const clock::time_point sent = clock::now();
    if (!work.empty()) {
      lock.unlock();
      renew(work, earliest_expiry);
      lock.lock();
    }

    std::vector<std::shared_ptr<detail::LeaseState>> lost;
    std::vector<LostReason> reasons;
    const clock::time_point after = clock::now();
    for (Work& done : work) {
      Entry& entry = *done.entry;
      entry.in_flight = false;
      if (done.outcome == Work::Outcome::renewed) {
        entry.lease->set_expires(sent + entry.lease->ttl);
        entry.next_renewal = renewal_after(sent, entry.lease->ttl);
      } else if (done.outcome == Work::Outcome::gone) {
        lost.push_back(entry.lease);
        reasons.push_back(LostReason::taken);
      } else {
        // Unconfirmed: try again soon, well before the lease runs out.
        entry.next_renewal = after + std::min<clock::duration>(entry.lease->ttl / 10,
                                                               std::chrono::milliseconds(100));
      }
    }
    for (const auto& [key, entry] : entries_) {
      if (entry.lease->expires() <= after && !entry.in_flight &&
          std::find(lost.begin(), lost.end(), entry.lease) == lost.end()) {
        lost.push_back(entry.lease);
        reasons.push_back(LostReason::expired);
      }
    }
    for (const auto& lease : lost) {
      lease->lost = true;
      entries_.erase(lease.get());
    }
    if (all) ++forced_rounds_;
    round_done_.notify_all();

    if (!lost.empty()) {
      lock.unlock();
      for (std::size_t i = 0; i < lost.size(); ++i) {
        if (!lost[i]->on_lost) continue;
        try {
          lost[i]->on_lost(LeaseInfo{lost[i]->key, lost[i]->token, reasons[i]});
        } catch (...) {
          // The holder's callback must not take the watchdog down.
        }
      }
      lock.lock();
    }
  }
  round_done_.notify_all();
}

inline void Watchdog::renew(std::vector<Work>& work, clock::time_point earliest_expiry) {
  try {
    // A renewal that cannot be confirmed before the first lease runs out is
    // as good as none: give up on it then, so the loss is reported on time.
    const auto until_expiry =
        std::chrono::duration_cast<std::chrono::milliseconds>(earliest_expiry - clock::now());
    const auto budget =
        std::clamp(until_expiry, std::chrono::milliseconds(1), options_.command_timeout);
    if (!connection_) {
      ConnectionOptions hurried = options_;
      hurried.connect_timeout = std::min(hurried.connect_timeout, budget);
      hurried.command_timeout = budget;
      connection_ = std::make_unique<Connection>(hurried);
      // Loaded up front so the first round is not a round of NOSCRIPTs. A
      // user without scripting (SimpleMutex only) may be refused: fine.
      try {
        connection_->command("SCRIPT", "LOAD", scripts::renew_batch.source);
      } catch (const ServerError&) {
      }
    }
    connection_->set_timeout(budget);
    std::vector<Work*> batched;
    for (Work& w : work) {
      if (w.entry->renew_alone) {
        try {
          const detail::TokenCheck result =
              w.entry->renew_alone(*connection_, *w.entry->lease, w.entry->ttl);
          w.outcome =
              result == detail::TokenCheck::done ? Work::Outcome::renewed : Work::Outcome::gone;
        } catch (const Error&) {
          // This lease stays unconfirmed (tried again soon); the others go on
          // unless the error broke the connection they share.
          if (connection_->broken() || connection_->pending() != 0) throw;
        }
      } else {
        batched.push_back(&w);
      }
    }
    renew_batches(batched);
  } catch (const Error&) {
    if (connection_ && (connection_->broken() || connection_->pending() != 0)) connection_.reset();
  }
}

inline void Watchdog::renew_batches(std::vector<Work*>& batched) {
  std::vector<std::vector<std::string_view>> calls;  // keys, args, keys, args, ...
  for (std::size_t first = 0; first < batched.size(); first += batch_size) {
    const std::size_t count = std::min(batch_size, batched.size() - first);
    std::vector<std::string_view> keys;
    std::vector<std::string_view> args;
    keys.reserve(count);
    args.reserve(2 * count);
    for (std::size_t i = first; i < first + count; ++i) {
      const Entry& entry = *batched[i]->entry;
      keys.push_back(entry.lease->key);
      args.push_back(entry.lease->token);
      args.push_back(entry.ttl);
    }
    connection_->append_evalsha(scripts::renew_batch, keys, args);
    calls.push_back(std::move(keys));
    calls.push_back(std::move(args));
  }
  if (calls.empty()) return;
  connection_->flush();
  // The script returns the (1-based) positions of the leases it found gone.
  const auto settle = [&](std::size_t batch, const ReplyView& gone_positions) {
    const std::size_t first = batch * batch_size;
    const std::size_t count = std::min(batch_size, batched.size() - first);
    for (std::size_t i = 0; i < count; ++i) batched[first + i]->outcome = Work::Outcome::renewed;
    for (std::size_t g = 0; g < gone_positions.size(); ++g) {
      const auto position = static_cast<std::size_t>(gone_positions[g].integer());
      if (position >= 1 && position <= count) {
        batched[first + position - 1]->outcome = Work::Outcome::gone;
      }
    }
  };
  std::vector<std::size_t> unloaded;  // batches that met NOSCRIPT
  const std::size_t batches = calls.size() / 2;
  for (std::size_t b = 0; b < batches; ++b) {
    const Reply& reply = connection_->read_reply();
    if (reply.is_error()) {
      if (classify_server_error(reply.str()) == ServerErrorKind::noscript) unloaded.push_back(b);
      continue;  // other errors: unknown, retried soon
    }
    settle(b, reply.view());
  }
  for (const std::size_t b : unloaded) {
    const Reply reply = connection_->eval(scripts::renew_batch, calls[2 * b], calls[2 * b + 1]);
    settle(b, reply.view());
  }
}

}  // namespace distlock
