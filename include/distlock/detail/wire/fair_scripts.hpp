// The Lua scripts of FairMutex, in Redisson's RFairLock layout: the lock is
// a ReentrantMutex hash (owner id -> hold count, the lease as its PTTL);
// beside it, the list "redisson_lock_queue:{name}" holds the waiters' owner
// ids in arrival order, and the sorted set "redisson_lock_timeout:{name}"
// the time (ms since the epoch) by which each must ask again or lose its
// place. A waiter at place p (0 for the front) is given until now + (p+1)
// waiter timeouts, and every grant to the front waiter moves the others up
// one place, so their deadlines come one waiter timeout sooner: the rule
// Redisson's own clients follow, so the two queue in one line. Unlike
// Redisson's, these scripts read the time from the server (TIME), not from
// the caller, and a waiter that asks again renews its deadline for its
// place. A waiter at the front whose deadline has passed stopped asking
// (crashed, or gave up unheard): the next script run for anyone else drops
// it; the waiter itself, asking, is alive, and takes its turn (which also
// spares the grant to the front, the handoff, a clock read).
// A release announces itself to the front waiter alone, on
// "redisson_lock__channel:{name}:<its owner id>", as Redisson's does.
// detail/wire/scripts.hpp lists these with the others in scripts::all.
#pragma once

#include "distlock/detail/wire/connection.hpp"

namespace distlock::scripts {

/// FairMutex acquire. KEYS[1] hash, KEYS[2] queue, KEYS[3] deadlines,
/// KEYS[4] (with fencing) the fence counter; ARGV[1] TTL in ms, ARGV[2]
/// owner, ARGV[3] waiter timeout in ms, ARGV[4] "1" to join the queue
/// when refused (or keep one's place), "0" not to: a try that does not
/// wait, or a wait's last attempt, which leaves the queue when refused (as
/// fair_leave, but telling nobody: the lock is held, or another waiter's
/// turn, or the refusal would have been a grant). Granted to the owner that
/// holds it already (one more hold), or when the lock is free and the queue
/// empty or led by the owner; the lease only ever lengthens, as
/// reentrant_acquire's. Returns nil granted, else ms: when to ask again,
/// the holder's PTTL (-1 for a hash that never expires) or the deadline of
/// the waiter whose turn it is, never more than a third of the waiter
/// timeout; with fencing, {1, fence} granted and {0, ms} refused.
inline constexpr Script fair_acquire{
    R"lua(local function clock()
  local time = redis.call('time')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local wait = tonumber(ARGV[3])
local now
local front = redis.call('lrange', KEYS[2], 0, 1)
local first = front[1]
if first and first ~= ARGV[2] then now = clock() end
while first and first ~= ARGV[2] do
  local due = tonumber(redis.call('zscore', KEYS[3], first))
  if due and due > now then break end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], first)
  front = redis.call('lrange', KEYS[2], 0, 1)
  first = front[1]
end
local held = redis.call('exists', KEYS[1]) == 1
local mine = held and redis.call('hexists', KEYS[1], ARGV[2]) == 1
if mine or (not held and (not first or first == ARGV[2])) then
  local fence = 0
  if KEYS[4] and mine then
    fence = tonumber(redis.call('get', KEYS[4])) or 0
  elseif KEYS[4] then
    fence = redis.pcall('incr', KEYS[4])
    if type(fence) == 'table' then return fence end
  end
  if first == ARGV[2] and not mine then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    if front[2] then
      for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -wait, waiter)
      end
    end
  end
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if not mine or redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  if KEYS[4] then return {1, fence} end
  return nil
end
now = now or clock()
local ask
if held then
  ask = redis.call('pttl', KEYS[1])
  if ask < 0 then return KEYS[4] and {0, ask} or ask end
else
  ask = tonumber(redis.call('zscore', KEYS[3], first)) - now
end
local place = redis.call('lpos', KEYS[2], ARGV[2])
if ARGV[4] == '1' then
  if not place then place = redis.call('rpush', KEYS[2], ARGV[2]) - 1 end
  local due = now + (place + 1) * wait
  local had = tonumber(redis.call('zscore', KEYS[3], ARGV[2]))
  if not had or had < due then redis.call('zadd', KEYS[3], due, ARGV[2]) end
elseif place then
  for _, waiter in ipairs(redis.call('lrange', KEYS[2], place + 1, -1)) do
    redis.call('zincrby', KEYS[3], -wait, waiter)
  end
  redis.call('lrem', KEYS[2], 0, ARGV[2])
  redis.call('zrem', KEYS[3], ARGV[2])
end
ask = math.max(1, math.min(ask, math.floor(wait / 3)))
if KEYS[4] then return {0, ask} end
return ask
)lua",
    "8c08ce98bcdb3d178d1b4c34fbd6b41b21f4ef5f"};

/// FairMutex release. KEYS[1] hash, KEYS[2] queue, KEYS[3] deadlines;
/// ARGV[1] owner, ARGV[2] the release channel's stem. One hold fewer; the
/// last one deletes the hash. Whenever the lock is then free (also when the
/// hash had expired), the waiter at the front of the queue, once those past
/// their deadline are dropped, is told on "<stem>:<its owner id>". Returns
/// 1 released, 2 released but the owner still holds it, 0 no hash, -1
/// another owner's hash.
inline constexpr Script fair_release{
    R"lua(local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if holds and holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  return 2
end
local answer = 1
if holds then
  redis.call('del', KEYS[1])
elseif redis.call('exists', KEYS[1]) == 1 then
  return -1
else
  answer = 0
end
local first = redis.call('lindex', KEYS[2], 0)
local now
if first then
  local time = redis.call('time')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
while first do
  local due = tonumber(redis.call('zscore', KEYS[3], first))
  if due and due > now then
    redis.call('publish', ARGV[2] .. ':' .. first, '0')
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], first)
  first = redis.call('lindex', KEYS[2], 0)
end
return answer
)lua",
    "1be3a5e326e5383a224ca750176a932460f766bd"};

/// A FairMutex waiter leaves the queue (it gave up, or its attempt is
/// undone). KEYS[1] hash, KEYS[2] queue, KEYS[3] deadlines; ARGV[1] owner,
/// ARGV[2] waiter timeout in ms, ARGV[3] the release channel's stem. The
/// waiters behind it move up one place (their deadlines one waiter timeout
/// sooner, as Redisson's rule has it); if it led the queue and the lock is
/// free, the next one is told. Returns 1 if it was queued, else 0.
inline constexpr Script fair_leave{
    R"lua(local queue = redis.call('lrange', KEYS[2], 0, -1)
local place
for i, waiter in ipairs(queue) do
  if place then
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), waiter)
  elseif waiter == ARGV[1] then
    place = i
  end
end
redis.call('zrem', KEYS[3], ARGV[1])
if not place then return 0 end
redis.call('lrem', KEYS[2], 0, ARGV[1])
if place == 1 and queue[2] and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', ARGV[3] .. ':' .. queue[2], '0')
end
return 1
)lua",
    "0630a0668ac5abf8b9d8aa4c2417c51788da683d"};

}  // namespace distlock::scripts
