// Writes a seeded capture (capture_generator.hpp) to a file, line by line: the input of
// compile_vs_mawk.sh. Usage: make_capture ping-d|ping|fping-d|epoch-rtt|csv PROBES PATH
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "capture_generator.hpp"

int main(int argc, char** argv) {
  using trace_bench::Shape;
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_capture ping-d|ping|fping-d|epoch-rtt|csv PROBES PATH\n");
    return 2;
  }
  const std::string_view name = argv[1];
  Shape shape{};
  if (name == "ping-d") {
    shape = Shape::kPingD;
  } else if (name == "ping") {
    shape = Shape::kPing;
  } else if (name == "fping-d") {
    shape = Shape::kFpingD;
  } else if (name == "epoch-rtt") {
    shape = Shape::kEpochRtt;
  } else if (name == "csv") {
    shape = Shape::kCsv;
  } else {
    std::fprintf(stderr, "make_capture: unknown shape \"%s\"\n", argv[1]);
    return 2;
  }
  char* end = nullptr;
  const long long probes = std::strtoll(argv[2], &end, 10);
  if (end == argv[2] || *end != '\0' || probes <= 0) {
    std::fprintf(stderr, "make_capture: PROBES must be a positive number, not \"%s\"\n", argv[2]);
    return 2;
  }
  std::FILE* out = std::fopen(argv[3], "w");
  if (out == nullptr) {
    std::fprintf(stderr, "make_capture: open %s: %s\n", argv[3], std::strerror(errno));
    return 1;
  }
  trace_bench::generate(shape, probes,
                        [&](const std::string& line) { std::fputs(line.c_str(), out); });
  if (std::fclose(out) != 0) {
    std::fprintf(stderr, "make_capture: write %s: %s\n", argv[3], std::strerror(errno));
    return 1;
  }
  return 0;
}
