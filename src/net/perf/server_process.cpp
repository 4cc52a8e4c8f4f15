#include "server_process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "courier/net/transport.hpp"

namespace courier::perf {

courier::result<std::uint16_t> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return courier::error(std::error_code(errno, std::system_category()), "socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  ::close(fd);
  if (!ok) return courier::error(std::error_code(errno, std::system_category()), "bind a free port");
  return ntohs(address.sin_port);
}

courier::result<server_process> server_process::start(std::vector<std::string> command, net::start_mode mode,
                                                      net::endpoint& where, std::chrono::milliseconds timeout) {
  const std::string program = command.front();
  command.push_back(std::string("--") + to_string(mode));
  if (where.kind == net::transport_kind::uds) {
    if (where.file.empty()) where.file = "/tmp/courier-perf-" + std::to_string(::getpid()) + ".sock";
    command.insert(command.end(), {"--uds", "--file", where.file});
  } else {
    auto port = free_port();
    if (!port) return port.err();
    where.port = *port;
    command.insert(command.end(), {"--tcp", "--port", std::to_string(*port)});
  }
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  auto child = net::spawn_with_stdio(command, null);
  ::close(null);
  if (!child) return child.err();
  server_process p{std::move(*child)};
  // Ready once it accepts: a first connection (a session of its own, closed at once) says so.
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto c = net::connect(where, std::chrono::milliseconds(200))) return p;
    if (p.child_.try_wait()) return courier::error(errc::connection_lost, program + " " + p.child_.describe_exit());
    if (std::chrono::steady_clock::now() > until)
      return courier::error(errc::request_timeout, program + " did not listen on " + net::to_string(where));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

server_process::~server_process() { child_.kill(SIGTERM); }

namespace {

std::uint64_t resident_bytes(const std::string& proc) {
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // in kB
  return 0;
}

}  // namespace

std::uint64_t resident_bytes_of_tree(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::uint64_t total = resident_bytes(proc);
  if (total == 0) return 0;
  std::error_code ignored;
  for (const auto& task : std::filesystem::directory_iterator(proc + "/task", ignored)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) total += resident_bytes_of_tree(child);
  }
  return total;
}

}  // namespace courier::perf
