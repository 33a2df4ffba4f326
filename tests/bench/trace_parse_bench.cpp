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
#include <string>
#include <system_error>
#include <vector>

#include "capture_generator.hpp"
#include "shaper/trace.hpp"

using namespace shaper;

namespace {

using trace_bench::generate;
using trace_bench::kSeventyTwoHoursAtTenHz;
using trace_bench::Shape;

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
