#pragma once
// Seeded captures shaped like real ones, for the trace benchmarks (trace_parse_bench,
// make_capture + compile_vs_mawk.sh): iputils' RTT formatting (3 decimals below 1 ms, 2 below 10
// ms, 1 below 100 ms, integers from 100 ms), 1 % of probes lost (no line), stamps = send time +
// RTT. The same seed gives the same bytes on every machine (std::mt19937_64 and snprintf are
// specified; the distributions are libstdc++'s).
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

namespace trace_bench {

constexpr std::uint64_t kSeed = 20241130;
constexpr std::int64_t kSeventyTwoHoursAtTenHz = 72LL * 3600 * 10;

enum class Shape { kPingD, kPing, kFpingD, kEpochRtt, kCsv };

// iputils' "time=" formatting (ping/ping_common.c).
inline std::string iputils_ms(double ms) {
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
inline void generate(Shape shape, std::int64_t probes,
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

}  // namespace trace_bench
