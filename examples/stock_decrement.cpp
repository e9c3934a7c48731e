// The stock-decrement case: several worker processes sell from one stock
// counter with a read-modify-write (GET, think, SET). Without a lock they
// overwrite each other and the count comes out wrong; with distlock::Mutex
// around each sale it is exact.
//
//   stock_decrement [redis://host:port] [workers] [sales-per-worker]
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

// One sale: read the stock, take a moment, write it back one lower.
void sell_one(distlock::Client& redis) {
  const long long stock = std::stoll(std::string(redis.command("GET", "stock").str()));
  std::this_thread::sleep_for(200us);  // the "business logic" between read and write
  redis.command("SET", "stock", std::to_string(stock - 1));
}

// Runs `workers` processes of `sales` sales each and returns the final stock.
long long run(const distlock::ClientOptions& where, int workers, int sales, bool locked) {
  {
    distlock::Client redis(where);
    redis.command("SET", "stock", std::to_string(workers * sales));
  }
  std::fflush(stdout);  // or the children would print it again
  std::vector<pid_t> children;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        distlock::Client redis(where);  // each process opens its own connections
        distlock::Mutex lock(redis, "stock:lock", distlock::LockOptions{}.ttl(5s));
        for (int i = 0; i < sales; ++i) {
          if (locked) {
            std::lock_guard guard(lock);
            sell_one(redis);
          } else {
            sell_one(redis);
          }
        }
        ::_exit(0);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "worker: %s\n", error.what());
        ::_exit(1);
      }
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) ::waitpid(pid, nullptr, 0);
  distlock::Client redis(where);
  return std::stoll(std::string(redis.command("GET", "stock").str()));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    const int workers = argc > 2 ? std::atoi(argv[2]) : 4;
    const int sales = argc > 3 ? std::atoi(argv[3]) : 50;
    if (workers <= 0 || sales <= 0) {
      std::fprintf(stderr, "usage: %s [redis://host:port] [workers] [sales-per-worker]\n", argv[0]);
      return 2;
    }
    std::printf("%d workers x %d sales from a stock of %d\n", workers, sales, workers * sales);
    const long long unlocked = run(where, workers, sales, false);
    std::printf("  without a lock: %lld left (should be 0: %lld sales were lost)\n", unlocked,
                unlocked);
    const long long locked = run(where, workers, sales, true);
    std::printf("  with distlock::Mutex: %lld left\n", locked);
    return locked == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "stock_decrement: %s\n", error.what());
    return 1;
  }
}
