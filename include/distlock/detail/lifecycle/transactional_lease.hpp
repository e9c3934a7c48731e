// TransactionalLease: SimpleMutex's wire protocol (simple_mutex.hpp says
// what it does, and what scripts do that it cannot): SET NX PX to acquire,
// and for release and extend a read (WATCH, GET) and then a transaction
// (MULTI, the change, EXEC) that runs only if the key still holds our token.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/client.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/base/config.hpp"
#include "distlock/detail/lifecycle/lease_mutex.hpp"
#include "distlock/detail/wire/connection.hpp"

namespace distlock::detail {

// SimpleMutex's wire protocol: plain commands and WATCH/MULTI/EXEC.
struct TransactionalLease {
  static Attempt acquire(Connection& connection, const LeaseKeys& keys, const std::string& token,
                         const Decimal& ttl, bool fencing) {
    if (!fencing) return set_if_absent(connection, keys, token, ttl);
    const SteadyClock::time_point sent = SteadyClock::now();
    connection.append("MULTI");
    connection.append("SET", keys.key, token, "NX", "PX", ttl);
    connection.append("INCR", keys.fence);
    connection.append("EXEC");
    // Every reply is read before any is reported: MULTI's, the SET's, the INCR's.
    std::string refused;
    bool multi_refused = false;
    bool set_alone = false;
    for (int step = 0; step < 3; ++step) {
      const Reply& reply = connection.read_reply();
      if (step == 1) set_alone = multi_refused && reply.is_ok();
      if (!reply.is_error() || !refused.empty()) continue;
      refused = std::string(reply.str());
      multi_refused = step == 0;
    }
    const Reply& exec = connection.read_reply();
    if (set_alone && young(sent, ttl, connection.options().command_timeout)) {
      try {
        static_cast<void>(connection.command("DEL", keys.key));
      } catch (const Error&) {  // the lease runs out instead
      }
    }
    if (!refused.empty()) throw ServerError(refused);
    try {
      return exec_answer(exec.throw_if_error());
    } catch (const UnfencedGrant& unfenced) {
      // A transaction does not roll back: the SET stands though the INCR
      // failed. Take the unfenced lock away again before reporting.
      static_cast<void>(release(connection, keys, token));
      throw ServerError(unfenced.what());
    }
  }

  // The same on a link (an event loop's): the fenced acquire is one MULTI
  // whose four commands are queued together, so no other step on the link
  // comes between them; the EXEC's reply is the answer. A MULTI the server
  // refused is a failure rather than a refusal: the SET may have run on
  // its own, so the attempt is given back apart (read, then deleted).
  static Link::Ticket send_acquire(Link& link, const LeaseKeys& keys, const std::string& token,
                                   const Decimal& ttl, bool fencing, Link::Sink sink) {
    if (!fencing) return send_set_if_absent(link, keys, token, ttl, std::move(sink));
    auto refused = std::make_shared<std::string>();  // MULTI's refusal
    link.send({"MULTI"}, [refused](LinkAnswer answer) {
      if (answer.reply && answer.reply->is_error()) *refused = answer.reply->str();
    });
    try {
      link.send({"SET", keys.key, token, "NX", "PX", ttl}, nullptr);
      link.send({"INCR", keys.fence}, nullptr);
      return link.send({"EXEC"}, [refused, sink = std::move(sink)](LinkAnswer answer) {
        if (!refused->empty() && answer.reply) {
          answer.reply.reset();
          answer.failure = std::make_exception_ptr(Error(Errc::server_error, *refused));
        }
        sink(std::move(answer));
      });
    } catch (...) {
      // Half a transaction queued (no memory): other steps would run in it.
      link.fail(std::current_exception());
      throw;
    }
  }
  // An unfenced grant (the INCR failed after the SET) is an Error, but no
  // ServerError: the grant stands, so the async caller gives it back.
  static Attempt acquire_answer(const Reply& reply, const LeaseKeys&, bool fencing) {
    if (!fencing) return set_answer(reply);
    try {
      return exec_answer(reply.throw_if_error());
    } catch (const UnfencedGrant& unfenced) {
      throw Error(Errc::server_error, unfenced.what());
    }
  }

  // See the top of this file: read, then delete, which nothing can write
  // blindly behind an attempt, so always apart, on a connection of its own.
  static void undo(UndoWriter& write, const LeaseKeys& keys, const std::string& token) {
    // release_by() reads the key and announces on the channel; no fence.
    write.apart([key = std::string(keys.key), channel = std::string(keys.channel),
                 token](Connection& fresh) {
      static_cast<void>(release_by(fresh, LeaseKeys{key, {}, channel}, token, no_deadline));
    });
  }

  static TokenCheck release(Connection& connection, const LeaseKeys& keys,
                            const std::string& token) {
    return release_by(connection, keys, token, no_deadline);
  }
  // No send_undo nor send_release: a token-checked delete takes a read and
  // then a transaction on one connection, whose WATCH another step on a
  // shared link could clear (UNWATCH, EXEC) in between. The async calls
  // give a late grant back, and release, on a connection of their own.

  static TokenCheck extend(Connection& connection, const LeaseKeys& keys, const std::string& token,
                           const Decimal& ttl) {
    return check_and_change(connection, keys, token, no_deadline,
                            [&] { connection.append("PEXPIRE", keys.key, ttl); });
  }

  static TokenCheck release_by(Connection& connection, const LeaseKeys& keys,
                               const std::string& token, SteadyClock::time_point deadline) {
    return check_and_change(connection, keys, token, deadline, [&] {
      connection.append("DEL", keys.key);
      connection.append(connection.publish_verb(), keys.channel, "0");
    });
  }

  // WATCH + GET + MULTI; if the key holds our token, the change and EXEC,
  // else an empty EXEC (which unwatches). An aborted EXEC means the key
  // changed under us: look again. MULTI goes with the read, so that a
  // MULTI the server refuses (a user whose ACL rules lack it) is known
  // before any change is sent: queued behind a refused MULTI, the change
  // would run on its own, outside the token check (a lease that ran out
  // and was taken meanwhile would lose its new holder the key). With a
  // `deadline`, every reply waits only for what is left until it.
  template <class QueueChange>
  static TokenCheck check_and_change(Connection& connection, const LeaseKeys& keys,
                                     const std::string& token, SteadyClock::time_point deadline,
                                     QueueChange queue_change) {
    const auto read = [&]() -> const Reply& {
      if (deadline != no_deadline) {
        if (SteadyClock::now() >= deadline) {
          throw TimeoutError(Errc::timed_out, connection.options().endpoint() + ": no time left");
        }
        connection.set_timeout(reply_timeout(connection.options().command_timeout, deadline));
      }
      return connection.read_reply();
    };
    for (;;) {
      connection.append("WATCH", keys.key);
      connection.append("GET", keys.key);
      connection.append("MULTI");
      read().throw_if_error();
      // What the GET said, kept: the next read reuses the reply.
      const Reply& value = read();
      const bool ours = !value.is_error() && !value.is_nil() && value.str() == token;
      const TokenCheck found = value.is_nil() ? TokenCheck::no_key : TokenCheck::other_token;
      const std::string get_error = value.is_error() ? std::string(value.str()) : std::string();
      const Reply& multi = read();
      if (multi.is_error()) {
        return unguarded(connection, keys, token, std::string(multi.str()), read, queue_change);
      }
      if (!ours) {
        connection.append("EXEC");  // nothing queued
        read().throw_if_error();
        if (!get_error.empty()) throw ServerError(get_error);
        return found;
      }
      const std::size_t queued_before = connection.pending();
      queue_change();
      const std::size_t changes = connection.pending() - queued_before;
      connection.append("EXEC");
      for (std::size_t i = 0; i < changes; ++i) read().throw_if_error();
      const Reply& exec = read().throw_if_error();
      if (exec.is_nil()) continue;  // the key changed after WATCH
      exec[0].throw_if_error();
      return TokenCheck::done;
    }
  }

  // A MULTI the server refused (a user whose ACL rules lack it): no
  // transaction can guard the change. It is sent on its own only while the
  // key holds our token with more than two command timeouts of its lease
  // left (GET and PTTL run back to back): nobody else can set the key
  // before that lease ends, so the change lands on our key. Else the
  // refusal is thrown, and the key is left to its lease.
  template <class Read, class QueueChange>
  static TokenCheck unguarded(Connection& connection, const LeaseKeys& keys,
                              const std::string& token, const std::string& refused, Read& read,
                              QueueChange& queue_change) {
    connection.append("UNWATCH");
    connection.append("GET", keys.key);
    connection.append("PTTL", keys.key);
    read().throw_if_error();
    const Reply& value = read();
    if (value.is_nil()) {
      read();
      return TokenCheck::no_key;
    }
    const std::string get_error = value.is_error() ? std::string(value.str()) : std::string();
    const bool ours = get_error.empty() && value.str() == token;
    const Reply& pttl = read();
    if (!get_error.empty()) throw ServerError(get_error);
    if (!ours) return TokenCheck::other_token;
    const long long twice = 2 * connection.options().command_timeout.count();
    if (!pttl.is_integer() || pttl.integer() <= twice) throw ServerError(refused);
    const std::size_t queued_before = connection.pending();
    queue_change();
    const std::size_t changes = connection.pending() - queued_before;
    for (std::size_t i = 0; i < changes; ++i) read().throw_if_error();
    return TokenCheck::done;
  }

  // A MULTI the server refused (a user whose ACL rules lack it) lets the
  // SET and the INCR behind it run on their own. A grant so made is deleted
  // at once on the same connection, with no check of its token (a check
  // takes a MULTI): nobody else can have set the key (NX) before its lease
  // ends, so the DEL goes only while half the lease is left past a command
  // timeout more; else the lease runs out.
  static bool young(SteadyClock::time_point sent, const Decimal& ttl,
                    std::chrono::milliseconds command_timeout) {
    return (SteadyClock::now() - sent) + command_timeout <
           std::chrono::milliseconds(ttl.value()) / 2;
  }

  // A fenced grant's INCR failed: the grant stands, without a fence.
  struct UnfencedGrant : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  // EXEC's reply to the fenced acquire: [OK or nil, fence].
  static Attempt exec_answer(const Reply& exec) {
    if (exec.size() != 2) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
    Attempt attempt;
    attempt.acquired = exec[0].is_ok();
    if (exec[1].is_error()) {
      if (attempt.acquired) throw UnfencedGrant(std::string(exec[1].str()));
      throw ServerError(exec[1].str());
    }
    if (attempt.acquired) attempt.fence = exec[1].integer();
    return attempt;
  }

  // Renews with no script. The leases go in chunks of watch_size: WATCH
  // the chunk's keys and MGET their values; then, for those still
  // holding their token, MULTI, PEXPIRE <ttl> GT each, EXEC. GT only
  // lengthens, so a renewal never cuts short a longer lease set by
  // extend(). One flight carries a chunk's transaction and the next chunk's
  // WATCH and reads, so a round costs one round trip per chunk, plus one.
  // Chunks stay small because WATCH checks each key against those already
  // watched: its cost grows with the square of the keys it is given.
  //
  // A watched key that changed in between (a lost lease that another
  // client took) aborts its chunk's EXEC: look at those leases again, a few
  // times, then leave them unknown for the next round. Redis before 7
  // refuses PEXPIRE's GT as it is queued (EXECABORT); the renewer then
  // reads each PTTL with the value and lengthens only the leases that would
  // end sooner than their TTL.
  class Renewer final : public detail::Renewer {
   public:
    explicit Renewer(SitePtr site, bool server_has_gt = true)
        : site_(std::move(site)), read_pttl_(!server_has_gt) {}
    BatchKey batch_key() const noexcept override { return {&kind_tag, site_->identity()}; }
    void renew(const std::vector<LeaseState*>& leases, std::vector<Renewed>& outcomes,
               SteadyClock::time_point deadline) noexcept override {
      try {
        Borrowed connection = site_->borrow(deadline);
        connection->set_timeout(reply_timeout(site_->options().command_timeout, deadline));
        std::vector<std::size_t> pending(leases.size());
        for (std::size_t i = 0; i < leases.size(); ++i) pending[i] = i;
        for (int look = 0; look < looks && !pending.empty(); ++look) {
          pending = renew_chunks(*connection, leases, outcomes, pending);
        }
      } catch (...) {
        // Whatever was not settled stays unknown.
      }
    }

    static constexpr std::size_t watch_size = 100;
    static constexpr int looks = 3;

   private:
    // One pass over `pending`; returns the leases whose EXEC aborted.
    std::vector<std::size_t> renew_chunks(Connection& connection,
                                          const std::vector<LeaseState*>& leases,
                                          std::vector<Renewed>& outcomes,
                                          const std::vector<std::size_t>& pending) {
      const bool read_pttl = read_pttl_.load(std::memory_order_relaxed);
      std::vector<std::size_t> aborted;
      std::vector<std::size_t> lengthen;  // the previous chunk's leases still ours
      bool watching = false;
      for (std::size_t first = 0;; first += watch_size) {
        const std::size_t end = std::min(first + watch_size, pending.size());
        const bool transaction = !lengthen.empty();
        const bool unwatch = watching && !transaction;  // nothing of the last chunk to lengthen
        if (!transaction && !unwatch && first >= end) break;
        if (transaction) {
          connection.append("MULTI");
          for (const std::size_t i : lengthen) {
            if (read_pttl) {
              connection.append("PEXPIRE", leases[i]->key, leases[i]->ttl_text);
            } else {
              connection.append("PEXPIRE", leases[i]->key, leases[i]->ttl_text, "GT");
            }
          }
          connection.append("EXEC");
        } else if (unwatch) {
          connection.append("UNWATCH");
        }
        watching = first < end;
        if (watching) {
          std::vector<std::string_view> keys{"WATCH"};
          for (std::size_t n = first; n < end; ++n) keys.push_back(leases[pending[n]]->key);
          connection.append_argv(keys);
          keys.front() = "MGET";  // one command for the chunk's values, not one GET each
          connection.append_argv(keys);
          if (read_pttl) {
            for (std::size_t n = first; n < end; ++n) {
              connection.append("PTTL", leases[pending[n]]->key);
            }
          }
        }
        connection.flush();
        if (transaction) {
          if (!settle(connection, lengthen, outcomes)) {
            aborted.insert(aborted.end(), lengthen.begin(), lengthen.end());
          }
        } else if (unwatch) {
          connection.read_reply().throw_if_error();
        }
        lengthen.clear();
        if (watching) {
          connection.read_reply().throw_if_error();  // WATCH
          connection.read_reply().throw_if_error();
          const Reply values = connection.take_last();
          if (values.size() != end - first) {
            throw ConnectionError(Errc::protocol_error, "bad MGET reply");
          }
          for (std::size_t n = first; n < end; ++n) {
            const std::size_t i = pending[n];
            const ReplyView value = values[n - first];
            const bool ours = value.is_string() && value.str() == leases[i]->token;
            long long pttl = -1;
            if (read_pttl && connection.read_reply().is_integer()) {
              pttl = connection.take_last().integer();
            }
            if (!ours) {
              outcomes[i] = Renewed::gone;
            } else if (!read_pttl || pttl < leases[i]->ttl.count()) {
              lengthen.push_back(i);
            } else {
              outcomes[i] = Renewed::yes;
            }
          }
        }
      }
      return aborted;
    }

    // Reads one MULTI/EXEC's replies; false when EXEC did not run because
    // a watched key changed or the server has no GT. Any other refusal (OOM:
    // Redis refuses every queued command) is thrown: the leases stay unknown.
    bool settle(Connection& connection, const std::vector<std::size_t>& lengthened,
                std::vector<Renewed>& outcomes) {
      connection.read_reply().throw_if_error();  // MULTI
      std::string refusal;
      for (std::size_t n = 0; n < lengthened.size(); ++n) {
        const Reply& queued = connection.read_reply();
        if (queued.is_error() && refusal.empty()) refusal = queued.str();
      }
      const Reply& exec = connection.read_reply();
      if (!refusal.empty()) {
        if (classify_server_error(refusal) != ServerErrorKind::other) throw ServerError(refusal);
        read_pttl_ = true;  // "wrong number of arguments": PEXPIRE without GT
        return false;
      }
      exec.throw_if_error();
      if (exec.is_nil()) return false;  // a watched key changed
      // No server answers EXEC otherwise; counted as renewed, it would keep
      // a lease believed whose key may be gone.
      if (!exec.is_array()) throw ConnectionError(Errc::protocol_error, "bad EXEC reply");
      for (const std::size_t i : lengthened) outcomes[i] = Renewed::yes;
      return true;
    }

    static constexpr char kind_tag = 0;
    const SitePtr site_;
    std::atomic<bool> read_pttl_;  // the server has no PEXPIRE ... GT
  };
};

}  // namespace distlock::detail
