// The flash-sale case: 2,000 items, split into 100 stock segments of 20,
// sold by worker processes. Each sale reads a segment's stock, writes the
// order (1 ms here) and writes the stock back one lower, so it must hold
// that segment's lock. Under one lock for all the stock every sale waits
// for every other; with distlock::StripedMutex each segment has its own
// stripe and workers take whichever is free (try_lock_any_for). Both runs sell
// exactly 2,000 items; the striped one is several times faster.
//
//   flash_sale [redis://host:port] [workers] [items] [segments]
#include <sys/wait.h>
#include <unistd.h>
#include <distlock/distlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string segment_key(std::size_t segment) { return "sale:segment:" + std::to_string(segment); }

// Sells from `segment` if it has stock: read, write the order, write back.
// Returns false when the segment is empty.
bool sell_from(distlock::Client& redis, std::size_t segment) {
  const long long stock = std::stoll(std::string(redis.command("GET", segment_key(segment)).str()));
  if (stock <= 0) return false;
  std::this_thread::sleep_for(1ms);  // writing the order
  redis.command("SET", segment_key(segment), std::to_string(stock - 1));
  return true;
}

// One worker process: sells until every segment is empty; returns its sales.
// Stripe s guards segments s, s + stripes, s + 2 x stripes, ...
long long work(const distlock::ClientOptions& where, std::size_t stripes, std::size_t segments) {
  distlock::Client redis(where);
  distlock::StripedMutex locks(redis, "sale:lock", stripes);
  std::vector<std::vector<std::size_t>> stocked(stripes);  // segments not known to be empty
  for (std::size_t s = 0; s < segments; ++s) stocked[s % stripes].push_back(s);
  std::vector<std::size_t> open(stripes);  // stripes with a segment not known to be empty
  for (std::size_t s = 0; s < stripes; ++s) open[s] = s;
  long long sold = 0;
  while (!open.empty()) {
    auto [stripe, guard] = locks.try_lock_any_for(30s, open);
    if (!guard) throw std::runtime_error("no stripe came free in 30 s");
    std::vector<std::size_t>& mine = stocked[stripe];
    // A random stocked segment of the stripe, so workers under one lock
    // do not all drain the same one.
    const std::size_t pick = static_cast<std::size_t>(std::rand()) % mine.size();
    if (sell_from(redis, mine[pick])) {
      ++sold;
      continue;
    }
    mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(pick));
    if (mine.empty()) {
      for (std::size_t i = 0; i < open.size(); ++i) {
        if (open[i] == stripe) open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  return sold;
}

struct Result {
  long long sold = 0;
  long long left = 0;
  double seconds = 0;
};

// Fills the segments, runs `workers` processes over `stripes` locks, and
// totals what they sold and what is left.
Result run(const distlock::ClientOptions& where, int workers, long long items, std::size_t segments,
           std::size_t stripes) {
  distlock::Client redis(where);
  redis.command("DEL", "sale:sold");
  for (std::size_t s = 0; s < segments; ++s) {
    const long long share = items / static_cast<long long>(segments) +
                            (static_cast<long long>(s) < items % static_cast<long long>(segments));
    redis.command("SET", segment_key(s), std::to_string(share));
  }
  std::fflush(stdout);  // or the children would print it again
  const Clock::time_point start = Clock::now();
  std::vector<pid_t> children;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        std::srand(static_cast<unsigned>(::getpid()));
        const long long sold = work(where, stripes, segments);
        distlock::Client own(where);
        own.command("INCRBY", "sale:sold", std::to_string(sold));
        ::_exit(0);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "worker: %s\n", error.what());
        ::_exit(1);
      }
    }
    children.push_back(pid);
  }
  bool failed = false;
  for (const pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  Result result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) throw std::runtime_error("a worker failed");
  result.sold = std::stoll(std::string(redis.command("GET", "sale:sold").str()));
  for (std::size_t s = 0; s < segments; ++s) {
    result.left += std::stoll(std::string(redis.command("GET", segment_key(s)).str()));
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    const int workers = argc > 2 ? std::atoi(argv[2]) : 8;
    const long long items = argc > 3 ? std::atoll(argv[3]) : 2000;
    const long long segments = argc > 4 ? std::atoll(argv[4]) : 100;
    if (workers <= 0 || items <= 0 || segments <= 0 || segments > 65536) {
      std::fprintf(stderr, "usage: %s [redis://host:port] [workers] [items] [segments]\n", argv[0]);
      return 2;
    }
    const auto count = static_cast<std::size_t>(segments);
    std::printf("%d workers sell %lld items from %lld segments\n", workers, items, segments);
    const Result one = run(where, workers, items, count, 1);
    std::printf("  one lock for all the stock: sold %lld, %lld left, %.2f s\n", one.sold, one.left,
                one.seconds);
    const Result striped = run(where, workers, items, count, count);
    std::printf("  StripedMutex, one stripe per segment: sold %lld, %lld left, %.2f s\n",
                striped.sold, striped.left, striped.seconds);
    std::printf("  speedup: %.1fx\n", one.seconds / striped.seconds);
    const bool exact =
        one.sold == items && one.left == 0 && striped.sold == items && striped.left == 0;
    return exact ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "flash_sale: %s\n", error.what());
    return 1;
  }
}
