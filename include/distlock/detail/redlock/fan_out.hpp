// FanOut: one command sent to several Redis servers at once, and their
// replies collected against one deadline, without a thread per server.
//
// Each server's Client lends one connection. The command is appended and
// flushed on every connection first; only then are the replies awaited,
// with poll() on each socket in turn against one shared deadline. A server
// that is slow or stopped uses the deadline up once, and the ones after it
// are only asked whether their replies are there, so it costs the deadline
// once, not once per server. (While it waits, the others are looked at now
// and then; see wait_for_reply.) (One poll() over all the sockets is woken by
// every reply as it arrives; waiting on one socket at a time lets the
// replies that arrive meanwhile be read without a wakeup each, which
// measured about a fifth faster per lock and unlock.) A server that has not
// answered by the deadline still owes its reply: its connection goes back
// to its Client with pending() > 0, and the Client drops it, so the late
// reply is never read as the answer to some later command.
//
// A round may also queue a command behind one still in flight on the same
// connection (Send::without_waiting). Redis runs one connection's commands in
// order, so if the earlier command is applied late, the queued one is applied
// right after it; that is how a failed Redlock attempt takes back a SET that
// may still land.
//
// On a Redis Cluster (ClusterClient), a server that answers MOVED has the
// step sent once more, to the slot's new owner, within the same deadline: a
// redirect means the old owner ran nothing, and without it a slot move would
// cost that cluster its vote in every step until its map was read again.
// One that answers ASK (its slot is being migrated and the key is not there)
// has the step sent once more to the importing node it names, after ASKING
// on the same connection (ASKING admits only the command right after it),
// within the same deadline too; the ASKING's own reply is read and dropped.
#pragma once

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/lifecycle/acquire.hpp"
#include "distlock/detail/wire/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

class FanOut {
 public:
  using clock = std::chrono::steady_clock;

  /// Where one server stands after a round.
  enum class State {
    idle,         ///< not waited on in this round
    unreachable,  ///< no connection, or the command could not be written: nothing was sent
    waiting,      ///< sent; the reply is owed (only between send and collect)
    replied,      ///< `reply` holds the answer, which may be an error reply
    timed_out,    ///< sent; no reply by the deadline, so it may yet be applied
    broken,       ///< sent; the connection broke before the reply, so it may have been applied
  };

  /// How a round treats one server.
  enum class Send {
    skip,             ///< leave it out
    and_wait,         ///< send on a connection owing nothing, and wait for the reply
    without_waiting,  ///< queue behind whatever its connection still owes; do not wait
  };

  /// What one round learns of a server; each round starts from a fresh one.
  struct Round {
    State state = State::idle;
    Reply reply{nullptr};
    std::error_code error;     ///< for unreachable, timed_out and broken
    std::string message;       ///< the error's text, naming the server
    bool queued = false;       ///< appended in this round, not yet flushed
    bool sent_eval = false;    ///< answered NOSCRIPT in this round and was sent EVAL
    bool redirected = false;   ///< answered MOVED or ASK in this round and was sent again
    bool asked = false;        ///< `connection` is to an importing node, reached by ASK
    unsigned asking_owed = 0;  ///< replies to ASKING still to be read before the step's
  };

  struct Node : Round {
    explicit Node(Site* where) noexcept : site(where) {}
    Site* site;
    std::optional<Borrowed> connection;
  };

  explicit FanOut(const std::vector<Site*>& sites) {
    nodes_.reserve(sites.size());
    for (Site* site : sites) nodes_.emplace_back(site);
  }

  FanOut(const FanOut&) = delete;
  FanOut& operator=(const FanOut&) = delete;

  /// Connections borrowed from now on (pool wait, connect) are cut to
  /// `deadline`, as a caller's deadline cuts every step.
  void borrow_by(clock::time_point deadline) noexcept { borrow_deadline_ = deadline; }

  /// Sends argv to the servers how(node) picks, borrowing a connection from
  /// each that has none, and flushes them all. A server that cannot be
  /// reached is marked unreachable; nothing throws for it. argv must
  /// outlive collect() (a MOVED sends it again).
  template <class How>
  void send(Args argv, How how) {
    script_ = nullptr;
    argv_ = argv;
    verb_ = argv.size() == 0 ? std::string() : std::string(*argv.begin());
    round(how, [&](Connection& connection, Send) { connection.append_argv(argv); });
  }

  /// As send(), for a script: EVALSHA, answered on NOSCRIPT by one EVAL in
  /// collect(). Servers sent without_waiting get EVAL at once, as nobody
  /// reads their NOSCRIPT. keys and args must outlive collect().
  template <class How>
  void send_script(const Script& script, Args keys, Args args, How how) {
    script_ = &script;
    verb_ = "EVALSHA";
    keys_ = keys;
    args_ = args;
    round(how, [&](Connection& connection, Send send) {
      if (send == Send::without_waiting) {
        connection.append_eval(script, keys, args);
      } else {
        connection.append_evalsha(script, keys, args);
      }
    });
  }

  /// Reads replies until every server waited on has answered or `deadline`
  /// has passed; the ones still silent then are timed_out.
  void collect(clock::time_point deadline) {
    collect_deadline_ = deadline;
    budget_ = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
    for (bool waiting = true; waiting;) {
      waiting = false;
      for (Node& node : nodes_) {
        if (node.state != State::waiting) continue;
        waiting = true;
        wait_for_reply(node, deadline);
      }
    }
  }

  std::size_t size() const noexcept { return nodes_.size(); }
  const Node& operator[](std::size_t i) const noexcept { return nodes_[i]; }

  /// Names a server in messages: its endpoint; for a cluster, the cluster
  /// (its seeds) and the node this round reached there.
  std::string where(const Node& node) const {
    std::string text = node.site->describe();
    if (node.site->redirects() && node.connection) {
      text += " node " + (*node.connection)->options().endpoint();
    }
    return text;
  }

 private:
  template <class How, class Append>
  void round(How how, Append append) {
    for (Node& node : nodes_) {
      const Send send = how(static_cast<const Node&>(node));
      const bool was_asked = node.asked;
      static_cast<Round&>(node) = Round{};
      if (send == Send::skip) continue;
      try {
        // A reply still owed on this connection would be read as this
        // round's answer, so a round that waits needs a clean connection;
        // it also goes to the slot's owner again, not to where an ASK
        // sent the last round (a new ASK is followed as that one was).
        if (node.connection &&
            ((*node.connection)->broken() ||
             (send == Send::and_wait && ((*node.connection)->pending() != 0 || was_asked)))) {
          node.connection.reset();
        }
        if (node.connection && was_asked) {
          // Queued behind a step an ASK sent to the importing node: that
          // node serves the slot's keys only after ASKING.
          node.asked = true;
          ask_first(node);
        }
        if (!node.connection) node.connection.emplace(node.site->borrow(borrow_deadline_));
        append(**node.connection, send);
        node.queued = true;
        if (send == Send::and_wait) node.state = State::waiting;
      } catch (const Error& error) {
        fail(node, State::unreachable, error);
      }
    }
    // Every command is written before any reply is awaited: that is what
    // makes one round cost one round trip, not one per server.
    for (Node& node : nodes_) {
      if (!node.queued) continue;
      node.queued = false;
      try {
        (*node.connection)->flush();
      } catch (const Error& error) {
        fail(node, State::unreachable, error);
      }
    }
  }

  // Waits for one server's reply until the deadline; past it, only looks.
  // The wait goes in slices (1 ms, doubling): when one runs out, the other
  // servers' sockets are looked at without waiting, so that one answering
  // NOSCRIPT is sent its EVAL at once rather than after this server's
  // deadline. Replies on a working network come within the first slice.
  void wait_for_reply(Node& node, clock::time_point deadline) {
    for (std::chrono::milliseconds slice(1);; slice *= 2) {
      const clock::duration left = deadline - clock::now();
      if (!poll_for_reply(node,
                          left <= clock::duration::zero()
                              ? std::chrono::milliseconds(0)
                              : std::min<std::chrono::milliseconds>(
                                    std::chrono::ceil<std::chrono::milliseconds>(left), slice))) {
        return;
      }
      if (left <= clock::duration::zero()) {
        node.state = State::timed_out;
        node.error = Errc::timed_out;
        node.message = where(node) + ": " + verb_ + ": no reply within " +
                       std::to_string(budget_.count()) + " ms";
        return;
      }
      for (Node& other : nodes_) {
        if (&other != &node && other.state == State::waiting) {
          static_cast<void>(poll_for_reply(other, std::chrono::milliseconds(0)));
        }
      }
    }
  }

  // One poll() of one socket, reading the reply if there is one. Returns
  // true if the server is still to be waited for.
  bool poll_for_reply(Node& node, std::chrono::milliseconds wait) {
    pollfd socket{(*node.connection)->fd(), POLLIN, 0};
    const int ready =
        ::poll(&socket, 1, static_cast<int>(std::min<long long>(wait.count(), INT_MAX)));
    const int poll_errno = errno;
    if (ready > 0) {
      read_reply(node);
      return node.state == State::waiting;
    }
    if (ready < 0 && poll_errno != EINTR) {
      node.state = State::broken;
      node.error = Errc::io_error;
      node.message = where(node) + ": poll: " + std::strerror(poll_errno);
      return false;
    }
    return true;
  }

  // Called once poll() said the socket is readable: one read, which then
  // does not block. A reply split in flight stays waited for, against the
  // same deadline, until its rest arrives.
  void read_reply(Node& node) {
    Connection& connection = **node.connection;
    try {
      connection.read_available();
      std::optional<Reply> reply = connection.next_buffered_reply();
      // The replies to ASKING come first, maybe in the same read as the
      // step's: dropped, unless one is an error, which answers the step.
      while (reply && node.asking_owed > 0 && !reply->is_error()) {
        --node.asking_owed;
        reply = connection.next_buffered_reply();
      }
      if (!reply) return;
      if (script_ != nullptr && !node.sent_eval && reply->is_error() &&
          classify_server_error(reply->str()) == ServerErrorKind::noscript) {
        // The server lost its script cache (restart, failover, SCRIPT
        // FLUSH): EVAL runs the script and caches it for next time.
        node.sent_eval = true;
        if (node.asked) ask_first(node);
        connection.append_eval(*script_, keys_, args_);
        connection.flush();
        return;
      }
      // On a cluster a MOVED notes the slot's new owner, where the step
      // goes once more, and an ASK names the importing node it goes to once
      // (see the top of this file); a second redirect is this master's
      // answer. Elsewhere the site hears the error (a Sentinel's master
      // that answers READONLY is looked for again).
      if (reply->is_error() && node.site->redirects()) {
        if (redirect(node, reply->str())) return;
      } else if (reply->is_error()) {
        node.site->saw_error(reply->str());
      }
      node.reply = std::move(*reply);
      node.state = State::replied;
    } catch (const Error& error) {
      fail(node, error.code() == Errc::timed_out ? State::timed_out : State::broken, error);
    }
  }

  // After a MOVED, the step once more on a connection to where the backend
  // routes it now (the new owner); after an ASK, on one to the importing
  // node it names, behind ASKING. By the same deadline, once per round.
  // False for any other reply.
  bool redirect(Node& node, std::string_view reply) {
    const bool moved = node.site->saw_error(reply);  // a MOVED is noted in the map
    if (node.redirected || (!moved && parse_redirect(reply).kind != Redirect::Kind::ask)) {
      return false;
    }
    node.connection.reset();  // its one reply read: clean, back to its pool
    node.redirected = true;
    node.asked = !moved;
    node.sent_eval = false;
    try {
      const clock::time_point by = std::min(borrow_deadline_, collect_deadline_);
      node.connection.emplace(moved ? node.site->borrow(by) : node.site->borrow_asked(reply, by));
      if (node.asked) ask_first(node);
      append_step(node);
    } catch (const Error& error) {
      fail(node, State::unreachable, error);
    }
    return true;
  }

  // ASKING, whose reply is to be read and dropped before the next one's.
  static void ask_first(Node& node) {
    (*node.connection)->append_argv(Args(asking_argv, 1));
    ++node.asking_owed;
  }

  // The round's step, appended again and flushed.
  void append_step(Node& node) {
    Connection& connection = **node.connection;
    if (script_ != nullptr) {
      connection.append_evalsha(*script_, keys_, args_);
    } else {
      connection.append_argv(argv_);
    }
    connection.flush();
  }

  static void fail(Node& node, State state, const Error& error) {
    node.state = state;
    node.queued = false;
    node.error = error.code();
    node.message = error.what();
    // A cluster's errors name the node; the cluster is named first.
    if (node.site->redirects()) node.message = node.site->describe() + ": " + node.message;
  }

  static constexpr std::string_view asking_argv[] = {"ASKING"};

  std::vector<Node> nodes_;
  const Script* script_ = nullptr;
  clock::time_point borrow_deadline_ = clock::time_point::max();
  clock::time_point collect_deadline_ = clock::time_point::max();
  Args argv_;                           // of send(), sent again after a MOVED
  std::string verb_;                    // the command of this round, for messages
  std::chrono::milliseconds budget_{};  // the wait collect() was given, for messages
  Args keys_;
  Args args_;
};

}  // namespace distlock::detail
