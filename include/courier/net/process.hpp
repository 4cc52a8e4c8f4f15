#pragma once
/// @file
/// Child processes, in one place for every part that starts them (the pipe transport's server, a
/// server's spawned sessions, courier-perf's raw peer): posix_spawn with a socket as the child's
/// standard input and output, the signal state a fresh program expects, and reaping (a pidfd where
/// the kernel has one), so no zombie outlives its parent's handle.
///
/// Thread-safety: spawn_with_stdio may be called from any thread; child_process is a move-only
/// value, one thread at a time.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "courier/error.hpp"

namespace courier::net {

/// A child process this one started (a pipe server, a spawned session, a benchmark's peer). Its
/// destructor reaps it: it waits a grace period for the
/// child to exit on its own (closing the socket first tells it to), then kills it with SIGKILL.
class child_process {
 public:
  child_process() noexcept = default;
  /// Adopts a started child (pid > 0) and opens a pidfd for it where the kernel has one.
  explicit child_process(pid_t pid) noexcept;
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// A descriptor that becomes readable when the child exits (pidfd), -1 where unavailable. A reactor
  /// can watch it next to the socket to learn of the exit at once.
  [[nodiscard]] int exit_fd() const noexcept { return pidfd_; }
  /// Reaps the child if it has exited, without blocking: its exit status, or 128 + signal number if
  /// a signal ended it; nullopt while it runs. Once reaped, every later call returns the same status.
  std::optional<int> try_wait() noexcept;
  /// Waits up to `limit` for the exit; the status as try_wait(), or -1 if the child still runs.
  int wait(std::chrono::milliseconds limit) noexcept;
  /// Sends `sig` to the child unless it has been reaped already.
  void kill(int sig) noexcept;
  /// "exited with status 3", "killed by signal 9 (Killed)", "still running": a signal is told
  /// apart from an exit with the same number (exit(137) is not SIGKILL).
  [[nodiscard]] std::string describe_exit() const;
  /// The child was ended by a signal (try_wait() returned 128 + its number).
  [[nodiscard]] bool killed_by_signal() const noexcept { return by_signal_; }

  /// Lets the child go without waiting or signalling: in a process forked from its parent, whose
  /// children are not this process's to reap (the copy of the handle only closes its pidfd).
  void disown() noexcept;

  /// How long the destructor waits for the child to exit before SIGKILL.
  static constexpr std::chrono::milliseconds exit_grace{2000};

 private:
  void reap() noexcept;  // what the destructor does: wait out the grace period, then SIGKILL
  void release_pidfd() noexcept;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> status_;
  bool by_signal_ = false;
};

/// Starts `command` (its first word looked up in PATH) with `stdio` as its standard input and output
/// (the same descriptor, in blocking mode, as any program expects). Every other descriptor of this
/// process stays out of the child (Courier opens all of them close-on-exec); SIGPIPE is set back to
/// its default and no signal is blocked, whatever this process (a server that blocks SIGTERM on its
/// threads, a client that ignores SIGPIPE) did with them. `extra_environment` ("NAME=value"
/// entries) is added to this process's environment for the child. The error names the command.
[[nodiscard]] courier::result<child_process> spawn_with_stdio(const std::vector<std::string>& command, int stdio,
                                                              const std::vector<std::string>& extra_environment = {});

/// Sends descriptor `fd` (a copy: the caller still holds its own) over the Unix-domain socket
/// `over` as SCM_RIGHTS ancillary data, beside `tag` (a number the receiver gets with it). False,
/// with errno, when it could not.
bool send_descriptor(int over, int fd, std::uint64_t tag = 0) noexcept;

/// Waits for a descriptor send_descriptor() sent over `over`: it (close-on-exec), or -1 when the
/// other end closed (errno 0) or on an error (errno set). Its tag goes to `tag` when given. A
/// message that came without a descriptor is an error (EPROTO).
int receive_descriptor(int over, std::uint64_t* tag = nullptr) noexcept;

}  // namespace courier::net
