#include "shaper/quantities.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "shaper/diagnostics.hpp"

namespace shaper {

Probability Probability::checked(double value) {
  auto p = make(value);
  if (!p) {
    std::fprintf(stderr, "internal error: Probability::checked(%g) is outside [0, 1]\n", value);
    std::abort();
  }
  return *p;
}

std::string format_duration(Nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  const double magnitude = std::fabs(ns);
  char buf[64];
  if (magnitude >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.9gs", ns / 1e9);
  } else if (magnitude >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.6gms", ns / 1e6);
  } else if (magnitude >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.3gus", ns / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%lldns", static_cast<long long>(d.count()));
  }
  return buf;
}

std::string format_probability(Probability p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g%%", p.value() * 100.0);
  return buf;
}

std::string to_string(const Diagnostics& diagnostics, const std::string& file) {
  std::string out;
  for (const auto& d : diagnostics) {
    if (!out.empty()) out += '\n';
    out += file.empty() ? d.to_string() : d.in_file(file);
  }
  return out;
}

std::string json_error_where(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string Diagnostic::in_file(const std::string& file) const {
  const auto colon = where.find(':');
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  const std::string_view w = where;
  if (colon != std::string::npos && digits(w.substr(0, colon)) && digits(w.substr(colon + 1))) {
    return file + ":" + where + ": " + message;
  }
  return file + ": " + to_string();
}

}  // namespace shaper
