// Tests for examples/prometheus_metrics.cpp: the built program
// (DISTLOCK_PROMETHEUS_METRICS_PATH) runs against its own redis-server,
// exits 0, and writes a well-formed Prometheus text exposition whose
// counters match its workload.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "support/fixture.hpp"
#include "support/run_example.hpp"

#ifndef DISTLOCK_PROMETHEUS_METRICS_PATH
#error "DISTLOCK_PROMETHEUS_METRICS_PATH must name the built prometheus_metrics example"
#endif

namespace distlock {
namespace {

// Every sample line "name{labels} value", by "name{labels}".
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

class PrometheusMetrics : public testing::RedisTest {};

TEST_F(PrometheusMetrics, ExportsTheEventsOfItsWorkload) {
  const testing::ExampleRun run =
      testing::run_example(DISTLOCK_PROMETHEUS_METRICS_PATH,
                           "redis://127.0.0.1:" + std::to_string(server().port()), server().dir());
  ASSERT_EQ(run.status, 0) << run.out;
  const std::map<std::string, double> got = samples(run.out);
  // Six turns on the export lock, the renewed job, the broken lock.
  EXPECT_EQ(got.at("distlock_acquired_total"), 8) << run.out;
  EXPECT_EQ(got.at("distlock_released_total{outcome=\"released\"}"), 7) << run.out;
  EXPECT_EQ(got.at("distlock_released_total{outcome=\"lost\"}"), 1) << run.out;
  EXPECT_EQ(got.at("distlock_lost_total{reason=\"taken\"}"), 1) << run.out;
  EXPECT_GE(got.at("distlock_renewed_total"), 1) << run.out;
  for (const char* histogram :
       {"distlock_acquire_wait_seconds", "distlock_acquire_attempts", "distlock_hold_seconds"}) {
    const std::string name = histogram;
    EXPECT_EQ(got.at(name + "_bucket{le=\"+Inf\"}"), got.at(name + "_count")) << name;
    EXPECT_EQ(got.at(name + "_count"), 8) << name;
    EXPECT_NE(run.out.find("# TYPE " + name + " histogram\n"), std::string::npos) << name;
  }
  EXPECT_EQ(server().command({"DBSIZE"}), "0");  // no lock left behind
}

}  // namespace
}  // namespace distlock
