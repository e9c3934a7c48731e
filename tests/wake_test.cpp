// Tests for WakeList (detail/base/wake.hpp), pure logic over Wakes that
// record their fires: the order they fire in, the baton a release hands
// to the next in turn, and how an unused baton goes on.
#include "distlock/detail/base/wake.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace distlock::detail {
namespace {

struct Recorded final : Wake {
  Recorded(std::string who, std::vector<std::string>& log, bool alone = true)
      : name(std::move(who)), fired(&log) {
    exclusive = alone;
  }
  void fire() noexcept override { fired->push_back(name); }
  std::string name;
  std::vector<std::string>* fired;
};

using Log = std::vector<std::string>;

TEST(WakeListTest, FireAllFiresEveryArmedWakeOnce) {
  Log log;
  Recorded a("a", log), b("b", log), c("c", log);
  WakeList list;
  for (Recorded* wake : {&a, &b, &c}) list.arm(*wake);
  list.arm(b);  // armed already: no second place
  list.disarm(c);
  list.fire_all();
  EXPECT_EQ(log, (Log{"a", "b"}));
  EXPECT_TRUE(list.empty());
  list.fire_all();  // fired ones are let go
  EXPECT_EQ(log.size(), 2u);
  EXPECT_FALSE(list.take_baton(a));
}

TEST(WakeListTest, AReleaseWakesTheOldestWaiterAloneWithTheBaton) {
  Log log;
  Recorded a("a", log), b("b", log), c("c", log);
  WakeList list;
  for (Recorded* wake : {&a, &b, &c}) list.arm(*wake);
  list.fire_next();
  EXPECT_EQ(log, (Log{"a"}));
  EXPECT_TRUE(list.take_baton(a));  // a attempts
  EXPECT_FALSE(list.take_baton(a));
  list.fire_next();
  EXPECT_EQ(log, (Log{"a", "b"}));
}

TEST(WakeListTest, SharedWaitersAheadOfTheFirstExclusiveOneGoTogether) {
  Log log;
  Recorded r1("r1", log, false), r2("r2", log, false), w("w", log), r3("r3", log, false);
  WakeList list;
  for (Recorded* wake : {&r1, &r2, &w, &r3}) list.arm(*wake);
  list.fire_next();
  EXPECT_EQ(log, (Log{"r1", "r2", "w"}));
  EXPECT_FALSE(list.take_baton(r1));
  EXPECT_TRUE(list.take_baton(w));
  list.fire_next();
  EXPECT_EQ(log, (Log{"r1", "r2", "w", "r3"}));  // no exclusive one left: all of them
}

TEST(WakeListTest, AnUnusedBatonGoesOnWhenDisarmedOrArmedAgain) {
  Log log;
  Recorded a("a", log), b("b", log), c("c", log);
  WakeList list;
  for (Recorded* wake : {&a, &b, &c}) list.arm(*wake);
  list.fire_next();
  list.disarm(a);  // a's wait ended otherwise: b is next
  EXPECT_EQ(log, (Log{"a", "b"}));
  list.arm(b);  // b waits on without attempting: c is next, b goes last
  EXPECT_EQ(log, (Log{"a", "b", "c"}));
  EXPECT_FALSE(list.take_baton(b));
  list.disarm(c);  // c's baton goes on to b, armed again behind it
  EXPECT_EQ(log, (Log{"a", "b", "c", "b"}));
  EXPECT_TRUE(list.empty());
  list.disarm(b);  // its baton finds nobody: dropped
  EXPECT_EQ(log.size(), 4u);
}

TEST(WakeListTest, AReleaseWithNobodyArmedIsClaimedOnceByTheNextSleeper) {
  Log log;
  Recorded reader("r", log, false);
  WakeList list;
  EXPECT_FALSE(list.claim_missed());
  list.fire_next();  // nobody armed
  EXPECT_TRUE(list.claim_missed());
  EXPECT_FALSE(list.claim_missed());  // once
  list.arm(reader);
  list.fire_next();  // a shared waiter takes no place of its own
  EXPECT_EQ(log, (Log{"r"}));
  EXPECT_TRUE(list.claim_missed());
  list.fire_all();  // a confirmation: nothing to claim
  EXPECT_FALSE(list.claim_missed());
}

}  // namespace
}  // namespace distlock::detail
