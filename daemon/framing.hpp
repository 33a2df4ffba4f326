#pragma once
// The control protocol's framing (docs/protocol.md): a request is a line ending in '\n'. A
// RequestFramer takes the bytes a connection reads, in whatever pieces they arrive, and hands out
// the complete request lines in order: a '\r' before the '\n' is dropped (CRLF clients), blank
// lines (nothing but spaces and tabs) are skipped, and a line longer than the limit ends the
// conversation (the server answers "too-large" and closes). Bytes after the last '\n' wait for
// more; when the client stops sending they are not a request. No I/O and no Asio, so the fuzz
// target frames exactly as the server does.

#include <cstddef>
#include <string>
#include <string_view>

namespace jitterd {

class RequestFramer {
 public:
  // `max_line_bytes` (limits.max_request_bytes): the longest line accepted, counted without its
  // '\n' and with the '\r' before it, if any.
  explicit RequestFramer(std::size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Appends bytes read from the client. Returns how many line ends ('\n') they hold, blank lines
  // included: a client that completes lines is active, one that trickles the bytes of a line is
  // not. Ignores the bytes (and returns 0) once the framer said kTooLarge.
  std::size_t feed(std::string_view bytes);

  enum class Status {
    kLine,      // `line` is the next request
    kNeedMore,  // no complete line yet: read more
    kTooLarge,  // the current line is longer than the limit, with or without its '\n'; final
  };
  struct Next {
    Status status = Status::kNeedMore;
    std::string_view line;  // kLine only; valid until the next feed()
  };
  // The next request line. Every line before an over-long one is handed out first; after kTooLarge,
  // every call says kTooLarge again.
  Next next();

  std::size_t max_line_bytes() const { return max_line_bytes_; }

 private:
  std::size_t max_line_bytes_;
  // Received and not yet handed out, from start_ on (what lies before start_ goes at the next feed,
  // so the buffer holds at most one read more than the lines it still owes).
  std::string buffer_;
  std::size_t start_ = 0;
  std::size_t scanned_ = 0;  // bytes after start_ known to hold no '\n': each byte is searched once
  bool too_large_ = false;
};

}  // namespace jitterd
