#include "shaper/json_reader.hpp"

#include <algorithm>

#include "shaper/profile.hpp"

namespace shaper {

std::string pointer_escape(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_syntax_error(std::string_view text, std::size_t* byte) {
  try {
    const auto parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::parse_error& e) {
    if (byte) *byte = e.byte;
    return e.what();
  }
  return {};
}

bool JsonReader::object(const json& j, const std::string& pointer, std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) {
    error(pointer, "expected an object, found " + std::string(j.type_name()));
    return false;
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      error(pointer + "/" + pointer_escape(key), "unknown key; expected one of: " + list);
    }
  }
  return true;
}

const JsonReader::json* JsonReader::member(const json& obj, const std::string& pointer, const char* key,
                                           bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) error(pointer + "/" + key, "missing; this member is required");
    return nullptr;
  }
  return &*it;
}

std::optional<Probability> JsonReader::probability(const json& obj, const std::string& pointer, const char* key) {
  const json* v = member(obj, pointer, key, false);
  if (!v) return Probability::zero();
  if (!v->is_number()) {
    error(pointer + "/" + key, "expected a probability between 0 and 1, found " + std::string(v->type_name()));
    return std::nullopt;
  }
  const double d = v->get<double>();
  auto p = Probability::make(d);
  if (!p) error(pointer + "/" + key, json(d).dump() + " is not a probability; expected 0 to 1 (0.01 is 1%)");
  return p;
}

std::optional<Nanoseconds> JsonReader::duration(const json& obj, const std::string& pointer, const char* key,
                                                bool required) {
  const json* v = member(obj, pointer, key, required);
  if (!v) return required ? std::nullopt : std::optional<Nanoseconds>(Nanoseconds(0));
  if (v->is_string()) {
    if (auto d = parse_duration(v->get<std::string>())) return d;
  }
  error(pointer + "/" + key,
        "expected a duration such as \"20ms\", \"1.5s\", \"250us\" or \"100ns\", found " + v->dump());
  return std::nullopt;
}

std::optional<bool> JsonReader::boolean(const json& obj, const std::string& pointer, const char* key, bool fallback) {
  const json* v = member(obj, pointer, key, false);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    error(pointer + "/" + key, "expected true or false, found " + v->dump());
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> JsonReader::string(const json& obj, const std::string& pointer, const char* key,
                                              bool required, std::size_t max_length) {
  const json* v = member(obj, pointer, key, required);
  if (!v) return required ? std::nullopt : std::optional<std::string>("");
  if (!v->is_string()) {
    error(pointer + "/" + key, "expected a string, found " + std::string(v->type_name()));
    return std::nullopt;
  }
  std::string s = v->get<std::string>();
  if (s.size() > max_length) {
    error(pointer + "/" + key, "is " + std::to_string(s.size()) + " characters long; at most " +
                                   std::to_string(max_length) + " are allowed");
    return std::nullopt;
  }
  return s;
}

}  // namespace shaper
