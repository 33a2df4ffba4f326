#pragma once
// Debian's real sshd (openssh-server) in a network namespace, for the tests that reach jitterd over
// SSH (remote_ssh_test.cpp, fleet_test.cpp), and the ssh command line that logs in to it.
//
// sshd runs in a mount namespace of its own (unshare -m) where a copy of /etc/passwd is bound over
// /etc/passwd, so the host's files are left alone. The copy gives root the shell /bin/sh: sshd runs
// every command with the user's shell, and Debian's bash sources ~/.bashrc when sshd starts it;
// this machine's /root/.bashrc runs `pyenv init -` and more, which made each login take 4 s in an
// idle UML guest and 10-16 s beside a build (docs/testing.md, "ssh in the bed"). It also adds
// "jtremote" (uid/gid 65534, shell /bin/sh), a user outside jitterd's socket group: nobody's shell
// is nologin. `SetEnv PATH=` puts the built jitterctl first in the remote PATH, so the remote
// command is the plain "jitterctl proxy".

#include <optional>
#include <string>

#include "e2e_support.hpp"

namespace jitterd_e2e {

// Why the SSH tests cannot run here (sshd, ssh or ssh-keygen missing), or nullopt.
std::optional<std::string> ssh_unavailable_reason();

// A key pair without a passphrase, made with ssh-keygen in `dir` as `name` and `name`.pub; throws
// std::runtime_error when ssh-keygen fails.
struct SshKey {
  SshKey(const std::string& dir, const std::string& name);
  std::string private_path;
  std::string public_text;  // the .pub file's line
};

class SshServer {
 public:
  // sshd for `netns`, listening on address:port, with its config, host key and log in `dir`, and
  // `client` the one key it lets in (for root and jtremote). Nothing runs until start().
  SshServer(std::string dir, std::string netns, std::string address, int port,
            const SshKey& client);
  SshServer(const SshServer&) = delete;
  SshServer& operator=(const SshServer&) = delete;
  // SIGTERM, then SIGKILL with the Process.
  ~SshServer();

  // Starts sshd and returns when it listens; throws std::runtime_error with its log when it ends or
  // does not listen within 20 s.
  void start();
  std::string log() const;
  // Its key list (replaced whole: "" lets nobody in).
  void authorize(const std::string& public_keys);
  // ssh://USER@ADDRESS:PORT, then `socket` (a path starting with '/').
  std::string url(const std::string& user, const std::string& socket) const;

 private:
  std::string dir_;
  std::string netns_;
  std::string address_;
  int port_;
  std::optional<Process> sshd_;
};

// The ssh command line for $JITTERD_SSH: `client`'s key only, no config files, known hosts in
// `known_hosts` (accepted on first use).
std::string ssh_command(const SshKey& client, const std::string& known_hosts);

}  // namespace jitterd_e2e
