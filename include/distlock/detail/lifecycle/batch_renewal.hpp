// Renewal of many leases by one script, in batches: the common part of
// every scripted lock type's Renewer.
//
// The leases go out in calls of up to Watchdog::batch_size, all calls in
// one pipeline on one connection borrowed from the lease's own backend, so
// a round over N leases costs one round trip. Each script returns the
// 1-based positions of the leases it found gone; a call that fails leaves
// its leases unknown (the Watchdog tries them again soon), and so does one
// answered with anything but an array (no server does so). With replica
// acknowledgement one WAIT follows the whole pipeline, and a round fewer
// replicas acknowledge renews nothing (its leases stay unknown, so their
// validity is not lengthened).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/lease_state.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/runtime/watchdog.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// A batch key for leases of `kind` on the backend whose options are
/// `options`, renewed with WAIT for `wanted` replicas within `timeout`: one
/// stable address per distinct combination, so that such leases of many
/// lock objects still share a round.
inline const void* replicated_batch_key(const void* kind, const void* options, int wanted,
                                        std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  static std::set<std::tuple<const void*, const void*, int, long long>> keys;
  const std::lock_guard<std::mutex> guard(mutex);
  return &*keys.emplace(kind, options, wanted, timeout.count()).first;
}

/// Renews leases of one kind by script `S`, in batches (see the top of
/// file). Each lease adds its key to its call's KEYS (then, `WithAux`, its
/// aux: a SharedMutex reader's timeout-key stem, a Semaphore's count key),
/// and its token (or hash field) and TTL to its ARGV. Until the server is
/// known to have the script, the pipeline starts with a SCRIPT LOAD, so
/// that a first round is not a round of NOSCRIPT answers and EVALs.
template <const Script& S, bool WithAux = false>
class ScriptRenewer final : public Renewer {
 public:
  /// With `replicas`, every round is confirmed by WAIT (see the top of file).
  explicit ScriptRenewer(SitePtr site, std::shared_ptr<ReplicaCheck> replicas = nullptr)
      : site_(std::move(site)),
        replicas_(std::move(replicas)),
        batch_key_(&S, replicas_ ? replicated_batch_key(&S, site_->identity(), replicas_->wanted(),
                                                        replicas_->timeout())
                                 : site_->identity()) {}
  BatchKey batch_key() const noexcept override { return batch_key_; }
  const void* endpoint() const noexcept override { return site_->identity(); }
  void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
             SteadyClock::time_point deadline) noexcept override {
    constexpr std::size_t batch = Watchdog::batch_size;
    bool replicated = true;  // no WAIT asked for, or enough replicas acknowledged
    try {
      Borrowed connection = site_->borrow(deadline);
      const std::chrono::milliseconds command_timeout = site_->options().command_timeout;
      connection->set_timeout(reply_timeout(command_timeout, deadline));
      const int needed =
          replicas_ && !leases.empty() ? replicas_->needed(*connection, leases[0]->key) : 0;
      const bool load = !loaded_.load(std::memory_order_relaxed);
      if (load) connection->append("SCRIPT", "LOAD", S.source);
      std::vector<std::vector<std::string_view>> calls;  // keys, args, keys, args, ...
      calls.reserve(2 * ((leases.size() + batch - 1) / batch));
      for (std::size_t first = 0; first < leases.size(); first += batch) {
        // Sized once: a lease adds at most two keys and two args.
        const std::size_t count = std::min(batch, leases.size() - first);
        std::vector<std::string_view> keys;
        std::vector<std::string_view> args;
        keys.reserve(2 * count);
        args.reserve(2 * count);
        for (std::size_t i = first; i < first + count; ++i) {
          const LeaseState& lease = *leases[i];
          keys.push_back(lease.key);
          if constexpr (WithAux) keys.push_back(lease.aux);
          args.push_back(lease.token);
          args.push_back(lease.ttl_text);
        }
        connection->append_evalsha(S, keys, args);
        calls.push_back(std::move(keys));
        calls.push_back(std::move(args));
      }
      if (needed > 0) replicas_->append_wait(*connection, needed, deadline, command_timeout);
      connection->flush();
      if (load) loaded_ = !connection->read_reply().is_error();
      const auto settle = [&](std::size_t call, const ReplyView& gone) {
        // The script answers an array, empty when every lease is there;
        // anything else renewed nothing we can count on: unknown.
        if (!gone.is_array()) return;
        const std::size_t first = call * batch;
        const std::size_t count = std::min(batch, leases.size() - first);
        for (std::size_t i = 0; i < count; ++i) outcomes[first + i] = Renewed::yes;
        for (std::size_t g = 0; g < gone.size(); ++g) {
          const auto position = static_cast<std::size_t>(gone[g].integer());
          if (position >= 1 && position <= count) outcomes[first + position - 1] = Renewed::gone;
        }
      };
      std::vector<std::size_t> unloaded;  // calls that met NOSCRIPT
      for (std::size_t call = 0; call < calls.size() / 2; ++call) {
        const Reply& reply = connection->read_reply();
        if (reply.is_error()) {
          if (classify_server_error(reply.str()) == ServerErrorKind::noscript) {
            unloaded.push_back(call);
            loaded_ = false;  // flushed, or a restarted server: load it next round
          } else {
            site_->saw_error(reply.str());  // a MOVED: the next round goes to the new owner
          }
          continue;  // other errors: unknown, tried again soon
        }
        settle(call, reply.view());
      }
      if (needed > 0) replicated = ReplicaCheck::read_wait(*connection) >= needed;
      for (const std::size_t call : unloaded) {
        const Reply reply = connection->eval(S, calls[2 * call], calls[2 * call + 1]);
        settle(call, reply.view());
      }
      if (needed > 0 && !unloaded.empty() && replicated) {
        bool cut = false;
        replicated = replicas_->wait(*connection, needed, deadline, command_timeout, cut) >= needed;
      }
    } catch (...) {
      replicated = !replicas_;  // Whatever was not settled stays unknown.
    }
    if (replicated) return;
    if (replicas_) replicas_->reread();
    // Renewed on the master only: not counted, so the lease's validity runs on.
    for (Renewed& outcome : outcomes) {
      if (outcome == Renewed::yes) outcome = Renewed::unknown;
    }
  }

 private:
  const SitePtr site_;
  const std::shared_ptr<ReplicaCheck> replicas_;
  const BatchKey batch_key_;
  std::atomic<bool> loaded_{false};
};

}  // namespace distlock::detail
