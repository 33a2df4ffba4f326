// libFuzzer target for the profile loader: any bytes give either a profile or diagnostics, never a
// crash; and a profile that loads writes back to a text that loads to the same profile and digest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shaper/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const shaper::ProfileLoad load = shaper::parse_profile(text);
  if (load.profile.has_value() == !load.diagnostics.empty()) std::abort();
  if (load.profile) {
    const shaper::ProfileLoad again = shaper::parse_profile(shaper::profile_to_json(*load.profile));
    if (!again.profile || !(*again.profile == *load.profile) || again.digest != load.digest) std::abort();
  }
  return 0;
}
