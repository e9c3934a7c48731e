// libFuzzer target: the URI parsers. Every from_uri either returns options
// that validate or throws InvalidArgument; any other exception, a crash or
// a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "distlock/client.hpp"
#include "distlock/cluster_options.hpp"
#include "distlock/connection_options.hpp"
#include "distlock/error.hpp"

namespace {

template <class Parse>
void parses_or_refuses(Parse&& parse) {
  try {
    parse().validate();
  } catch (const distlock::InvalidArgument&) {
    // The one way to refuse a URI.
  }
  // Anything else escapes, and libFuzzer reports it as a crash.
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view uri(reinterpret_cast<const char*>(data), size);
  parses_or_refuses([&] { return distlock::ConnectionOptions::from_uri(uri); });
  parses_or_refuses([&] { return distlock::ClientOptions::from_uri(uri); });
  parses_or_refuses([&] { return distlock::ClusterOptions::from_uri(uri); });
  return 0;
}
