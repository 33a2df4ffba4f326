#pragma once
// Reading protocol messages into this library's structs: lenient where jitterd may grow (unknown
// members are ignored, absent or null members take their defaults) and strict about types. A member
// of the wrong type goes to the reader's WrongType handler with its JSON pointer
// ("/sessions/0/time_in_phase_ns", "an integer"), which throws what its caller catches.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "protocol/values.hpp"

namespace jitterd::protocol {

using Json = nlohmann::json;

// Reports a member of the wrong type by throwing: its pointer, what was expected, what was found.
using WrongType = void (*)(const std::string& pointer, const char* expected, const Json& found);

// What from_json throws for a member of the wrong type: "<pointer>: expected <what>".
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throw_wire_error(const std::string& pointer, const char* expected,
                                   const Json& found);

// The members of one JSON object, read by name with the object's pointer kept for messages.
class Members {
 public:
  Members(const Json& object, std::string pointer, WrongType wrong_type);

  const std::string& pointer() const { return pointer_; }
  std::string pointer(const char* key) const { return pointer_ + "/" + key; }
  WrongType on_wrong_type() const { return wrong_type_; }
  [[noreturn]] void wrong(const std::string& pointer, const char* expected,
                          const Json& found) const;

  // Absent and null members are "not there".
  const Json* get(const char* key) const;
  std::string text(const char* key) const;
  std::optional<std::int64_t> optional_integer(const char* key) const;
  std::int64_t integer(const char* key) const { return optional_integer(key).value_or(0); }
  std::optional<std::uint64_t> optional_count(const char* key) const;  // an integer >= 0
  std::uint64_t count(const char* key) const { return optional_count(key).value_or(0); }
  std::optional<bool> optional_flag(const char* key) const;
  bool flag(const char* key) const { return optional_flag(key).value_or(false); }
  // Durations in replies are integers in nanoseconds, in members named *_ns.
  std::optional<Nanoseconds> optional_duration(const char* key) const;
  Nanoseconds duration(const char* key) const {
    return optional_duration(key).value_or(Nanoseconds(0));
  }
  std::optional<Stamp> time(const char* key) const;
  std::vector<std::string> strings(const char* key) const;

  // The member `key` read as a T (read_members(Members, T&)); nullopt when absent.
  template <typename T>
  std::optional<T> object(const char* key) const;
  // Every element of the array `key` read as a T; none when absent.
  template <typename T>
  std::vector<T> array(const char* key) const;

 private:
  const Json& object_;
  std::string pointer_;
  WrongType wrong_type_;
};

void read_members(const Members& m, Stamp& out);

template <typename T>
concept ReadFromMembers = requires(const Members& m, T& out) {
  read_members(m, out);
};

// `j` (at `pointer` in its message) as a T.
template <ReadFromMembers T>
T read_as(const Json& j, std::string pointer, WrongType wrong_type) {
  T out;
  read_members(Members(j, std::move(pointer), wrong_type), out);
  return out;
}

// For nlohmann's j.get<T>(): the pointer is relative to `j`, the error a WireError.
template <ReadFromMembers T>
void from_json(const Json& j, T& out) {
  out = read_as<T>(j, "", throw_wire_error);
}

template <typename T>
std::optional<T> Members::object(const char* key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  return read_as<T>(*v, pointer(key), wrong_type_);
}

template <typename T>
std::vector<T> Members::array(const char* key) const {
  std::vector<T> out;
  const Json* v = get(key);
  if (!v) return out;
  if (!v->is_array()) wrong(pointer(key), "an array", *v);
  for (std::size_t i = 0; i < v->size(); ++i) {
    out.push_back(read_as<T>((*v)[i], pointer(key) + "/" + std::to_string(i), wrong_type_));
  }
  return out;
}

}  // namespace jitterd::protocol
