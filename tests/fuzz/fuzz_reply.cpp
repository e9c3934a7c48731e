// libFuzzer target: reply handling. Bytes from a server, parsed by
// hiredis's reader as Connection parses them, then every accessor the
// library uses on a reply, on every node of the tree: type(), str(),
// integer(), size(), operator[], throw_if_error(), expect_integer(), and
// the readers of text replies (server_info_field, classify_server_error,
// parse_redirect). Only distlock errors may come out.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"
#include "fuzz/fuzz_reader.hpp"

namespace {

using distlock::ReplyType;

template <class Node>
void walk(const Node& reply) {
  const ReplyType type = reply.type();
  const std::string_view text = reply.str();
  const bool has_text =
      type == ReplyType::string || type == ReplyType::status || type == ReplyType::error;
  if (!has_text && !text.empty()) std::abort();  // str() is empty for other types
  if (reply.is_ok() && text != "OK") std::abort();
  static_cast<void>(reply.integer());
  static_cast<void>(distlock::detail::server_info_field(text, "run_id"));
  static_cast<void>(distlock::detail::server_info_field(text, "role"));
  static_cast<void>(distlock::classify_server_error(text));
  const distlock::detail::Redirect redirect = distlock::detail::parse_redirect(text);
  if (redirect.slot >= distlock::detail::cluster_slots) std::abort();
  try {
    reply.throw_if_error();
    if (type == ReplyType::error) std::abort();  // an error reply must throw
  } catch (const distlock::ServerError&) {
  }
  try {
    static_cast<void>(reply.expect_integer("fuzz"));
    if (type != ReplyType::integer) std::abort();
  } catch (const distlock::ConnectionError&) {
  }
  if (type != ReplyType::array && reply.size() != 0) std::abort();
  for (std::size_t i = 0; i < reply.size(); ++i) walk(reply[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  distlock::fuzz::read_replies(data, size, [](const distlock::Reply& reply) { walk(reply); });
  return 0;
}
