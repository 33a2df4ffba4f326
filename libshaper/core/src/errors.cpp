#include "shaper/errors.hpp"

#include <openssl/err.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace shaper {

namespace {

std::string what_for(const std::string& operation, const std::string& object,
                     const std::string& cause) {
  std::string out = operation;
  if (!object.empty()) out += " (" + object + ")";
  return out + ": " + cause;
}

// "Invalid argument: netem: negative latency. Load sch_netem ..." — one sentence per part.
std::string netlink_cause(int error_number, const std::string& kernel_message,
                          const std::string& hint) {
  std::string out = std::strerror(error_number);
  if (!kernel_message.empty()) out += ": " + kernel_message;
  if (!hint.empty()) {
    if (out.back() != '.') out += '.';
    out += ' ';
    out += hint;
  }
  return out;
}

class JitterdCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "jitterd"; }
  std::string message(int value) const override {
    switch (static_cast<Errc>(value)) {
      case Errc::kNotOurs:
        return "not jitterd's";
      case Errc::kCryptoFailed:
        return "libcrypto failed";
      case Errc::kProtocolBroken:
        return "protocol broken";
    }
    return "unknown jitterd error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& jitterd_category() noexcept {
  static const JitterdCategory category;
  return category;
}

std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), jitterd_category()};
}

EnvironmentError::EnvironmentError(std::error_code code, std::string text)
    : std::system_error(code), text_(std::make_shared<const std::string>(std::move(text))) {}

SystemError::SystemError(std::string operation, std::string object, int error_number,
                         std::string hint)
    : EnvironmentError(std::error_code(error_number, std::system_category()),
                       what_for(operation, object, std::strerror(error_number))),
      operation_(std::move(operation)),
      object_(std::move(object)),
      errno_(error_number),
      hint_(std::move(hint)) {}

NetlinkError::NetlinkError(std::string operation, std::string object, int error_number,
                           std::string kernel_message, std::string hint)
    : EnvironmentError(
          std::error_code(error_number, std::system_category()),
          what_for(operation, object, netlink_cause(error_number, kernel_message, hint))),
      operation_(std::move(operation)),
      object_(std::move(object)),
      errno_(error_number),
      kernel_message_(std::move(kernel_message)),
      hint_(std::move(hint)) {}

std::string NetlinkError::without_hint() const {
  return what_for(operation_, object_, netlink_cause(errno_, kernel_message_, {}));
}

NetlinkError with_missing_part_hint(const NetlinkError& e, const std::string& part,
                                    const std::string& modules) {
  if (!e.hint().empty() || (e.error_number() != ENOENT && e.error_number() != EOPNOTSUPP)) return e;
  const std::string& m = e.kernel_message();
  const bool says_missing = m.empty() || m.find("nknown") != std::string::npos ||
                            m.find("not found") != std::string::npos ||
                            m.find("Failed to load") != std::string::npos;
  if (!says_missing) return e;
  const bool several = modules.find(' ') != std::string::npos;
  return NetlinkError(
      e.operation(), e.object(), e.error_number(), e.kernel_message(),
      "This kernel lacks " + part + " (" + (several ? "modules " : "module ") + modules +
          "): load " + (several ? "them" : "it") + " with `modprobe " + (several ? "-a " : "") +
          modules +
          "` (shaping a whole interface's egress without the SSH guard needs netem alone)");
}

long check_syscall(long result, const std::string& operation, const std::string& object) {
  if (result == -1) throw SystemError(operation, object, errno);
  return result;
}

void check_openssl(int result, std::string_view operation, std::string_view object) {
  if (result == 1) return;
  // Every reason queued, oldest first ("; " between them); the queue is libcrypto's own, at most 16
  // entries, and this empties it so that the next failure does not repeat these.
  std::string cause;
  for (unsigned long code = ERR_get_error(); code != 0; code = ERR_get_error()) {
    char text[256];  // ERR_error_string_n's documented size for its longest line
    ERR_error_string_n(code, text, sizeof text);
    if (!cause.empty()) cause += "; ";
    cause += text;
  }
  if (cause.empty()) cause = "libcrypto failed without a reason";
  throw CryptoError(what_for(std::string(operation), std::string(object), cause));
}

}  // namespace shaper
