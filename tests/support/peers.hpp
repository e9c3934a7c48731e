// Emulated peers for mixed fleets: lock clients of other libraries that
// share a lock name with distlock, rebuilt here from the facts of their
// layouts (key types, fields, channels, which keys a release touches), for
// the fault tests to run beside distlock's own contenders under one oracle.
//
// Defines distlock::testing::RedisPyLockPeer and RedissonLockPeer. Each
// waits by polling, as those clients do when no message arrives; neither
// renews: a peer's lease is long enough for its longest section.
//
// The layouts:
//   - redis-py's Lock: a string at the name holding a random token, set
//     with SET NX PX; released by a script that deletes the key only if it
//     still holds the token.
//   - Redisson's RLock: a hash at the name whose one field, the owner
//     "<uuid>:<thread id>", counts that owner's holds; the hash's PTTL is
//     the lease. Acquire when the hash is missing or has the owner's field
//     (count up, set the lease), else answer the PTTL. Release (current
//     Redisson) first reads an unlock latch, the string
//     "redisson_unlock_latch:{name}:<request id>": if set, the same release
//     already ran and its answer is returned again. Otherwise count the
//     owner's field down; above zero, keep the lease and latch 0; at zero,
//     delete the hash, publish "0" on "redisson_lock__channel:{name}" and
//     latch 1. The latch carries a short PX of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "distlock/client.hpp"
#include "distlock/token.hpp"

namespace distlock::testing {

/// redis-py's Lock(name, timeout=lease) with blocking polls.
class RedisPyLockPeer {
 public:
  RedisPyLockPeer(Client& client, std::string name, std::chrono::milliseconds lease)
      : client_(client), name_(std::move(name)), lease_(std::to_string(lease.count())) {}

  bool try_lock_for(std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    token_ = make_token();
    for (;;) {
      if (client_.command("SET", name_, token_, "NX", "PX", lease_).is_ok()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // its polling pace
    }
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
        channel_("redisson_lock__channel:{" + name_ + "}"),
        owner_(process_uuid() + ":" + std::to_string(thread_number())),
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
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (client_.command("EVAL", acquire, "1", name_, lease_, owner_).is_nil()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  void unlock() {
    // KEYS: the hash, the channel, the latch; ARGV: the message, the lease,
    // the owner, the latch's own PX.
    static constexpr std::string_view release = R"(
local latched = redis.call('get', KEYS[3])
if latched then return tonumber(latched) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[4])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[4])
return 1
)";
    const std::string latch = "redisson_unlock_latch:{" + name_ + "}:" + make_token();
    client_.command("EVAL", release, "3", name_, channel_, latch, "0", lease_, owner_, "2000");
  }

  const std::string& owner() const noexcept { return owner_; }

 private:
  static const std::string& process_uuid() {
    static const std::string uuid = [] {
      const std::string hex = make_token();  // 32 hex digits
      return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
             hex.substr(16, 4) + "-" + hex.substr(20, 12);
    }();
    return uuid;
  }
  static long long thread_number() {
    static std::atomic<long long> next{1};
    thread_local const long long number = next.fetch_add(1);
    return number;
  }

  Client& client_;
  const std::string name_;
  const std::string channel_;
  const std::string owner_;
  const std::string lease_;
};

}  // namespace distlock::testing
