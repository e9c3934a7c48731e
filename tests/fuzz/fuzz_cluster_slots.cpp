// libFuzzer target: the cluster slot map. A reply as CLUSTER SHARDS or
// CLUSTER SLOTS could answer (any shape at all), read into ranges as
// detail/backend/cluster_routing.hpp reads them; every range kept must be one the
// routing can use (slots within the cluster's, a port, a host). Also the
// key-to-slot hash on the reply's text, hash tags and all.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "distlock/detail/backend/cluster_slots.hpp"
#include "distlock/detail/backend/cluster_topology.hpp"
#include "distlock/reply.hpp"
#include "fuzz/fuzz_reader.hpp"

namespace {

using distlock::detail::cluster_slots;
using distlock::detail::SlotRange;

void check(const std::vector<SlotRange>& ranges) {
  for (const SlotRange& range : ranges) {
    if (range.first < 0 || range.last < range.first || range.last >= cluster_slots) std::abort();
    if (range.port <= 0 || range.port > 65535) std::abort();
    if (range.host.empty()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  distlock::fuzz::read_replies(data, size, [](const distlock::Reply& reply) {
    const std::string asked = "127.0.0.1";
    check(distlock::detail::ranges_from_slots(reply.view(), asked));
    check(distlock::detail::ranges_from_shards(reply.view(), asked, false).ranges);
    check(distlock::detail::ranges_from_shards(reply.view(), asked, true).ranges);
    const int slot = distlock::detail::key_slot(reply.str());
    if (slot < 0 || slot >= cluster_slots) std::abort();
  });
  return 0;
}
