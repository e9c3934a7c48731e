// The one duration grammar: a URI's timeouts (connection_options.hpp,
// client.hpp) and the distlock tool's flags (tools/duration.hpp) both read
// durations here, so "5m" means the same in ?command_timeout=5m and in
// --wait 5m. A whole number with a unit (ms, s, m, h), or a bare whole
// number of milliseconds (the URI's first form, kept). Anything past
// max_duration is refused rather than wrapped: a deadline computed from a
// huge timeout would overflow the clock.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace distlock::detail {

/// The forms, for messages and help texts.
inline constexpr const char* duration_forms = "250ms, 30s, 5m, 1h; a bare number is ms";

/// The longest duration the grammar reads: 365 days, the longest ttl too.
inline constexpr std::chrono::milliseconds max_duration{std::int64_t{365} * 24 * 60 * 60 * 1000};

/// Parses "<digits>[ms|s|m|h]" (no unit: milliseconds). Signs, spaces,
/// fractions and compound forms ("1m30s") are refused, as is anything above
/// max_duration; std::nullopt then, and the caller names the option.
inline std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::int64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, count);
  // ec is result_out_of_range for more digits than an int64 holds.
  if (ec != std::errc() || end != text.data() + digits) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::int64_t per_unit = 0;
  if (unit.empty() || unit == "ms") {
    per_unit = 1;
  } else if (unit == "s") {
    per_unit = 1000;
  } else if (unit == "m") {
    per_unit = 60 * 1000;
  } else if (unit == "h") {
    per_unit = 60 * 60 * 1000;
  } else {
    return std::nullopt;
  }
  // Divided, not multiplied, so the check itself cannot overflow.
  if (count > max_duration.count() / per_unit) return std::nullopt;
  return std::chrono::milliseconds(count * per_unit);
}

}  // namespace distlock::detail
