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

// ReentrantMutex and SharedMutex keep Redisson's layout (see their headers):
// a hash at the lock's key whose fields are owner ids "<client>:<thread>"
// with hold counts. Scripts that only read or release return 0 when the
// hash is gone (expired) and -1 when it exists without our field (another
// owner has it now).

/// ReentrantMutex acquire: Redisson's RLock tryLock, step for step. KEYS[1]
/// hash; ARGV[1] TTL in ms, ARGV[2] owner. Free, or already ours: count one
/// more hold and (re)start the lease. Returns nil when acquired, else the
/// holder's PTTL.
inline constexpr Script reentrant_acquire{
    R"lua(if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
)lua",
    "457424f39c0e88d00ed7fb050ed70f982d3d0db0"};

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
redis.call('pexpire', KEYS[1], ARGV[1])
return {1, fence}
)lua",
    "c093058ed827d5d27da927ebd14b77dd401c9a41"};

/// ReentrantMutex release. KEYS[1] hash, KEYS[2] channel; ARGV[1] owner,
/// ARGV[2] TTL in ms. One hold fewer; the last one deletes the hash and
/// publishes "0", as Redisson's unlock does. Returns 1 released, 2 released
/// but the owner still holds it (another lock object of the same thread),
/// 0 no hash, -1 another owner's hash.
inline constexpr Script reentrant_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
if holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 2
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
)lua",
    "68bf5ec141ecbc4054053d93753c841f052f85cb"};

/// ReentrantMutex extend. KEYS[1] hash; ARGV[1] owner, ARGV[2] TTL in ms.
/// Returns 1 extended, 0 no hash, -1 another owner's hash.
inline constexpr Script hash_field_extend{
    R"lua(if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return -redis.call('exists', KEYS[1])
)lua",
    "feaca4b9523bdf43142ae1ed22979f971d1aad44"};

/// Watchdog renewal of a ReentrantMutex hold or a SharedMutex write hold
/// (ARGV[1] is then "<owner>:write"). KEYS[1] hash; ARGV[1] field, ARGV[2]
/// TTL in ms. A key of another type counts as gone (pcall), as in
/// renew_batch. Returns 1 renewed, 0 gone.
inline constexpr Script hash_field_renew{
    R"lua(if redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua",
    "eabfea41f54f30b7870fa094446ba8d0886a73f5"};

/// SharedMutex read acquire. KEYS[1] hash, KEYS[2] the owner's timeout-key
/// stem "{name}:<owner>:rwlock_timeout"; ARGV[1] TTL in ms, ARGV[2] owner,
/// ARGV[3] "<owner>:write". Granted when the lock is free, read-held, or
/// write-held by this owner (a downgrade). Hold n of an owner has its own
/// lease in the key "<stem>:n"; the hash lives at least as long as any.
/// Returns nil when acquired, else the holder's PTTL.
inline constexpr Script read_acquire{
    R"lua(local mode = redis.call('hget', KEYS[1], 'mode')
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
    "8ce8439d8fb1aae9114c3d8bcae00ea33166e797"};

/// SharedMutex read release. KEYS[1] hash, KEYS[2] channel, KEYS[3] the
/// owner's timeout-key stem, KEYS[4] the lock's ("{name}"); ARGV[1] owner.
/// Drops the owner's newest hold and its timeout key. If a writer (this
/// owner, after a downgrade) remains, it keeps its own lease; if readers
/// remain, the hash lives as long as the longest of their live leases; if
/// none is live, the hash is deleted and "0" published. Returns 1 released,
/// 0 our hold's lease had run out (or no hash), -1 another owner's hash.
inline constexpr Script read_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not holds then return -redis.call('exists', KEYS[1]) end
local live = redis.call('del', KEYS[3] .. ':' .. holds)
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
    "d64db25b477ca534c91ef478891a1a6c687f9f1c"};

/// Watchdog renewal of a SharedMutex read hold. KEYS[1] hash, KEYS[2] the
/// owner's timeout-key stem; ARGV[1] owner, ARGV[2] TTL in ms. The hold is
/// gone when the owner's field is, or when its newest timeout key ran out
/// (its lease is its own, whatever other readers keep alive). Otherwise
/// renews every timeout key of the owner and keeps the hash at least as
/// long. Returns 1 renewed, 0 gone.
inline constexpr Script read_renew{
    R"lua(local holds = tonumber(redis.pcall('hget', KEYS[1], ARGV[1]))
if not holds or redis.call('pexpire', KEYS[2] .. ':' .. holds, ARGV[2]) == 0 then return 0 end
for n = 1, holds - 1 do
  redis.call('pexpire', KEYS[2] .. ':' .. n, ARGV[2])
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
)lua",
    "6e641623b7877df7b7b008de7c8c8a5b5a893753"};

/// SharedMutex write acquire. KEYS[1] hash; ARGV[1] TTL in ms, ARGV[2]
/// "<owner>:write", ARGV[3] owner. Granted when the lock is free or
/// write-held by this owner. Returns nil when acquired; the string "upgrade"
/// when this owner holds a read lock (waiting would deadlock: the owner's
/// own read hold keeps the writer out); else the holder's PTTL.
inline constexpr Script write_acquire{
    R"lua(local mode = redis.call('hget', KEYS[1], 'mode')
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
    "0cc15af2c2ff011ff887a1a15db39d5bceefe079"};

/// SharedMutex write release. KEYS[1] hash, KEYS[2] channel; ARGV[1]
/// "<owner>:write". The last write hold deletes the hash, or, when the
/// owner also holds read locks (a downgrade), leaves them in read mode;
/// either way "1" is published so that every waiter looks again. Returns 1
/// released, 0 no hash, -1 another owner's hash.
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
else
  redis.call('del', KEYS[1])
end
redis.call('publish', KEYS[2], '1')
return 1
)lua",
    "7abb5352b4ad8cde09ca7dfd2df77ddc110e2485"};

/// Every script above, for checks that cover them all.
inline constexpr const Script* all[] = {&release,           &extend,
                                        &acquire_fenced,    &renew_batch,
                                        &reentrant_acquire, &reentrant_acquire_fenced,
                                        &reentrant_release, &hash_field_extend,
                                        &hash_field_renew,  &read_acquire,
                                        &read_release,      &read_renew,
                                        &write_acquire,     &write_release};

}  // namespace distlock::scripts
