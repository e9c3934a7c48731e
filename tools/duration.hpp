// Durations as the command line writes them: a whole number and a unit,
// "500ms", "30s", "5m", "1h"; "0" alone is zero. parse_duration() returns
// std::nullopt for anything else, and the caller says which option was bad.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distlock::cli {

/// The text a --help line shows for a duration argument.
inline constexpr const char* duration_forms = "500ms, 30s, 5m, 1h";

/// Parses "<digits><unit>" with unit ms, s, m or h (or a bare "0"), up to
/// 365 days. Fractions, signs, spaces and compound forms ("1m30s") are refused.
inline std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  if (text == "0") return std::chrono::milliseconds(0);
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::int64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, count);
  if (ec != std::errc() || end != text.data() + digits) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::int64_t per_unit = 0;
  if (unit == "ms") {
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
  constexpr std::int64_t max_ms = std::int64_t{365} * 24 * 60 * 60 * 1000;
  if (count > max_ms / per_unit) return std::nullopt;
  return std::chrono::milliseconds(count * per_unit);
}

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
