// Durations as the command line writes them, in the library's one grammar
// (distlock/detail/base/duration.hpp), so a flag and a URI option read the same
// text the same way: "500ms", "30s", "5m", "1h", or a bare number of
// milliseconds. parse_duration() returns std::nullopt for anything else,
// and the caller says which option was bad.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "distlock/detail/base/duration.hpp"

namespace distlock::cli {

/// The text a --help line shows for a duration argument.
inline constexpr const char* duration_forms = detail::duration_forms;

using detail::parse_duration;

/// A duration in the largest unit that keeps it whole (30000 ms -> "30s",
/// 1500 ms -> "1500ms"), so a message shows what parse_duration() reads back.
inline std::string format_duration(std::chrono::milliseconds duration) {
  const std::int64_t ms = duration.count();
  if (ms != 0 && ms % (60 * 60 * 1000) == 0) return std::to_string(ms / (60 * 60 * 1000)) + "h";
  if (ms != 0 && ms % (60 * 1000) == 0) return std::to_string(ms / (60 * 1000)) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace distlock::cli
