// The sharded-pub/sub twin of a script, for Redis Cluster: the same Lua
// with every redis.call('publish', ...) turned into redis.call('spublish',
// ...), so that a release announces itself only on the shard that owns the
// channel's slot (where waiters SSUBSCRIBE, and where Redisson's cluster
// mode listens) instead of over the whole cluster bus. Made on first use,
// with its SHA-1 computed here, and kept for the life of the process.
// SPUBLISH inside a script needs Redis 7.0; plain Clients keep PUBLISH.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "distlock/connection_options.hpp"

namespace distlock::detail {

/// SHA-1 of `data` as 40 lower-case hex digits (what EVALSHA names a
/// script by).
inline std::string sha1_hex(std::string_view data) {
  std::uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::string message(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8u;
  message.push_back(static_cast<char>(0x80));
  while (message.size() % 64 != 56) message.push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) {
    message.push_back(static_cast<char>((bits >> shift) & 0xffu));
  }
  const auto rotl = [](std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  for (std::size_t block = 0; block < message.size(); block += 64) {
    std::array<std::uint32_t, 80> w{};
    for (std::size_t i = 0; i < 16; ++i) {
      w[i] = 0;
      for (std::size_t b = 0; b < 4; ++b) {
        w[i] = (w[i] << 8) | static_cast<unsigned char>(message[block + 4 * i + b]);
      }
    }
    for (std::size_t i = 16; i < 80; ++i)
      w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (std::size_t i = 0; i < 80; ++i) {
      std::uint32_t f = 0;
      std::uint32_t k = 0;
      if (i < 20) {
        f = (b & c) | (~b & d);
        k = 0x5A827999u;
      } else if (i < 40) {
        f = b ^ c ^ d;
        k = 0x6ED9EBA1u;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d;
        k = 0xCA62C1D6u;
      }
      const std::uint32_t next = rotl(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = rotl(b, 30);
      b = a;
      a = next;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (const std::uint32_t word : h) {
    for (int shift = 28; shift >= 0; shift -= 4) hex.push_back(digits[(word >> shift) & 0xfu]);
  }
  return hex;
}

/// `script` with its publishes sharded (see the top of this file); the
/// script itself when it publishes nothing. The reference stays valid.
inline const Script& with_sharded_publish(const Script& script) {
  struct Twin {
    std::string source;
    std::string sha1;
    Script script;
  };
  static std::mutex mutex;
  static std::unordered_map<const char*, std::unique_ptr<Twin>> twins;
  const std::lock_guard<std::mutex> guard(mutex);
  std::unique_ptr<Twin>& twin = twins[script.source.data()];
  if (!twin) {
    constexpr std::string_view from = "redis.call('publish',";
    constexpr std::string_view to = "redis.call('spublish',";
    twin = std::make_unique<Twin>();
    twin->source = std::string(script.source);
    bool changed = false;
    for (std::size_t at = twin->source.find(from); at != std::string::npos;
         at = twin->source.find(from, at + to.size())) {
      twin->source.replace(at, from.size(), to);
      changed = true;
    }
    if (changed) {
      twin->sha1 = sha1_hex(twin->source);
      twin->script = Script{twin->source, twin->sha1};
    } else {
      twin->script = script;
    }
  }
  return twin->script;
}

}  // namespace distlock::detail
