// libFuzzer target: what a Sentinel answers. A reply to SENTINEL
// get-master-addr-by-name (any shape at all) read as
// detail/backend/sentinel_master.hpp reads it: an address that can be dialled, no
// address, or a ConnectionError; and the INFO field the master's run_id
// is read with.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "distlock/detail/backend/sentinel_reply.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"
#include "fuzz/fuzz_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  distlock::fuzz::read_replies(data, size, [](const distlock::Reply& reply) {
    try {
      const std::optional<distlock::detail::MasterAddress> master =
          distlock::detail::master_address(reply.view());
      if (master && (master->host.empty() || master->port <= 0 || master->port > 65535)) {
        std::abort();
      }
    } catch (const distlock::ConnectionError&) {
    }
    static_cast<void>(distlock::detail::server_info_field(reply.str(), "run_id"));
  });
  return 0;
}
