#include "protocol/methods.hpp"

namespace jitterd::protocol {
namespace {

// The table is indexed by Method: entry i describes method i.
constexpr bool table_in_order() {
  for (std::size_t i = 0; i < std::size(kMethods); ++i) {
    if (static_cast<std::size_t>(kMethods[i].method) != i) return false;
  }
  return true;
}
static_assert(table_in_order());

}  // namespace

const MethodInfo* find_method(std::string_view name) {
  for (const auto& m : kMethods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string method_names() {
  std::string names;
  for (const auto& m : kMethods) names += (names.empty() ? "" : ", ") + std::string(m.name);
  return names;
}

}  // namespace jitterd::protocol
