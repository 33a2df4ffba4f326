#include "ledger.hpp"

#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"

namespace jitterd {
namespace {

using json = nlohmann::json;
using shaper::check_syscall;

std::string key_of(int index, const std::string& direction, const std::string& set) {
  return std::to_string(index) + "/" + direction + "/" + set;
}

}  // namespace

Ledger::Ledger(std::string state_dir) : state_dir_(std::move(state_dir)) {}

LedgerContents Ledger::load(std::string* problem) const {
  std::ifstream in(path());
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, false);
  LedgerContents out;
  if (j.is_discarded() || !j.is_object() || !j.contains("interfaces") || !j["interfaces"].is_array()) {
    if (problem) *problem = path() + " is not a jitterd ledger; relying on the handle scan";
    return out;
  }
  for (const auto& e : j["interfaces"]) {
    if (!e.is_object() || !e.contains("index") || !e["index"].is_number_integer()) continue;
    LedgerEntry entry;
    entry.index = e["index"].get<int>();
    entry.interface = e.value("interface", "");
    entry.profile = e.value("profile", "");
    entry.digest = e.value("digest", "");
    entry.phase = e.value("phase", "");
    entry.direction = e.value("direction", "egress");
    entry.set = e.value("set", "");
    out.sessions.push_back(std::move(entry));
  }
  if (j.contains("offloads") && j["offloads"].is_array()) {
    for (const auto& e : j["offloads"]) {
      if (!e.is_object() || !e.contains("index") || !e["index"].is_number_integer()) continue;
      out.offloads.push_back(LedgerOffloads{e["index"].get<int>(), e.value("interface", ""), e.value("tso", false),
                                            e.value("gso", false), e.value("gro", false)});
    }
  }
  return out;
}

void Ledger::record(const LedgerEntry& entry) {
  entries_[key_of(entry.index, entry.direction, entry.set)] = entry;
  write();
}

void Ledger::erase(int index, const std::string& direction, const std::string& set) {
  if (entries_.erase(key_of(index, direction, set))) write();
}

void Ledger::erase(int index) {
  const std::size_t erased =
      std::erase_if(entries_, [&](const auto& entry) { return entry.second.index == index; }) +
      offloads_.erase(index);
  if (erased) write();
}

void Ledger::record_offloads(const LedgerOffloads& saved) {
  offloads_[saved.index] = saved;
  write();
}

void Ledger::write() const {
  json j = {{"version", 1}, {"pid", ::getpid()}, {"interfaces", json::array()}};
  for (const auto& [key, e] : entries_) {
    j["interfaces"].push_back({{"index", e.index},
                               {"interface", e.interface},
                               {"direction", e.direction},
                               {"set", e.set},
                               {"profile", e.profile},
                               {"digest", e.digest},
                               {"phase", e.phase}});
  }
  if (!offloads_.empty()) {
    j["offloads"] = json::array();
    for (const auto& [index, o] : offloads_) {
      j["offloads"].push_back(
          {{"index", o.index}, {"interface", o.interface}, {"tso", o.tso}, {"gso", o.gso}, {"gro", o.gro}});
    }
  }
  const std::string text = j.dump(2) + "\n";
  const std::string tmp = path() + ".tmp";
  {
    const shaper::UniqueFd fd(static_cast<int>(
        check_syscall(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), "open", tmp)));
    std::size_t done = 0;
    while (done < text.size()) {
      const long n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      done += static_cast<std::size_t>(check_syscall(n, "write", tmp));
    }
    check_syscall(::fsync(fd.get()), "fsync", tmp);
  }
  check_syscall(::rename(tmp.c_str(), path().c_str()), "rename", tmp + " -> " + path());
}

}  // namespace jitterd
