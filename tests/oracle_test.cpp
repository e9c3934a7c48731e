// Tests for tests/support/oracle.hpp: the oracle counts what it says on
// hand-made records (the fault tests' controls show it on real runs).
#include "support/oracle.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace distlock {
namespace {

using testing::judge;
using testing::Section;

Section exclusive(int process, std::int64_t start, std::int64_t end, int name = 0) {
  Section s;
  s.process = process;
  s.name = name;
  s.start_ns = start;
  s.end_ns = end;
  s.wrote = 1;
  return s;
}

Section shared(int process, std::int64_t start, std::int64_t end) {
  Section s = exclusive(process, start, end);
  s.exclusive = 0;
  s.wrote = 0;
  return s;
}

Section fenced(std::int64_t fence, int result, std::int64_t sent, std::int64_t acked) {
  Section s = exclusive(0, sent - 1, acked + 1);
  s.wrote = 0;
  s.fence = fence;
  s.fenced = result;
  s.write_sent_ns = sent;
  s.write_acked_ns = acked;
  return s;
}

TEST(Oracle, DisjointExclusiveSectionsDoNotOverlap) {
  const auto v = judge({exclusive(0, 0, 10), exclusive(1, 10, 20), exclusive(0, 25, 30)}, {3});
  EXPECT_EQ(v.sections, 3);
  EXPECT_EQ(v.overlaps, 0);
  EXPECT_EQ(v.lost_updates, 0);
}

TEST(Oracle, IntersectingExclusiveSectionsOverlapEvenPastAShortOne) {
  // The long first section spans the second and the third.
  const auto v = judge({exclusive(0, 0, 100), exclusive(1, 10, 20), exclusive(2, 30, 40)}, {3});
  EXPECT_EQ(v.overlaps, 2);
  EXPECT_FALSE(v.first_overlap.empty());
}

TEST(Oracle, SectionsOfDifferentNamesNeverOverlap) {
  const auto v = judge({exclusive(0, 0, 100, 0), exclusive(1, 10, 20, 1)}, {1, 1});
  EXPECT_EQ(v.overlaps, 0);
}

TEST(Oracle, ReadersShareButAWriterExcludesThem) {
  EXPECT_EQ(judge({shared(0, 0, 100), shared(1, 10, 20)}, {0}).overlaps, 0);
  EXPECT_EQ(judge({shared(0, 0, 100), exclusive(1, 10, 20)}, {1}).overlaps, 1);
  EXPECT_EQ(judge({exclusive(1, 0, 100), shared(0, 10, 20)}, {1}).overlaps, 1);
  EXPECT_EQ(judge({exclusive(1, 0, 10), shared(0, 10, 20)}, {1}).overlaps, 0);
}

TEST(Oracle, ACounterShortOfItsWritesIsLostUpdates) {
  EXPECT_EQ(judge({exclusive(0, 0, 10), exclusive(1, 20, 30)}, {1}).lost_updates, 1);
  Section torn = shared(0, 0, 10);
  torn.torn = 1;
  EXPECT_EQ(judge({torn}, {0}).torn_reads, 1);
}

TEST(Oracle, AFencedWriteAcceptedAfterAHigherFenceWasAckedIsStale) {
  // Fence 2 acked at 20; fence 1 sent at 30 and accepted: stale.
  const auto v = judge({fenced(2, 1, 10, 20), fenced(1, 1, 30, 40)}, {0}, {2});
  EXPECT_EQ(v.fenced_accepted, 2);
  EXPECT_EQ(v.stale_accepted, 1);
  // Refused instead: nothing stale.
  const auto w = judge({fenced(2, 1, 10, 20), fenced(1, 2, 30, 40)}, {0}, {1});
  EXPECT_EQ(w.fenced_refused, 1);
  EXPECT_EQ(w.stale_accepted, 0);
  // Sent before the higher fence was acked: not provably stale.
  EXPECT_EQ(judge({fenced(2, 1, 10, 20), fenced(1, 1, 15, 40)}, {0}, {2}).stale_accepted, 0);
}

}  // namespace
}  // namespace distlock
