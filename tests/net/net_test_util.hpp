#pragma once
// Small helpers shared by the network tests: waiting for readiness with a deadline, reading an exact
// number of bytes from a non-blocking socket, and counting this process's open descriptors.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "courier/net/socket.hpp"

namespace courier_test {

/// Waits until `fd` shows `events` or `limit` passes; whether it did.
inline bool wait_for(int fd, short events, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  pollfd watch{fd, events, 0};
  return ::poll(&watch, 1, static_cast<int>(limit.count())) == 1;
}

/// Writes all of `text`, waiting for room; false on failure or time-out.
inline bool write_all(const courier::net::socket& s, std::string_view text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const iovec piece{const_cast<char*>(text.data()) + sent, text.size() - sent};
    const auto put = courier::net::write_some(s, {&piece, 1});
    if (put.status == courier::net::io_result::failed) return false;
    if (put.status == courier::net::io_result::would_block) {
      if (!wait_for(s.fd(), POLLOUT)) return false;
      continue;
    }
    sent += put.bytes;
  }
  return true;
}

/// Reads exactly `count` bytes (waiting for them); shorter when the stream ends, fails or times out.
inline std::string read_exactly(const courier::net::socket& s, std::size_t count,
                                std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::string text;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (text.size() < count && std::chrono::steady_clock::now() < until) {
    char buffer[4096];
    const std::size_t want = count - text.size() < sizeof buffer ? count - text.size() : sizeof buffer;
    const auto got = courier::net::read_some(s, std::as_writable_bytes(std::span<char>(buffer, want)));
    if (got.status == courier::net::io_result::ok)
      text.append(buffer, got.bytes);
    else if (got.status == courier::net::io_result::would_block)
      wait_for(s.fd(), POLLIN, std::chrono::milliseconds(100));
    else
      break;
  }
  return text;
}

/// How many entries a directory has, "." and ".." aside (/proc/PID/fd, /proc/PID/task); -1 if it
/// cannot be read.
inline int directory_entries(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return -1;
  int count = 0;
  while (const dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  ::closedir(dir);
  return count;
}

/// How many descriptors this process has open (the entries of /proc/self/fd, minus the directory's own).
inline int open_descriptors() {
  const int entries = directory_entries("/proc/self/fd");
  return entries < 0 ? -1 : entries - 1;
}

/// How many of this process's descriptors are sockets.
inline int open_sockets() {
  int count = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(dir)) {
      char target[64];
      const std::string link = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target);
      if (n > 7 && std::string_view(target, 7) == "socket:") ++count;
    }
    ::closedir(dir);
  }
  return count;
}

/// What this process's descriptors are ("3 socket:[123]", one a line): a count that differs
/// says which kind came or went.
inline std::string descriptor_list() {
  std::string text;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      char target[256];
      const std::string link = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      text += entry->d_name;
      text += ' ';
      text.append(target, n > 0 ? static_cast<std::size_t>(n) : 0);
      text += '\n';
    }
    ::closedir(dir);
  }
  return text;
}

/// How many threads this process has (/proc/self/task).
inline int thread_count() { return directory_entries("/proc/self/task"); }

/// thread_count() once threads that were joined have left /proc/self/task: join() returns when a
/// thread has cleared its id, a moment before the kernel drops its task entry. Waits up to
/// `limit` for the count to come down to `expected`; a thread that really leaked stays counted.
inline int thread_count_settled(int expected, std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int count = thread_count();
  while (count > expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    count = thread_count();
  }
  return count;
}

/// This process's threads by id (/proc/self/task).
inline std::set<long> thread_ids() {
  std::set<long> ids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ids.insert(std::stol(entry->d_name));
    ::closedir(dir);
  }
  return ids;
}

/// How many threads exist that were not in `before` (thread_ids()), once joined threads have left
/// /proc/self/task (waits up to `limit` for that). Sets, not counts: a thread joined before
/// `before` was taken (an earlier test's watchdog) may leave meanwhile and must not hide a new one.
inline std::size_t threads_added(const std::set<long>& before,
                                 std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::size_t added = 0;
    for (long id : thread_ids()) added += before.count(id) == 0 ? 1 : 0;
    if (added == 0 || std::chrono::steady_clock::now() >= deadline) return added;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

inline bool nonblocking_and_cloexec(int fd) {
  return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0 && (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

/// A fresh path for a socket file under the temporary directory, unique to this process and call.
inline std::string temp_socket_path(std::string_view label) {
  static int serial = 0;
  return "/tmp/courier-net-test-" + std::to_string(::getpid()) + "-" + std::string(label) + "-" +
         std::to_string(++serial) + ".sock";
}

/// A tcp port on the loopback interface that was free a moment ago (for a server in another
/// process, which cannot report the one the kernel chose).
inline std::uint16_t free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    throw std::runtime_error("no free tcp port");
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace courier_test
