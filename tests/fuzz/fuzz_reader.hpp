// What the reply fuzz targets share: hiredis's reader, as Connection uses
// it, fed the fuzz input in chunks whose sizes the input chooses (a reply
// split anywhere must parse as the whole one does), handing each complete
// reply to a callback. A reader error ends the input, as it ends a
// connection.
//
// An input that declares an array of more than max_elements is skipped:
// hiredis allocates an array's element pointers when it reads its header
// ("*2000000000\r\n" asks for 16 GB), before any element arrives. That is
// hiredis's reader, not distlock's parsing, and it would end every run as
// an out-of-memory report within seconds; without sanitizers the memory is
// reserved, never touched, and a failed allocation is a protocol error.
#pragma once

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "distlock/reply.hpp"

namespace distlock::fuzz {

inline constexpr long long max_elements = 4096;

// True if some "*<count>" in the input declares more than max_elements.
inline bool declares_huge_array(const std::uint8_t* data, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != '*') continue;
    long long count = 0;
    for (std::size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9'; ++j) {
      count = count * 10 + (data[j] - '0');
      if (count > max_elements) return true;
    }
  }
  return false;
}

template <class OnReply>
void read_replies(const std::uint8_t* data, std::size_t size, OnReply&& on_reply) {
  if (size == 0 || declares_huge_array(data, size)) return;
  // The first byte picks the chunk size (1 to 16 bytes, or all at once).
  const std::size_t chunk = data[0] % 17 == 0 ? size : data[0] % 17;
  ++data;
  --size;
  std::unique_ptr<redisReader, void (*)(redisReader*)> reader(redisReaderCreate(), redisReaderFree);
  for (std::size_t at = 0; at < size; at += chunk) {
    const std::size_t n = size - at < chunk ? size - at : chunk;
    if (redisReaderFeed(reader.get(), reinterpret_cast<const char*>(data + at), n) != REDIS_OK) {
      return;
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK || raw == nullptr) break;
      on_reply(Reply(static_cast<redisReply*>(raw)));
    }
    if (reader->err != 0) return;
  }
}

}  // namespace distlock::fuzz
