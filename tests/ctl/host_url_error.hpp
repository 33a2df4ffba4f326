#pragma once
// What parse_host_url says of `url` (its UsageError's text), or "(accepted)": the URL tests of both
// transports (remote_test.cpp, k8s_transport_test.cpp) assert on it.

#include <string>

#include "options.hpp"
#include "remote_host.hpp"

namespace jitterctl::testing {

inline std::string host_url_error(const std::string& url) {
  try {
    parse_host_url(url);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace jitterctl::testing
