// What a Client's locks do, as Prometheus metrics: the Client's event hook
// (ClientOptions::on_event) feeds counters and histograms, and the program
// writes them in Prometheus' text exposition format to stdout, as a
// scrape of /metrics would return them (serve that text from your own HTTP
// endpoint, or write it to a file for node_exporter's textfile collector).
//
// The workload: two workers share an export lock, a long job's lease is
// renewed by the watchdog, and an administrator breaks a stuck lock with
// force_unlock(), which its holder's watchdog reports as lost.
//
//   prometheus_metrics [redis://host:port | unix:///path/to/redis.sock]
#include <distlock/distlock.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

// A Prometheus histogram: cumulative buckets by upper bound, sum and count.
template <std::size_t N>
class Histogram {
 public:
  explicit Histogram(std::array<double, N> bounds) : bounds_(bounds) {}
  void observe(double value) {
    for (std::size_t i = 0; i < N; ++i) counts_[i] += value <= bounds_[i] ? 1 : 0;
    sum_ += value;
    ++count_;
  }
  void write(const char* name, const char* help) const {
    std::printf("# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (std::size_t i = 0; i < N; ++i) {
      std::printf("%s_bucket{le=\"%g\"} %llu\n", name, bounds_[i], counts_[i]);
    }
    std::printf("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", name, count_, name, sum_,
                name, count_);
  }

 private:
  std::array<double, N> bounds_;
  std::array<unsigned long long, N> counts_{};
  double sum_ = 0;
  unsigned long long count_ = 0;
};

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Every metric, updated from the hook (on the caller's, the watchdog's and
// the notifier's threads: hence the mutex).
class LockMetrics {
 public:
  void record(const distlock::LockEvent& event) {
    std::lock_guard<std::mutex> guard(mutex_);
    ++events_[event.type];
    switch (event.type) {
      case distlock::LockEventType::acquired:
        wait_.observe(seconds(event.waited));
        attempts_.observe(event.attempts);
        break;
      case distlock::LockEventType::released:
        hold_.observe(seconds(event.held));
        ++released_[distlock::to_string(event.outcome)];
        break;
      case distlock::LockEventType::lost:
        ++lost_[event.reason == distlock::LostReason::taken ? "taken" : "expired"];
        break;
      default: break;
    }
  }

  void write() const {
    std::lock_guard<std::mutex> guard(mutex_);
    using T = distlock::LockEventType;
    counter("distlock_acquired_total", "Locks taken in Redis.", count(T::acquired));
    std::printf(
        "# HELP distlock_released_total Holds given back, by what the release found.\n"
        "# TYPE distlock_released_total counter\n");
    for (const auto& [outcome, n] : released_) {
      std::printf("distlock_released_total{outcome=\"%s\"} %llu\n", outcome.c_str(), n);
    }
    counter("distlock_renewed_total", "Leases renewed by the watchdog.", count(T::renewed));
    counter("distlock_renewal_failed_total", "Renewals that got no answer.",
            count(T::renewal_failed));
    std::printf(
        "# HELP distlock_lost_total Held leases lost, by reason.\n"
        "# TYPE distlock_lost_total counter\n");
    for (const char* reason : {"taken", "expired"}) {
      const auto it = lost_.find(reason);
      std::printf("distlock_lost_total{reason=\"%s\"} %llu\n", reason,
                  it == lost_.end() ? 0ULL : it->second);
    }
    counter("distlock_unlock_failed_total", "Releases unlock() could not make.",
            count(T::unlock_failed));
    counter("distlock_notifier_reconnects_total", "Reconnects of the release notifier.",
            count(T::notifier_reconnected));
    wait_.write("distlock_acquire_wait_seconds", "Time from the first attempt to the grant.");
    attempts_.write("distlock_acquire_attempts", "Attempts an acquire sent.");
    hold_.write("distlock_hold_seconds", "Time a lock was held.");
  }

 private:
  unsigned long long count(distlock::LockEventType type) const {
    const auto it = events_.find(type);
    return it == events_.end() ? 0 : it->second;
  }
  static void counter(const char* name, const char* help, unsigned long long value) {
    std::printf("# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, value);
  }

  mutable std::mutex mutex_;
  std::map<distlock::LockEventType, unsigned long long> events_;
  std::map<std::string, unsigned long long> released_;
  std::map<std::string, unsigned long long> lost_;
  Histogram<5> wait_{{0.001, 0.01, 0.1, 1, 10}};
  Histogram<4> attempts_{{1, 2, 5, 10}};
  Histogram<5> hold_{{0.001, 0.01, 0.1, 1, 10}};
};

}  // namespace

int main(int argc, char** argv) {
  try {
    LockMetrics metrics;
    distlock::ClientOptions where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    where.on_event = [&metrics](const distlock::LockEvent& event) { metrics.record(event); };
    distlock::Client redis{where};

    // Two workers take turns on one export lock, three times each.
    auto worker = [&redis] {
      distlock::Mutex exports{redis, "jobs:export", distlock::LockOptions{}.ttl(5s)};
      for (int round = 0; round < 3; ++round) {
        std::unique_lock<distlock::Mutex> lock{exports};
        std::this_thread::sleep_for(20ms);  // the export
      }
    };
    std::thread first{worker};
    std::thread second{worker};
    first.join();
    second.join();

    // A long job on a short lease: the watchdog renews it meanwhile.
    {
      distlock::Mutex job{redis, "jobs:reindex",
                          distlock::LockOptions{}.ttl(150ms).auto_renew(true)};
      std::lock_guard<distlock::Mutex> guard{job};
      std::this_thread::sleep_for(400ms);
    }

    // A stuck holder, broken by an administrator: its watchdog reports it lost.
    distlock::Mutex stuck{redis, "jobs:stuck", distlock::LockOptions{}.ttl(150ms).auto_renew(true)};
    stuck.lock();
    distlock::force_unlock(redis, "jobs:stuck");
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!stuck.lost() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    if (stuck.release() != distlock::Release::lost) {
      std::fputs("the broken lock was not reported lost\n", stderr);
      return 1;
    }

    metrics.write();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "prometheus_metrics: %s\n", error.what());
    return 1;
  }
}
