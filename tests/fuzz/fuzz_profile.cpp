// libFuzzer target for the profile loader: any bytes give either a profile or diagnostics, never a
// crash; every diagnostic is short whatever the input quotes; and a profile that loads writes back
// to a text that loads to the same profile and digest.
//
// Input: the bytes are the profile, unless they start with the byte 0xFF: then
//   0xFF, two bytes N (big-endian), PREFIX, 0x01, UNIT, 0x01, SUFFIX
// is the text PREFIX + UNIT repeated 4*N times + SUFFIX (up to 262 140 repetitions). libFuzzer's
// inputs are 4096 bytes unless told otherwise, and a value nested 100 000 deep (issue 21: a 295 KB
// profile crashed jitterctl and jitterd) or a megabyte string is out of their reach without it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_input.hpp"
#include "shaper/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = jitterd::fuzz::expand(data, size, shaper::kMaxProfileBytes + 1);
  const shaper::ProfileLoad load = shaper::parse_profile(text);
  if (load.has_value() == !load.diagnostics().empty()) std::abort();
  jitterd::fuzz::check_bounded(load.diagnostics());
  if (load) {
    const shaper::ProfileLoad again = shaper::parse_profile(shaper::profile_to_json(load->profile));
    if (!again || !(again->profile == load->profile) || again->digest != load->digest) std::abort();
  }
  return 0;
}
