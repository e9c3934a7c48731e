// Redis Cluster's key space, as a client needs it: the hash slot of a key
// (CRC16/XMODEM of the key, or of its hash tag, mod 16384), the check that
// a lock's keys share one slot, and the redirect replies (MOVED, ASK) and
// transient refusals (TRYAGAIN, CLUSTERDOWN) a node answers with.
//
// The hash-tag rule: if the key has a '{' and a '}' somewhere after it with
// at least one byte between them, only the bytes between the first '{' and
// the first '}' after it are hashed; otherwise the whole key is.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/error.hpp"

namespace distlock::detail {

/// Slots in a Redis Cluster.
inline constexpr int cluster_slots = 16384;

/// The CRC16/XMODEM table (polynomial 0x1021), built at compile time.
constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    unsigned crc = byte << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000u) != 0 ? (crc << 1) ^ 0x1021u : crc << 1;
    }
    table[byte] = static_cast<std::uint16_t>(crc & 0xffffu);
  }
  return table;
}

/// CRC16 with the XMODEM parameters (polynomial 0x1021, initial 0, no
/// reflection): the checksum Redis Cluster hashes keys with.
struct Crc16 {
  static constexpr std::array<std::uint16_t, 256> table = make_crc16_table();

  static constexpr std::uint16_t of(std::string_view bytes) noexcept {
    unsigned crc = 0;
    for (const char c : bytes) {
      const unsigned index = ((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xffu;
      crc = ((crc << 8) ^ table[index]) & 0xffffu;
    }
    return static_cast<std::uint16_t>(crc);
  }
};

/// The part of `key` that is hashed: its hash tag if it has one, else itself.
constexpr std::string_view hashed_part(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

/// The hash slot of `key`, in [0, 16384).
constexpr int key_slot(std::string_view key) noexcept {
  return static_cast<int>(Crc16::of(hashed_part(key)) & (cluster_slots - 1));
}

/// Throws InvalidArgument, naming every key and its slot, unless all of
/// `keys` hash to one slot (a cluster refuses a script over several).
inline void check_one_slot(std::string_view what, std::initializer_list<std::string_view> keys) {
  if (keys.size() < 2) return;
  const int first = key_slot(*keys.begin());
  bool same = true;
  for (const std::string_view key : keys) same = same && key_slot(key) == first;
  if (same) return;
  std::string listed;
  for (const std::string_view key : keys) {
    if (!listed.empty()) listed += ", ";
    listed += '"';
    listed += key;
    listed += "\" (slot ";
    listed += std::to_string(key_slot(key));
    listed += ')';
  }
  throw InvalidArgument(
      std::string(what) + ": the keys a lock's scripts touch must share one cluster slot, but " +
      listed + " do not; give the name a hash tag, e.g. \"{name}\", or leave out braces");
}

/// What an error reply from a cluster node asks of the client.
struct Redirect {
  enum class Kind {
    none,      ///< not a cluster reply: the error stands
    moved,     ///< the slot has a new owner for good
    ask,       ///< this one command goes to the importing node, after ASKING
    try_again  ///< TRYAGAIN or CLUSTERDOWN: the cluster is busy or down for now
  };
  Kind kind = Kind::none;
  int slot = -1;
  std::string host;  ///< empty when the node did not say (use the node asked)
  int port = 0;
};

/// Reads "MOVED <slot> <host>:<port>", "ASK <slot> <host>:<port>",
/// "TRYAGAIN ..." or "CLUSTERDOWN ..." at the start of `message` (an error
/// reply, or a ServerError's what(), which begins with the reply).
inline Redirect parse_redirect(std::string_view message) noexcept {
  Redirect redirect;
  const std::string_view word = message.substr(0, message.find(' '));
  if (word == "TRYAGAIN" || word == "CLUSTERDOWN") {
    redirect.kind = Redirect::Kind::try_again;
    return redirect;
  }
  if (word != "MOVED" && word != "ASK") return redirect;
  std::string_view rest = message.substr(word.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  int slot = -1;
  const auto [slot_end, slot_error] = std::from_chars(rest.data(), rest.data() + rest.size(), slot);
  if (slot_error != std::errc() || slot < 0 || slot >= cluster_slots) return redirect;
  rest = rest.substr(static_cast<std::size_t>(slot_end - rest.data()));
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  std::string_view address = rest.substr(0, rest.find(' '));
  // ServerError's what() appends ": <category message>" to the reply.
  if (address.size() > 1 && address.back() == ':') address.remove_suffix(1);
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return redirect;
  int port = 0;
  const std::string_view port_text = address.substr(colon + 1);
  const auto [port_end, port_error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_error != std::errc() || port_end != port_text.data() + port_text.size() || port <= 0 ||
      port > 65535) {
    return redirect;
  }
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "?") host = {};  // "unknown endpoint": the node we asked
  redirect.kind = word == "MOVED" ? Redirect::Kind::moved : Redirect::Kind::ask;
  redirect.slot = slot;
  redirect.host = std::string(host);
  redirect.port = port;
  return redirect;
}

}  // namespace distlock::detail
