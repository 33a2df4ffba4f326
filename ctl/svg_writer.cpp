#include "svg_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace jitterctl::svg {

namespace {

constexpr double kTickLength = 5;
constexpr double kTickFont = 11, kLabelFont = 12, kTitleFont = 13;
// An average glyph of the 12-unit sans-serif font is about 7 units wide: enough to space the
// legend's entries without measuring text (which SVG cannot do before rendering).
constexpr double kGlyphWidth = 7;

}  // namespace

namespace {

// The length of the well-formed UTF-8 sequence at text[i], or 0 where the bytes are not one (a
// file name may hold any bytes; an XML file may not).
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const std::size_t n = lead < 0x80                   ? 1
                        : lead >= 0xc2 && lead < 0xe0 ? 2
                        : lead >= 0xe0 && lead < 0xf0 ? 3
                        : lead >= 0xf0 && lead < 0xf5 ? 4
                                                      : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  // Overlong three- and four-byte forms, surrogates and code points above U+10FFFF.
  if (n == 3 && ((lead == 0xe0 && byte(i + 1) < 0xa0) || (lead == 0xed && byte(i + 1) >= 0xa0)))
    return 0;
  if (n == 4 && ((lead == 0xf0 && byte(i + 1) < 0x90) || (lead == 0xf4 && byte(i + 1) >= 0x90)))
    return 0;
  return n;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    const char c = text[i];
    if (n > 1) {
      out += text.substr(i, n);
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else if (c == '\'') {
      out += "&apos;";
    } else {
      const auto u = static_cast<unsigned char>(c);
      out += n == 0 || (u < 0x20 && c != '\t') || u == 0x7f ? '?' : c;
    }
    i += std::max<std::size_t>(n, 1);
  }
  return out;
}

std::string coord(double v) {
  // No plot is a million units wide: anything beyond is an error clamped out of sight.
  constexpr double kLimit = 1e6;
  if (!std::isfinite(v)) v = std::signbit(v) ? -kLimit : kLimit;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::clamp(v, -kLimit, kLimit));
  return buf;
}

std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

double Axis::map(double v) const {
  double a = lo, b = hi, x = std::clamp(v, lo, hi);
  if (log) {
    a = std::log10(lo);
    b = std::log10(hi);
    x = std::log10(x);
  }
  return from + (x - a) / (b - a) * (to - from);
}

std::vector<double> Axis::ticks() const {
  std::vector<double> out;
  if (log) {
    const double first = std::pow(10, std::floor(std::log10(lo)));
    // Fewer than three decades in range: 1, 2 and 5 of each, so that the axis has numbers to read.
    const bool fine = std::log10(hi / lo) < 2;
    for (double d = first; d <= hi * 1.0001; d *= 10) {
      for (const double m : {1.0, 2.0, 5.0}) {
        if ((m == 1.0 || fine) && d * m >= lo * 0.9999 && d * m <= hi * 1.0001)
          out.push_back(d * m);
      }
    }
    return out;
  }
  const double span = hi - lo;
  double step = std::pow(10, std::floor(std::log10(span / 5)));
  if (span / step > 10) step *= 2;
  if (span / step > 10) step *= 2.5;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
}

Axis make_axis(double lo, double hi, bool log, double log_floor, double from, double to) {
  if (!std::isfinite(lo)) lo = 0;
  if (!std::isfinite(hi)) hi = lo + 1;
  if (log) {
    lo = std::max(lo, log_floor);
    hi = std::max(hi, lo * 10);
  } else if (hi <= lo) {
    hi = lo + 1;
  }
  return {lo, hi, log, from, to};
}

void frame(std::ostringstream& out, const Panel& p, const Axis& x, const Axis& y,
           const Frame& labels) {
  out << "<text x='" << coord(p.left) << "' y='" << coord(p.top - 8) << "' font-size='"
      << kTitleFont << "' font-weight='bold'>" << escape(labels.title) << "</text>\n";
  out << "<g stroke='#e4e4e4'>";
  for (const double t : x.ticks()) {
    const std::string px = coord(x.map(t));
    out << "<line x1='" << px << "' y1='" << coord(p.top) << "' x2='" << px << "' y2='"
        << coord(p.bottom()) << "'/>";
  }
  for (const double t : y.ticks()) {
    const std::string py = coord(y.map(t));
    out << "<line x1='" << coord(p.left) << "' y1='" << py << "' x2='" << coord(p.right())
        << "' y2='" << py << "'/>";
  }
  out << "</g>\n<g font-size='" << kTickFont << "'>";
  for (const double t : x.ticks()) {
    const std::string px = coord(x.map(t));
    out << "<line x1='" << px << "' y1='" << coord(p.bottom()) << "' x2='" << px << "' y2='"
        << coord(p.bottom() + kTickLength) << "' stroke='#444'/><text x='" << px << "' y='"
        << coord(p.bottom() + 17) << "' text-anchor='middle'>" << label(t) << "</text>";
  }
  for (const double t : y.ticks()) {
    const std::string py = coord(y.map(t));
    out << "<line x1='" << coord(p.left - kTickLength) << "' y1='" << py << "' x2='"
        << coord(p.left) << "' y2='" << py << "' stroke='#444'/><text x='" << coord(p.left - 8)
        << "' y='" << coord(y.map(t) + 4) << "' text-anchor='end'>" << label(t) << "</text>";
  }
  out << "</g>\n<rect x='" << coord(p.left) << "' y='" << coord(p.top) << "' width='"
      << coord(p.width) << "' height='" << coord(p.height) << "' fill='none' stroke='#444'/>\n";
  out << "<text x='" << coord(p.left + p.width / 2) << "' y='" << coord(p.bottom() + 34)
      << "' font-size='" << kLabelFont << "' text-anchor='middle'>" << escape(labels.x_label)
      << "</text>\n";
  const std::string yx = coord(p.left - 52), yy = coord(p.top + p.height / 2);
  out << "<text x='" << yx << "' y='" << yy << "' font-size='" << kLabelFont
      << "' text-anchor='middle' transform='rotate(-90 " << yx << ' ' << yy << ")'>"
      << escape(labels.y_label) << "</text>\n";
}

void legend(std::ostringstream& out, double x, double y, const std::vector<LegendEntry>& entries) {
  for (const auto& e : entries) {
    if (e.band) {
      out << "<rect x='" << coord(x) << "' y='" << coord(y - 9) << "' width='18' height='10' fill='"
          << e.colour << "'/>";
    } else {
      out << "<rect x='" << coord(x) << "' y='" << coord(y - 5) << "' width='18' height='3' fill='"
          << e.colour << "'/>";
    }
    out << "<text x='" << coord(x + 24) << "' y='" << coord(y) << "' font-size='" << kLabelFont
        << "'>" << escape(e.text) << "</text>\n";
    x += 24 + kGlyphWidth * static_cast<double>(e.text.size()) + 22;
  }
}

std::string document(double width, double height, const std::string& body) {
  std::ostringstream svg;
  svg << "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='"
      << coord(width) << "' height='" << coord(height) << "' viewBox='0 0 " << coord(width) << ' '
      << coord(height) << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << body << "</svg>\n";
  return svg.str();
}

std::string shortened(std::string_view name, std::size_t keep) {
  if (name.size() <= keep) return std::string(name);
  std::size_t cut = name.size() - keep;
  // Not inside a UTF-8 sequence: skip its continuation bytes.
  while (cut < name.size() && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) ++cut;
  return "..." + std::string(name.substr(cut));
}

}  // namespace jitterctl::svg
