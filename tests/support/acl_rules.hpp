// The least-privilege ACL rules of docs/connecting.md ("Least privilege
// (ACL)"), written
// once for the tests that run every lock type as a user with exactly them:
// on one server (acl_test.cpp), on every node of a Redis Cluster
// (cluster_acl_test.cpp) and on a Sentinel-watched master and its
// Sentinels (sentinel_acl_test.cpp). The rules are for lock names that all
// start with "jobs:" (written with "jobs:*" for the key and "{jobs:*}" for
// the companions). Every user starts from "reset" (no commands, keys or
// channels) so that these lines are all it has. AUTH and HELLO need no
// rule. The helpers make such a user on a server, read what the server
// refused (ACL LOG), and read the guide's ready-to-paste lines, which
// must be these lists word for word.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/redis_server.hpp"

// The build passes the guide's path; a bare compile (a syntax check from
// the source tree) looks for it under the working directory.
#ifndef DISTLOCK_ACL_GUIDE_PATH
#define DISTLOCK_ACL_GUIDE_PATH "docs/connecting.md"
#endif

// One failed step, as the result of a path ("" when every step worked).
#define DISTLOCK_STEP(condition) \
  if (!(condition)) return "failed: " #condition

namespace distlock::testing::acl {

// A path's second party: a wait run on a thread of its own. A path that
// fails before taking its result cancels the lock's waits (until the wait
// has seen a cancel) instead of sitting out the wait's timeout.
template <class Result>
class Waiting {
 public:
  Waiting(std::function<void()> cancel, std::future<Result> result)
      : cancel_(std::move(cancel)), result_(std::move(result)) {}
  Waiting(Waiting&&) noexcept = default;
  Waiting& operator=(Waiting&&) = delete;
  ~Waiting() {
    while (result_.valid() &&
           result_.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
      cancel_();
    }
  }
  Result get() { return result_.get(); }

 private:
  std::function<void()> cancel_;
  std::future<Result> result_;
};

// Runs `wait` (a wait on `lock`) on a thread of its own.
template <class Lock, class Wait>
auto wait_on(Lock& lock, Wait wait) {
  using Result = decltype(wait());
  return Waiting<Result>([&lock] { lock.cancel_waits(); },
                         std::async(std::launch::async, std::move(wait)));
}

using Rules = std::vector<std::string>;

// What every lease-holding lock sends besides its own commands: PING (the
// server watch, while a lease is held), SUBSCRIBE/UNSUBSCRIBE (the release
// notifier, for waits woken by a release), EVALSHA with EVAL for a server
// that lost its script cache, SCRIPT LOAD (the Watchdog's batched renewal).
inline Rules with_common(Rules rules) {
  const Rules common = {"+ping", "+subscribe", "+unsubscribe", "+evalsha", "+eval", "+script|load"};
  rules.insert(rules.begin(), common.begin(), common.end());
  return rules;
}

/// `parts` one after another, in order (the guide's lines are compared word
/// for word).
inline Rules joined(std::initializer_list<Rules> parts) {
  Rules out;
  for (const Rules& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// What a string lease sends (SET NX PX, the token checked by GET or MGET,
// DEL, PEXPIRE, PTTL, and TYPE for a key no lock can be taken on): Mutex,
// SimpleMutex and Redlock.
inline const Rules lease_commands = {"+set", "+get", "+del", "+pexpire", "+pttl", "+mget", "+type"};

inline const Rules mutex_rules =
    with_common(joined({lease_commands,
                        {"+publish", "+incr", "~jobs:*", "~{jobs:*}:fence", "~{jobs:*}:released",
                         "&{jobs:*}:released"}}));
// Mutex keys taken and given back together: EXISTS (all free?) where a
// Mutex has GET; no fence.
inline const Rules multi_rules =
    with_common({"+exists", "+set", "+del", "+pexpire", "+pttl", "+mget", "+type", "+publish",
                 "~jobs:*", "~{jobs:*}:released", "&{jobs:*}:released"});
// No scripts: MULTI/EXEC, WATCH, and the release announced by PUBLISH.
inline const Rules simple_mutex_rules =
    joined({{"+ping", "+subscribe", "+unsubscribe"},
            lease_commands,
            {"+multi", "+exec", "+watch", "+unwatch", "+publish", "+incr", "~jobs:*",
             "~{jobs:*}:fence", "&{jobs:*}:released"}});
inline const Rules reentrant_rules =
    with_common({"+exists", "+hexists", "+hget", "+hincrby", "+hlen", "+pexpire", "+pttl", "+del",
                 "+get", "+incr", "+type", "+publish", "~jobs:*", "~{jobs:*}:fence",
                 "~redisson_lock__channel:{jobs:*}", "&redisson_lock__channel:{jobs:*}"});
inline const Rules fair_rules = with_common({"+exists",
                                             "+hexists",
                                             "+hget",
                                             "+hincrby",
                                             "+hlen",
                                             "+pexpire",
                                             "+pttl",
                                             "+del",
                                             "+get",
                                             "+incr",
                                             "+type",
                                             "+publish",
                                             "+time",
                                             "+lindex",
                                             "+lpop",
                                             "+lpos",
                                             "+lrange",
                                             "+lrem",
                                             "+rpush",
                                             "+zadd",
                                             "+zincrby",
                                             "+zrange",
                                             "+zrem",
                                             "+zscore",
                                             "~jobs:*",
                                             "~{jobs:*}:fence",
                                             "~redisson_lock_queue:{jobs:*}",
                                             "~redisson_lock_timeout:{jobs:*}",
                                             "&redisson_lock__channel:{jobs:*}:*"});
inline const Rules shared_rules = with_common(
    {"+exists", "+hexists", "+hget", "+hgetall", "+hset", "+hdel", "+hincrby", "+hlen", "+set",
     "+pexpire", "+pttl", "+del", "+type", "+publish", "~jobs:*", "~{jobs:*}",
     "~{jobs:*}:*rwlock_timeout*", "~redisson_rwlock:{jobs:*}", "&redisson_rwlock:{jobs:*}"});
inline const Rules semaphore_rules = with_common(
    {"+zadd", "+zrem", "+zcard", "+zcount", "+zrange", "+zscore", "+zmscore", "+zremrangebyscore",
     "+get", "+set", "+del", "+pexpire", "+pttl", "+time", "+publish", "~jobs:*",
     "~{jobs:*}:permits", "~{jobs:*}:released", "&{jobs:*}:released"});
// No lease: no watch, no waiting on a channel.
inline const Rules rate_limiter_rules = {"+evalsha", "+eval", "+get", "+set",   "+incrby",
                                         "+pttl",    "+time", "+del", "~jobs:*"};
// Per master; Redlock has no fencing and no wake-on-release (so no
// SUBSCRIBE), but its release still announces on the channel.
inline const Rules redlock_rules =
    joined({{"+ping", "+evalsha", "+eval", "+script|load"},
            lease_commands,
            {"+publish", "~jobs:*", "~{jobs:*}:released", "&{jobs:*}:released"}});
// inspect() and is_locked() read in one MULTI/EXEC; force_unlock() is one
// script over the key, the read holds' timeout keys, every channel and a
// fair queue's front (told on its own channel).
inline const Rules admin_rules = {"+multi",
                                  "+exec",
                                  "+type",
                                  "+pttl",
                                  "+hgetall",
                                  "+evalsha",
                                  "+eval",
                                  "+del",
                                  "+publish",
                                  "+lindex",
                                  "~jobs:*",
                                  "~{jobs:*}",
                                  "~{jobs:*}:*rwlock_timeout*",
                                  "~{jobs:*}:released",
                                  "&{jobs:*}:released",
                                  "~redisson_lock__channel:{jobs:*}",
                                  "&redisson_lock__channel:{jobs:*}",
                                  "~redisson_rwlock:{jobs:*}",
                                  "&redisson_rwlock:{jobs:*}",
                                  "~redisson_lock_queue:{jobs:*}",
                                  "&redisson_lock__channel:{jobs:*}:*"};

// The cluster's extras, on every node: the slot map (CLUSTER SHARDS, and
// CLUSTER SLOTS where a SHARDS reply is doubtful while a failover settles),
// ASKING (a slot's keys half moved), and sharded pub/sub, since a
// ClusterClient's notifier SSUBSCRIBEs and its scripts SPUBLISH. No PING:
// a cluster's nodes are followed by the slot map, not watched.
inline const Rules cluster_extras = {"+cluster|shards", "+cluster|slots", "+asking"};

// `rules` with `commands` after its own commands, before its keys and
// channels (as the guide writes them).
inline Rules with_commands(Rules rules, const Rules& commands) {
  auto at = rules.begin();
  while (at != rules.end() && !at->empty() && at->front() == '+') ++at;
  rules.insert(at, commands.begin(), commands.end());
  return rules;
}

// A lock type's rules as a ClusterClient needs them on every node.
inline Rules on_cluster(const Rules& rules) {
  Rules out;
  for (const std::string& rule : rules) {
    if (rule == "+ping") continue;
    if (rule == "+subscribe") {
      out.push_back("+ssubscribe");
    } else if (rule == "+unsubscribe") {
      out.push_back("+sunsubscribe");
    } else if (rule == "+publish") {
      out.push_back("+spublish");
    } else {
      out.push_back(rule);
    }
  }
  return with_commands(out, cluster_extras);
}

// The master's extras behind Sentinel: ROLE (the named server must say
// master) and INFO (its run id, to tell a restarted master at the same
// address from the one it was).
inline const Rules sentinel_master_extras = {"+role", "+info"};

inline Rules on_sentinel_master(const Rules& rules) {
  return with_commands(rules, sentinel_master_extras);
}

// The Sentinels' own user (SentinelOptions::sentinel_username): where the
// master is, and the +switch-master announcements.
inline const Rules sentinel_rules = {"+sentinel|get-master-addr-by-name", "+subscribe",
                                     "&+switch-master"};

// A user with `rules`, password "pw", replacing any earlier one of that name.
inline void set_user(const RedisServer& server, const std::string& user, const Rules& rules) {
  std::vector<std::string> argv = {"ACL", "SETUSER", user, "reset", "on", ">pw"};
  argv.insert(argv.end(), rules.begin(), rules.end());
  const std::string answer = server.command(argv);
  ASSERT_EQ(answer, "OK") << "ACL SETUSER " << user;
}

// The rules without `rule` (one of them), for the negative tests.
inline Rules without(const Rules& rules, const std::string& rule) {
  Rules left;
  for (const std::string& each : rules) {
    if (each != rule) left.push_back(each);
  }
  return left;
}

// What the server refused since the last ACL LOG RESET ("" when nothing):
// a refusal the library tolerates still shows here, so a passing path
// with a refusal behind it is caught too.
inline std::string refusals(const RedisServer& server) {
  const std::string log = server.command({"ACL", "LOG"});
  server.command({"ACL", "LOG", "RESET"});
  return log;
}

// The guide's ready-to-paste line for `user`: its rules after
// "ACL SETUSER <user> reset on >secret".
inline Rules guide_rules(const std::string& user) {
  std::ifstream guide(DISTLOCK_ACL_GUIDE_PATH);
  const std::string start = "ACL SETUSER " + user + " reset on >secret ";
  std::string line;
  while (std::getline(guide, line)) {
    if (line.compare(0, start.size(), start) != 0) continue;
    std::istringstream words(line.substr(start.size()));
    Rules rules;
    for (std::string word; words >> word;) rules.push_back(word);
    return rules;
  }
  return {};
}

}  // namespace distlock::testing::acl
