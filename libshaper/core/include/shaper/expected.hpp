#pragma once
// The one form of a result read from user data (a profile, an address, a request): a value or not,
// and the diagnostics that say why not. Environment failures are exceptions instead
// (shaper/errors.hpp); docs/architecture.md, "Errors", says which is which.
//
//   Expected<IpPrefix> prefix = parse_ip_prefix("10.0.0.0/33");
//   if (!prefix) return prefix.diagnostics();  // "/33 is not a prefix length: 0 to 32 for IPv4"
//   use(*prefix);
//
// With E = Diagnostics (the default), a value may come with warnings (what was odd but accepted),
// and no value always comes with at least one error. Another E (the daemon's RequestError: one
// error with its protocol code) is the reason there is no value, and is default-constructed beside
// a value. Reading the value of an Expected that has none is a broken invariant: it aborts.

#include <concepts>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

#include "shaper/diagnostics.hpp"

namespace shaper {

template <typename T, typename E = Diagnostics>
class Expected {
 public:
  using value_type = T;
  using error_type = E;

  // A value: `return profile;`. Anything T is built from converts, except an E, which is a failure.
  template <typename U = T>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::remove_cvref_t<U>, Expected> &&
           !std::is_same_v<std::remove_cvref_t<U>, E>) Expected(U&& value)
      : value_(std::forward<U>(value)) {}  // NOLINT: implicit, as `return x;` reads

  // A value with the warnings that came with it (Diagnostics only).
  Expected(T value, Diagnostics warnings) requires std::same_as<E, Diagnostics>
      : value_(std::move(value)), error_(std::move(warnings)) {}

  // No value, and why: `return diagnostics;`, `return RequestError{...};`.
  Expected(E error) : error_(std::move(error)) {}  // NOLINT: implicit, as `return e;` reads

  bool has_value() const { return value_.has_value(); }
  explicit operator bool() const { return has_value(); }

  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Expected*>(this)->checked(); }
  T&& operator*() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Expected*>(this)->checked(); }

  // Why there is no value; beside a value, the warnings (Diagnostics) or a default E.
  const E& error() const& { return error_; }
  E& error() & { return error_; }
  E&& error() && { return std::move(error_); }

  // The same as error(), under the name that reads where E is Diagnostics.
  const Diagnostics& diagnostics() const& requires std::same_as<E, Diagnostics> { return error_; }
  Diagnostics& diagnostics() & requires std::same_as<E, Diagnostics> { return error_; }

  // The value moved out, nullopt when there is none: for callers that keep it in an optional.
  std::optional<T> take_value() && { return std::move(value_); }

 private:
  T& checked() {
    if (!value_) std::abort();  // a caller read a value without testing for it
    return *value_;
  }

  std::optional<T> value_;
  E error_{};
};

}  // namespace shaper
