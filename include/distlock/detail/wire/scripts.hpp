// Every Lua script distlock runs, and nothing else (the hash-layout ones
// of ReentrantMutex and SharedMutex through detail/wire/hash_scripts.hpp,
// FairMutex's through detail/wire/fair_scripts.hpp, MultiMutex's through
// detail/wire/multi_scripts.hpp).
//
// Keys and tokens always arrive as KEYS/ARGV, never spliced into the source,
// so the text (and with it the SHA-1 that EVALSHA names) never changes. The
// sha1 fields are checked against the server's SCRIPT LOAD in the tests.
#pragma once

#include "distlock/detail/wire/connection.hpp"
#include "distlock/detail/wire/fair_scripts.hpp"
#include "distlock/detail/wire/hash_scripts.hpp"
#include "distlock/detail/wire/multi_scripts.hpp"

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
/// Returns {1, fence} when acquired, {0, pttl of the holder, type of the
/// key} otherwise (SET NX is refused by a key of any type).
inline constexpr Script acquire_fenced{
    R"lua(if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('pttl', KEYS[1]), redis.call('type', KEYS[1]).ok}
end
local fence = redis.pcall('incr', KEYS[2])
if type(fence) == 'table' then
  redis.call('del', KEYS[1])
  return fence
end
return {1, fence}
)lua",
    "0d0ed1017bdf4c8f60c6029edc5c9136917fde01"};

/// Watchdog renewal of many Mutex leases in one call. KEYS[i] lock i;
/// ARGV[2i-1] its token, ARGV[2i] its TTL in ms. Each lease still holding
/// its token is made to last at least its TTL from now; a renewal never
/// shortens a lease (one that lands after its holder's extend must not undo
/// it): PEXPIRE ... GT, or before Redis 7 a PTTL comparison. The tokens are
/// read by one MGET rather than a GET each: a script's time goes mostly to
/// its calls to the server, so this halves the calls per lease (a call
/// carries Watchdog::batch_size keys, far below the ~8,000 unpack() takes).
/// MGET reads a key of another type as nil: such a lease counts as gone
/// rather than failing the whole batch. Returns the positions i of the
/// leases found gone.
inline constexpr Script renew_batch{
    R"lua(if #KEYS == 0 then return {} end
local tokens = redis.call('mget', unpack(KEYS))
local gone = {}
for i = 1, #KEYS do
  if tokens[i] == ARGV[2 * i - 1] then
    local key, ttl = KEYS[i], ARGV[2 * i]
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
    "73d00482d202164dcc7d0e47ad9a116e67771213"};

/// Administrative force_unlock (inspect.hpp), for every layout. KEYS[1]
/// lock, KEYS[2..4] the release channels of Mutex, ReentrantMutex and
/// SharedMutex, KEYS[5] the read holds' timeout-key stem ("{name}"),
/// KEYS[6] a FairMutex's queue. Deletes a lock of any holder
/// (lock_layout.hpp's rule, checked in the same step: a string with an
/// expiry, or a Redisson hash with an expiry, and then a read-write lock's
/// timeout keys too) and announces the release on every channel, so every
/// kind of waiter looks again, and to the fair queue's front waiter on its
/// own channel (KEYS[3]:<its id>, as fair_release tells it); the fence
/// counter stays. A timeout key that expired ends the deletion of an owner's: the
/// ones after it expire by themselves, and a hold count read from the hash
/// bounds nothing (a loop to it could block the server). Anything else is
/// left alone. Returns 1 removed, 0 nothing there, or {type, why, field}
/// for a key that is no lock (why as detail::not_a_lock() takes it).
inline constexpr Script force_unlock{
    R"lua(local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then return 0 end
if kind ~= 'string' and kind ~= 'hash' then return {kind, 'type', ''} end
if redis.call('pttl', KEYS[1]) < 0 then return {kind, 'expiry', ''} end
if kind == 'hash' then
  local fields = redis.call('hgetall', KEYS[1])
  local owners, mode = 0, false
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'mode' then
      if value ~= 'read' and value ~= 'write' then return {kind, 'mode', ''} end
      mode = true
    elseif not string.find(field, ':', 1, true) or #value > 18 or
        not string.match(value, '^[1-9]%d*$') then
      return {kind, 'field', field}
    else
      owners = owners + 1
    end
  end
  if owners == 0 then return {kind, 'owners', ''} end
  if mode then
    for i = 1, #fields, 2 do
      local n = 1
      while fields[i] ~= 'mode' and n <= tonumber(fields[i + 1]) and
          redis.call('del', KEYS[5] .. ':' .. fields[i] .. ':rwlock_timeout:' .. n) == 1 do
        n = n + 1
      end
    end
  end
end
redis.call('del', KEYS[1])
for i = 2, 4 do redis.call('publish', KEYS[i], '0') end
local first = redis.call('lindex', KEYS[6], 0)
if first then redis.call('publish', KEYS[3] .. ':' .. first, '0') end
return 1
)lua",
    "18eff14ce51510bbbd4afab872b2b8b61c5d5938"};

/// Every script above, for checks that cover them all.
inline constexpr const Script* all[] = {&release,           &extend,
                                        &acquire_fenced,    &renew_batch,
                                        &reentrant_acquire, &reentrant_acquire_fenced,
                                        &reentrant_release, &hash_field_extend,
                                        &hash_field_renew,  &read_acquire,
                                        &read_release,      &read_renew,
                                        &read_extend,       &write_acquire,
                                        &write_release,     &force_unlock,
                                        &fair_acquire,      &fair_release,
                                        &fair_leave,        &multi_acquire,
                                        &multi_release,     &multi_extend};

}  // namespace distlock::scripts
