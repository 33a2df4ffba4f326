// Trace parsing throughput: ping -D text (the common long capture) parsed from memory and from a
// file, at 10 k lines and at 72 h of 10 Hz probing (2.592 M lines); plus the other line formats
// for comparison. The captures are generated with a seeded generator, shaped like real ones:
// iputils' RTT formatting (3 decimals below 1 ms, 2 below 10 ms, 1 below 100 ms, integers from
// 100 ms), 1 % of probes lost (no line), stamps = send time + RTT.
// Figures: docs/benchmarks.md, "Trace parsing". Run: build/tests/bench/trace_parse_bench
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "shaper/trace.hpp"

using namespace shaper;

namespace {

constexpr std::uint64_t kSeed = 20241130;
constexpr std::int64_t kSeventyTwoHoursAtTenHz = 72LL * 3600 * 10;

enum class Shape { kPingD, kPing, kFpingD, kEpochRtt, kCsv };

// iputils' "time=" formatting (ping/ping_common.c).
std::string iputils_ms(double ms) {
  char buffer[32];
  if (ms >= 99.95) {
    std::snprintf(buffer, sizeof buffer, "%.0f", ms);
  } else if (ms >= 9.995) {
    std::snprintf(buffer, sizeof buffer, "%.1f", ms);
  } else if (ms >= 1.0) {
    std::snprintf(buffer, sizeof buffer, "%.2f", ms);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3f", ms);
  }
  return buffer;
}

// Calls `emit` with each line of a capture of `probes` probes at 10 Hz.
void generate(Shape shape, std::int64_t probes,
              const std::function<void(const std::string&)>& emit) {
  std::mt19937_64 random(kSeed);
  // A link of 20 ms with a log-normal queueing tail (median +3 ms, occasionally >100 ms).
  std::lognormal_distribution<double> queueing(1.1, 0.9);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double start = 1732971234.0;
  char line[160];
  if (shape == Shape::kPingD || shape == Shape::kPing) {
    emit("PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.\n");
  } else if (shape == Shape::kCsv) {
    emit("timestamp,seq,rtt_ms\n");
  }
  for (std::int64_t i = 1; i <= probes; ++i) {
    const double send = start + static_cast<double>(i) * 0.1;
    const bool lost = unit(random) < 0.01;
    const double ms = 20.0 + queueing(random);
    if (lost && shape != Shape::kEpochRtt && shape != Shape::kCsv) continue;
    const std::string rtt = lost ? "-1" : iputils_ms(ms);
    const unsigned seq = static_cast<unsigned>(i % 65536);
    switch (shape) {
      case Shape::kPingD:
        std::snprintf(line, sizeof line,
                      "[%.6f] 64 bytes from 192.0.2.7: icmp_seq=%u ttl=57 time=%s ms\n",
                      send + ms / 1000.0, seq, rtt.c_str());
        break;
      case Shape::kPing:
        std::snprintf(line, sizeof line, "64 bytes from 192.0.2.7: icmp_seq=%u ttl=57 time=%s ms\n",
                      seq, rtt.c_str());
        break;
      case Shape::kFpingD:
        std::snprintf(line, sizeof line,
                      "[%.5f] 192.0.2.7 : [%lld], 64 bytes, %s ms (%s avg, 1%% loss)\n",
                      send + ms / 1000.0, static_cast<long long>(i - 1), rtt.c_str(), rtt.c_str());
        break;
      case Shape::kEpochRtt:
        std::snprintf(line, sizeof line, "%.6f %s\n", send, rtt.c_str());
        break;
      case Shape::kCsv:
        std::snprintf(line, sizeof line, "%.6f,%lld,%s\n", send, static_cast<long long>(i),
                      lost ? "" : rtt.c_str());
        break;
    }
    emit(line);
  }
}

const std::string& text_for(Shape shape, std::int64_t probes) {
  static std::map<std::pair<Shape, std::int64_t>, std::string> cache;
  auto& text = cache[{shape, probes}];
  if (text.empty()) generate(shape, probes, [&](const std::string& line) { text += line; });
  return text;
}

// Generated files, removed when the benchmark exits.
struct TemporaryFiles {
  std::vector<std::filesystem::path> paths;
  ~TemporaryFiles() {
    for (const auto& path : paths) {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  }
};
TemporaryFiles temporary_files;

// The capture written line by line (never whole in memory), so that a run of the file benchmark
// alone shows the parser's peak RSS.
std::string file_for(Shape shape, std::int64_t probes) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("jitterd_trace_bench_" + std::to_string(static_cast<int>(shape)) + "_" +
                     std::to_string(probes) + ".txt");
  if (!std::filesystem::exists(path)) {
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (out == nullptr) return {};
    generate(shape, probes, [&](const std::string& line) { std::fputs(line.c_str(), out); });
    std::fclose(out);
    temporary_files.paths.push_back(path);
  }
  return path.string();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void report(benchmark::State& state, const Trace& trace, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
  state.counters["lines/s"] =
      benchmark::Counter(static_cast<double>(trace.lines) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["samples"] = static_cast<double>(trace.samples.size());
  if (!trace.diagnostics.empty() || trace.unrecognised_lines != 0) {
    state.SkipWithError(to_string(trace.diagnostics).c_str());
  }
}

void parse_text(benchmark::State& state, Shape shape) {
  const std::string& text = text_for(shape, state.range(0));
  Trace trace;
  for (auto _ : state) {
    trace = parse_trace_text(text, "bench", {});
    benchmark::DoNotOptimize(trace.samples.data());
  }
  report(state, trace, text.size());
}

void BM_PingDText(benchmark::State& state) {
  parse_text(state, Shape::kPingD);
}
void BM_PingText(benchmark::State& state) {
  parse_text(state, Shape::kPing);
}
void BM_FpingDText(benchmark::State& state) {
  parse_text(state, Shape::kFpingD);
}
void BM_EpochRttText(benchmark::State& state) {
  parse_text(state, Shape::kEpochRtt);
}
void BM_CsvText(benchmark::State& state) {
  parse_text(state, Shape::kCsv);
}

// Through parse_trace_file: open, 256 KiB reads (from the page cache after the first run), parse.
void BM_PingDFile(benchmark::State& state) {
  const std::string path = file_for(Shape::kPingD, state.range(0));
  if (path.empty()) {
    state.SkipWithError("cannot write the capture file");
    return;
  }
  const auto bytes = static_cast<std::size_t>(std::filesystem::file_size(path));
  Trace trace;
  for (auto _ : state) {
    trace = Trace{};  // one trace alive at a time: the RSS counter is the parser's own peak
    trace = parse_trace_file(path, {});
    benchmark::DoNotOptimize(trace.samples.data());
  }
  report(state, trace, bytes);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

}  // namespace

BENCHMARK(BM_PingDText)->Arg(10000)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PingText)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FpingDText)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EpochRttText)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CsvText)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PingDFile)->Arg(10000)->Arg(kSeventyTwoHoursAtTenHz)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
