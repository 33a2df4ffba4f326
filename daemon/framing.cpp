#include "framing.hpp"

#include <algorithm>

namespace jitterd {

std::size_t RequestFramer::feed(std::string_view bytes) {
  if (too_large_) return 0;
  buffer_.erase(0, start_);
  start_ = 0;
  buffer_.append(bytes);
  return static_cast<std::size_t>(std::count(bytes.begin(), bytes.end(), '\n'));
}

RequestFramer::Next RequestFramer::next() {
  while (!too_large_) {
    const std::size_t end = buffer_.find('\n', start_ + scanned_);
    if (end == std::string::npos) {
      scanned_ = buffer_.size() - start_;
      // One byte past the limit and still no '\n': too large, whatever follows.
      if (scanned_ > max_line_bytes_) break;
      return {Status::kNeedMore, {}};
    }
    std::string_view line(buffer_.data() + start_, end - start_);
    start_ = end + 1;
    scanned_ = 0;
    if (line.size() > max_line_bytes_) break;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank
    return {Status::kLine, line};
  }
  if (!too_large_) {
    too_large_ = true;
    buffer_ = std::string();  // the connection is closing: nothing here is read again
    start_ = 0;
    scanned_ = 0;
  }
  return {Status::kTooLarge, {}};
}

}  // namespace jitterd
