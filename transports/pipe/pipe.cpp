#include "pipe/pipe.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

extern char** environ;

namespace courier::net::transports {

namespace {

courier::result<connected> connect_pipe(const endpoint& where, std::chrono::milliseconds) {
  if (where.command.empty())
    return courier::error(errc::invalid_argument, "pipe: no server command (usage: client [options] @ server args...)");
  auto pair = socket_pair();
  if (!pair) return pair.err();
  auto& [ours, theirs] = *pair;
  // The child gets an ordinary blocking stdin/stdout, as any program expects; O_NONBLOCK belongs to
  // the open file description, which the child's two copies share, so clear it before they exist.
  if (const int flags = ::fcntl(theirs.fd(), F_GETFL); flags < 0 || ::fcntl(theirs.fd(), F_SETFL, flags & ~O_NONBLOCK) < 0)
    return system_error(errno, "fcntl", where);

  // The child's end becomes its stdin and stdout; dup2 clears close-on-exec on the copies only, so
  // every other descriptor of this process (all opened close-on-exec) stays out of the child.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.fd(), 0);
  posix_spawn_file_actions_adddup2(&actions, theirs.fd(), 1);
  // A client that ignores SIGPIPE, or blocks signals on its threads, must not hand that to the server.
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
  argv.reserve(where.command.size() + 1);
  for (const auto& word : where.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int failed = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (failed != 0) return system_error(failed, "start", where);

  theirs.close();  // the child holds its end now; ours sees EOF when the child exits
  return connected{std::move(ours), child_process(pid)};
}

}  // namespace

const transport_unit pipe{"pipe", connect_pipe, nullptr, nullptr};

}  // namespace courier::net::transports
