#include "protocol/reader.hpp"

#include <cstdlib>

namespace jitterd::protocol {

void throw_wire_error(const std::string& pointer, const char* expected, const Json&) {
  throw WireError((pointer.empty() ? std::string("/") : pointer) + ": expected " + expected);
}

Members::Members(const Json& object, std::string pointer, WrongType wrong_type)
    : object_(object), pointer_(std::move(pointer)), wrong_type_(wrong_type) {
  if (!object_.is_object()) wrong(pointer_, "an object", object_);
}

void Members::wrong(const std::string& pointer, const char* expected, const Json& found) const {
  wrong_type_(pointer, expected, found);
  std::abort();  // a WrongType handler that returns is a bug in its caller
}

const Json* Members::get(const char* key) const {
  const auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

std::string Members::text(const char* key) const {
  const Json* v = get(key);
  if (!v) return {};
  if (!v->is_string()) wrong(pointer(key), "a string", *v);
  return v->get<std::string>();
}

std::optional<std::int64_t> Members::optional_integer(const char* key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) wrong(pointer(key), "an integer", *v);
  return v->get<std::int64_t>();
}

std::optional<std::uint64_t> Members::optional_count(const char* key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned()) wrong(pointer(key), "a count (an integer >= 0)", *v);
  return v->get<std::uint64_t>();
}

std::optional<bool> Members::optional_flag(const char* key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong(pointer(key), "true or false", *v);
  return v->get<bool>();
}

std::optional<Nanoseconds> Members::optional_duration(const char* key) const {
  const auto ns = optional_integer(key);
  if (!ns) return std::nullopt;
  return Nanoseconds(*ns);
}

std::optional<Stamp> Members::time(const char* key) const {
  return object<Stamp>(key);
}

std::vector<std::string> Members::strings(const char* key) const {
  std::vector<std::string> out;
  const Json* v = get(key);
  if (!v) return out;
  if (!v->is_array()) wrong(pointer(key), "an array of strings", *v);
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) wrong(pointer(key) + "/" + std::to_string(i), "a string", (*v)[i]);
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

void read_members(const Members& m, Stamp& out) {
  out = {Nanoseconds(m.integer("monotonic_ns")), Nanoseconds(m.integer("realtime_ns"))};
}

}  // namespace jitterd::protocol
