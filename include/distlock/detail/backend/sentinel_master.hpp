// SentinelMaster: what every copy of a SentinelClient shares: the master
// as the Sentinels name it (a Client, one pool, per address seen), the
// watch on the Sentinels' +switch-master announcements, and route(), which
// sends one step to the master and follows it when it moves.
//
// Finding the master: each Sentinel in turn is asked SENTINEL
// get-master-addr-by-name; the address it names is asked ROLE (and INFO
// server, for its run_id) on a connection of that address's pool; the
// first that says "master" is the master. It is looked for on first use,
// and again once marked stale: after a connection to it failed, after it
// answered READONLY (a demoted master), and when a Sentinel announces
// +switch-master (a thread subscribed at one Sentinel, moving to the next
// while it cannot reach one; a resubscription looks too, since an
// announcement may have been missed).
//
// A new master (another address, or the same address answering with
// another run_id) moves the release Notifier there (every waiter is
// subscribed again and looks again), has every lease the Watchdog holds
// (renewed or of fixed ttl) revalidated on it (Runtime::revalidate): still
// ours, or lost; and is told to the hook once (master_switched), after the
// look, with no lock held. The watch thread (detail/backend/sentinel_watch.hpp)
// holds this object only while it looks, so destroying the last handle
// never waits for a look in progress.
//
// route() retries only what did not run: a connection that could not be
// borrowed, or a READONLY reply; it asks the Sentinels again between tries,
// pausing from retry_pause, until the caller's deadline (or, without one,
// one command timeout), then throws: TimeoutError when a deadline ran out
// (the caller's timeout), ConnectionError otherwise. An error on a step
// that was sent is thrown at once (the step may have run).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/detail/backend/sentinel_reply.hpp"
#include "distlock/detail/backend/sentinel_watch.hpp"
#include "distlock/detail/base/thread_annotations.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "distlock/detail/runtime/runtime.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/sentinel_options.hpp"
#include "distlock/token.hpp"

namespace distlock::detail {

class SentinelMaster : public std::enable_shared_from_this<SentinelMaster> {
 public:
  explicit SentinelMaster(SentinelOptions options)
      : options_(checked(std::move(options))),
        id_(make_token()),
        events_(options_.on_event ? std::make_shared<const EventHook>(options_.on_event)
                                  : nullptr) {}

  ~SentinelMaster() {
    if (forked()) {
      // The watch thread is the parent's: leave it be (detail/runtime/runtime.hpp).
      if (watch_) left_behind_in_child().push_back(watch_.release());
      if (runtime_) left_behind_in_child().push_back(runtime_.release());
      return;
    }
    watch_.reset();  // prompt: see detail/backend/sentinel_watch.hpp
  }

  SentinelMaster(const SentinelMaster&) = delete;
  SentinelMaster& operator=(const SentinelMaster&) = delete;

  const SentinelOptions& options() const noexcept { return options_; }
  const std::string& id() const noexcept { return id_; }
  const SharedEventHook& events() const noexcept { return events_; }
  bool forked() const noexcept { return fork_guard_.forked(); }
  void check_process() const { fork_guard_.check("SentinelClient"); }

  /// The master's pool, looking for the master first if it is stale or not
  /// known yet (throws as find() does).
  Client master(SteadyClock::time_point deadline) {
    check_process();
    {
      MutexLock lock(mutex_);
      if (master_ && !stale_.load(std::memory_order_acquire)) return *master_;
    }
    {
      std::lock_guard<std::mutex> one(finding_);
      bool found_meanwhile;
      {
        MutexLock lock(mutex_);
        found_meanwhile = master_ && !stale_.load(std::memory_order_acquire);
      }
      if (!found_meanwhile) find(deadline);
    }
    tell_switches();  // with no lock held: the hook may use the client
    MutexLock lock(mutex_);
    return *master_;
  }

  /// Marks the master to be looked for again before the next step.
  void stale() noexcept {
    if (!stale_.exchange(true, std::memory_order_acq_rel)) {
      epoch_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  /// How many times the master was marked stale: a connection made to the
  /// master found at one epoch is let go at a later one (an async link,
  /// which no pool hands out again).
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

  /// "host:port" of the master as last found; empty before.
  std::string address() const {
    MutexLock lock(mutex_);
    return master_ ? master_->options().endpoint() : std::string();
  }
  /// How many times a new master was adopted after the first.
  unsigned switches() const noexcept { return switches_.load(std::memory_order_acquire); }

  /// Asks the Sentinels now (see the top of this file). Throws
  /// ConnectionError naming every Sentinel and what it said when none named
  /// a master that says ROLE master; Error(invalid_argument) when the
  /// Sentinels that answered know no master of that name; ServerError
  /// (NOPERM) when the one named refuses ROLE to this user.
  void find(SteadyClock::time_point deadline);

  /// A connection to the master, the step's reply timeout set.
  template <class Send>
  auto route(SteadyClock::time_point deadline, Send&& send) {
    const SteadyClock::time_point give_up =
        deadline != no_deadline ? deadline : SteadyClock::now() + options_.command_timeout;
    std::chrono::milliseconds pause = options_.retry_pause;
    for (;;) {
      std::optional<Client::Borrowed> connection;
      try {
        connection.emplace(master(deadline).borrow(deadline));
      } catch (const ConnectionError& error) {
        stale();
        pause_or_throw(deadline, give_up, pause, error);
        continue;
      } catch (const TimeoutError&) {
        stale();
        throw;
      }
      try {
        (*connection)->set_timeout(reply_timeout(options_.command_timeout, deadline));
        return send(**connection);
      } catch (const ServerError& error) {
        if (error.kind() != ServerErrorKind::readonly) throw;
        stale();  // a demoted master: the step did not run, so it may go again
        connection.reset();
        pause_or_throw(deadline, give_up, pause, error);
      } catch (const ConnectionError&) {
        stale();
        throw;
      } catch (const TimeoutError&) {
        stale();
        throw;
      }
    }
  }

  /// Reads the error reply of a pipelined step (a renewal): READONLY marks
  /// the master stale.
  void saw_error(std::string_view reply) noexcept {
    if (classify_server_error(reply) == ServerErrorKind::readonly) stale();
  }

  /// The Runtime beside the pools, made on first use; its Notifier
  /// subscribes at the master (found first if need be) and follows it.
  Runtime& runtime() {
    check_process();
    std::call_once(runtime_made_, [this] {
      const Client found = master(SteadyClock::now() + options_.connect_timeout);
      runtime_ = std::make_unique<Runtime>(found.options(), options_.max_waiters, events_,
                                           WatchServer{true, nullptr});
      runtime_ready_.store(true, std::memory_order_release);
    });
    return *runtime_;
  }

 private:
  struct Found {
    std::string host;
    int port = 0;
    std::string run_id;
  };

  static SentinelOptions checked(SentinelOptions options) {
    options.validate();
    if (options.ignore_sigpipe) ignore_default_sigpipe();
    return options;
  }

  void pause_or_throw(SteadyClock::time_point deadline, SteadyClock::time_point give_up,
                      std::chrono::milliseconds& pause, const Error& error) {
    const SteadyClock::time_point now = SteadyClock::now();
    if (now + pause >= give_up) {
      if (deadline != no_deadline) {
        std::this_thread::sleep_until(deadline);
        throw TimeoutError(Errc::timed_out, "no master of '" + options_.master_name +
                                                "' answered until the deadline: " + error.what());
      }
      const std::string why = message_of(error);  // the error thrown here adds the code's
      const std::string prefix = "no master of '" + options_.master_name + "'";
      throw ConnectionError(Errc::connect_failed,
                            why.compare(0, prefix.size(), prefix) == 0 ? why : prefix + ": " + why);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }

  // What the Sentinel at `address` names, if that server says ROLE master.
  // `answered`: the Sentinel answered; `named`: it named an address;
  // `refused`: the server named refused ROLE to this user (NOPERM).
  std::optional<Found> ask(const std::string& address, SteadyClock::time_point deadline,
                           std::string& why, bool& named, bool& answered, std::string& refused);
  // Makes `found` the master; a new one moves the Notifier and has the
  // leases revalidated.
  void adopt(const Found& found);
  Client client_at(const std::string& host, int port) DISTLOCK_REQUIRES(mutex_);
  void start_watch();
  // Tells the hook of each switch not told yet (master_switched), with no
  // lock held: the hook may use the client.
  void tell_switches() noexcept {
    const unsigned now = switches_.load(std::memory_order_acquire);
    for (unsigned told = told_switches_.exchange(now); told < now; ++told) {
      try {
        emit_about(events_, LockEventType::master_switched, address());
      } catch (...) {
        // No memory for the address: this one goes untold.
      }
    }
  }

  const SentinelOptions options_;
  const std::string id_;
  const ForkGuard fork_guard_;
  const SharedEventHook events_;
  std::mutex finding_;  // one look at a time
  mutable Mutex mutex_;
  std::optional<Client> master_ DISTLOCK_GUARDED_BY(mutex_);
  std::string run_id_ DISTLOCK_GUARDED_BY(mutex_);
  std::vector<Client> pools_ DISTLOCK_GUARDED_BY(mutex_);  // one per address seen
  std::atomic<bool> stale_{false};
  std::atomic<std::uint64_t> epoch_{0};  // stale() marks, see epoch()
  std::atomic<unsigned> switches_{0};
  std::atomic<unsigned> told_switches_{0};  // switches the hook heard of
  std::once_flag watch_started_;
  std::unique_ptr<SentinelWatch> watch_;
  std::once_flag runtime_made_;
  std::atomic<bool> runtime_ready_{false};
  // Declared last so it stops first: its threads use the pools above.
  std::unique_ptr<Runtime> runtime_;
};

inline void SentinelMaster::find(SteadyClock::time_point deadline) {
  std::string why;
  bool named = false;
  bool answered = false;
  std::string refused;
  for (const std::string& address : options_.sentinels) {
    if (const std::optional<Found> found = ask(address, deadline, why, named, answered, refused)) {
      adopt(*found);
      start_watch();
      return;
    }
    if (deadline != no_deadline && SteadyClock::now() >= deadline) break;
  }
  stale();
  if (!named && answered) {
    // Sentinels that answer and know no such master: the name is wrong,
    // and asking again will not change that.
    throw Error(Errc::invalid_argument,
                "no Sentinel knows a master named '" + options_.master_name + "':" + why);
  }
  if (!refused.empty()) {
    // The master is there and answers, but not to this user: no wait for a
    // failover will change that (the ACL rules, docs/connecting.md "Least privilege").
    throw ServerError(refused);
  }
  throw ConnectionError(Errc::connect_failed,
                        "no master of '" + options_.master_name + "' found:" + why);
}

inline std::optional<SentinelMaster::Found> SentinelMaster::ask(const std::string& address,
                                                                SteadyClock::time_point deadline,
                                                                std::string& why, bool& named,
                                                                bool& answered,
                                                                std::string& refused) {
  Found found;
  try {
    const ConnectionOptions usual = options_.sentinel_connection(address);
    Connection sentinel(cut_to(usual, deadline));
    // Cut short, the question's timeout is kept by poll(), to the
    // millisecond, as a pooled connection's is (client.hpp).
    sentinel.set_usual_timeout(usual.command_timeout);
    sentinel.set_timeout(sentinel.timeout());
    const Reply reply =
        sentinel.command("SENTINEL", "get-master-addr-by-name", options_.master_name);
    answered = true;
    const std::optional<MasterAddress> master = master_address(reply.view());
    if (!master) {
      why += "\n  sentinel " + address + ": knows no master named '" + options_.master_name + "'";
      return std::nullopt;
    }
    named = true;
    found.host = master->host;
    found.port = master->port;
  } catch (const std::exception& error) {
    why += "\n  sentinel " + address + ": " + message_of(error);
    return std::nullopt;
  }
  const std::string where = found.host + ":" + std::to_string(found.port);
  try {
    Client pool = [&] {
      MutexLock lock(mutex_);
      return client_at(found.host, found.port);
    }();
    auto connection = pool.borrow(deadline);
    connection->set_timeout(reply_timeout(options_.command_timeout, deadline));
    connection->append("ROLE");
    connection->append("INFO", "server");
    connection->flush();
    const Reply& role = connection->read_reply();
    const bool master = !role.is_error() && role.is_array() && role.size() > 0 &&
                        role[0].str() == std::string_view("master");
    const std::string role_text = role.is_error()                      ? std::string(role.str())
                                  : role.is_array() && role.size() > 0 ? std::string(role[0].str())
                                                                       : std::string("?");
    if (role.is_error() && classify_server_error(role.str()) == ServerErrorKind::noperm) {
      refused = role_text + " (ROLE at " + where + ", which Sentinel " + address +
                " names as the master of '" + options_.master_name + "')";
    }
    // `role` is the connection's last reply: read before the next one.
    const Reply& info = connection->read_reply();
    if (!info.is_error()) found.run_id = std::string(server_info_field(info.str(), "run_id"));
    if (!master) {
      why += "\n  sentinel " + address + " names " + where + ", which says ROLE " + role_text;
      return std::nullopt;
    }
  } catch (const Error& error) {
    why += "\n  sentinel " + address + " names " + where + ": " + message_of(error);
    return std::nullopt;
  }
  return found;
}

inline Client SentinelMaster::client_at(const std::string& host, int port) {
  for (const Client& pool : pools_) {
    if (pool.options().port == port && pool.options().host == host) return pool;
  }
  ClientOptions at = static_cast<const ClientOptions&>(options_);
  at.host = host;
  at.port = port;
  at.on_event = nullptr;  // the SentinelClient's hook is told through its own Runtime
  pools_.emplace_back(std::move(at));
  return pools_.back();
}

inline void SentinelMaster::adopt(const Found& found) {
  bool moved = false;
  ConnectionOptions where;
  {
    MutexLock lock(mutex_);
    const bool first = !master_;
    const bool other_address =
        master_ && (master_->options().host != found.host || master_->options().port != found.port);
    const bool other_process = !run_id_.empty() && !found.run_id.empty() && run_id_ != found.run_id;
    master_ = client_at(found.host, found.port);
    if (!found.run_id.empty()) run_id_ = found.run_id;
    stale_.store(false, std::memory_order_release);
    moved = !first && (other_address || other_process);
    where = master_->options();
  }
  if (!moved) return;
  switches_.fetch_add(1, std::memory_order_acq_rel);
  if (runtime_ready_.load(std::memory_order_acquire)) {
    runtime_->retarget(where);
    runtime_->revalidate();
  }
}

inline void SentinelMaster::start_watch() {
  std::call_once(watch_started_, [this] {
    watch_ = std::make_unique<SentinelWatch>(options_, [master = weak_from_this()] {
      // Held only while looking (detail/backend/sentinel_watch.hpp).
      const std::shared_ptr<SentinelMaster> held = master.lock();
      if (!held) return false;
      held->stale();
      try {
        std::lock_guard<std::mutex> one(held->finding_);
        const SteadyClock::time_point now = SteadyClock::now();
        held->find(now + held->options_.connect_timeout + held->options_.command_timeout);
      } catch (const Error&) {
        // Still switching: the next step, or the next announcement, looks again.
      }
      held->tell_switches();
      return true;
    });
  });
}

}  // namespace distlock::detail
