// RequestFramer: the control protocol's framing (docs/protocol.md), bytes in whatever pieces a
// socket gives them, request lines out. The limit is small here (8 bytes) so that "exactly the
// limit" and "one past it" are short literals; the server passes limits.max_request_bytes.
#include "framing.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace jitterd::testing {
namespace {

using Status = RequestFramer::Status;

constexpr std::size_t kLimit = 8;

// Every line the framer has now, then how it stopped (kNeedMore or kTooLarge).
struct Drained {
  std::vector<std::string> lines;
  Status stop = Status::kNeedMore;
};

Drained drain(RequestFramer& framer) {
  Drained out;
  for (;;) {
    const RequestFramer::Next next = framer.next();
    if (next.status != Status::kLine) {
      out.stop = next.status;
      return out;
    }
    out.lines.emplace_back(next.line);
  }
}

using Lines = std::vector<std::string>;

TEST(RequestFramer, ALineSplitAcrossReadsIsHandedOutWhenItsNewlineArrives) {
  RequestFramer framer(64);
  framer.feed(R"({"id": 9, "meth)");
  EXPECT_EQ(drain(framer).lines, Lines{});
  framer.feed(R"(od": "version"})");
  EXPECT_EQ(drain(framer).lines, Lines{});
  framer.feed("\n");
  const Drained d = drain(framer);
  EXPECT_EQ(d.lines, Lines{R"({"id": 9, "method": "version"})"});
  EXPECT_EQ(d.stop, Status::kNeedMore);
}

TEST(RequestFramer, ManyLinesInOneReadComeOutInOrderAndAPartialOneWaits) {
  RequestFramer framer(kLimit);
  framer.feed("a\nbb\nccc\ndd");
  EXPECT_EQ(drain(framer).lines, (Lines{"a", "bb", "ccc"}));
  framer.feed("dd\n");
  EXPECT_EQ(drain(framer).lines, Lines{"dddd"});
}

TEST(RequestFramer, OneByteAtATimeGivesTheSameLines) {
  const std::string stream = "a\r\n\n  \nbb\n12345678\nc";
  RequestFramer framer(kLimit);
  Lines lines;
  for (char c : stream) {
    framer.feed(std::string(1, c));
    for (auto& l : drain(framer).lines) lines.push_back(l);
  }
  EXPECT_EQ(lines, (Lines{"a", "bb", "12345678"}));
}

TEST(RequestFramer, OneCarriageReturnBeforeTheNewlineIsDropped) {
  RequestFramer framer(kLimit);
  framer.feed("x\r\ny\r\r\na\rb\n");
  // Only the last '\r' belongs to the line end; others are the request's own bytes (JSON rejects
  // them).
  EXPECT_EQ(drain(framer).lines, (Lines{"x", "y\r", "a\rb"}));
}

TEST(RequestFramer, BlankLinesAreSkippedAndOtherLinesKeepTheirSpaces) {
  RequestFramer framer(kLimit);
  framer.feed("\n\r\n  \t \n\t\r\n x \n\r \n");
  // " x " is not trimmed; "\r " is not blank (the '\r' is not the line end's).
  EXPECT_EQ(drain(framer).lines, (Lines{" x ", "\r "}));
}

TEST(RequestFramer, ALineOfExactlyTheLimitIsReadOnePastItIsTooLarge) {
  RequestFramer ok(kLimit);
  ok.feed("12345678\n");
  EXPECT_EQ(drain(ok).lines, Lines{"12345678"});

  RequestFramer big(kLimit);
  big.feed("123456789\n");
  const Drained d = drain(big);
  EXPECT_EQ(d.lines, Lines{});
  EXPECT_EQ(d.stop, Status::kTooLarge);
}

TEST(RequestFramer, TheCarriageReturnCountsTowardsTheLimit) {
  RequestFramer ok(kLimit);
  ok.feed("1234567\r\n");  // 8 bytes before the '\n'
  EXPECT_EQ(drain(ok).lines, Lines{"1234567"});

  RequestFramer big(kLimit);
  big.feed("12345678\r\n");  // 9
  EXPECT_EQ(drain(big).stop, Status::kTooLarge);
}

TEST(RequestFramer, ALineIsTooLargeAsSoonAsItPassesTheLimitWithoutItsNewline) {
  RequestFramer framer(kLimit);
  framer.feed("12345678");
  EXPECT_EQ(drain(framer).stop, Status::kNeedMore)
      << "exactly the limit: the next byte may be '\\n'";
  framer.feed("9");
  EXPECT_EQ(drain(framer).stop, Status::kTooLarge);
}

TEST(RequestFramer, LinesBeforeAnOverLongOneAreHandedOutThenNothingMore) {
  RequestFramer framer(kLimit);
  framer.feed("ok\nstill ok\n123456789\nlater\n");
  // "still ok" is 8 bytes: accepted.
  const Drained d = drain(framer);
  EXPECT_EQ(d.lines, (Lines{"ok", "still ok"}));
  EXPECT_EQ(d.stop, Status::kTooLarge);
  // Final: the connection closes, nothing after is read.
  EXPECT_EQ(framer.feed("more\n"), 0u);
  EXPECT_EQ(framer.next().status, Status::kTooLarge);
}

TEST(RequestFramer, BytesWithoutANewlineAtTheEndAreNotARequest) {
  RequestFramer framer(64);
  framer.feed(R"({"method": "version"})");
  const Drained d = drain(framer);
  EXPECT_EQ(d.lines, Lines{});
  EXPECT_EQ(d.stop, Status::kNeedMore);
}

TEST(RequestFramer, FeedCountsLineEndsBlankLinesIncluded) {
  RequestFramer framer(kLimit);
  EXPECT_EQ(framer.feed("a\n\n\r\nb"), 3u);
  EXPECT_EQ(framer.feed("bb"), 0u) << "part of a line is no activity";
  EXPECT_EQ(framer.feed("\n"), 1u);
}

TEST(RequestFramer, ALineStaysReadableWhileLaterOnesAreTaken) {
  RequestFramer framer(kLimit);
  framer.feed("first\nsecond\n");
  const std::string_view first = framer.next().line;
  const std::string_view second = framer.next().line;
  EXPECT_EQ(first, "first");
  EXPECT_EQ(second, "second");
}

}  // namespace
}  // namespace jitterd::testing
