// The Lua scripts of the counting primitives, RateLimiter and Semaphore
// (detail/wire/scripts.hpp holds the locks').
//
// As there, keys and arguments arrive as KEYS/ARGV only, and each sha1 is
// checked against the server's SCRIPT LOAD in the tests. Every time these
// scripts judge comes from the server's own clock (TIME inside the
// script), never from an argument: callers' clocks may disagree, the
// server's is the one every caller shares. Redis 5 and later replicate a
// script's effects rather than its text, so reading TIME before a write is
// allowed; on older servers redis.replicate_commands() asks for that.
// Large numbers (microsecond times) are written with string.format, since
// Redis may pass a Lua number on in exponent notation.
#pragma once

#include "distlock/detail/wire/connection.hpp"

namespace distlock::scripts {

/// RateLimiter, fixed window. KEYS[1] the window's counter; ARGV[1] limit,
/// ARGV[2] window in ms, ARGV[3] cost. The first admission of a window
/// creates the counter with the window as its PTTL in one SET ... PX, so a
/// counter never exists without its expiry (no INCR-then-EXPIRE gap); the
/// window ends when the server expires it. A denied call counts nothing.
/// Returns {1, 0, remaining} when admitted, {0, ms until the window ends,
/// remaining} when not.
inline constexpr Script rate_fixed_window{
    R"lua(local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local left = redis.call('pttl', KEYS[1])
local used = 0
if left > 0 then
  used = tonumber(redis.call('get', KEYS[1])) or limit
end
if used + cost > limit then
  return {0, left + 1, math.max(limit - used, 0)}
end
if left > 0 then
  redis.call('incrby', KEYS[1], cost)
else
  redis.call('set', KEYS[1], cost, 'PX', window)
end
return {1, 0, limit - used - cost}
)lua",
    "b09aed93df95d70d9384ca7edac2b3899d257b18"};

/// RateLimiter, GCRA (a token bucket kept as one timestamp). KEYS[1] the
/// theoretical arrival time in server microseconds; ARGV[1] emission
/// interval in us, ARGV[2] burst, ARGV[3] cost. A call of cost n is
/// admitted when the bucket has room for n, i.e. when the TAT pushed on by
/// n intervals is at most burst intervals ahead of the server's now. The
/// key expires when the bucket would be full again. Returns {1, 0,
/// remaining} when admitted, {0, ms until it would be, remaining} when not.
inline constexpr Script rate_gcra{
    R"lua(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('get', KEYS[1])) or now
if tat < now then tat = now end
local spare = now + burst * interval - tat
local need = cost * interval
if need > spare then
  return {0, math.ceil((need - spare) / 1000), math.floor(spare / interval)}
end
tat = tat + need
redis.call('set', KEYS[1], string.format('%.0f', tat), 'PX',
           string.format('%.0f', math.ceil((tat - now) / 1000)))
return {1, 0, math.floor((spare - need) / interval)}
)lua",
    "c9f5e0ca7f66aa4778638423f48823fb2310c157"};

// Semaphore: a sorted set at the name whose members are permit ids, each
// scored by its expiry in server milliseconds (live while score > now), and
// which lives at least as long as its longest permit; the permit count at
// "{name}:permits". Which count is in force is told by that key's expiry:
// none, a count resize() stored (configuration, in force for everyone);
// one, a count the first acquire adopted from its caller, in force while a
// permit is live and kept alive at least as long as the set (acquire,
// extend and renew lengthen it with the set, release deletes it with the
// last live permit). No count in force: the caller's.

/// Semaphore acquire. KEYS[1] permits, KEYS[2] stored count; ARGV[1]
/// permit id, ARGV[2] lease in ms, ARGV[3] the caller's count. A caller
/// whose count differs from an adopted one in force is refused before
/// anything is written. Otherwise prunes expired permits, then adds ours
/// if fewer than the count are live, adopting the caller's count when none
/// is in force. Returns {1, 0} when acquired, {0, ms until the first live
/// permit expires} when not ({0, -1} when none is held: a count of 0), {-1,
/// the adopted count} when refused.
inline constexpr Script semaphore_acquire{
    R"lua(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stored = tonumber(redis.call('get', KEYS[2]))
local adopted = stored and redis.call('pttl', KEYS[2]) >= 0
if adopted then
  if redis.call('zcount', KEYS[1], string.format('(%.0f', now), '+inf') == 0 then
    stored = nil
  elseif stored ~= tonumber(ARGV[3]) then
    return {-1, stored}
  end
end
redis.call('zremrangebyscore', KEYS[1], '-inf', string.format('%.0f', now))
if redis.call('zcard', KEYS[1]) < (stored or tonumber(ARGV[3])) then
  local ttl = tonumber(ARGV[2])
  redis.call('zadd', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
  local left = redis.call('pttl', KEYS[1])
  if left < ttl then
    redis.call('pexpire', KEYS[1], ARGV[2])
    left = ttl
  end
  if not stored then
    redis.call('set', KEYS[2], ARGV[3], 'PX', string.format('%.0f', left))
  elseif adopted and redis.call('pttl', KEYS[2]) < left then
    redis.call('pexpire', KEYS[2], string.format('%.0f', left))
  end
  return {1, 0}
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {0, -1} end
return {0, tonumber(first[2]) - now}
)lua",
    "616b7d734882ee67cf1a15ddd1eb0d5ac9f5af9c"};

/// Semaphore release. KEYS[1] permits, KEYS[2] release channel, KEYS[3]
/// stored count; ARGV[1] permit id. Removes the permit and announces a free
/// one; with it the last live permit, an adopted count goes too. Returns 1
/// released, 0 the permit had expired (or was gone).
inline constexpr Script semaphore_release{
    R"lua(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = tonumber(redis.call('zscore', KEYS[1], ARGV[1]))
if not score then return 0 end
redis.call('zrem', KEYS[1], ARGV[1])
if redis.call('pttl', KEYS[3]) >= 0 and
   redis.call('zcount', KEYS[1], string.format('(%.0f', now), '+inf') == 0 then
  redis.call('del', KEYS[3])
end
redis.call('publish', KEYS[2], '0')
if score <= now then return 0 end
return 1
)lua",
    "04fcfd24c27580064e7419601f6bbaa7adbecd4c"};

/// Semaphore extend. KEYS[1] permits, KEYS[2] stored count; ARGV[1] permit
/// id, ARGV[2] lease in ms. A live permit's lease becomes exactly the new
/// one (the set's only ever lengthens, and an adopted count's with it).
/// Returns 1 extended, 0 the permit had expired or was gone.
inline constexpr Script semaphore_extend{
    R"lua(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = tonumber(redis.call('zscore', KEYS[1], ARGV[1]))
if not score then return 0 end
if score <= now then
  redis.call('zrem', KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('zadd', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
local left = redis.call('pttl', KEYS[1])
if left < ttl then
  redis.call('pexpire', KEYS[1], ARGV[2])
  left = ttl
end
local kept = redis.call('pttl', KEYS[2])
if kept >= 0 and kept < left then redis.call('pexpire', KEYS[2], string.format('%.0f', left)) end
return 1
)lua",
    "92648be2ca31f66f9ff206a0541f3175a329ed99"};

/// Watchdog renewal of many permits in one call. KEYS[2i-1] permits i,
/// KEYS[2i] its set's stored count; ARGV[2i-1] permit id, ARGV[2i] its
/// lease in ms. A live permit gets at least its lease from now (never less
/// than it has), its set lives at least as long, and an adopted count as
/// long as its set (a count without expiry is left so, a missing one is
/// not made); a key of another type counts as gone (pcall). Returns the
/// positions i of the permits found gone. A script spends most of its time
/// in calls to the server, not in Lua, so the permits of one set cost four
/// calls, however many there are: one ZMSCORE reads their scores (before
/// Redis 6.2, which has none, one ZSCORE each), one ZADD moves the live
/// ones, one PTTL (and PEXPIRE if short) covers the longest lease, one PTTL
/// (and PEXPIRE if short) of the count follows the set.
inline constexpr Script semaphore_renew{
    R"lua(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sets, order, counts = {}, {}, {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local at = sets[key]
  if not at then
    at = {}
    sets[key] = at
    counts[key] = KEYS[2 * i]
    order[#order + 1] = key
  end
  at[#at + 1] = i
end
local gone = {}
for _, key in ipairs(order) do
  local at, ids = sets[key], {}
  for n = 1, #at do ids[n] = ARGV[2 * at[n] - 1] end
  local scores = redis.pcall('zmscore', key, unpack(ids))
  if scores.err then
    scores = {}
    for n = 1, #at do scores[n] = redis.pcall('zscore', key, ids[n]) end
  end
  local moves, m, longest, until_text = {}, 0, 0, {}
  for n = 1, #at do
    local score, ttl = tonumber(scores[n]), tonumber(ARGV[2 * at[n]])
    if score and score > now then
      if now + ttl > score then
        local text = until_text[ttl]
        if not text then
          text = string.format('%.0f', now + ttl)
          until_text[ttl] = text
        end
        moves[m + 1], moves[m + 2], m = text, ids[n], m + 2
      end
      if ttl > longest then longest = ttl end
    else
      gone[#gone + 1] = at[n]
    end
  end
  if m > 0 then redis.call('zadd', key, unpack(moves)) end
  if longest > 0 then
    local left = redis.call('pttl', key)
    if left < longest then
      redis.call('pexpire', key, string.format('%.0f', longest))
      left = longest
    end
    local kept = redis.call('pttl', counts[key])
    if kept >= 0 and kept < left then
      redis.call('pexpire', counts[key], string.format('%.0f', left))
    end
  end
end
return gone
)lua",
    "b0ad7dd7ded94f4dddb9340016d63324ce867017"};

/// Semaphore count. KEYS[1] permits, KEYS[2] stored count; ARGV[1] the
/// caller's count. Reads only. Returns {the count in force, live permits}.
inline constexpr Script semaphore_count{
    R"lua(local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('zcount', KEYS[1], string.format('(%.0f', now), '+inf')
local permits = tonumber(redis.call('get', KEYS[2]))
if permits and live == 0 and redis.call('pttl', KEYS[2]) >= 0 then permits = nil end
return {permits or tonumber(ARGV[1]), live}
)lua",
    "69f39016e2ae1e94b64eb3612381b82077efa0be"};

/// Semaphore resize. KEYS[1] stored count, KEYS[2] release channel;
/// ARGV[1] the new count. Stores it (no expiry: it is configuration, not a
/// lease) and wakes every waiter, as many may fit now ("1": see
/// Notifier::handle). Returns 1.
inline constexpr Script semaphore_resize{
    R"lua(redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], '1')
return 1
)lua",
    "40adaa402a127b9e61240e60e0afe67d5f01cba3"};

/// Every script above, for checks that cover them all.
inline constexpr const Script* counting[] = {
    &rate_fixed_window, &rate_gcra,       &semaphore_acquire, &semaphore_release,
    &semaphore_extend,  &semaphore_renew, &semaphore_count,   &semaphore_resize};

}  // namespace distlock::scripts
