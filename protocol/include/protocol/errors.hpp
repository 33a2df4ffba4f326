#pragma once
// The error reply of docs/protocol.md ("Error codes"): a code from a fixed set and the usual
// what/where/fix. The daemon answers with it; jitterctl reads it and picks its exit code by the
// code.

#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace jitterd::protocol {

enum class ErrorCode {
  kParseError,      // the line is not JSON
  kInvalidRequest,  // the envelope is wrong
  kUnknownMethod,
  kInvalidParams,     // a parameter is missing, of the wrong type or out of range
  kPermissionDenied,  // the peer may not do this, or the interface is not allowed
  kNotFound,          // no such interface, profile, phase or session
  kConflict,          // the root qdisc belongs to someone else
  kKernelError,       // the kernel refused; the message keeps its extended-ACK text
  kSystemError,       // a system call failed in jitterd
  kTooLarge,          // the request line is longer than limits.max_request_bytes
  kBusy,              // too many connections
  kInternalError,     // a bug in jitterd
  kUnknown,           // read only: a code newer than this reader, or none
};

// The wire spelling: "parse-error", "invalid-request" ...; kUnknown is "unknown".
std::string_view to_string(ErrorCode code);
// kUnknown for a spelling this reader does not know.
ErrorCode error_code_from_string(std::string_view text);
// A code equals its wire spelling, so that tests and messages may name codes as the protocol does.
bool operator==(ErrorCode code, std::string_view text);
std::ostream& operator<<(std::ostream& out, ErrorCode code);

// The `error` member of a reply that is not ok.
struct Error {
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;
  std::string where;  // a JSON pointer into the request; empty: not about one member
  std::string hint;   // how to fix it; empty: nothing to add
};
// where and hint are left out when empty.
void to_json(nlohmann::json& j, const Error& e);

}  // namespace jitterd::protocol
