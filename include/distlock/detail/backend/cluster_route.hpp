// route_to_owner(): sends one step to the node of a cluster that owns a
// hash slot (ClusterNodes, detail/backend/cluster_routing.hpp) and follows the
// cluster's answers, all within the caller's deadline and max_redirects:
// - MOVED <slot> <node>: the slot moved for good; note the new owner and
//   send the step there;
// - ASK <slot> <node>: the slot is being migrated and this key is already
//   at the importing node; send ASKING and the step on one connection there
//   (the map is not changed);
// - TRYAGAIN, CLUSTERDOWN: pause (doubling from retry_pause) and send again.
// A redirect or refusal means the node did not run the step, so sending it
// again elsewhere is safe. So is a node that could not be connected to (a
// master that died): the map is read again and the step sent to the slot's
// owner then (a promoted replica), until the caller's deadline, or
// max_redirects times without one. Other connection errors are not retried
// here (the step may have run); the map is read again before the next step.
// A slot the map names no owner for (read from a node that has not learned
// a failover's outcome yet) is looked up again the same way; at the
// deadline the wait ends in a TimeoutError, as the cluster's CLUSTERDOWN's
// does, and without one after max_redirects looks in that CLUSTERDOWN.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "distlock/client.hpp"
#include "distlock/cluster_options.hpp"
#include "distlock/detail/backend/cluster_routing.hpp"
#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/base/time.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

/// The longest pause between two looks for a failed node's successor.
inline constexpr std::chrono::milliseconds max_failover_pause{200};

/// Sends `send(connection)` to the owner of `slot`, following redirects as
/// the top of this file says; returns what send returns.
template <class Send>
auto route_to_owner(ClusterNodes& nodes, int slot, SteadyClock::time_point deadline, Send&& send) {
  const ClusterOptions& options = nodes.options();
  ClusterNodes::Node* target = nodes.owner_if_any(slot, deadline);
  bool asking = false;
  std::chrono::milliseconds pause = options.retry_pause;
  for (unsigned redirects = 0;; ++redirects) {
    if (target == nullptr) {
      const auto now = SteadyClock::now();
      if (deadline == no_deadline ? redirects >= options.max_redirects : now >= deadline) {
        if (deadline == no_deadline) throw ServerError(ClusterNodes::unserved(slot));
        throw TimeoutError(Errc::timed_out, ClusterNodes::unserved(slot) + " until the deadline");
      }
      std::this_thread::sleep_until(deadline == no_deadline ? now + pause
                                                            : std::min(now + pause, deadline));
      pause = std::min(pause * 2, max_failover_pause);
      target = nodes.owner_if_any(slot, deadline);  // the map is read again first
      continue;
    }
    std::optional<Client::Borrowed> connection;
    try {
      connection.emplace(target->client.borrow(deadline));
      (*connection)->set_timeout(reply_timeout(options.command_timeout, deadline));
      (*connection)->set_sharded_publish(true);
      if (!asking) return send(**connection);
      (*connection)->command("ASKING");
      struct AskingOff {
        Connection& connection;
        ~AskingOff() { connection.set_asking(false); }
      } off{**connection};
      (*connection)->set_asking(true);
      return send(**connection);
    } catch (const ServerError& error) {
      const Redirect redirect = parse_redirect(error.what());
      if (redirect.kind == Redirect::Kind::none || redirects >= options.max_redirects) throw;
      connection.reset();
      if (redirect.kind == Redirect::Kind::try_again) {
        if (deadline != no_deadline && SteadyClock::now() + pause >= deadline) {
          // The caller's time runs out first: its wait ends at its deadline.
          std::this_thread::sleep_until(deadline);
          throw TimeoutError(Errc::timed_out,
                             std::string("cluster busy until the deadline: ") + error.what());
        }
        std::this_thread::sleep_for(pause);
        pause *= 2;
        continue;
      }
      ClusterNodes::Node& to =
          nodes.node_at(redirect.host.empty() ? target->host() : redirect.host, redirect.port);
      if (redirect.kind == Redirect::Kind::moved) {
        nodes.moved(redirect.slot, to);
        asking = false;
      } else {
        asking = true;
      }
      target = &to;
    } catch (const ConnectionError& error) {
      nodes.mark_stale();  // the node may be gone: read the map before the next step
      // Not even connected, so nothing was sent: after a failover the
      // slot has a new owner to send it to. A caller with a deadline
      // looks for one until then; one without, max_redirects times.
      if (error.code() != Errc::connect_failed) throw;
      connection.reset();
      const auto now = SteadyClock::now();
      if (deadline == no_deadline ? redirects >= options.max_redirects : now + pause >= deadline) {
        throw;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, max_failover_pause);
      nodes.reread(deadline);
      target = nodes.owner_if_any(slot, deadline);
      asking = false;
    } catch (const TimeoutError&) {
      nodes.mark_stale();
      throw;
    }
  }
}

}  // namespace distlock::detail
