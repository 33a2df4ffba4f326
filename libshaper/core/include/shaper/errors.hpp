#pragma once
// Environment failures (a syscall, a netlink request, the kernel refusing something) are exceptions
// that name the operation and the object and keep the kernel's own words. They are caught in two
// places only: the daemon's control session and each program's main(). Every one is an
// EnvironmentError, a std::system_error: code() is the errno where there is one
// (std::system_category()) and one of jitterd's own Errc values otherwise. Bad user data is never
// thrown: it comes back as diagnostics (shaper/expected.hpp).

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace shaper {

// The causes of environment failures that have no errno.
enum class Errc {
  kNotOurs = 1,     // the object is someone else's or in a state jitterd did not leave it in
  kCryptoFailed,    // libcrypto refused; its own reasons are in the text
  kProtocolBroken,  // a peer (jitterd, for jitterctl) broke the control protocol
};

// The category of Errc, named "jitterd".
const std::error_category& jitterd_category() noexcept;
std::error_code make_error_code(Errc e) noexcept;

// The base of every environment exception. what() is exactly `text`, with nothing appended:
// std::system_error's own what() would add ": <code's message>", and the texts are part of the
// interface (replies, jitterctl's output, the troubleshooting guide quote them).
class EnvironmentError : public std::system_error {
 public:
  EnvironmentError(std::error_code code, std::string text);
  const char* what() const noexcept override { return text_->c_str(); }

 private:
  // Shared, so that copying the exception (as throw and catch may) cannot throw.
  std::shared_ptr<const std::string> text_;
};

// A failed system call: "open (/run/jitterd/state.json): Permission denied". `hint` says how to fix
// the environment when the caller knows ("free some space in /run/jitterd ..."); it is not part of
// what(), so that the places that catch it can show it on a line (or in a member) of its own.
class SystemError : public EnvironmentError {
 public:
  SystemError(std::string operation, std::string object, int error_number, std::string hint = {});
  const std::string& operation() const { return operation_; }
  const std::string& object() const { return object_; }
  int error_number() const { return errno_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string operation_;
  std::string object_;
  int errno_;
  std::string hint_;
};

// A netlink request the kernel (or libnl) refused:
// "netem change (dev veth0 handle 1a7e:): Invalid argument: netem: negative latency".
// `kernel_message` is the extended-ACK text, empty when the kernel gave none; `hint` says how to
// fix the environment when we know (netem missing, no CAP_NET_ADMIN...).
class NetlinkError : public EnvironmentError {
 public:
  NetlinkError(std::string operation, std::string object, int error_number,
               std::string kernel_message, std::string hint = {});
  const std::string& operation() const { return operation_; }
  const std::string& object() const { return object_; }
  int error_number() const { return errno_; }
  const std::string& kernel_message() const { return kernel_message_; }
  const std::string& hint() const { return hint_; }
  // what() without the hint, for whoever shows the hint on its own (a reply's member, a "hint:"
  // line).
  std::string without_hint() const;

 private:
  std::string operation_;
  std::string object_;
  int errno_;
  std::string kernel_message_;
  std::string hint_;
};

// `e` with a hint when the kernel refused because it lacks a part jitterd needs: an unknown qdisc,
// classifier, action or link kind (ENOENT or EOPNOTSUPP, and a kernel message, if any, that says
// the kind is unknown or not found). `part` says what it is and what needs it ("the HTB qdisc, the
// root of a tree of rule sets"), `modules` the modules that provide it ("sch_htb", "cls_u32
// act_mirred"). Any other error comes back unchanged, as does one that already has a hint.
NetlinkError with_missing_part_hint(const NetlinkError& e, const std::string& part,
                                    const std::string& modules);

// A request the engine refuses before it reaches the kernel because it would touch something that
// is not ours or is in the wrong state ("root qdisc of eth0 is htb 1:, installed by someone else").
class OwnershipError : public EnvironmentError {
 public:
  explicit OwnershipError(std::string text)
      : EnvironmentError(make_error_code(Errc::kNotOurs), std::move(text)) {}
};

// A libcrypto (OpenSSL) call that failed, with the reasons libcrypto queued for it:
// "EVP_DigestInit_ex (SHA-256): error:0308010C:digital envelope routines::unsupported".
class CryptoError : public EnvironmentError {
 public:
  explicit CryptoError(std::string text)
      : EnvironmentError(make_error_code(Errc::kCryptoFailed), std::move(text)) {}
};

// The one checker for system calls: returns `result` when it is not -1, throws SystemError with
// errno otherwise.
long check_syscall(long result, const std::string& operation, const std::string& object);

// The one checker for libcrypto calls, which return 1 for success: throws CryptoError otherwise,
// emptying libcrypto's (per-thread) error queue into its text. string_view, not string: it runs
// once per chunk hashed, and "EVP_DigestUpdate" is one byte too long for std::string's in-place
// buffer.
void check_openssl(int result, std::string_view operation, std::string_view object);

}  // namespace shaper

template <>
struct std::is_error_code_enum<shaper::Errc> : std::true_type {};
