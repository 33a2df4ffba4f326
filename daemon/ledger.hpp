#pragma once
// The ledger: what this jitterd has installed, kept in <state_dir>/state.json and rewritten (atomically:
// temporary file, fsync, rename) on every install and removal, so that the next start after a crash or
// kill -9 knows what was left behind. The kernel is the authority (the reserved handle 1a7e: marks our
// qdiscs); the ledger adds what the kernel cannot say: which profile and phase were running.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace jitterd {

struct LedgerEntry {
  int index = 0;
  std::string interface;
  std::string direction = "egress";
  std::string set;  // "" = the whole direction
  std::string profile;
  std::string digest;
  std::string phase;
  friend bool operator==(const LedgerEntry&, const LedgerEntry&) = default;
};

// Offload settings jitterd turned off on an interface, to restore after a crash.
struct LedgerOffloads {
  int index = 0;
  std::string interface;
  bool tso = false;
  bool gso = false;
  bool gro = false;
  friend bool operator==(const LedgerOffloads&, const LedgerOffloads&) = default;
};

struct LedgerContents {
  std::vector<LedgerEntry> sessions;
  std::vector<LedgerOffloads> offloads;
};

class Ledger {
 public:
  explicit Ledger(std::string state_dir);

  // What a previous process left (empty when there is no state file). A file that cannot be parsed is
  // reported in `problem` and treated as empty: the handle scan still finds the qdiscs.
  LedgerContents load(std::string* problem) const;

  // Writes the ledger as it stands (at startup: proves the state folder is writable before anything is
  // installed, and replaces what the previous process left once recovery has dealt with it).
  void save() const { write(); }

  void record(const LedgerEntry& entry);
  // One session (interface, direction, set), or everything recorded for an interface.
  void erase(int index, const std::string& direction, const std::string& set);
  void erase(int index);
  void record_offloads(const LedgerOffloads& saved);
  const std::map<std::string, LedgerEntry>& entries() const { return entries_; }

  std::string path() const { return state_dir_ + "/state.json"; }

 private:
  // Throws shaper::SystemError: a daemon that cannot keep its ledger must say so.
  void write() const;

  std::string state_dir_;
  // By "<index>/<direction>/<set>".
  std::map<std::string, LedgerEntry> entries_;
  std::map<int, LedgerOffloads> offloads_;
};

}  // namespace jitterd
