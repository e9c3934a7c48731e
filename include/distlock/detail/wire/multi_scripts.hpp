// The Lua scripts of MultiMutex: several Mutex keys taken and given back as
// one. Every name is stored as a Mutex stores it (SET <key> <token> PX
// <ttl>), all under one token, so a Mutex on one of the names and a
// MultiMutex over it exclude each other. The keys of one call share a hash
// slot (on a cluster a MultiMutex sends one call per slot). Renewal is
// renew_batch's, given each key with the token and the TTL.
// detail/wire/scripts.hpp lists these with the others in scripts::all.
#pragma once

#include "distlock/detail/wire/connection.hpp"

namespace distlock::scripts {

/// MultiMutex acquire. KEYS the lock keys; ARGV[1] token, ARGV[2] TTL in
/// ms. All or none: when no key exists, each is set to the token with the
/// TTL; otherwise nothing is written. A key of any type is in the way, as
/// it is for SET NX. Under OOM the first SET is refused, and a script that
/// has not written is not let write at all, so nothing is half taken.
/// Returns {1} when taken, else {0, i, pttl, type} of the first key i
/// that exists.
inline constexpr Script multi_acquire{
    R"lua(if redis.call('exists', unpack(KEYS)) == 0 then
  for i = 1, #KEYS do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
  return {1}
end
for i = 1, #KEYS do
  local pttl = redis.call('pttl', KEYS[i])
  if pttl ~= -2 then
    return {0, i, pttl, redis.call('type', KEYS[i]).ok}
  end
end
return {0, 1, -2, 'none'}
)lua",
    "c77e653a33152df08e18bb55c6015668e969810d"};

/// MultiMutex release. KEYS[1..n] the lock keys, KEYS[n+1..2n] their
/// release channels; ARGV[1] token. Deletes every key that still holds the
/// token (by one DEL), announcing each on its channel in the same step, and
/// no other: MGET reads a key of another type as nil, so a name some other
/// data took is left alone. Returns 1 when every key held the token, -1 when some
/// key exists without it (another owner's, or not a lock), 0 otherwise
/// (some ran out, none was taken).
inline constexpr Script multi_release{
    R"lua(local n = #KEYS / 2
local tokens = redis.call('mget', unpack(KEYS, 1, n))
local mine, taken = {}, false
for i = 1, n do
  if tokens[i] == ARGV[1] then
    mine[#mine + 1] = KEYS[i]
    tokens[i] = true
  elseif redis.call('exists', KEYS[i]) == 1 then
    taken = true
  end
end
if #mine > 0 then
  redis.call('del', unpack(mine))
  for i = 1, n do
    if tokens[i] == true then redis.call('publish', KEYS[n + i], '0') end
  end
end
if #mine == n then return 1 end
if taken then return -1 end
return 0
)lua",
    "ddc195263ea0ed6eb1121395fbb43a5fe078150d"};

/// MultiMutex extend. KEYS the lock keys; ARGV[1] token, ARGV[2] new TTL in
/// ms. Only when every key holds the token are they all given the TTL;
/// else nothing changes. Returns 1 extended, -1 when some key exists
/// without the token, 0 when some key is gone and none is taken.
inline constexpr Script multi_extend{
    R"lua(local tokens = redis.call('mget', unpack(KEYS))
local gone = false
for i = 1, #KEYS do
  if tokens[i] ~= ARGV[1] then
    if redis.call('exists', KEYS[i]) == 1 then return -1 end
    gone = true
  end
end
if gone then return 0 end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
)lua",
    "9ba0d5686dac3795ca10e6d33ca6479adcbd502f"};

}  // namespace distlock::scripts
