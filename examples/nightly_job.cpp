// The cron case: several machines fire the same 2 a.m. job; exactly one may
// run it, the others skip. The job outlives its 1 s lease, so the lease is
// renewed by the watchdog while it works, and the job checks lost() between
// steps in case the lease ever goes. One machine's clock is late: its cron
// fires after the job has already ended. min_hold keeps the lock for 5 s
// from the acquire whatever the job takes, so that machine skips too
// instead of running the job a second time.
//
//   nightly_job [redis://host:port] [machines]
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

// One machine: run the job if we get the lock, skip it otherwise.
int machine(const distlock::ClientOptions& where, int id) {
  distlock::Client redis(where);
  const auto options = distlock::LockOptions{}.ttl(1s).auto_renew(true).min_hold(5s).on_lost(
      [id](const distlock::LeaseInfo& lease) {
        std::printf("  machine %d: lease on %s lost!\n", id, lease.name().c_str());
      });
  distlock::Mutex nightly(redis, "jobs:nightly-report", options);
  std::unique_lock lock(nightly, std::try_to_lock);
  if (!lock.owns_lock()) {
    std::printf("  machine %d: another machine runs tonight's report; skipping\n", id);
    return 0;
  }
  std::printf("  machine %d: running the report (a 1 s lease, renewed while it works)\n", id);
  for (int step = 0; step < 5; ++step) {
    if (nightly.lost()) return 1;
    std::this_thread::sleep_for(500ms);  // one step of a job that takes 2.5 s
  }
  redis.command("INCR", "jobs:nightly-report:runs");
  std::printf("  machine %d: done, lease still valid for %lld ms\n", id,
              static_cast<long long>(nightly.validity().count()));
  lock.unlock();
  std::printf("  machine %d: unlocked; the lock stays held until 5 s after the acquire\n", id);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    const int machines = argc > 2 ? std::atoi(argv[2]) : 3;
    if (machines <= 0) {
      std::fprintf(stderr, "usage: %s [redis://host:port] [machines]\n", argv[0]);
      return 2;
    }
    distlock::Client(where).command("DEL", "jobs:nightly-report:runs");
    std::printf("%d machines fire the nightly report at once, one more 3.5 s later\n", machines);
    std::fflush(stdout);  // or the children would print it again
    std::vector<pid_t> children;
    for (int id = 1; id <= machines + 1; ++id) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        if (id > machines) {
          std::this_thread::sleep_for(3500ms);  // a clock 3.5 s late: the job is over by then
          std::printf("  machine %d: its cron fires 3.5 s late\n", id);
        }
        const int status = machine(where, id);
        std::fflush(stdout);
        ::_exit(status);
      }
      children.push_back(pid);
    }
    bool all_ok = true;
    for (const pid_t pid : children) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      all_ok = all_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    const auto runs = distlock::Client(where).command("GET", "jobs:nightly-report:runs");
    std::printf("the report ran %s time(s)\n", std::string(runs.str()).c_str());
    return all_ok && runs.str() == "1" ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nightly_job: %s\n", error.what());
    return 1;
  }
}
