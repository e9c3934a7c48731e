// The errors distlock reports, as an std::error_code category and a small
// exception hierarchy rooted at distlock::Error.
//
// Losing a race is not an error (try_lock returns false); these are for what
// the caller did wrong (InvalidArgument) or what the infrastructure did
// (ConnectionError, TimeoutError, ServerError; WrongTypeError and
// NotALockError for a key no lock of the kind can use) and for lease trouble
// (LockLostError, NotReplicatedError). Messages never contain credentials or lock tokens.
// Redlock's NoQuorumError (Errc::no_quorum) lives in redlock_options.hpp, next to
// the per-master results it carries.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

namespace distlock {

/// Error codes of distlock's own category.
enum class Errc {
  connect_failed = 1,  ///< could not open a connection (refused, unreachable)
  io_error,            ///< the connection broke while a command was in flight
  timed_out,           ///< no connection or reply within the configured timeout
  protocol_error,      ///< the reply could not be parsed
  server_error,        ///< the server answered with an error reply
  pool_exhausted,      ///< no pooled connection became free in time
  invalid_argument,    ///< bad input: name, TTL, timeout, option
  lock_lost,           ///< the lease expired or another owner holds the lock
  not_held,            ///< an operation needs a lock this object does not hold
  too_many_waiters,    ///< the Client's bound on waiting acquirers was reached
  cancelled,           ///< a wait was cancelled from another thread
  no_quorum,           ///< too few of a Redlock's masters answered to decide
  forked,              ///< a Client made before fork() was used in the child
  not_replicated,      ///< fewer replicas acknowledged a grant than LockOptions::replicas asks
};

namespace detail {

class ErrorCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "distlock"; }
  std::string message(int code) const override {
    switch (static_cast<Errc>(code)) {
      case Errc::connect_failed: return "could not connect to the server";
      case Errc::io_error: return "connection broke during a command";
      case Errc::timed_out: return "timed out";
      case Errc::protocol_error: return "protocol error";
      case Errc::server_error: return "server replied with an error";
      case Errc::pool_exhausted: return "no free connection in the pool";
      case Errc::invalid_argument: return "invalid argument";
      case Errc::lock_lost: return "lock lost";
      case Errc::not_held: return "lock not held";
      case Errc::too_many_waiters: return "too many waiters";
      case Errc::cancelled: return "wait cancelled";
      case Errc::no_quorum: return "no quorum of masters answered";
      case Errc::forked: return "Client used in a child process after fork()";
      case Errc::not_replicated: return "not acknowledged by enough replicas";
    }
    return "unknown distlock error";
  }
};

}  // namespace detail

/// The category of every distlock::Errc. Never destroyed: a library
/// thread (the connector giving a hold back) may still build an error while
/// the process exits and destroys its statics, as std::system_category()
/// never is either.
inline const std::error_category& error_category() noexcept {
  static const detail::ErrorCategory* const category = new detail::ErrorCategory();
  return *category;
}

inline std::error_code make_error_code(Errc code) noexcept {
  return {static_cast<int>(code), error_category()};
}

}  // namespace distlock

/// \cond
template <>
struct std::is_error_code_enum<distlock::Errc> : std::true_type {};
/// \endcond

namespace distlock {

/// What kind of error reply the server sent, read from its first word.
enum class ServerErrorKind {
  wrongtype,   ///< the key holds another type (e.g. a hash where a string was expected)
  noscript,    ///< EVALSHA of a script the server does not have
  oom,         ///< maxmemory reached with a no-eviction policy
  readonly,    ///< a write sent to a replica
  loading,     ///< the server is still loading its dataset
  busy,        ///< a script is running past lua-time-limit
  noauth,      ///< authentication required
  wrongpass,   ///< bad username or password
  noperm,      ///< the ACL user may not run this command or touch this key
  noreplicas,  ///< min-replicas-to-write not satisfied
  other,       ///< anything else (ERR ...)
};

/// Classifies a server error reply by its prefix ("WRONGTYPE Operation ...").
inline ServerErrorKind classify_server_error(std::string_view message) noexcept {
  const std::string_view word = message.substr(0, message.find(' '));
  if (word == "WRONGTYPE") return ServerErrorKind::wrongtype;
  if (word == "NOSCRIPT") return ServerErrorKind::noscript;
  if (word == "OOM") return ServerErrorKind::oom;
  if (word == "READONLY") return ServerErrorKind::readonly;
  if (word == "LOADING") return ServerErrorKind::loading;
  if (word == "BUSY") return ServerErrorKind::busy;
  if (word == "NOAUTH") return ServerErrorKind::noauth;
  if (word == "WRONGPASS") return ServerErrorKind::wrongpass;
  if (word == "NOPERM") return ServerErrorKind::noperm;
  if (word == "NOREPLICAS") return ServerErrorKind::noreplicas;
  return ServerErrorKind::other;
}

/// Root of every exception distlock throws; code() is in error_category().
class Error : public std::system_error {
 public:
  /// `what` is the message; what() appends the code's message to it, as
  /// std::system_error does.
  Error(Errc code, const std::string& what) : std::system_error(code, what) {}
};

/// Bad input from the caller: refused before anything was sent, or, for a
/// Semaphore made with another count than the one its name adopted, by
/// the server's script with nothing changed (retrying cannot help either way).
class InvalidArgument : public Error {
 public:
  /// Errc::invalid_argument; `what` says which input is wrong and why.
  explicit InvalidArgument(const std::string& what) : Error(Errc::invalid_argument, what) {}
};

/// The connection could not be opened, broke, or spoke garbage.
class ConnectionError : public Error {
 public:
  /// Error(code, what); distlock throws it with connect_failed, io_error or
  /// protocol_error.
  using Error::Error;
};

/// A connect, a reply or a pooled connection did not arrive in time. For a
/// command, the server may still have applied it.
class TimeoutError : public Error {
 public:
  /// Error(code, what); distlock throws it with timed_out or pool_exhausted.
  using Error::Error;
};

/// The server answered with an error reply; kind() tells which.
class ServerError : public Error {
 public:
  /// `reply` is the server's error text, the message as it is; kind() is
  /// read from its first word.
  explicit ServerError(std::string_view reply)
      : Error(Errc::server_error, std::string(reply)), kind_(classify_server_error(reply)) {}
  /// Which error the server sent (ServerErrorKind::other when unknown).
  ServerErrorKind kind() const noexcept { return kind_; }

 protected:
  /// For errors distlock words itself, whose first word is not the
  /// server's: `kind` is given, not read from `what`.
  ServerError(ServerErrorKind kind, const std::string& what)
      : Error(Errc::server_error, what), kind_(kind) {}

 private:
  ServerErrorKind kind_;
};

/// The lock's key holds a value of another type than the lock keeps there
/// (a hash where Mutex keeps a string lease, a string where ReentrantMutex
/// or SharedMutex keep a hash): the key is not a lock of this kind, and
/// waiting for it would never end. A ServerError of kind wrongtype.
class WrongTypeError : public ServerError {
 public:
  /// `key` holds a `found` (as TYPE names it) where the lock keeps
  /// `expected`; the message, starting with WRONGTYPE, says so.
  WrongTypeError(const std::string& key, const std::string& found, const std::string& expected)
      : ServerError("WRONGTYPE " + key + " holds a " + found + ", not the " + expected +
                    " this lock keeps there (another kind of lock, or not a lock, uses the name)"),
        key_(key),
        found_(found) {}
  /// The lock's key.
  const std::string& key() const noexcept { return key_; }
  /// The type the key holds, as TYPE names it ("hash", "string", "list", ...).
  const std::string& found() const noexcept { return found_; }

 protected:
  struct Worded {};  // the message is given whole
  /// For a subclass that words the message itself: `what`, whole.
  WrongTypeError(Worded, std::string key, std::string found, const std::string& what)
      : ServerError(ServerErrorKind::wrongtype, what),
        key_(std::move(key)),
        found_(std::move(found)) {}

 private:
  std::string key_;
  std::string found_;
};

/// The key holds no lock of any kind: a key without expiry (every lock's
/// layout sets the key and its expiry in one step), a hash whose fields
/// are not a Redisson lock's, or a type no lock keeps. Application data,
/// or a peer's bug: force_unlock() deletes nothing, is_locked() will not
/// call it held, and an acquire refuses it rather than wait for ever. A
/// WrongTypeError (kind wrongtype), so that code catching that one for a
/// key a lock cannot use catches this one too.
class NotALockError : public WrongTypeError {
 public:
  /// `holds` says what is there ("a string without expiry"); `outcome`
  /// what the call did about it ("not deleted").
  NotALockError(const std::string& key, const std::string& found, const std::string& holds,
                const std::string& outcome)
      : WrongTypeError(Worded{}, key, found,
                       "key '" + key + "' is " + holds + ", not a lock; " + outcome),
        holds_(holds) {}
  /// What the key holds, in words ("a hash without expiry").
  const std::string& holds() const noexcept { return holds_; }

 private:
  std::string holds_;
};

/// The lease is gone: it expired, or the key now holds someone else's token.
class LockLostError : public Error {
 public:
  /// Errc::lock_lost; `what` names the lock.
  explicit LockLostError(const std::string& what) : Error(Errc::lock_lost, what) {}
};

/// Fewer replicas acknowledged a write than LockOptions::replicas asks (or
/// fewer are connected than it asks for). A grant it follows has been given
/// back: the lock is not held.
class NotReplicatedError : public Error {
 public:
  /// Errc::not_replicated: `acknowledged` replicas (or connected ones)
  /// where `wanted` were asked for.
  NotReplicatedError(const std::string& what, int acknowledged, int wanted)
      : Error(Errc::not_replicated, what), acknowledged_(acknowledged), wanted_(wanted) {}
  /// Replicas that acknowledged (WAIT's answer), or that were connected.
  int acknowledged() const noexcept { return acknowledged_; }
  /// Replicas asked for.
  int wanted() const noexcept { return wanted_; }

 private:
  int acknowledged_;
  int wanted_;
};

/// The operation needs a lock that this object does not hold.
class NotHeldError : public Error {
 public:
  /// Errc::not_held; `what` says which call found nothing held.
  explicit NotHeldError(const std::string& what) : Error(Errc::not_held, what) {}
};

namespace detail {

/// what() of `error` without the ": <code's message>" std::system_error
/// appends to a distlock Error: for an error told inside another, which
/// appends its own.
inline std::string message_of(const std::exception& error) {
  std::string text = error.what();
  if (const auto* coded = dynamic_cast<const Error*>(&error)) {
    const std::string suffix = ": " + coded->code().message();
    if (text.size() > suffix.size() &&
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      text.resize(text.size() - suffix.size());
    }
  }
  return text;
}

}  // namespace detail

}  // namespace distlock
