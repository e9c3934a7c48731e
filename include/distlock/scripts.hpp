// Every Lua script distlock runs, and nothing else.
//
// Keys and tokens always arrive as KEYS/ARGV, never spliced into the source,
// so the text (and with it the SHA-1 that EVALSHA names) never changes. The
// sha1 fields are checked against the server's SCRIPT LOAD in the tests.
#pragma once

#include "distlock/connection.hpp"

namespace distlock::scripts {

/// Mutex release. KEYS[1] lock, KEYS[2] release channel; ARGV[1] token.
/// Deletes the lock only if it still holds our token and announces the
/// release in the same step, so no waiter can miss it.
/// Returns 1 released, 0 no such key (expired), -1 another token holds it.
inline constexpr Script release{
    R"lua(local v = redis.call('get', KEYS[1])
if v == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
  return 1
end
if v then return -1 end
return 0
)lua",
    "2194da7e6892e21326ffa51065f407fbce6aad12"};

/// Mutex extend. KEYS[1] lock; ARGV[1] token, ARGV[2] new TTL in ms.
/// Returns 1 extended, 0 no such key (expired), -1 another token holds it.
inline constexpr Script extend{
    R"lua(local v = redis.call('get', KEYS[1])
if v == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if v then return -1 end
return 0
)lua",
    "d07edb4c63a214f280bcb15f68850135c7feae4a"};

/// Mutex acquire with a fencing token. KEYS[1] lock, KEYS[2] fence counter;
/// ARGV[1] token, ARGV[2] TTL in ms. The SET and the INCR happen together,
/// so every holder's fence is higher than every earlier holder's. Should the
/// INCR fail (the counter is not a number) the SET is undone and the error
/// returned: an error never leaves a lock behind. Under OOM the SET itself
/// is refused, so nothing is written.
/// Returns {1, fence} when acquired, {0, pttl of the holder} otherwise.
inline constexpr Script acquire_fenced{
    R"lua(if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('pttl', KEYS[1])}
end
local fence = redis.pcall('incr', KEYS[2])
if type(fence) == 'table' then
  redis.call('del', KEYS[1])
  return fence
end
return {1, fence}
)lua",
    "d37e35d1ac6d7840e1656ad11b8f054459872c07"};

/// Watchdog renewal of many Mutex leases in one call. KEYS[i] lock i;
/// ARGV[2i-1] its token, ARGV[2i] its TTL in ms. Each lease is extended only
/// if it still holds its token; a key of another type counts as gone rather
/// than failing the whole batch (hence pcall).
/// Returns the positions i of the leases found gone (usually none).
inline constexpr Script renew_batch{
    R"lua(local gone = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if redis.pcall('get', key) == ARGV[2 * i - 1] then
    redis.call('pexpire', key, ARGV[2 * i])
  else
    gone[#gone + 1] = i
  end
end
return gone
)lua",
    "e357e45b63bac6d9d361b28344acb348a782f8fa"};

/// Every script above, for checks that cover them all.
inline constexpr const Script* all[] = {&release, &extend, &acquire_fenced, &renew_batch};

}  // namespace distlock::scripts
