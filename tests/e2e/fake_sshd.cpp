// A stand-in for sshd in the end-to-end tests: a program whose name (and so its /proc comm) is
// "sshd", listening on the TCP port given and echoing what each connection sends. jitterd finds
// sshd's ports by that name; no real sshd (or its keys and config) is needed. Usage: sshd PORT
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sshd PORT\n");
    return 2;
  }
  const int listener = socket(AF_INET6, SOCK_STREAM, 0);
  const int off = 0, on = 1;
  setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(static_cast<std::uint16_t>(std::atoi(argv[1])));
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 16) != 0) {
    std::perror("sshd: bind/listen");
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  std::vector<pollfd> fds{{listener, POLLIN, 0}};
  char buffer[4096];
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents & POLLIN) {
      const int c = accept(listener, nullptr, nullptr);
      if (c >= 0) {
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        fds.push_back({c, POLLIN, 0});
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0 || write(fds[i].fd, buffer, static_cast<std::size_t>(n)) != n) {
        close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
        --i;
      }
    }
  }
}
