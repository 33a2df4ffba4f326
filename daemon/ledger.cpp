#include "ledger.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shaper/errors.hpp"
#include "shaper/files.hpp"
#include "shaper/json_reader.hpp"
#include "unix_peer.hpp"

namespace jitterd {
namespace {

using json = nlohmann::json;

std::string key_of(int index, const std::string& direction, const std::string& set) {
  return std::to_string(index) + "/" + direction + "/" + set;
}

// How to fix a state folder that failed with `error`, and why it matters.
std::string state_folder_hint(int error, const std::string& state_dir) {
  std::string fix;
  switch (error) {
    case EROFS:
      fix = state_dir + " is on a read-only file system: remount it read-write";
      break;
    case ENOSPC:
    case EDQUOT:
      fix = "the file system of " + state_dir + " is full: free some space there";
      break;
    case EACCES:
    case EPERM:
      fix = "jitterd (uid " + std::to_string(::geteuid()) + ") may not write in " + state_dir +
            ": give it the folder (chown)";
      break;
    default:
      fix = "check " + state_dir;
      break;
  }
  return fix +
         ", or set state_dir in the config (or --state-dir) to a folder jitterd can write. jitterd "
         "changes no "
         "shaping it cannot record there: the next start reads the ledger to remove what a crash "
         "left";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The state folder's lock

StateFolderLock StateFolderLock::acquire(const std::string& state_dir) {
  if (::mkdir(state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    const int error = errno;
    throw shaper::SystemError("create the state folder", state_dir, error,
                              state_folder_hint(error, state_dir));
  }
  const std::string path = state_dir + "/jitterd.lock";
  shaper::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) {
    const int error = errno;
    throw shaper::SystemError("open the state folder's lock", path, error,
                              state_folder_hint(error, state_dir));
  }
  // A POSIX record lock rather than flock(): F_GETLK names the holder. The process opens this file
  // once and keeps it open, so the record lock's one pitfall (any close() of the file drops it)
  // cannot bite.
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_SETLK, &lock) != 0) {
    const int error = errno;
    if (error != EAGAIN && error != EACCES) {
      throw shaper::SystemError("lock the state folder", path, error,
                                state_folder_hint(error, state_dir));
    }
    // The kernel names the holder (0 when it lives in another pid namespace); else what it wrote
    // here.
    pid_t holder = 0;
    struct flock query = lock;
    if (::fcntl(fd.get(), F_GETLK, &query) == 0 && query.l_type != F_UNLCK) holder = query.l_pid;
    if (holder <= 0) {
      std::ifstream in(path);
      long written = 0;
      if (in >> written && written > 0) holder = static_cast<pid_t>(written);
    }
    throw shaper::SystemError(
        "another jitterd" + describe_pid(holder) + " holds the state folder", path, error,
        "only one jitterd may use a state folder (and a socket): stop the other one first (" +
            (holder > 0 ? "kill " + std::to_string(holder) + ", or " : std::string()) +
            "systemctl stop jitterd), or give this one a state_dir and socket.path of its own");
  }
  // For people, and for a refusal whose kernel cannot name the holder (above).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int error = errno;
    throw shaper::SystemError("write the state folder's lock", path, error,
                              state_folder_hint(error, state_dir));
  }
  return StateFolderLock(std::move(fd), path);
}

// ---------------------------------------------------------------------------------------------
// The ledger

Ledger::Ledger(std::string state_dir) : state_dir_(std::move(state_dir)) {}

Ledger::Ledger(std::string state_dir, const LedgerTarget& target)
    : state_dir_(std::move(state_dir)),
      file_(std::string(kTargetPrefix) + std::to_string(target.device) + "-" +
            std::to_string(target.inode) + ".json"),
      target_(target) {}

void Ledger::discard() const {
  ::unlink(path().c_str());
}

shaper::Expected<LedgerContents> Ledger::load() const {
  return load_file(path());
}

shaper::Expected<LedgerContents> Ledger::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return LedgerContents{};
  std::stringstream text;
  text << in.rdbuf();
  // Bounded like every other JSON jitterd reads: a ledger damaged into deep nesting must not take
  // the daemon down at start-up, when it is needed to clean up.
  const shaper::JsonDocument doc = shaper::parse_json_bounded(text.str());
  const json& j = doc.value;
  LedgerContents out;
  if (doc.problem != shaper::JsonProblem::kNone || !j.is_object() || !j.contains("interfaces") ||
      !j["interfaces"].is_array()) {
    return {std::move(out),
            shaper::Diagnostics{{"", path + " is not a jitterd ledger" +
                                         (doc.problem != shaper::JsonProblem::kNone
                                              ? " (" + doc.where + ": " + doc.message + ")"
                                              : std::string()) +
                                         "; relying on the handle scan"}}};
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
      out.offloads.push_back(LedgerOffloads{e["index"].get<int>(), e.value("interface", ""),
                                            e.value("tso", false), e.value("gso", false),
                                            e.value("gro", false)});
    }
  }
  if (j.contains("target") && j["target"].is_object()) {
    const json& t = j["target"];
    LedgerTarget target;
    target.kind = t.value("kind", "");
    target.name = t.value("name", "");
    target.path = t.value("path", "");
    target.device = t.value("device", std::uint64_t{0});
    target.inode = t.value("inode", std::uint64_t{0});
    target.cookie = t.value("cookie", std::uint64_t{0});
    out.target = std::move(target);
  }
  return out;
}

void Ledger::record(const LedgerEntry& entry) {
  record(std::vector<LedgerEntry>{entry});
}

void Ledger::record(const std::vector<LedgerEntry>& entries) {
  Entries before = entries_;
  for (const auto& entry : entries)
    entries_[key_of(entry.index, entry.direction, entry.set)] = entry;
  try {
    write();
  } catch (...) {
    entries_ = std::move(before);
    throw;
  }
}

void Ledger::put_back(const std::vector<LedgerEntry>& recorded, const Entries& before) {
  for (const auto& entry : recorded) {
    const std::string key = key_of(entry.index, entry.direction, entry.set);
    if (auto it = before.find(key); it != before.end()) {
      entries_[key] = it->second;
    } else {
      entries_.erase(key);
    }
  }
  dirty_ = true;
  write();
}

void Ledger::erase(int index, const std::string& direction, const std::string& set) {
  if (!entries_.erase(key_of(index, direction, set))) return;
  dirty_ = true;
  write();
}

void Ledger::erase(int index) {
  const std::size_t erased =
      std::erase_if(entries_, [&](const auto& entry) { return entry.second.index == index; }) +
      offloads_.erase(index);
  if (!erased) return;
  dirty_ = true;
  write();
}

bool Ledger::names_lane(const LedgerEntry& entry) const {
  const auto it = entries_.find(key_of(entry.index, entry.direction, entry.set));
  if (it == entries_.end()) return false;
  const LedgerEntry& e = it->second;
  return e.interface == entry.interface && e.profile == entry.profile && e.digest == entry.digest;
}

void Ledger::note_phase(const LedgerEntry& entry) {
  const auto it = entries_.find(key_of(entry.index, entry.direction, entry.set));
  if (it == entries_.end()) return;
  if (it->second.phase != entry.phase) {
    it->second.phase = entry.phase;
    dirty_ = true;
  }
}

void Ledger::flush() {
  if (dirty_) write();
}

void Ledger::record_offloads(const LedgerOffloads& saved) {
  const auto before = offloads_;
  offloads_[saved.index] = saved;
  try {
    write();
  } catch (...) {
    offloads_ = before;
    throw;
  }
}

void Ledger::forget_offloads(int index) {
  if (!offloads_.erase(index)) return;
  dirty_ = true;
  write();
}

void Ledger::write() {
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
      j["offloads"].push_back({{"index", o.index},
                               {"interface", o.interface},
                               {"tso", o.tso},
                               {"gso", o.gso},
                               {"gro", o.gro}});
    }
  }
  if (target_) {
    j["target"] = {{"kind", target_->kind},   {"name", target_->name},
                   {"path", target_->path},   {"device", target_->device},
                   {"inode", target_->inode}, {"cookie", target_->cookie}};
  }
  const std::string text = j.dump(2) + "\n";
  // Through a private temporary renamed into place (shaper::OutputFile): a reader, or jitterd after
  // a crash, finds the old ledger or the whole new one; on failure the temporary goes, since half
  // of a ledger helps nobody and on a full disk it holds the room the next attempt needs.
  try {
    shaper::write_file_atomically(path(), text, 0644);
  } catch (const shaper::SystemError& e) {
    // Named by the ledger's own path: the temporary's random name would tell an operator nothing.
    throw shaper::SystemError(e.operation() + " the ledger", path(), e.error_number(),
                              state_folder_hint(e.error_number(), state_dir_));
  }
  dirty_ = false;
  ++writes_;
}

}  // namespace jitterd
