// The Lua scripts of the locks kept in Redisson's hash layout,
// ReentrantMutex and SharedMutex (see their headers): a hash at the lock's
// key whose fields are owner ids "<client>:<thread>" with hold counts.
// Scripts that only read or release return 0 when the hash is gone
// (expired) and -1 when it exists without our field (another owner has it
// now). detail/wire/scripts.hpp includes this header and lists these scripts with the
// others in scripts::all; the rules at its top hold here too.
#pragma once

#include "distlock/detail/wire/connection.hpp"

namespace distlock::scripts {

/// ReentrantMutex acquire: Redisson's RLock tryLock, except that a nested
/// hold never shortens the lease. KEYS[1] hash; ARGV[1] TTL in ms, ARGV[2]
/// owner. Free, or already ours: count one more hold and make the lease
/// last at least the TTL. Returns nil when acquired, else the holder's PTTL.
inline constexpr Script reentrant_acquire{
    R"lua(if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return nil
end
return redis.call('pttl', KEYS[1])
)lua",
    "e136884c275af2b7a6c64207d52543025bcc4647"};

/// ReentrantMutex acquire with a fencing token. KEYS[1] hash, KEYS[2] fence
/// counter; ARGV as reentrant_acquire. The counter rises when the hash is
/// created, before anything is written, so an INCR that fails (the counter
/// is not a number) leaves nothing behind; an owner that already holds the
/// lock gets the current fence. Returns {1, fence} when acquired, {0, pttl
/// of the holder} otherwise.
inline constexpr Script reentrant_acquire_fenced{
    R"lua(local fence
if redis.call('exists', KEYS[1]) == 0 then
  fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then return fence end
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  fence = tonumber(redis.call('get', KEYS[2])) or 0
else
  return {0, redis.call('pttl', KEYS[1])}
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return {1, fence}
)lua",
    "d0cc6407f2f5e4cde55ab7851d236529dce96732"};

/// ReentrantMutex release. KEYS[1] hash, KEYS[2] channel; ARGV[1] owner.
/// One hold fewer, leaving the lease of the holds that remain as it is;
/// the last one deletes the hash and publishes "0", as Redisson's unlock
/// does. Returns 1 released, 2 released but the owner still holds it
/// (another lock object of the same thread), 0 no hash, -1 another
/// owner's hash.
inline constexpr Script reentrant_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
if holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  return 2
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
)lua",
    "951a2b3b5205e1c9904c0345b20e67f1d70bdbaa"};

/// Extend of a ReentrantMutex hold or a SharedMutex write hold (ARGV[1] is
/// then "<owner>:write"). KEYS[1] hash; ARGV[1] field, ARGV[2] TTL in ms.
/// The lease becomes exactly the TTL when the hold is the hash's only one;
/// while other holds share the hash (another lock object of the owner, or
/// the owner's read holds after a downgrade) it is only ever lengthened.
/// Returns 1 extended, 0 no hash, -1 another owner's hash.
inline constexpr Script hash_field_extend{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
local alone = holds == 1 and
  redis.call('hlen', KEYS[1]) == 1 + redis.call('hexists', KEYS[1], 'mode')
if alone or redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
)lua",
    "6c1d5d78691e43298b8bd0a8bbf4a6c2f673d566"};

/// Watchdog renewal of many ReentrantMutex holds or SharedMutex write holds
/// in one call. KEYS[i] hash i; ARGV[2i-1] its field, ARGV[2i] its TTL in
/// ms. A hold whose field is still there gets at least its TTL from now
/// (never less than it has), as in renew_batch; a key of another type
/// counts as gone (pcall). Returns the positions i of the holds found gone.
inline constexpr Script hash_field_renew{
    R"lua(local gone = {}
for i = 1, #KEYS do
  local key, ttl = KEYS[i], ARGV[2 * i]
  if redis.pcall('hexists', key, ARGV[2 * i - 1]) == 1 then
    if type(redis.pcall('pexpire', key, ttl, 'GT')) == 'table' and
        redis.call('pttl', key) < tonumber(ttl) then
      redis.call('pexpire', key, ttl)
    end
  else
    gone[#gone + 1] = i
  end
end
return gone
)lua",
    "59e45bb4164bd194e83b876681e4fbd0451598ed"};

/// SharedMutex read acquire. KEYS[1] hash, KEYS[2] the owner's timeout-key
/// stem "{name}:<owner>:rwlock_timeout"; ARGV[1] TTL in ms, ARGV[2] owner,
/// ARGV[3] "<owner>:write". Granted when the lock is free, read-held, or
/// write-held by this owner (a downgrade); never over a hash without a
/// mode (a ReentrantMutex's or Redisson RLock's hold on the same name).
/// Hold n of an owner has its own lease in the key "<stem>:n"; the hash
/// lives at least as long as any. Returns nil when acquired, else the
/// holder's PTTL.
inline constexpr Script read_acquire{
    R"lua(local mode = redis.call('hget', KEYS[1], 'mode')
if not mode and redis.call('exists', KEYS[1]) == 1 then return redis.call('pttl', KEYS[1]) end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. holds, 1, 'px', ARGV[1])
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return nil
end
return redis.call('pttl', KEYS[1])
)lua",
    "04293dadad9626606167e0df1d25f8b518477a37"};

/// SharedMutex read release. KEYS[1] hash, KEYS[2] channel, KEYS[3] the
/// owner's timeout-key stem, KEYS[4] the lock's ("{name}"); ARGV[1] owner.
/// Drops one of the owner's holds. The owner's holds are interchangeable in
/// Redis (timeout keys 1..n), so the shortest lease goes and the others
/// keep theirs: the newest key's lease moves into the slot of the shortest,
/// and the newest key is deleted. If a writer (this owner, after a
/// downgrade) remains, it keeps its own lease; if readers remain, the hash
/// lives as long as the longest of their live leases; if none is live, the
/// hash is deleted and "0" published. Returns 1 released, 0 the shortest
/// lease had run out (or no hash), -1 another owner's hash.
inline constexpr Script read_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
local shortest, slot = math.huge, holds
for n = 1, holds do
  local left = redis.call('pttl', KEYS[3] .. ':' .. n)
  if left < shortest then shortest, slot = left, n end
end
local live = shortest == -2 and 0 or 1
if slot ~= holds then
  local newest = redis.call('pttl', KEYS[3] .. ':' .. holds)
  if newest > 0 then
    redis.call('set', KEYS[3] .. ':' .. slot, 1, 'px', newest)
  else
    redis.call('del', KEYS[3] .. ':' .. slot)
  end
end
redis.call('del', KEYS[3] .. ':' .. holds)
if holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
elseif redis.call('hlen', KEYS[1]) > 2 then
  redis.call('hdel', KEYS[1], ARGV[1])
else
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
  return live
end
if redis.call('hget', KEYS[1], 'mode') == 'write' then return live end
local longest = 0
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
  local count = tonumber(fields[i + 1])
  if count then
    for n = 1, count do
      local key = KEYS[4] .. ':' .. fields[i] .. ':rwlock_timeout:' .. n
      longest = math.max(longest, redis.call('pttl', key))
    end
  end
end
if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
else
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
end
return live
)lua",
    "cb0dd4bf380094eba1eaeaeaf860919065f680be"};

/// Watchdog renewal of many SharedMutex read holds in one call. KEYS[2i-1]
/// hash i, KEYS[2i] its owner's timeout-key stem; ARGV[2i-1] the owner,
/// ARGV[2i] the TTL in ms. A hold is gone when its owner's field is, or
/// when one of the owner's timeout keys ran out (its lease is its own,
/// whatever other readers keep alive; the owner's holds are
/// interchangeable, so any one run out may be this one). Otherwise every
/// timeout key of the owner, and the hash, get at least the TTL from now
/// (lengthen: PEXPIRE ... GT, or before Redis 7 a PTTL comparison; it
/// answers whether the key exists). Returns the positions i of the holds
/// found gone.
inline constexpr Script read_renew{
    R"lua(local function lengthen(key, ttl)
  local done = redis.pcall('pexpire', key, ttl, 'GT')
  if type(done) == 'table' then
    local left = redis.call('pttl', key)
    if left == -2 then return 0 end
    if left < tonumber(ttl) then redis.call('pexpire', key, ttl) end
    return 1
  end
  if done == 1 then return 1 end
  return redis.call('exists', key)
end
local gone = {}
for i = 1, #KEYS / 2 do
  local hash, stem, ttl = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i]
  local holds = tonumber(redis.pcall('hget', hash, ARGV[2 * i - 1]))
  local live = holds ~= nil
  for n = 1, holds or 0 do
    if lengthen(stem .. ':' .. n, ttl) == 0 then live = false end
  end
  if live then lengthen(hash, ttl) else gone[#gone + 1] = i end
end
return gone
)lua",
    "2bf1b99a8a1374926411d5136b7151d32f8e06dc"};

/// SharedMutex read extend. KEYS[1] hash, KEYS[2] the owner's timeout-key
/// stem; ARGV[1] owner, ARGV[2] TTL in ms. An owner with one read hold gets
/// exactly the TTL; with more, which are interchangeable in Redis, every
/// timeout key only ever lengthens. The hash is lengthened to outlive it if
/// needed (never shortened: a release recomputes it). Returns 1 extended,
/// 0 our lease had run out (or no hash), -1 another owner's hash.
inline constexpr Script read_extend{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
local ttl = tonumber(ARGV[2])
for n = 1, holds do
  local key = KEYS[2] .. ':' .. n
  local left = redis.call('pttl', key)
  if left == -2 then return 0 end
  if holds == 1 or left < ttl then redis.call('pexpire', key, ttl) end
end
if redis.call('pttl', KEYS[1]) < ttl then redis.call('pexpire', KEYS[1], ttl) end
return 1
)lua",
    "b2ebf65821b221aa5b0d026f95713c88975acba0"};

/// SharedMutex write acquire. KEYS[1] hash; ARGV[1] TTL in ms, ARGV[2]
/// "<owner>:write", ARGV[3] owner. Granted when the lock is free or
/// write-held by this owner; never over a hash without a mode (a
/// ReentrantMutex's or Redisson RLock's hold on the same name). Returns nil
/// when acquired; the string "upgrade" when this owner holds a read lock
/// (waiting would deadlock: the owner's own read hold keeps the writer
/// out); else the holder's PTTL.
inline constexpr Script write_acquire{
    R"lua(local mode = redis.call('hget', KEYS[1], 'mode')
if not mode and redis.call('exists', KEYS[1]) == 1 then return redis.call('pttl', KEYS[1]) end
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 1 then return 'upgrade' end
return redis.call('pttl', KEYS[1])
)lua",
    "a51a80e24c0e9a6136965740f8e9608e411a4b52"};

/// SharedMutex write release. KEYS[1] hash, KEYS[2] channel, KEYS[3] the
/// owner's timeout-key stem; ARGV[1] "<owner>:write", ARGV[2] the owner.
/// The last write hold deletes the hash, or, when the owner also holds read
/// locks (a downgrade), leaves them in read mode, with the hash living at
/// least as long as the longest of their leases; either way "1" is
/// published so that every waiter looks again. Returns 1 released, 0 no
/// hash, -1 another owner's hash.
inline constexpr Script write_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
if holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  return 1
end
if redis.call('hlen', KEYS[1]) > 2 then
  redis.call('hdel', KEYS[1], ARGV[1])
  redis.call('hset', KEYS[1], 'mode', 'read')
  local longest = redis.call('pttl', KEYS[1])
  for n = 1, tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0 do
    longest = math.max(longest, redis.call('pttl', KEYS[3] .. ':' .. n))
  end
  if longest > 0 then redis.call('pexpire', KEYS[1], longest) end
else
  redis.call('del', KEYS[1])
end
redis.call('publish', KEYS[2], '1')
return 1
)lua",
    "243da534fd23f61dd763fe22183d0cf7921fef48"};

}  // namespace distlock::scripts
