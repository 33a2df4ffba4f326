// The kernel-timed switch's word and program (shaper/netem_gate.hpp), without a kernel: what the
// word means, and the program's encoding run by a small interpreter of the instructions it uses.
// The kernel test (tests/kernel/netem_gate_test.cpp) judges the real thing packet by packet.
#include <linux/bpf.h>

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <stdexcept>

#include "shaper/netem_gate.hpp"

using namespace shaper;
using namespace std::chrono_literals;

namespace {

// Runs the gate program with the map holding `word` (or no value) at time `now`; returns r0.
// Interprets only the opcodes the program may use, and refuses any other.
std::uint64_t run_gate(const std::vector<std::uint64_t>& program, std::optional<std::uint64_t> word,
                       std::uint64_t now) {
  constexpr std::uint64_t kMapPointer = 0x1000;
  std::uint64_t r[11] = {};
  std::map<std::uint64_t, std::uint32_t> stack;  // by address, 32-bit slots
  r[10] = 0x8000;
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    bpf_insn in{};
    std::memcpy(&in, &program[pc], sizeof in);
    const std::uint64_t src = in.src_reg, dst = in.dst_reg;
    const auto imm = static_cast<std::uint64_t>(static_cast<std::int64_t>(in.imm));
    switch (in.code) {
      case BPF_LD | BPF_DW | BPF_IMM:
        EXPECT_EQ(src, BPF_PSEUDO_MAP_FD);
        r[dst] = kMapPointer;
        ++pc;
        break;
      case BPF_ST | BPF_MEM | BPF_W:
        stack[r[dst] + static_cast<std::uint64_t>(in.off)] = static_cast<std::uint32_t>(in.imm);
        break;
      case BPF_ALU64 | BPF_MOV | BPF_X:
        r[dst] = r[src];
        break;
      case BPF_ALU64 | BPF_MOV | BPF_K:
        r[dst] = imm;
        break;
      case BPF_ALU64 | BPF_ADD | BPF_K:
        r[dst] += imm;
        break;
      case BPF_ALU64 | BPF_AND | BPF_K:
        r[dst] &= imm;
        break;
      case BPF_ALU64 | BPF_XOR | BPF_K:
        r[dst] ^= imm;
        break;
      case BPF_ALU64 | BPF_RSH | BPF_K:
        r[dst] >>= imm;
        break;
      case BPF_ALU64 | BPF_LSH | BPF_K:
        r[dst] <<= imm;
        break;
      case BPF_JMP | BPF_CALL:
        if (in.imm == BPF_FUNC_map_lookup_elem) {
          EXPECT_EQ(r[1], kMapPointer);
          EXPECT_EQ(stack.at(r[2]), 0u) << "the key";
          r[0] = word ? kMapPointer : 0;
        } else if (in.imm == BPF_FUNC_ktime_get_ns) {
          r[0] = now;
        } else {
          throw std::runtime_error("unexpected helper " + std::to_string(in.imm));
        }
        for (int k = 1; k <= 5; ++k) r[k] = 0xdead;  // caller-saved: clobbered
        break;
      case BPF_LDX | BPF_MEM | BPF_DW:
        EXPECT_EQ(r[src], kMapPointer);
        r[dst] = *word;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        if (r[dst] == imm) pc += static_cast<std::size_t>(in.off);
        break;
      case BPF_JMP | BPF_JGE | BPF_X:
        if (r[dst] >= r[src]) pc += static_cast<std::size_t>(in.off);
        break;
      case BPF_JMP | BPF_EXIT:
        return r[0];
      default:
        throw std::runtime_error("unexpected opcode " + std::to_string(in.code));
    }
  }
  throw std::runtime_error("the program ran off its end");
}

}  // namespace

TEST(GateWord, NamesTheBandAfterItsDeadlineAndTheOtherBandBefore) {
  const auto word = gate_word(1'000'000'001ns, 1);  // the deadline's lowest bit is dropped
  EXPECT_EQ(word, 1'000'000'001u);
  EXPECT_EQ(gate_band_at(word, 999'999'999ns), 0);
  EXPECT_EQ(gate_band_at(word, 1'000'000'000ns), 1);
  EXPECT_EQ(gate_band_at(word, 5s), 1);
  EXPECT_EQ(gate_band_at(gate_word(2s, 0), 1s), 1);
  EXPECT_EQ(gate_band_at(gate_word(2s, 0), 2s), 0);
  // Deadline 0: the band at once, whatever the time.
  EXPECT_EQ(gate_band_at(gate_word(0ns, 1), 0ns), 1);
  EXPECT_EQ(gate_band_at(0, 0ns), 0);
}

TEST(GateProgramEncoding, ClassifiesAsTheWordSaysAtEveryInstant) {
  const auto program = gate_program(7);
  const std::uint64_t deadline = 5'000'000'000;
  for (int after = 0; after <= 1; ++after) {
    const std::uint64_t word = gate_word(std::chrono::nanoseconds(deadline), after);
    for (const std::uint64_t now :
         {std::uint64_t{0}, deadline - 1, deadline, deadline + 1, std::uint64_t{1} << 62}) {
      const int band = gate_band_at(word, std::chrono::nanoseconds(now));
      EXPECT_EQ(run_gate(program, word, now), gate_band_class(band))
          << "after " << after << ", now " << now;
    }
  }
  EXPECT_EQ(run_gate(program, 0, 123), gate_band_class(0));
  // No value (never for an array map's key 0, but the verifier demands the check): band 0.
  EXPECT_EQ(run_gate(program, std::nullopt, 123), gate_band_class(0));
  EXPECT_EQ(gate_band_class(1), 0x1a7e0002u);
}
