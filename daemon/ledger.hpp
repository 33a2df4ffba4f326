#pragma once
// The ledger: what this jitterd has installed, kept in <state_dir>/state.json and rewritten
// (atomically: temporary file, fsync, rename) on every install and removal, so that the next start
// after a crash or kill -9 knows what was left behind. The kernel is the authority (the reserved
// handle 1a7e: marks our qdiscs); the ledger adds what the kernel cannot say: which profile and
// phase were running.
//
// What the file must never miss is a lane: every lane is recorded before the kernel is asked to
// build it. A schedule's step within a lane already recorded changes only the phase's name, so it
// is noted in memory (note_phase) and written a little later by flush(), several steps at once:
// rewriting the file before every step put ~4 ms (TCG) on each 10 Hz deadline. After a kill -9 the
// file may then name the phase before the last steps (at most the flush delay old); the lanes it
// names are exact.
//
// The state folder belongs to one jitterd at a time: StateFolderLock holds a lock on
// <state_dir>/jitterd.lock for the life of the process, so a second jitterd refuses before its
// recovery could take the first one's qdiscs for leftovers or overwrite its ledger.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shaper/expected.hpp"
#include "shaper/files.hpp"

namespace jitterd {

// Creates the state folder if missing and takes it for this process until it ends (a POSIX record
// lock, released by the kernel when the process dies, kill -9 included; the file keeps the holder's
// pid for people). Throws shaper::SystemError with a hint when the folder cannot be created or
// written, or when another process holds it (named by its pid).
class StateFolderLock {
 public:
  static StateFolderLock acquire(const std::string& state_dir);
  std::string path() const { return path_; }

 private:
  StateFolderLock(shaper::UniqueFd fd, std::string path)
      : fd_(std::move(fd)), path_(std::move(path)) {}
  shaper::UniqueFd fd_;
  std::string path_;
};

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

// The target namespace a ledger of `--via inside` shaping belongs to (issue 23, part 4): its
// device and inode (the stat of its nsfs file, what `ip netns identify` compares) find it, whatever
// name or process now points there, and its cookie tells it from a newer namespace that was given
// the same inode; the rest says where to look for it first and how to name it in messages.
struct LedgerTarget {
  std::string kind;  // netns, netns-path, pid, container
  std::string name;  // as the request gave it
  std::string path;  // the nsfs file it was opened from (/run/netns/NAME, /proc/PID/ns/net)
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  // SO_NETNS_COOKIE (0: the kernel has none): an inode is given to the next namespace as soon as
  // this one is freed, a cookie never is.
  std::uint64_t cookie = 0;
  friend bool operator==(const LedgerTarget&, const LedgerTarget&) = default;
};

struct LedgerContents {
  std::vector<LedgerEntry> sessions;
  std::vector<LedgerOffloads> offloads;
  std::optional<LedgerTarget> target;  // a target's ledger (Ledger::for_target)
};

class Ledger {
 public:
  // By "<index>/<direction>/<set>".
  using Entries = std::map<std::string, LedgerEntry>;

  explicit Ledger(std::string state_dir);
  // The ledger of what is shaped inside a target namespace (`--via inside`): a file of its own in
  // the state folder, <state_dir>/<kTargetPrefix><device>-<inode>.json, naming the namespace.
  static constexpr std::string_view kTargetPrefix = "target-";
  Ledger(std::string state_dir, const LedgerTarget& target);
  // Reads a target ledger's file (a name the state folder listed); empty when unreadable, with a
  // warning, as load().
  static shaper::Expected<LedgerContents> load_file(const std::string& path);

  // What a previous process left (empty when there is no state file). A file that cannot be parsed
  // is treated as empty, with a warning saying so: the handle scan still finds the qdiscs. Always a
  // value.
  shaper::Expected<LedgerContents> load() const;

  // Writes the ledger as it stands (at startup: proves the state folder is writable before anything
  // is installed, and replaces what the previous process left once recovery has dealt with it).
  void save() { write(); }

  // Recording is all or nothing: when the file cannot be written, the ledger stays as it was (in
  // memory and on disk) and shaper::SystemError says why, with a hint. Callers record before they
  // install, so that nothing is ever shaped without an entry that names it.
  void record(const LedgerEntry& entry);
  void record(const std::vector<LedgerEntry>& entries);
  // Puts the lanes of `recorded` back as `before` (entries() before they were recorded) had them,
  // after the kernel refused what was recorded; every other lane stays as it is now (others
  // recorded in between, in the same batch, took effect). Kept in memory even when the write fails:
  // the file then names more than is installed, which recovery tolerates.
  void put_back(const std::vector<LedgerEntry>& recorded, const Entries& before);
  // One session (interface, direction, set), or everything recorded for an interface. Forgotten in
  // memory even when the write fails (the file then names more than is installed, as above).
  void erase(int index, const std::string& direction, const std::string& set);
  void erase(int index);
  // The offloads jitterd is about to turn off on an interface, written before it does (throws when
  // the file cannot be written, keeping the memory as it was); forget_offloads() drops the record
  // when turning them off failed (in memory even when that write fails, as erase()).
  void record_offloads(const LedgerOffloads& saved);
  void forget_offloads(int index);
  const Entries& entries() const { return entries_; }

  // Whether the file already names `entry`'s lane with its profile and digest (its phase aside):
  // then a change of phase there needs no write before the kernel is touched.
  bool names_lane(const LedgerEntry& entry) const;
  // A new phase on a lane that names_lane() (the caller checked, before the kernel took the
  // change): kept in memory for the next write. A lane the ledger does not name is left alone;
  // record() it instead.
  void note_phase(const LedgerEntry& entry);
  // Whether memory holds something the file does not (noted phases, or a write that failed).
  bool dirty() const { return dirty_; }
  // Writes the ledger if dirty(). Throws like record(); it stays dirty then.
  void flush();
  // Files written so far (each a whole rewrite).
  std::uint64_t writes() const { return writes_; }

  std::string path() const { return state_dir_ + "/" + file_; }
  // Removes the file (a target whose shaping ended: nothing left to recover). Failures are
  // ignored: a ledger naming nothing is harmless.
  void discard() const;

 private:
  // Throws shaper::SystemError with a hint: a daemon that cannot keep its ledger must say so.
  // Clears dirty() once the file says what memory does.
  void write();

  std::string state_dir_;
  std::string file_ = "state.json";
  std::optional<LedgerTarget> target_;
  Entries entries_;
  std::map<int, LedgerOffloads> offloads_;
  bool dirty_ = false;
  std::uint64_t writes_ = 0;
};

}  // namespace jitterd
