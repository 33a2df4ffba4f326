#pragma once
// `jitterctl fleet validate` (docs/validation.md, "Fleets"): the fleet's probes (fleet.hpp) judged
// pair by pair (fleet_validation.hpp). In the offline layer, since the judge is libshaper's
// validation.

#include "options.hpp"

namespace jitterctl {

int fleet_validate_command(const Invocation& inv);

}  // namespace jitterctl
