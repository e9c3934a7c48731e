// Typed access to hiredis replies: ReplyView (borrowed) and Reply (owning).
//
// A Reply owns one redisReply tree and frees it with freeReplyObject; the
// elements of an array are ReplyViews into it, valid as long as the Reply.
// Error replies are values here; Connection decides when one becomes a throw.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "distlock/error.hpp"

namespace distlock {

/// The RESP2 reply types distlock deals with.
enum class ReplyType { string, array, integer, nil, status, error, other };

namespace detail {

/// The name of a reply type, for messages ("an integer", "an array", ...).
inline const char* describe(ReplyType type) noexcept {
  switch (type) {
    case ReplyType::string: return "a bulk string";
    case ReplyType::array: return "an array";
    case ReplyType::integer: return "an integer";
    case ReplyType::nil: return "a nil";
    case ReplyType::status: return "a status";
    case ReplyType::error: return "an error";
    case ReplyType::other: return "a reply of another type";
  }
  return "an unknown reply";
}

/// Throws the ConnectionError (protocol_error) of a reply of the wrong type:
/// "<what>: the server answered <got> where <wanted> belongs".
[[noreturn]] inline void unexpected_reply(std::string_view what, std::string_view wanted,
                                          ReplyType got) {
  throw ConnectionError(Errc::protocol_error, std::string(what) + ": the server answered " +
                                                  describe(got) + " where " + std::string(wanted) +
                                                  " belongs");
}

// The accessors shared by ReplyView and Reply; Derived supplies reply_ptr().
template <class Derived>
class ReplyAccess {
 public:
  ReplyType type() const noexcept {
    switch (reply().type) {
      case REDIS_REPLY_STRING: return ReplyType::string;
      case REDIS_REPLY_ARRAY: return ReplyType::array;
      case REDIS_REPLY_INTEGER: return ReplyType::integer;
      case REDIS_REPLY_NIL: return ReplyType::nil;
      case REDIS_REPLY_STATUS: return ReplyType::status;
      case REDIS_REPLY_ERROR: return ReplyType::error;
      default: return ReplyType::other;
    }
  }
  bool is_nil() const noexcept { return type() == ReplyType::nil; }
  bool is_error() const noexcept { return type() == ReplyType::error; }
  bool is_integer() const noexcept { return type() == ReplyType::integer; }
  bool is_array() const noexcept { return type() == ReplyType::array; }
  /// True for a bulk string or a status reply ("OK").
  bool is_string() const noexcept {
    return type() == ReplyType::string || type() == ReplyType::status;
  }
  /// True for the status reply +OK.
  bool is_ok() const noexcept { return type() == ReplyType::status && str() == "OK"; }

  /// The bytes of a string, status or error reply (empty for other types).
  std::string_view str() const noexcept {
    const redisReply& r = reply();
    const bool has_text =
        r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS || r.type == REDIS_REPLY_ERROR;
    return has_text ? std::string_view(r.str, r.len) : std::string_view();
  }
  /// The value of an integer reply (0 for other types).
  long long integer() const noexcept {
    return reply().type == REDIS_REPLY_INTEGER ? reply().integer : 0;
  }
  /// The number of elements of an array reply (0 for other types).
  std::size_t size() const noexcept {
    return reply().type == REDIS_REPLY_ARRAY ? reply().elements : 0;
  }

  /// The value of an integer reply. Any other type throws ConnectionError
  /// (protocol_error) naming `what` and the type: no Redis server answers
  /// so, and reading it as integer()'s 0 would pass for an answer (a lock
  /// refused or expired) while the command may well have been applied.
  long long expect_integer(std::string_view what) const {
    if (!is_integer()) unexpected_reply(what, "an integer", type());
    return integer();
  }

  /// Throws ServerError if this is an error reply.
  const Derived& throw_if_error() const {
    if (is_error()) throw ServerError(str());
    return static_cast<const Derived&>(*this);
  }

  const redisReply* raw() const noexcept { return &reply(); }

 private:
  const redisReply& reply() const noexcept {
    return *static_cast<const Derived&>(*this).reply_ptr();
  }
};

/// The value of `field` in an INFO reply ("" when absent).
inline std::string_view server_info_field(std::string_view info, std::string_view field) {
  for (std::size_t at = info.find(field); at != std::string_view::npos;
       at = info.find(field, at + 1)) {
    const std::size_t end = at + field.size();
    if ((at == 0 || info[at - 1] == '\n') && end < info.size() && info[end] == ':') {
      const std::size_t stop = info.find_first_of("\r\n", end + 1);
      return info.substr(end + 1, stop == std::string_view::npos ? stop : stop - end - 1);
    }
  }
  return {};
}

}  // namespace detail

/// A borrowed view of one reply node; cheap to copy.
class ReplyView : public detail::ReplyAccess<ReplyView> {
 public:
  /// Views `reply`, which must stay valid while the view is used.
  explicit ReplyView(const redisReply* reply) noexcept : reply_(reply) {}

  /// Element i of an array reply; i must be < size().
  ReplyView operator[](std::size_t i) const noexcept { return ReplyView(reply_->element[i]); }

 private:
  friend class detail::ReplyAccess<ReplyView>;
  const redisReply* reply_ptr() const noexcept { return reply_; }
  const redisReply* reply_;
};

/// An owned reply tree. Move-only; never empty once handed out by Connection.
class Reply : public detail::ReplyAccess<Reply> {
 public:
  /// Takes ownership of `reply`, freed with freeReplyObject.
  explicit Reply(redisReply* reply) noexcept : reply_(reply) {}

  /// A view of the whole reply, valid as long as this Reply.
  ReplyView view() const noexcept { return ReplyView(reply_.get()); }
  /// Element i of an array reply; i must be < size().
  ReplyView operator[](std::size_t i) const noexcept { return view()[i]; }

 private:
  friend class detail::ReplyAccess<Reply>;
  struct Free {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
  };
  const redisReply* reply_ptr() const noexcept { return reply_.get(); }
  std::unique_ptr<redisReply, Free> reply_;
};

}  // namespace distlock
