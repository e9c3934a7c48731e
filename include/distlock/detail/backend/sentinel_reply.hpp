// What a Sentinel answers SENTINEL get-master-addr-by-name, read
// (detail/backend/sentinel_master.hpp asks). Apart from the asking so that it can be
// fuzzed on its own (tests/fuzz/fuzz_sentinel.cpp): a Sentinel's answer is
// dialled next, so a hostile or broken one must end in a clear error.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "distlock/error.hpp"
#include "distlock/reply.hpp"

namespace distlock::detail {

/// A master's address, as SENTINEL get-master-addr-by-name answers it.
struct MasterAddress {
  std::string host;
  int port = 0;
};

/// The address in a get-master-addr-by-name reply ([host, port]); nullopt
/// for nil (the Sentinel knows no master of that name) or another shape.
/// A host or port that is none throws ConnectionError (protocol_error):
/// what a Sentinel answers is dialled next, so it is checked here, not
/// left to whatever dialling it makes of it.
inline std::optional<MasterAddress> master_address(const ReplyView& reply) {
  if (!reply.is_array() || reply.size() < 2) return std::nullopt;
  MasterAddress address{std::string(reply[0].str()), 0};
  const std::string_view port = reply[1].str();
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), address.port);
  if (address.host.empty() || error != std::errc() || end != port.data() + port.size() ||
      address.port <= 0 || address.port > 65535) {
    throw ConnectionError(Errc::protocol_error,
                          "get-master-addr-by-name answered no address (host '" + address.host +
                              "', port '" + std::string(port) + "')");
  }
  return address;
}

}  // namespace distlock::detail
