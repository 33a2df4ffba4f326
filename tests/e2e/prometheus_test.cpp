// Debian's Prometheus server scrapes jitterd's HTTP endpoint (metrics.listen) every second while
// the two-phase schedule switches jta between its phases, and the test reads the values back
// through Prometheus' own query API (/api/v1/query), not from jitterd: the target is up, the phase
// transitions are counted, the lateness histogram holds them, and the phase jta is in is labelled.
//
// Both servers run in namespace a, on its loopback (a fresh namespace: the ports are free). curl,
// in the same namespace, is the HTTP client. Prometheus is a Go program that starts in a few
// seconds on a host and takes longer in the emulated machine; the waits below are patience, not
// speed.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "e2e_support.hpp"

using namespace std::chrono_literals;
using jitterd_e2e::Clock;
using jitterd_e2e::Json;

namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kJitterdMetrics = "127.0.0.1:9464";
constexpr const char* kPrometheusWeb = "127.0.0.1:9090";
// How long the test waits for Prometheus to start and to have scraped what the schedule did: a
// few scrapes at 1 s, after a start that took up to ~20 s in User-Mode Linux.
constexpr auto kPatience = 120s;

class E2ePrometheus : public jitterd_e2e::E2eTest {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPrometheus))
      GTEST_SKIP() << kPrometheus << " is not installed (Debian's prometheus; scripts/setup)";
    jitterd_e2e::E2eTest::SetUp();
  }

  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.metrics_listen = kJitterdMetrics;
    return options;
  }

  // Prometheus in namespace a, scraping jitterd every second, its data in the bed's folder.
  jitterd_e2e::Process start_prometheus() {
    const std::string config = bed().dir.write(
        "prometheus.yml", std::string("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                      "scrape_configs:\n  - job_name: jitterd\n"
                                      "    static_configs:\n      - targets: ['") +
                              kJitterdMetrics + "']\n");
    jitterd_e2e::SpawnOptions options;
    options.netns = bed().net.ns_a();
    options.output_file = bed().dir.file("prometheus.log");
    return jitterd_e2e::Process::spawn(
        {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + bed().dir.file("tsdb"),
         "--web.listen-address=" + std::string(kPrometheusWeb)},
        options);
  }

  // The value of `query`'s first sample, through Prometheus' HTTP API; nullopt when it has none
  // (yet) or Prometheus does not answer.
  std::optional<double> query(const std::string& promql) {
    jitterd_e2e::SpawnOptions options;
    options.netns = bed().net.ns_a();
    const auto done =
        jitterd_e2e::run_to_completion({"curl", "-sS", "--max-time", "5", "-G",
                                        std::string("http://") + kPrometheusWeb + "/api/v1/query",
                                        "--data-urlencode", "query=" + promql},
                                       options, 30s);
    if (done.exit_code != 0) return std::nullopt;
    const Json reply = Json::parse(done.out, nullptr, false);
    if (reply.is_discarded() || reply.value("status", "") != "success") return std::nullopt;
    const Json& result = reply["data"]["result"];
    if (!result.is_array() || result.empty()) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  }

  // Polls `promql` until its value passes `accept` or kPatience is over; the last value.
  std::optional<double> wait_for(const std::string& promql, bool (*accept)(double)) {
    const auto deadline = Clock::now() + kPatience;
    std::optional<double> value;
    while (Clock::now() < deadline) {
      value = query(promql);
      if (value && accept(*value)) break;
      std::this_thread::sleep_for(500ms);
    }
    return value;
  }

  std::string prometheus_log() {
    try {
      return jitterd_e2e::read_file(bed().dir.file("prometheus.log"));
    } catch (const std::exception& e) {
      return e.what();
    }
  }
};

TEST_F(E2ePrometheus, PrometheusScrapesTransitionsAndLatenessWhileAScheduleRuns) {
  jitterd_e2e::Process prometheus = start_prometheus();
  const auto applied = bed().ctl({"apply", "jta", jitterd_e2e::kProfileName});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;

  const auto up = wait_for("up{job=\"jitterd\"}", [](double v) { return v == 1; });
  ASSERT_EQ(up, 1.0) << "Prometheus never saw jitterd up; its log:\n" << prometheus_log();
  // The apply and at least two of the schedule's own steps (2 s each).
  const auto transitions =
      wait_for("jitterd_transitions_total{job=\"jitterd\"}", [](double v) { return v >= 3; });
  ASSERT_TRUE(transitions) << prometheus_log();
  EXPECT_GE(*transitions, 3);
  const auto lateness = wait_for("jitterd_transition_lateness_seconds_count{job=\"jitterd\"}",
                                 [](double v) { return v >= 3; });
  ASSERT_TRUE(lateness);
  EXPECT_GE(*lateness, 3);
  // Every transition lies in some bucket; +Inf holds them all.
  const auto in_buckets = query(
      "jitterd_transition_lateness_seconds_bucket{job=\"jitterd\",le=\"+Inf\"} - "
      "ignoring(le) jitterd_transition_lateness_seconds_count{job=\"jitterd\"}");
  EXPECT_EQ(in_buckets, 0.0);
  const auto quantile =
      query("histogram_quantile(0.5, jitterd_transition_lateness_seconds_bucket{job=\"jitterd\"})");
  ASSERT_TRUE(quantile);
  EXPECT_GE(*quantile, 0);
  EXPECT_LE(*quantile, 0.1) << "the median lateness is in the histogram's last finite bucket";
  // The phase in force on jta, as a label: one of the profile's two.
  const auto phase =
      query("count(jitterd_session_info{job=\"jitterd\",interface=\"jta\",phase=~\"low|high\"})");
  EXPECT_EQ(phase, 1.0);
  // What Prometheus read is what jitterd counted: no more than jitterd says now.
  const std::string text = bed().ctl_json({"metrics"}).value("text", "");
  const std::string series = "\njitterd_transitions_total ";
  const auto at = text.find(series);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_GE(std::stod(text.substr(at + series.size())), *transitions);
  prometheus.signal(SIGTERM);
  EXPECT_TRUE(prometheus.wait(30s)) << prometheus_log();
}

// Socket activation with two sockets, as jitterd.socket and jitterd-metrics.socket hand them over:
// systemd-socket-activate (systemd's tool for this) listens on the control socket and on a TCP
// port, and starts jitterd with both on the first connection; jitterd serves its protocol on the
// first and /metrics on the second, without metrics.listen in its config.
class E2eMetricsActivation : public jitterd_e2e::E2eTest {
 protected:
  jitterd_e2e::BedOptions bed_options() const override {
    jitterd_e2e::BedOptions options;
    options.start = false;
    return options;
  }
};

TEST_F(E2eMetricsActivation, ATcpSocketHandedBySystemdServesMetrics) {
  constexpr const char* kActivate = "/usr/bin/systemd-socket-activate";
  if (!std::filesystem::exists(kActivate))
    GTEST_SKIP() << kActivate << " is not installed (Debian's systemd)";
  jitterd_e2e::SpawnOptions options;
  options.netns = bed().net.ns_a();
  options.output_file = bed().dir.file("activated.log");
  jitterd_e2e::Process activated = jitterd_e2e::Process::spawn(
      {kActivate, "-l", bed().daemon.socket(), "-l", "127.0.0.1:9465",
       jitterd_e2e::jitterd_binary(), "--config", bed().daemon.config_path()},
      options);
  const auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline && bed().ctl({"version"}).exit_code != 0)
    std::this_thread::sleep_for(200ms);
  ASSERT_EQ(bed().ctl({"version"}).exit_code, 0)
      << jitterd_e2e::read_file(bed().dir.file("activated.log"));
  jitterd_e2e::SpawnOptions in_ns_a;
  in_ns_a.netns = bed().net.ns_a();
  const auto scraped = jitterd_e2e::run_to_completion(
      {"curl", "-sS", "--max-time", "5", "-i", "http://127.0.0.1:9465/metrics"}, in_ns_a, 30s);
  EXPECT_EQ(scraped.exit_code, 0) << scraped.err;
  EXPECT_EQ(scraped.out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << scraped.out;
  EXPECT_NE(scraped.out.find("# TYPE jitterd_transitions_total counter\n"), std::string::npos)
      << scraped.out;
  const std::string log = jitterd_e2e::read_file(bed().dir.file("activated.log"));
  EXPECT_NE(log.find("serving /metrics and /healthz on http://127.0.0.1:9465 (from systemd)"),
            std::string::npos)
      << log;
  activated.signal(SIGTERM);
  EXPECT_EQ(activated.wait(20s), 0) << jitterd_e2e::read_file(bed().dir.file("activated.log"));
}

}  // namespace
