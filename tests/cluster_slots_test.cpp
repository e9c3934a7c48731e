// Tests for detail/backend/cluster_slots.hpp: the hash slot of a key, the one-slot
// check, and the redirect replies. No server needed.
#include "distlock/detail/backend/cluster_slots.hpp"

#include <gtest/gtest.h>

#include <string>

#include "distlock/error.hpp"
#include "distlock/lock_options.hpp"

namespace distlock {
namespace {

using detail::key_slot;
using detail::parse_redirect;
using detail::Redirect;

TEST(ClusterSlots, Crc16IsXmodem) {
  // The check value of CRC-16/XMODEM, as the Redis Cluster spec gives it.
  EXPECT_EQ(detail::Crc16::of("123456789"), 0x31C3);
  EXPECT_EQ(detail::Crc16::of(""), 0);
}

TEST(ClusterSlots, KnownSlots) {
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(key_slot(""), 0);
}

TEST(ClusterSlots, HashTagsFollowTheSpec) {
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  // Only the first '{' and the first '}' after it count.
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  // An empty tag, or no '}' after the '{': the whole key is hashed.
  EXPECT_EQ(detail::hashed_part("foo{}{bar}"), "foo{}{bar}");
  EXPECT_EQ(detail::hashed_part("foo{bar"), "foo{bar");
  EXPECT_EQ(detail::hashed_part("a}b{c}"), "c");
}

TEST(ClusterSlots, CompanionKeysShareTheLockKeysSlot) {
  for (const char* key : {"plain", "stock:{42}", "{a}b", "q{"}) {
    EXPECT_EQ(key_slot(detail::companion_key(key, "fence")), key_slot(key)) << key;
    EXPECT_EQ(key_slot(detail::companion_key(key, "released")), key_slot(key)) << key;
  }
  // A '}' in an untagged name ends the tag companion_key adds: such names
  // are refused on a cluster (Mutex.NameWhoseKeysSpanSlotsIsRefused).
  EXPECT_NE(key_slot(detail::companion_key("a}b", "fence")), key_slot("a}b"));
  EXPECT_NE(key_slot(detail::companion_key("x{}y", "fence")), key_slot("x{}y"));
}

TEST(ClusterSlots, CheckOneSlotNamesTheKeysThatDiffer) {
  EXPECT_NO_THROW(detail::check_one_slot("lock", {"{u}.a", "{u}.b", "u"}));
  try {
    detail::check_one_slot("lock 'a}b'", {"a}b", "{a}b}:released"});
    FAIL() << "keys in two slots were accepted";
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("\"a}b\" (slot " + std::to_string(key_slot("a}b")) + ")"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("\"{a}b}:released\""), std::string::npos) << what;
    EXPECT_NE(what.find("lock 'a}b'"), std::string::npos) << what;
  }
}

TEST(ClusterSlots, ParsesMovedAndAsk) {
  const Redirect moved = parse_redirect("MOVED 3999 127.0.0.1:6381");
  EXPECT_EQ(moved.kind, Redirect::Kind::moved);
  EXPECT_EQ(moved.slot, 3999);
  EXPECT_EQ(moved.host, "127.0.0.1");
  EXPECT_EQ(moved.port, 6381);

  // As ServerError::what() shows it: the reply, then the category's text.
  const Redirect ask = parse_redirect("ASK 12182 10.0.0.7:7002: server replied with an error");
  EXPECT_EQ(ask.kind, Redirect::Kind::ask);
  EXPECT_EQ(ask.slot, 12182);
  EXPECT_EQ(ask.host, "10.0.0.7");
  EXPECT_EQ(ask.port, 7002);

  const Redirect v6 = parse_redirect("MOVED 1 ::1:7000");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 7000);

  const Redirect unknown_host = parse_redirect("MOVED 5 :7001");
  EXPECT_EQ(unknown_host.kind, Redirect::Kind::moved);
  EXPECT_EQ(unknown_host.host, "");
  EXPECT_EQ(unknown_host.port, 7001);
}

TEST(ClusterSlots, TransientRefusalsAndOtherErrors) {
  EXPECT_EQ(parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot").kind,
            Redirect::Kind::try_again);
  EXPECT_EQ(parse_redirect("CLUSTERDOWN The cluster is down").kind, Redirect::Kind::try_again);
  EXPECT_EQ(parse_redirect("ERR unknown command").kind, Redirect::Kind::none);
  EXPECT_EQ(parse_redirect("MOVED notanumber 1.2.3.4:5").kind, Redirect::Kind::none);
  EXPECT_EQ(parse_redirect("MOVED 16384 1.2.3.4:5").kind, Redirect::Kind::none);
  EXPECT_EQ(parse_redirect("MOVED 1 1.2.3.4:0").kind, Redirect::Kind::none);
  EXPECT_EQ(parse_redirect("MOVED 1 nohostport").kind, Redirect::Kind::none);
}

}  // namespace
}  // namespace distlock
