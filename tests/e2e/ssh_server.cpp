#include "ssh_server.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace jitterd_e2e {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSshd = "/usr/sbin/sshd";
constexpr const char* kSsh = "/usr/bin/ssh";
constexpr const char* kKeygen = "/usr/bin/ssh-keygen";

void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

// /etc/passwd with root's shell /bin/sh (why: the header).
std::string with_root_shell_sh(const std::string& passwd) {
  std::string out;
  std::size_t at = 0;
  while (at < passwd.size()) {
    const std::size_t end = std::min(passwd.find('\n', at), passwd.size());
    std::string line = passwd.substr(at, end - at);
    if (line.rfind("root:", 0) == 0) line = line.substr(0, line.rfind(':') + 1) + "/bin/sh";
    out += line + '\n';
    at = end + 1;
  }
  return out;
}

}  // namespace

std::optional<std::string> ssh_unavailable_reason() {
  for (const char* tool : {kSshd, kSsh, kKeygen}) {
    if (::access(tool, X_OK) != 0)
      return std::string(tool) +
             " is not installed (scripts/setup installs openssh-server/-client)";
  }
  return std::nullopt;
}

SshKey::SshKey(const std::string& dir, const std::string& name) : private_path(dir + "/" + name) {
  const auto made =
      run_to_completion({kKeygen, "-q", "-t", "ed25519", "-N", "", "-f", private_path});
  if (made.exit_code != 0) throw std::runtime_error("ssh-keygen " + private_path + ": " + made.err);
  public_text = read_file(private_path + ".pub");
}

SshServer::SshServer(std::string dir, std::string netns, std::string address, int port,
                     const SshKey& client)
    : dir_(std::move(dir)), netns_(std::move(netns)), address_(std::move(address)), port_(port) {
  const SshKey host(dir_, "host_key");
  authorize(client.public_text);
  const std::string ctl = jitterctl_binary();
  write_text(dir_ + "/sshd_config",
             "Port " + std::to_string(port_) + "\nListenAddress " + address_ + "\nHostKey " +
                 host.private_path + "\nPidFile none\nAuthorizedKeysFile " + dir_ +
                 "/authorized_keys\nStrictModes no\nUsePAM no\n"
                 "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                 "KbdInteractiveAuthentication no\nLogLevel VERBOSE\n"
                 "SetEnv PATH=" +
                 ctl.substr(0, ctl.rfind('/')) + ":/usr/bin:/bin\n");
  write_text(dir_ + "/passwd", with_root_shell_sh(read_file("/etc/passwd")) +
                                   "jtremote:x:65534:65534:jitterd e2e:" + dir_ + ":/bin/sh\n");
}

SshServer::~SshServer() {
  if (sshd_ && sshd_->running()) {
    sshd_->signal(SIGTERM);
    sshd_->wait(5s);
  }
}

void SshServer::authorize(const std::string& public_keys) {
  ::unlink((dir_ + "/authorized_keys").c_str());
  write_text(dir_ + "/authorized_keys", public_keys);
}

void SshServer::start() {
  ::mkdir("/run/sshd", 0755);  // sshd's privilege separation folder (the guest's own /run)
  const std::string script = "mount --bind " + dir_ + "/passwd /etc/passwd && exec " + kSshd +
                             " -D -e -f " + dir_ + "/sshd_config";
  SpawnOptions options;
  options.netns = netns_;
  options.output_file = dir_ + "/sshd.log";
  sshd_.emplace(
      Process::spawn({"unshare", "-m", "--propagation", "private", "sh", "-c", script}, options));
  // Ready when it logs that it listens (-e: the log goes to stderr).
  const auto deadline = Clock::now() + 20s;
  while (log().find("listening on") == std::string::npos) {
    if (!sshd_->running()) throw std::runtime_error("sshd ended:\n" + log());
    if (Clock::now() > deadline) throw std::runtime_error("sshd does not listen:\n" + log());
    std::this_thread::sleep_for(50ms);
  }
}

std::string SshServer::log() const {
  try {
    return read_file(dir_ + "/sshd.log");
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string SshServer::url(const std::string& user, const std::string& socket) const {
  return "ssh://" + user + "@" + address_ + ":" + std::to_string(port_) + socket;
}

std::string ssh_command(const SshKey& client, const std::string& known_hosts) {
  return std::string(kSsh) + " -F none -i " + client.private_path + " -o IdentitiesOnly=yes" +
         " -o UserKnownHostsFile=" + known_hosts + " -o StrictHostKeyChecking=accept-new";
}

}  // namespace jitterd_e2e
