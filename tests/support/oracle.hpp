// The oracle of the fault tests: what a workload's records say about a lock.
//
// Defines distlock::testing::Section (one critical section as a contender
// recorded it), Verdict (the figures) and judge(). A section is stamped with
// CLOCK_MONOTONIC, one clock for every process on the machine, right after
// acquire returned and right before release was sent. judge() counts:
//   - overlaps: sections that intersect an exclusive section of the same name
//     held by someone else (for a read-write lock: a writer with anyone);
//   - lost updates: increments of a name's counter that the final value does
//     not show (two holders read the same value and both wrote it plus one);
//   - torn reads: reads that saw a writer's half-written pair;
//   - fenced writes accepted and refused, and stale writes accepted: a write
//     the fenced store accepted although a write with a higher fence had
//     already been acknowledged before this one was sent.
// Depends on nothing but the standard library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace distlock::testing {

/// One critical section. Plain data: it lives in memory shared by forked
/// contenders.
struct Section {
  std::int32_t process = 0;
  std::int32_t thread = 0;
  std::int32_t name = 0;            // index of the lock name
  std::int32_t exclusive = 1;       // 0: a read (shared) section
  std::int32_t role = 0;            // which member of a mixed fleet held it
  std::int64_t start_ns = 0;        // CLOCK_MONOTONIC right after acquire returned
  std::int64_t end_ns = 0;          // CLOCK_MONOTONIC right before release was sent
  std::int32_t wrote = 0;           // 1: this section incremented its name's counter
  std::int32_t torn = 0;            // 1: a read section saw a half-written pair
  std::int64_t fence = 0;           // the lock's fencing token (fenced workloads)
  std::int32_t fenced = 0;          // 0: no fenced write; 1 accepted; 2 refused
  std::int32_t lost_seen = 0;       // 1: lost() was true before the fenced write
  std::int64_t write_sent_ns = 0;   // the fenced write was sent
  std::int64_t write_acked_ns = 0;  // its reply arrived
};

/// The figures for one run.
struct Verdict {
  std::int64_t sections = 0;
  std::int64_t overlaps = 0;
  std::int64_t lost_updates = 0;
  std::int64_t torn_reads = 0;
  std::int64_t fenced_accepted = 0;
  std::int64_t fenced_refused = 0;
  std::int64_t stale_accepted = 0;
  std::string first_overlap;  // the first overlapping pair, for a failure message
};

namespace oracle_detail {

inline std::string describe(const Section& s) {
  std::ostringstream out;
  out << "p" << s.process << "/t" << s.thread << " role " << s.role << " name " << s.name
      << (s.exclusive ? " exclusive " : " shared ") << "[" << s.start_ns << ", " << s.end_ns << "]";
  return out.str();
}

// Counts the sections of `sorted` (one name, by start) that intersect an
// exclusive one, or a shared one intersecting an exclusive one.
inline void count_overlaps(const std::vector<const Section*>& sorted, Verdict& verdict) {
  std::vector<const Section*> writers;
  for (const Section* s : sorted) {
    if (s->exclusive) writers.push_back(s);
  }
  // Writers with writers: a sweep keeping the latest end so far.
  const Section* latest = nullptr;
  for (const Section* s : writers) {
    if (latest != nullptr && s->start_ns < latest->end_ns) {
      ++verdict.overlaps;
      if (verdict.first_overlap.empty()) {
        verdict.first_overlap = describe(*latest) + " and " + describe(*s);
      }
    }
    if (latest == nullptr || s->end_ns > latest->end_ns) latest = s;
  }
  // Readers with writers: the writers starting before the read ended, and
  // the latest end among them.
  std::vector<const Section*> latest_end(writers.size());
  for (std::size_t i = 0; i < writers.size(); ++i) {
    latest_end[i] =
        (i == 0 || writers[i]->end_ns > latest_end[i - 1]->end_ns) ? writers[i] : latest_end[i - 1];
  }
  for (const Section* s : sorted) {
    if (s->exclusive) continue;
    const auto after =
        std::lower_bound(writers.begin(), writers.end(), s->end_ns,
                         [](const Section* w, std::int64_t end) { return w->start_ns < end; });
    if (after == writers.begin()) continue;
    const Section* writer = latest_end[static_cast<std::size_t>(after - writers.begin()) - 1];
    if (writer->end_ns > s->start_ns) {
      ++verdict.overlaps;
      if (verdict.first_overlap.empty()) {
        verdict.first_overlap = describe(*writer) + " and " + describe(*s);
      }
    }
  }
}

}  // namespace oracle_detail

/// Judges `sections` against the final counter of each name
/// (`final_counters[name]`, the unfenced counters) and the fenced store's
/// final values (`fenced_finals[name]`, empty when the run was not fenced).
inline Verdict judge(const std::vector<Section>& sections,
                     const std::vector<std::int64_t>& final_counters,
                     const std::vector<std::int64_t>& fenced_finals = {}) {
  Verdict verdict;
  verdict.sections = static_cast<std::int64_t>(sections.size());
  std::map<int, std::vector<const Section*>> by_name;
  std::map<int, std::int64_t> writes;
  std::map<int, std::int64_t> accepted;
  std::vector<const Section*> acked;
  for (const Section& s : sections) {
    by_name[s.name].push_back(&s);
    if (s.wrote) ++writes[s.name];
    if (s.torn) ++verdict.torn_reads;
    if (s.fenced == 1) {
      ++verdict.fenced_accepted;
      ++accepted[s.name];
      acked.push_back(&s);
    } else if (s.fenced == 2) {
      ++verdict.fenced_refused;
    }
  }
  for (auto& [name, list] : by_name) {
    std::sort(list.begin(), list.end(),
              [](const Section* a, const Section* b) { return a->start_ns < b->start_ns; });
    oracle_detail::count_overlaps(list, verdict);
  }
  for (std::size_t name = 0; name < final_counters.size(); ++name) {
    const std::int64_t made = writes[static_cast<int>(name)];
    verdict.lost_updates += std::max<std::int64_t>(0, made - final_counters[name]);
  }
  for (std::size_t name = 0; name < fenced_finals.size(); ++name) {
    const std::int64_t made = accepted[static_cast<int>(name)];
    verdict.lost_updates += std::max<std::int64_t>(0, made - fenced_finals[name]);
  }
  // Stale: accepted although a higher fence of the same name had been
  // acknowledged before it was sent. Sorted by acknowledgement, a running
  // maximum of fences acknowledged so far answers it for every write.
  std::map<int, std::vector<const Section*>> acked_by_name;
  for (const Section* s : acked) acked_by_name[s->name].push_back(s);
  for (auto& [name, list] : acked_by_name) {
    std::vector<const Section*> by_ack = list;
    std::sort(by_ack.begin(), by_ack.end(), [](const Section* a, const Section* b) {
      return a->write_acked_ns < b->write_acked_ns;
    });
    std::vector<std::int64_t> highest(by_ack.size());
    for (std::size_t i = 0; i < by_ack.size(); ++i) {
      highest[i] = i == 0 ? by_ack[i]->fence : std::max(highest[i - 1], by_ack[i]->fence);
    }
    for (const Section* s : list) {
      const auto before = std::lower_bound(
          by_ack.begin(), by_ack.end(), s->write_sent_ns,
          [](const Section* a, std::int64_t sent) { return a->write_acked_ns < sent; });
      if (before == by_ack.begin()) continue;
      if (highest[static_cast<std::size_t>(before - by_ack.begin()) - 1] > s->fence) {
        ++verdict.stale_accepted;
      }
    }
  }
  return verdict;
}

}  // namespace distlock::testing
