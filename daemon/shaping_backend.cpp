#include "shaping_backend.hpp"

namespace jitterd {

void ShapingBackend::shape(const shaper::Interface& interface, Direction direction,
                           const Layout& layout, bool force) {
  const ShapeRequest one{interface, direction, layout, force};
  if (std::exception_ptr failure = shape_batch({&one, 1}).front()) std::rethrow_exception(failure);
}

bool Layout::same_structure(const Layout& other) const {
  if (bypass != other.bypass || lanes.size() != other.lanes.size()) return false;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i].set != other.lanes[i].set || lanes[i].selectors != other.lanes[i].selectors)
      return false;
  }
  return true;
}

}  // namespace jitterd
