// libFuzzer target for the daemon's config reader (parse_config, what jitterd --check-config and
// jitterd's start run): any bytes give either a config or diagnostics, never a crash, and every
// diagnostic is short whatever the input quotes. Input: as fuzz_profile's (fuzz_input.hpp: bytes,
// or 0xFF N PREFIX 0x01 UNIT 0x01 SUFFIX for texts larger and deeper than libFuzzer's inputs).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "config.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = jitterd::fuzz::expand(data, size, jitterd::kMaxConfigBytes + 1);
  const jitterd::ConfigLoad load = jitterd::parse_config(text);
  if (load.config.has_value() == !load.diagnostics.empty()) std::abort();
  jitterd::fuzz::check_bounded(load.diagnostics);
  return 0;
}
