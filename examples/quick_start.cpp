// The README's Quick start, as a program that runs: the part between the
// "README quick start" markers is the README's code block, character for
// character (a test compares them), and what comes before it stands in for
// the application the README's lines call into. Redis down, it says so and
// exits 1.
//
//   quick_start [redis://host:port | unix:///path/to/redis.sock]
#include <cstdio>
#include <map>
#include <string>

namespace {

void run_report() { std::puts("nightly report: this process runs it tonight"); }
void render() { std::puts("catalog: rendered under a read lock"); }
void rebuild() { std::puts("catalog: rebuilt under the write lock"); }

// A store that keeps the highest fence it has seen per item and refuses a
// write that carries a lower one.
struct Inventory {
  std::map<std::string, long long> stock{{"stock:42", 10}};
  std::map<std::string, long long> fences;

  bool decrement_if_newer(const std::string& item, long long fence) {
    long long& seen = fences[item];
    if (fence < seen) {
      std::printf("%s: refused a write with fence %lld (seen %lld)\n", item.c_str(), fence, seen);
      return false;
    }
    seen = fence;
    std::printf("%s: %lld left (fence %lld)\n", item.c_str(), --stock[item], fence);
    return true;
  }
};

Inventory db;
const std::string item = "stock:42";

}  // namespace

// [README quick start]
#include <distlock/distlock.hpp>
#include <iostream>
using namespace std::chrono_literals;

int main(int argc, char** argv) try {
  // One Client per Redis endpoint: a bounded connection pool, thread-safe, shared.
  auto where = distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
  where.command_timeout = 500ms;  // or "?command_timeout=500" in the URI
  distlock::Client redis{where};

  // Three machines, one runs the 2 a.m. job, the others skip it: held at least
  // 5 min, so a machine whose cron fires late does not run it a second time.
  distlock::Mutex nightly{redis, "jobs:nightly-report",
                          distlock::LockOptions{}.ttl(30s).min_hold(5min)};
  if (std::unique_lock lock{nightly, std::try_to_lock}; lock.owns_lock()) {
    run_report();
  }  // unlocked here (never throws), the key kept until 5 min after the acquire

  // Waiting with a deadline, and a fencing token for the storage to check.
  distlock::Mutex stock{redis, "stock:42", distlock::LockOptions{}.ttl(5s).fencing(true)};
  if (std::unique_lock lock{stock, 2s}) {        // try_lock_for(2s)
    db.decrement_if_newer(item, stock.fence());  // storage rejects a lower fence
  }

  // Re-entrant and read-write locks, in Redisson's layout: Java services share them.
  distlock::ReentrantMutex tree{redis, "menu-tree"};
  distlock::SharedMutex catalog{redis, "catalog"};
  {
    std::lock_guard outer{tree};
    std::lock_guard inner{tree};  // the holding thread locks it again: no round trip
  }
  {
    std::shared_lock read{catalog};  // readers share
    render();
  }
  {
    std::unique_lock write{catalog};  // a writer excludes everyone
    rebuild();
  }

  // When it matters what happened at release: release() reports, unlock() cannot.
  if (stock.try_lock_for(2s)) {
    db.decrement_if_newer(item, stock.fence());
    switch (stock.release()) {
      case distlock::Release::released: break;
      case distlock::Release::expired: break;    // the lease ran out: someone may have been in
      case distlock::Release::not_owner: break;  // ran out and was taken; their lock is untouched
      case distlock::Release::lost: break;       // the watchdog reported it lost; nothing sent
      case distlock::Release::kept: break;       // held on until LockOptions::min_hold ends
    }
  }
} catch (const distlock::Error& e) {  // Redis down or unreachable, a bad URI, an ACL refusal...
  std::cerr << "quick_start: " << e.what() << '\n';
  return 1;
}
// [README quick start end]
