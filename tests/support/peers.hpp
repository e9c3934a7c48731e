// Emulated peers for mixed fleets: lock clients of other libraries that
// share a lock name with distlock, rebuilt here from the facts of their
// layouts (key types, fields, channels, which keys a release touches), for
// the fault tests to run beside distlock's own contenders under one oracle.
//
// Defines distlock::testing::RedisPyLockPeer, RedissonLockPeer,
// RedissonFairLockPeer and RedissonReadWriteLockPeer. Each waits by polling, as those clients do
// when no message arrives; none renews: a peer's lease is long enough for its longest section.
//
// The layouts:
//   - redis-py's Lock: a string at the name holding a random token, set
//     with SET NX PX; released by a script that deletes the key only if it
//     still holds the token.
//   - Redisson's owner id, for its locks below: "<uuid>:<thread id>", the
//     uuid one per client (here: per process).
//   - Redisson's unlock latch (current Redisson, every lock below): an
//     unlock names a fresh request id and its script first reads the string
//     "redisson_unlock_latch:{name}:<request id>": if set, the same unlock
//     already ran and its answer is returned again; else the script stores
//     its answer there, with a short PX, before returning it. Once the
//     answer is in, the client deletes the latch with a DEL of its own.
//   - Redisson's RLock: a hash at the name whose one field, the owner,
//     counts that owner's holds; the hash's PTTL is the lease. Acquire when
//     the hash is missing or has the owner's field (count up, set the
//     lease), else answer the PTTL. Release: count the owner's field down;
//     above zero, keep the lease and latch 0; at zero, delete the hash,
//     publish "0" on "redisson_lock__channel:{name}" and latch 1.
//   - Redisson's RReadWriteLock: a hash at the name with a field "mode",
//     "read" or "write". A reader's field is the owner, a writer's the owner
//     with ":write"; each counts that owner's holds of its kind. Read hold n
//     of an owner also has a string "{name}:<owner>:rwlock_timeout:<n>" whose
//     PTTL is that hold's lease, and the hash's PTTL is kept at the longest
//     of them; a write hold's lease is the hash's PTTL. A reader gets in when
//     there is no mode, when the mode is "read", or when the mode is "write"
//     and its own owner holds the write side; a writer when there is no mode,
//     or again when it holds the write side already (the lease grows by one
//     lease). Releases are announced on "redisson_rwlock:{name}": "0" when a
//     read release deletes the hash (one waiter may go), "1" when a write
//     release does (every waiter looks again).
//   - Redisson's RFairLock: RLock's hash, and beside it the list
//     "redisson_lock_queue:{name}" of waiting owners in arrival order and
//     the sorted set "redisson_lock_timeout:{name}" of their deadlines (ms,
//     the client's wall clock, passed in). Every script first drops the
//     waiters at the front whose deadline has passed. A tryLock(wait)
//     takes the lock when it is free and the queue empty or led by the
//     owner (then it leaves the queue and every other deadline comes one
//     wait sooner), or again when the owner holds it; else an owner not yet
//     queued joins at the back with the deadline of the one before it (or
//     the lock's PTTL from now) plus the wait. It uses its wait as that
//     wait. One that gives up leaves the queue, and those behind it move up
//     one wait. Release counts down as RLock's; the last one deletes the
//     hash and publishes "0" on "redisson_lock__channel:{name}:<owner at
//     the front>" (also when the hash had already gone).
//     Where a name has a '{', Redisson uses it as it is instead of "{name}".
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "distlock/client.hpp"
#include "distlock/token.hpp"

namespace distlock::testing {

namespace peer_detail {

// Polls `attempt` (true: acquired) every 2 ms, the peers' pace, until
// `wait` has passed.
template <class Attempt>
bool poll_for(std::chrono::milliseconds wait, Attempt&& attempt) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (attempt()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// "{name}", or the name as it is if it has a '{'.
inline std::string redisson_braced(const std::string& name) {
  return name.find('{') == std::string::npos ? "{" + name + "}" : name;
}

// The calling thread's Redisson owner id: "<uuid>:<thread id>", the uuid
// drawn once per process (each forked contender is a client of its own).
inline std::string redisson_owner() {
  static const std::string uuid = [] {
    const std::string hex = make_token();  // 32 hex digits
    return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
           hex.substr(16, 4) + "-" + hex.substr(20, 12);
  }();
  static std::atomic<long long> next{1};
  thread_local const long long thread = next.fetch_add(1);
  return uuid + ":" + std::to_string(thread);
}

// The latch of one unlock: "redisson_unlock_latch:{name}:<request id>".
inline std::string redisson_latch(const std::string& name) {
  return "redisson_unlock_latch:" + redisson_braced(name) + ":" + make_token();
}

// The latch's own PX. Redisson derives it from its retry settings; a
// latch is deleted as soon as its unlock answers, so this only bounds one
// whose DEL was lost.
inline constexpr std::string_view latch_px = "2000";

// How every peer unlock script begins: its latch (the script's last key,
// the latch's PX its last argument) answers a repeated unlock as the first
// was answered, and answer(n) latches n and returns it.
inline std::string with_latch(std::string_view body) {
  constexpr std::string_view preamble = R"(
local latch, latch_px = KEYS[#KEYS], ARGV[#ARGV]
local latched = redis.call('get', latch)
if latched then return tonumber(latched) end
local function answer(n)
  redis.call('set', latch, n, 'px', latch_px)
  return n
end)";
  return std::string(preamble) + std::string(body);
}

// A peer's reply: a script error is the peer's defect, not a lost race.
inline Reply checked(Reply reply) {
  reply.throw_if_error();
  return reply;
}

}  // namespace peer_detail

/// redis-py's Lock(name, timeout=lease) with blocking polls.
class RedisPyLockPeer {
 public:
  RedisPyLockPeer(Client& client, std::string name, std::chrono::milliseconds lease)
      : client_(client), name_(std::move(name)), lease_(std::to_string(lease.count())) {}

  bool try_lock_for(std::chrono::milliseconds wait) {
    token_ = make_token();
    return peer_detail::poll_for(
        wait, [&] { return client_.command("SET", name_, token_, "NX", "PX", lease_).is_ok(); });
  }

  void unlock() {
    // Deletes the key only while it still holds our token.
    static constexpr std::string_view release = R"(
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('del', KEYS[1])
)";
    client_.command("EVAL", release, "1", name_, token_);
  }

 private:
  Client& client_;
  const std::string name_;
  const std::string lease_;
  std::string token_;
};

/// Redisson's RLock (tryLock(wait, lease) and unlock) for one thread.
class RedissonLockPeer {
 public:
  RedissonLockPeer(Client& client, std::string name, std::chrono::milliseconds lease)
      : client_(client),
        name_(std::move(name)),
        channel_("redisson_lock__channel:" + peer_detail::redisson_braced(name_)),
        owner_(peer_detail::redisson_owner()),
        lease_(std::to_string(lease.count())) {}

  bool try_lock_for(std::chrono::milliseconds wait) {
    static constexpr std::string_view acquire = R"(
if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return redis.call('pttl', KEYS[1])
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil
)";
    return peer_detail::poll_for(wait, [&] {
      return peer_detail::checked(client_.command("EVAL", acquire, "1", name_, lease_, owner_))
          .is_nil();
    });
  }

  void unlock() {
    // KEYS: the hash, the channel, the latch; ARGV: the message, the lease,
    // the owner, the latch's own PX.
    static const std::string release = peer_detail::with_latch(R"(
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return answer(0)
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return answer(1)
)");
    const std::string latch = peer_detail::redisson_latch(name_);
    peer_detail::checked(client_.command("EVAL", release, "3", name_, channel_, latch, "0", lease_,
                                         owner_, peer_detail::latch_px));
    client_.command("DEL", latch);
  }

  const std::string& owner() const noexcept { return owner_; }

 private:
  Client& client_;
  const std::string name_;
  const std::string channel_;
  const std::string owner_;
  const std::string lease_;
};

/// Redisson's RFairLock (tryLock(wait, lease) and unlock) for one thread,
/// without its unlock latch (as an older Redisson).
class RedissonFairLockPeer {
 public:
  RedissonFairLockPeer(Client& client, std::string name, std::chrono::milliseconds lease)
      : client_(client),
        name_(std::move(name)),
        queue_("redisson_lock_queue:" + peer_detail::redisson_braced(name_)),
        deadlines_("redisson_lock_timeout:" + peer_detail::redisson_braced(name_)),
        channel_("redisson_lock__channel:" + peer_detail::redisson_braced(name_)),
        owner_(peer_detail::redisson_owner()),
        lease_(std::to_string(lease.count())) {}

  bool try_lock_for(std::chrono::milliseconds wait) {
    // KEYS: the hash, the queue, the deadlines; ARGV: the lease, the owner,
    // the wait, the client's clock.
    static const std::string acquire = std::string(drop_overdue) + R"(
if redis.call('exists', KEYS[1]) == 0 and (not first or first == ARGV[2]) then
  if first then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, other in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
      redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), other)
    end
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) then return 1 end
local last = redis.call('lindex', KEYS[2], -1)
local base = now + math.max(redis.call('pttl', KEYS[1]), 0)
if last then base = tonumber(redis.call('zscore', KEYS[3], last)) or now end
redis.call('zadd', KEYS[3], base + tonumber(ARGV[3]), ARGV[2])
redis.call('rpush', KEYS[2], ARGV[2])
return 1
)";
    // KEYS: the queue, the deadlines; ARGV: the owner, the wait.
    static constexpr std::string_view give_up = R"(
local behind = false
for _, waiter in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do
  if behind then redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), waiter) end
  if waiter == ARGV[1] then behind = true end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
)";
    const std::string waited = std::to_string(wait.count());
    const bool acquired = peer_detail::poll_for(wait, [&] {
      return peer_detail::checked(client_.command("EVAL", acquire, "3", name_, queue_, deadlines_,
                                                  lease_, owner_, waited, wall_clock_ms()))
          .is_nil();
    });
    if (!acquired) {
      peer_detail::checked(
          client_.command("EVAL", give_up, "2", queue_, deadlines_, owner_, waited));
    }
    return acquired;
  }

  void unlock() {
    // KEYS: the hash, the queue, the deadlines; ARGV: the owner, the
    // channel's stem, the client's clock.
    static const std::string release = std::string(drop_overdue) + R"(
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if holds and holds > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  return 0
end
if not holds and redis.call('exists', KEYS[1]) == 1 then return nil end
if holds then redis.call('del', KEYS[1]) end
if first and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', ARGV[2] .. ':' .. first, '0')
end
return 1
)";
    peer_detail::checked(client_.command("EVAL", release, "3", name_, queue_, deadlines_, owner_,
                                         channel_, wall_clock_ms()));
  }

 private:
  // How each script begins: the waiters at the front whose deadline (by
  // the clock in the last argument) has passed are dropped; `first` and
  // `now` are left for the rest.
  static constexpr std::string_view drop_overdue = R"(
local now = tonumber(ARGV[#ARGV])
local first = redis.call('lindex', KEYS[2], 0)
while first do
  local due = tonumber(redis.call('zscore', KEYS[3], first))
  if due and due > now then break end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], first)
  first = redis.call('lindex', KEYS[2], 0)
end
)";

  static std::string wall_clock_ms() {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  }

  Client& client_;
  const std::string name_;
  const std::string queue_;
  const std::string deadlines_;
  const std::string channel_;
  const std::string owner_;
  const std::string lease_;
};

/// Redisson's RReadWriteLock, its readLock() and writeLock() (tryLock(wait,
/// lease) and unlock) for one thread: try_lock_shared_for/unlock_shared
/// and try_lock_for/unlock.
class RedissonReadWriteLockPeer {
 public:
  RedissonReadWriteLockPeer(Client& client, std::string name, std::chrono::milliseconds lease)
      : client_(client),
        name_(std::move(name)),
        braced_(peer_detail::redisson_braced(name_)),
        channel_("redisson_rwlock:" + braced_),
        reader_(peer_detail::redisson_owner()),
        writer_(reader_ + ":write"),
        timeouts_(braced_ + ":" + reader_ + ":rwlock_timeout"),
        lease_(std::to_string(lease.count())) {}

  bool try_lock_shared_for(std::chrono::milliseconds wait) {
    // KEYS: the hash, this owner's timeout-key stem; ARGV: the lease, the
    // reader field, the writer field. Nil when in, else the hash's PTTL.
    static constexpr std::string_view acquire = R"(
local mode = redis.call('hget', KEYS[1], 'mode')
local own_writer = mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1
if mode and mode ~= 'read' and not own_writer then return redis.call('pttl', KEYS[1]) end
local hold = 1
if mode then
  hold = redis.call('hincrby', KEYS[1], ARGV[2], 1)
else
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
end
redis.call('set', KEYS[2] .. ':' .. hold, 1, 'px', ARGV[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return nil
)";
    return peer_detail::poll_for(wait, [&] {
      return peer_detail::checked(
                 client_.command("EVAL", acquire, "2", name_, timeouts_, lease_, reader_, writer_))
          .is_nil();
    });
  }

  void unlock_shared() {
    // KEYS: the hash, the channel, this owner's timeout-key stem, "{name}"
    // (every owner's stem begins with it), the latch; ARGV: the message,
    // the reader field, the latch's own PX. The newest of the owner's
    // timeout keys goes with the hold; the hash then lives as long as the
    // longest read hold left, or goes (and "0" is announced) if none is
    // live, unless a writer of the same owner remains.
    static const std::string release = peer_detail::with_latch(R"(
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call('publish', KEYS[2], ARGV[1])
  return answer(1)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local holds = tonumber(fields[i + 1])
    for n = 1, holds or 0 do
      local key = KEYS[4] .. ':' .. fields[i] .. ':rwlock_timeout:' .. n
      longest = math.max(longest, redis.call('pttl', key))
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return answer(0)
  end
  if mode == 'write' then return answer(0) end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return answer(1)
)");
    const std::string latch = peer_detail::redisson_latch(name_);
    peer_detail::checked(client_.command("EVAL", release, "5", name_, channel_, timeouts_, braced_,
                                         latch, "0", reader_, peer_detail::latch_px));
    client_.command("DEL", latch);
  }

  bool try_lock_for(std::chrono::milliseconds wait) {
    // KEYS: the hash; ARGV: the lease, the writer field. Nil when in, else
    // the hash's PTTL.
    static constexpr std::string_view acquire = R"(
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])
)";
    return peer_detail::poll_for(wait, [&] {
      return peer_detail::checked(client_.command("EVAL", acquire, "1", name_, lease_, writer_))
          .is_nil();
    });
  }

  void unlock() {
    // KEYS: the hash, the channel, the latch; ARGV: the message, the lease,
    // the writer field, the latch's own PX. A nested hold fewer keeps the
    // lock and renews the lease; the last one deletes the hash and
    // announces "1", or, when the owner's read holds remain (a downgrade),
    // leaves them in read mode without a word.
    static const std::string release = peer_detail::with_latch(R"(
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call('publish', KEYS[2], ARGV[1])
  return answer(1)
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return answer(0)
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return answer(1)
)");
    const std::string latch = peer_detail::redisson_latch(name_);
    peer_detail::checked(client_.command("EVAL", release, "3", name_, channel_, latch, "1", lease_,
                                         writer_, peer_detail::latch_px));
    client_.command("DEL", latch);
  }

 private:
  Client& client_;
  const std::string name_;
  const std::string braced_;    // "{name}"
  const std::string channel_;   // redisson_rwlock:{name}
  const std::string reader_;    // "<uuid>:<thread id>"
  const std::string writer_;    // reader_ + ":write"
  const std::string timeouts_;  // "{name}:<reader>:rwlock_timeout"
  const std::string lease_;
};

}  // namespace distlock::testing
