// The acceptor of --thread, --fork and --spawn: one loop for the three, the mode's runner behind it.
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "courier/net/log.hpp"
#include "courier/net/server.hpp"
#include "courier/net/transport.hpp"
#include "courier/system.hpp"
#include "runner.hpp"

namespace courier::net::detail {

namespace {

/// This program's file, which --spawn starts again (argv[0] where /proc does not say).
std::string self_path(const char* argv0) {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string(argv0);
}

bool out_of_descriptors(const courier::error& e) noexcept {
  return e.code == std::errc::too_many_files_open || e.code == std::errc::too_many_files_open_in_system;
}

}  // namespace

int accept_sessions(int argc, const char* const* argv, const server_program& program, const options& opts,
                    start_mode mode, const kept_runners& kept, const serve_callback& serve,
                    const std::shared_ptr<const log_hook>& log) {
  const char* name = program.name.c_str();
  if (const std::size_t alive = courier::system::alive(); alive != 0 && mode == start_mode::fork) {
    std::fprintf(stderr,
                 "%s: --fork needs a process with no running courier::system (%zu alive): a fork would "
                 "leave the child its workers' locks and reactor without the threads\n",
                 name, alive);
    return 1;
  }
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGTERM);
  sigaddset(&watched, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &watched, nullptr);
  const int signals = ::signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signals < 0) {
    std::fprintf(stderr, "%s: signalfd: %s\n", name, std::strerror(errno));
    return 1;
  }
  // Listening only once SIGTERM is this loop's to read: a client that reached the socket may take
  // the server for ready, and a stop it asks for then must be an orderly one.
  auto listening = listen(opts.where);
  if (!listening) {
    std::fprintf(stderr, "%s: %s\n", name, listening.err().describe().c_str());
    return 1;
  }
  std::unique_ptr<start_mode_runner> runner;
  if (mode == start_mode::thread) {
    runner = make_thread_runner(program, opts, serve, log, kept.threads);
  } else {
    std::vector<std::string> command{self_path(argv[0])};
    for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);
    runner = make_process_runner(mode, std::move(command), log, signals, *listening, kept.processes);
  }
  if (!opts.silent)
    std::fprintf(stderr, "%s: serving on %s (a %s per session)\n", name, listening->describe().c_str(),
                 mode == start_mode::thread ? "thread" : "process");
  // What a new user learned only from a comment: an actor the serve callback spawns (a chat's
  // room) is then per session.
  log_line(log, log_level::warning,
           std::string("--") + to_string(mode) +
               (mode == start_mode::thread
                    ? ": each session has a system of its own; sessions share only what the process holds outside "
                      "the systems (what the serve callback makes is per session)"
                    : ": each session has a process of its own; sessions share nothing (what the serve callback "
                      "makes is per session)"));

  int spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // given up to refuse while out of descriptors
  std::uint64_t sessions_started = 0;  // the sessions' numbers: the server's, across its threads or processes
  // Starts `session` on `connection`, or refuses it with why. In a forked child it does not return:
  // the child serves its connection from here and ends (nothing of the acceptor above this frame
  // is its to run or to destroy).
  const auto start_session = [&](socket& connection, const session_ticket& session) {
    if (opts.max_connections != 0 && runner->running() >= opts.max_connections) {
      detail::refuse(connection, static_cast<std::uint32_t>(errc::system_shutdown),
                     "too many connections (this server serves at most " + std::to_string(opts.max_connections) + ")",
                     log);
      return;
    }
    const auto started = runner->start(connection, session);
    if (started == start_mode_runner::started::in_forked_child) {
      if (spare >= 0) ::close(spare);
      const int status = serve_session_process(program, opts, serve, log, mode, runner->forked_child());
      // The static objects and exit handlers are copies of the acceptor's: not this process's to
      // run, and running them made each session slower.
      std::fflush(nullptr);
      ::_exit(status);
    }
    if (started == start_mode_runner::started::no) {
      log_line(log, log_level::error, "a session could not start: " + runner->why_not());
      detail::refuse(connection, static_cast<std::uint32_t>(errc::system_shutdown),
                     "the server could not start a session: " + runner->why_not(), log);
    }
  };
  // True once SIGINT or SIGTERM was read (SIGCHLD is read too: reaping polls each process).
  const auto stop_asked = [signals] {
    bool asked = false;
    signalfd_siginfo info{};
    while (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) asked = true;
    return asked;
  };
  std::vector<pollfd> watch;
  for (bool stopping = false; !stopping;) {
    watch.assign({{listening->fd(), POLLIN, 0}, {signals, POLLIN, 0}});
    runner->watch(watch);
    if (::poll(watch.data(), watch.size(), -1) < 0) {
      if (errno != EINTR) break;
      continue;
    }
    runner->watched(watch.data() + 2, watch.size() - 2);  // before the accepts: a process may wait for one
    for (;;) {
      // A stop is looked for before each connection: one that comes while this loop drains the
      // backlog (a session's start takes a while: a spawn, a fork) leaves the rest to be refused
      // with why, not started and then stopped at once.
      if (stop_asked()) {
        stopping = true;
        break;
      }
      auto accepted = listening->accept();
      if (!accepted && out_of_descriptors(accepted.err()) && spare >= 0) {
        // The spare descriptor makes room to accept the oldest waiting connection and tell it why,
        // instead of leaving it unanswered in the backlog (and this loop polling it readable).
        ::close(std::exchange(spare, -1));
        if (auto refused = listening->accept())
          detail::refuse(*refused, static_cast<std::uint32_t>(errc::system_shutdown),
                         "the server could not start a session: out of file descriptors", log);
        spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        continue;
      }
      if (!accepted) break;  // none waiting (or a failure of this one connection: the next poll goes on)
      start_session(*accepted, {++sessions_started, steady::now()});
    }
    if (stopping) break;
    runner->running();  // reap what ended (SIGCHLD, or a thread's session)
    for (auto& [orphan, session] : runner->take_orphans()) {
      log_line(log, log_level::warning,
               "session " + std::to_string(session.number) +
                   ": its process ended before it took the connection; started again");
      start_session(orphan, session);
    }
  }
  // Stop: no new sessions, the socket file gone, every session told and given the grace. The
  // connections still in the backlog are told why first (section 11), not left to a bare close.
  for (auto waiting = listening->accept(); waiting; waiting = listening->accept())
    detail::refuse(*waiting, static_cast<std::uint32_t>(errc::system_shutdown), "the server is shutting down", log);
  listening->close();
  ::close(signals);
  if (spare >= 0) ::close(spare);
  if (!runner->stop(program.grace)) {
    log_line(log, log_level::error, runner->why_not());
    if (mode == start_mode::thread) {
      // Their threads still run handlers that reach into this frame: end the process here.
      std::fflush(nullptr);
      ::_exit(1);
    }
  }
  return 0;
}

}  // namespace courier::net::detail
