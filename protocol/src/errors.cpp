#include "protocol/errors.hpp"

#include <nlohmann/json.hpp>
#include <ostream>

namespace jitterd::protocol {
namespace {

struct Spelling {
  ErrorCode code;
  std::string_view text;
};

constexpr Spelling kSpellings[] = {
    {ErrorCode::kParseError, "parse-error"},
    {ErrorCode::kInvalidRequest, "invalid-request"},
    {ErrorCode::kUnknownMethod, "unknown-method"},
    {ErrorCode::kInvalidParams, "invalid-params"},
    {ErrorCode::kPermissionDenied, "permission-denied"},
    {ErrorCode::kNotFound, "not-found"},
    {ErrorCode::kConflict, "conflict"},
    {ErrorCode::kKernelError, "kernel-error"},
    {ErrorCode::kSystemError, "system-error"},
    {ErrorCode::kTooLarge, "too-large"},
    {ErrorCode::kBusy, "busy"},
    {ErrorCode::kInternalError, "internal-error"},
};

}  // namespace

std::string_view to_string(ErrorCode code) {
  for (const auto& s : kSpellings) {
    if (s.code == code) return s.text;
  }
  return "unknown";
}

ErrorCode error_code_from_string(std::string_view text) {
  for (const auto& s : kSpellings) {
    if (s.text == text) return s.code;
  }
  return ErrorCode::kUnknown;
}

bool operator==(ErrorCode code, std::string_view text) {
  return to_string(code) == text;
}

std::ostream& operator<<(std::ostream& out, ErrorCode code) {
  return out << to_string(code);
}

void to_json(nlohmann::json& j, const Error& e) {
  j = {{"code", to_string(e.code)}, {"message", e.message}};
  if (!e.where.empty()) j["where"] = e.where;
  if (!e.hint.empty()) j["hint"] = e.hint;
}

}  // namespace jitterd::protocol
