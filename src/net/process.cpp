#include "courier/net/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;

namespace courier::net {

// --- child_process --------------------------------------------------------------------------------

child_process::child_process(pid_t pid) noexcept : pid_(pid) {
#ifdef SYS_pidfd_open
  // A pidfd lets a reactor learn of the exit at once; kernels before 5.3 lack it and the caller polls.
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    pidfd_ = static_cast<int>(fd);
    ::fcntl(pidfd_, F_SETFD, FD_CLOEXEC);
  }
#endif
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      status_(other.status_),
      by_signal_(other.by_signal_) {}

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this != &other) {
    reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    status_ = other.status_;
    by_signal_ = other.by_signal_;
  }
  return *this;
}

child_process::~child_process() { reap(); }

void child_process::reap() noexcept {
  if (pid_ > 0 && !status_) {
    if (wait(exit_grace) < 0) {
      kill(SIGKILL);
      wait(std::chrono::milliseconds(-1));
    }
  }
  release_pidfd();
  pid_ = -1;
}

void child_process::disown() noexcept {
  release_pidfd();
  pid_ = -1;
}

void child_process::release_pidfd() noexcept {
  if (pidfd_ >= 0) ::close(std::exchange(pidfd_, -1));
}

std::optional<int> child_process::try_wait() noexcept {
  if (status_ || pid_ <= 0) return status_;
  int raw = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &raw, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return std::nullopt;
  if (got < 0) {
    status_ = -1;  // ECHILD: someone else reaped it (a SIGCHLD handler set to SIG_IGN, say)
  } else if (WIFEXITED(raw)) {
    status_ = WEXITSTATUS(raw);
  } else if (WIFSIGNALED(raw)) {
    status_ = 128 + WTERMSIG(raw);
    by_signal_ = true;
  } else {
    return std::nullopt;  // stopped or continued: still alive
  }
  release_pidfd();
  return status_;
}

int child_process::wait(std::chrono::milliseconds limit) noexcept {
  if (pid_ <= 0) return -1;
  const bool forever = limit.count() < 0;
  const auto until = std::chrono::steady_clock::now() + limit;
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    if (auto status = try_wait()) return *status;
    const auto now = std::chrono::steady_clock::now();
    if (!forever && now >= until) return -1;
    if (pidfd_ >= 0) {
      pollfd watch{pidfd_, POLLIN, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
      ::poll(&watch, 1, forever ? -1 : static_cast<int>(left));
    } else {
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::milliseconds(5)) nap *= 2;
    }
  }
}

void child_process::kill(int sig) noexcept {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::string child_process::describe_exit() const {
  if (!status_) return "still running";
  if (*status_ < 0) return "exited (status unknown: reaped elsewhere)";
  if (by_signal_) {
    const int sig = *status_ - 128;
    const char* name = ::strsignal(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : std::string());
  }
  return "exited with status " + std::to_string(*status_);
}

// --- spawn ----------------------------------------------------------------------------------------

courier::result<child_process> spawn_with_stdio(const std::vector<std::string>& command, int stdio,
                                                const std::vector<std::string>& extra_environment) {
  if (command.empty()) return courier::error(errc::invalid_argument, "spawn: no command");
  auto failed = [&](int errno_value, const char* what) {
    return courier::error(std::error_code(errno_value, std::system_category()), std::string(what) + " " + command[0]);
  };
  // O_NONBLOCK belongs to the open file description, which the child's copies share with ours:
  // the child gets blocking descriptors, as any program expects, so the caller's copy becomes
  // blocking too (a caller that keeps using it makes it non-blocking again itself).
  if (const int flags = ::fcntl(stdio, F_GETFL); flags < 0 || ::fcntl(stdio, F_SETFL, flags & ~O_NONBLOCK) < 0)
    return failed(errno, "fcntl for");

  // dup2 clears close-on-exec on the copies only, so every other descriptor stays out of the child.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdio, 0);
  posix_spawn_file_actions_adddup2(&actions, stdio, 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const auto& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);

  std::vector<char*> envp;
  if (!extra_environment.empty()) {
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (const auto& entry : extra_environment) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
  }

  pid_t pid = -1;
  const int error =
      ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), envp.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) return failed(error, "start");
  return child_process(pid);
}

// --- descriptors over a Unix-domain socket ------------------------------------------------------

namespace {

/// A tag with room for one descriptor beside it, as send_descriptor and receive_descriptor pass
/// them. Not copyable: the header points into the object.
struct descriptor_message {
  std::uint64_t tag = 0;
  iovec data{&tag, sizeof tag};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))]{};
  msghdr message{};

  descriptor_message() noexcept {
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
  }
  descriptor_message(const descriptor_message&) = delete;
  descriptor_message& operator=(const descriptor_message&) = delete;
};

}  // namespace

bool send_descriptor(int over, int fd, std::uint64_t tag) noexcept {
  descriptor_message m;
  m.tag = tag;
  msghdr& message = m.message;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  ssize_t sent;
  do sent = ::sendmsg(over, &message, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(sizeof m.tag);
}

int receive_descriptor(int over, std::uint64_t* tag) noexcept {
  descriptor_message m;
  msghdr& message = m.message;
  ssize_t got;
  do got = ::recvmsg(over, &message, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got <= 0) {
    if (got == 0) errno = 0;
    return -1;
  }
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS &&
        header->cmsg_len == CMSG_LEN(sizeof(int))) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header), sizeof fd);
      if (got != static_cast<ssize_t>(sizeof m.tag)) {  // not what send_descriptor sends
        ::close(fd);
        break;
      }
      if (tag != nullptr) *tag = m.tag;
      return fd;
    }
  }
  errno = EPROTO;
  return -1;
}

}  // namespace courier::net
