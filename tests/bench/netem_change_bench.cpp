// Time to apply one netem change, side by side in one run:
//   Engine       — NetemQdisc::change(): one RTM_NEWQDISC over an open netlink socket, ACK awaited.
//   TcProcess    — `tc qdisc change ...` spawned as a process per change (what peers do).
//   TcBatch      — `tc -batch` applying 1000 changes in one process: the in-process floor of tc.
//   Coincident16Singles / Coincident16Batch — 16 qdiscs (one per veth) changed at one instant: 16
//                  NetemQdisc::change() one after the other (each ACK awaited before the next: what
//                  the daemon did with coincident deadlines), against one NetemEngine::change()
//                  batch of the 16 (all sent, then all ACKs read). Time per 16 changes.
// All alternate between the same two specs on veths in a private network namespace.
// Wall-clock time (UseRealTime): the tc contenders spend their time in child processes, which CPU
// time would not count. Figures and ratios: docs/benchmarks.md. Run: tests/vm/run
// build/tests/bench/netem_change_bench
#include <benchmark/benchmark.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shaper/errors.hpp"
#include "shaper/netem_engine.hpp"

extern char** environ;

using namespace shaper;
using namespace std::chrono_literals;

namespace {

constexpr const char* kDev = "jtbench0";
constexpr int kBatch = 1000;

// The two phases every contender switches between, as jitterd would: delay and GE loss.
NetemSpec phase(bool high) {
  NetemSpec spec;
  spec.delay.latency = high ? 30ms : 10ms;
  spec.delay.jitter = 2ms;
  spec.loss = GilbertElliottLoss{Probability::checked(0.01), Probability::checked(0.3)};
  spec.limit = 10000;
  return spec;
}

std::string tc_args(bool high) {
  return std::string("qdisc change dev ") + kDev + " root handle 1a7e: netem delay " +
         (high ? "30ms" : "10ms") + " 2ms loss gemodel 1% 30% limit 10000";
}

int spawn_and_wait(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Bed {
  RouteSocket socket;
  NetemEngine engine{socket};
  Interface dev;
  std::optional<NetemQdisc> qdisc;
};

Bed& bed() {
  static Bed* instance = [] {
    // A private namespace for the whole process; spawned tc processes inherit it.
    if (unshare(CLONE_NEWNET) != 0) {
      std::perror("unshare(CLONE_NEWNET) (needs root)");
      std::exit(77);
    }
    if (spawn_and_wait({"ip", "link", "add", kDev, "type", "veth", "peer", "name", "jtbench1"}) !=
            0 ||
        spawn_and_wait({"ip", "link", "set", kDev, "up"}) != 0) {
      std::fprintf(stderr, "cannot create the veth pair\n");
      std::exit(77);
    }
    auto* b = new Bed;
    b->dev = b->engine.resolve(std::string(kDev));
    try {
      b->qdisc.emplace(b->engine.install(b->dev, phase(false)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "no netem here: %s\n", e.what());
      std::exit(77);
    }
    return b;
  }();
  return *instance;
}

void BM_EngineChange(benchmark::State& state) {
  Bed& b = bed();
  bool high = false;
  for (auto _ : state) {
    high = !high;
    b.qdisc->change(phase(high));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_TcProcessChange(benchmark::State& state) {
  bed();
  bool high = false;
  for (auto _ : state) {
    high = !high;
    std::vector<std::string> argv{"tc"};
    std::string args = tc_args(high);
    for (std::size_t pos = 0, next; pos < args.size(); pos = next + 1) {
      next = args.find(' ', pos);
      if (next == std::string::npos) next = args.size();
      argv.push_back(args.substr(pos, next - pos));
    }
    if (spawn_and_wait(argv) != 0) state.SkipWithError("tc qdisc change failed");
  }
  state.SetItemsProcessed(state.iterations());
}

// The interfaces of the coincident contenders, as the daemon's 10 Hz soak has them.
constexpr int kCoincident = 16;

std::vector<NetemQdisc>& coincident_qdiscs() {
  static std::vector<NetemQdisc>* instance = [] {
    Bed& b = bed();
    auto* qdiscs = new std::vector<NetemQdisc>;
    for (int i = 0; i < kCoincident; ++i) {
      const std::string dev = "jtco" + std::to_string(i);
      if (spawn_and_wait({"ip", "link", "add", dev, "type", "veth", "peer", "name",
                          "jtcp" + std::to_string(i)}) != 0 ||
          spawn_and_wait({"ip", "link", "set", dev, "up"}) != 0) {
        std::fprintf(stderr, "cannot create veth %s\n", dev.c_str());
        std::exit(77);
      }
      qdiscs->push_back(b.engine.install(b.engine.resolve(dev), phase(false)));
    }
    return qdiscs;
  }();
  return *instance;
}

void BM_Coincident16Singles(benchmark::State& state) {
  auto& qdiscs = coincident_qdiscs();
  bool high = false;
  for (auto _ : state) {
    high = !high;
    for (auto& q : qdiscs) q.change(phase(high));
  }
  state.SetItemsProcessed(state.iterations() * kCoincident);
}

void BM_Coincident16Batch(benchmark::State& state) {
  auto& qdiscs = coincident_qdiscs();
  Bed& b = bed();
  bool high = false;
  for (auto _ : state) {
    high = !high;
    std::vector<PreparedChange> batch;
    for (auto& q : qdiscs) batch.push_back(q.prepare_change(phase(high)));
    for (const auto& refused : b.engine.change(batch)) {
      if (refused) state.SkipWithError(refused->what());
    }
  }
  state.SetItemsProcessed(state.iterations() * kCoincident);
}

void BM_TcBatchChange(benchmark::State& state) {
  bed();
  char path[] = "/tmp/jitterd-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    state.SkipWithError("mkstemp");
    return;
  }
  close(fd);
  {
    std::ofstream batch(path);
    for (int i = 0; i < kBatch; ++i) batch << tc_args(i % 2 == 1) << '\n';
  }
  for (auto _ : state) {
    if (spawn_and_wait({"tc", "-batch", path}) != 0) state.SkipWithError("tc -batch failed");
  }
  unlink(path);
  // One iteration applies kBatch changes: items/s is changes per second, comparable with the
  // others.
  state.SetItemsProcessed(state.iterations() * kBatch);
}

}  // namespace

BENCHMARK(BM_EngineChange)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TcProcessChange)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TcBatchChange)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Coincident16Singles)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Coincident16Batch)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
