#pragma once
// jitterctl's exit codes, shared by the offline and the online commands. Documented in
// `jitterctl --help` and docs/jitterctl.md; scripts depend on them, so they never change meaning.

namespace jitterctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerdictFail =
    1;                                // validate: the profile or the shaped link failed a threshold
inline constexpr int kExitUsage = 2;  // bad command line
inline constexpr int kExitBadInput =
    3;  // a capture, profile or request with errors (jitterd's too)
inline constexpr int kExitEnvironment =
    4;  // a file, jitterd unreachable, the kernel or jitterd failing
inline constexpr int kExitPermission =
    5;                                   // jitterd refused: not allowed for this user or interface
inline constexpr int kExitConflict = 6;  // the interface's root qdisc is someone else's (--force)
// fleet: a change did not land on every host and at least one host that took it could not be put
// back: the fleet is not whole (the report names each host's state).
inline constexpr int kExitFleetNotWhole = 7;

}  // namespace jitterctl
