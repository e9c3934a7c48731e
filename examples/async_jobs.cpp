// Many workers, few jobs: an Asio service whose coroutines compete for the
// locks of three jobs, as workers on several machines would. Each worker
// waits at most 300 ms for its job's lock and runs the job under
// async_run_locked_for, which stops the job (its awaited timer is
// cancelled) the moment the lease is reported lost. Midway, an operator's
// mistake deletes the lock of the "reindex" job: that run is stopped and
// reported lost, but only at the next renewal, and meanwhile another
// worker may take the free lock: the example shows that overlap, which is
// what fencing is for (examples/fenced_sqlite.cpp). Otherwise no two
// workers ever run one job at once. One thread runs the whole service.
//
//   async_jobs [redis://host:port] [workers per job]
//
// C++20 (coroutines); the library itself is C++17.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <distlock/asio.hpp>
#include <distlock/distlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using asio::awaitable;
using asio::use_awaitable;

struct Job {
  std::string name;
  std::chrono::milliseconds takes;
  int running = 0;  // workers inside it now: never more than one
  int overlaps = 0;
};

struct Tally {
  int ran = 0, skipped = 0, stopped = 0, failed = 0;
};

// The job's own work: steps on a timer. Each co_await is where a lost
// lease stops it (the timer wait is cancelled, and throws).
awaitable<void> do_job(Job& job, distlock::Client& redis, bool mistaken) {
  asio::steady_timer step(co_await asio::this_coro::executor);
  for (auto left = job.takes; left > 0ms; left -= 50ms) {
    if (mistaken && left == job.takes - 100ms) {
      // The operator's mistake: the lock's key deleted behind its holder.
      redis.command("DEL", "jobs:" + job.name);
    }
    step.expires_after(50ms);
    co_await step.async_wait(use_awaitable);
  }
}

awaitable<void> worker(distlock::Client& redis, Job& job, int id, Tally& tally, bool mistaken) {
  // A lock object per worker, as each machine of a fleet would have; a
  // 600 ms lease, renewed every 200 ms while the job runs.
  distlock::Mutex lock(redis, "jobs:" + job.name,
                       distlock::LockOptions{}.ttl(600ms).auto_renew(true));
  const auto executor = co_await asio::this_coro::executor;
  const auto [ec, outcome] = co_await distlock::async_run_locked_for(
      lock, 300ms,
      [&](auto done) {
        ++job.running;
        if (job.running > 1) ++job.overlaps;
        asio::co_spawn(executor, do_job(job, redis, mistaken),
                       [&job, done = std::move(done)](std::exception_ptr) mutable {
                         --job.running;
                         std::move(done)();
                       });
      },
      asio::experimental::as_tuple(use_awaitable));
  if (ec) {
    ++tally.failed;
    std::printf("  worker %2d, %-8s: %s\n", id, job.name.c_str(), ec.message().c_str());
  } else if (outcome == distlock::RunLocked::held) {
    ++tally.ran;
    std::printf("  worker %2d, %-8s: ran it\n", id, job.name.c_str());
  } else if (outcome == distlock::RunLocked::busy) {
    ++tally.skipped;
    std::printf("  worker %2d, %-8s: busy for 300 ms, skipped\n", id, job.name.c_str());
  } else {
    ++tally.stopped;
    std::printf("  worker %2d, %-8s: the lease was lost; the job was stopped\n", id,
                job.name.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    const int per_job = argc > 2 ? std::atoi(argv[2]) : 4;
    if (per_job <= 0) {
      std::fprintf(stderr, "usage: %s [redis://host:port] [workers per job]\n", argv[0]);
      return 2;
    }
    distlock::Client redis(where);
    std::vector<Job> jobs = {{"report", 120ms}, {"export", 200ms}, {"reindex", 600ms}};
    Tally tally;
    asio::io_context io;
    for (int i = 0; i < per_job * static_cast<int>(jobs.size()); ++i) {
      Job& job = jobs[static_cast<std::size_t>(i) % jobs.size()];
      // The first reindex run meets the mistake.
      asio::co_spawn(io, worker(redis, job, i, tally, i == 2), asio::detached);
    }
    io.run();  // one thread: every worker waits without one of its own
    std::printf("ran %d, skipped %d, stopped %d, failed %d\n", tally.ran, tally.skipped,
                tally.stopped, tally.failed);
    int overlaps = 0;
    for (const Job& job : jobs) {
      if (job.name == "reindex") {
        std::printf(
            "reindex: %d run(s) overlapped the one whose key was deleted, which ran on "
            "until its loss was reported\n",
            job.overlaps);
      } else {
        overlaps += job.overlaps;
      }
    }
    std::printf("overlapping runs of the other jobs: %d\n", overlaps);
    return overlaps == 0 && tally.failed == 0 && tally.stopped == 1 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "async_jobs: %s\n", error.what());
    return 1;
  }
}
