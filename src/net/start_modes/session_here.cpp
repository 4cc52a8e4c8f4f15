// Serving one session on the calling thread with a system of its own: a --thread session's thread,
// and the main of a session's process (--fork, --spawn, a session server over pipe).
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "courier/config.hpp"
#include "courier/net/process.hpp"
#include "courier/net/server.hpp"
#include "runner.hpp"

namespace courier::net::detail {

namespace {

ino_t inode_of(int fd) noexcept {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/// How long a session's thread looks for work before it sleeps in poll.
constexpr auto spin_before_sleep = std::chrono::microseconds(100);

/// Serves one session's connection (`where`, which names it: names_one_connection), the server's `session`, on
/// the calling thread, with a system of its own that has no workers (config::embedded()) and its
/// node: the session's actors and its connection run here until the connection ends, `stop` is
/// set, or `stop_signals` (a signalfd, or -1) turns readable; then the node stops within the
/// grace. False when the serve callback failed (logged).
bool serve_session_here(const session_setup& setup, const endpoint& where, const session_ticket& session,
                        const std::atomic<bool>* stop, int stop_signals, std::string& why_not) {
  const std::uint64_t number = session.number;
  courier::system sys(courier::config::embedded());
  node net(sys);
  if (number != 0) net.number_sessions_from(number);  // 0: the only session of a pipe server
  if (setup.memory) net.count_receive_memory_against(setup.memory);
  connection_config base = setup.program.base;
  if (base.name == connection_config{}.name) base.name = setup.program.name;
  if (!base.log) base.log = setup.log;  // one logger for all the sessions of a process
  base.accepted_at = session.accepted;  // the handshake time-out counts from the accept
  const connection_config cfg = config_from(setup.opts, base);
  server_setup context{sys, net, setup.opts, where, cfg, setup.mode};
  auto served = setup.serve(context);
  if (!served) {
    why_not = served.err().describe();
    return false;
  }
  // The stop flag is looked at between turns, at least every 20 ms. Before it sleeps the thread
  // looks again for a while, as a worker does before it parks: a client that calls back to back
  // finds it awake, and a wake-up (tens of microseconds here) is paid only by a session that
  // went quiet.
  pollfd watch[2] = {{sys.wake_fd(), POLLIN, 0}, {stop_signals, POLLIN, 0}};
  const nfds_t watched = stop_signals >= 0 ? 2 : 1;
  auto active = std::chrono::steady_clock::now();
  while (stop == nullptr || !stop->load(std::memory_order_acquire)) {
    const run_report ran = sys.poll();
    if (ran.messages != 0 || ran.more) {
      active = std::chrono::steady_clock::now();
      if (ran.more) continue;
    }
    if (net.wait_no_connections(std::chrono::milliseconds(0))) break;
    if (std::chrono::steady_clock::now() - active < spin_before_sleep) continue;
    auto timeout = std::chrono::milliseconds(20);
    const auto deadline = sys.next_deadline();
    if (deadline != std::chrono::steady_clock::time_point::max())
      timeout = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                           std::chrono::milliseconds(0), timeout);
    if (::poll(watch, watched, static_cast<int>(timeout.count())) > 0) {
      if (watched == 2 && (watch[1].revents & POLLIN) != 0) break;  // SIGINT or SIGTERM
      active = std::chrono::steady_clock::now();
    }
  }
  net.stop(setup.program.grace);
  sys.shutdown();
  return true;
}

}  // namespace

std::string start_failure(const std::error_code& code, std::string_view what) {
  std::string why;
  if (code == std::errc::too_many_files_open || code == std::errc::too_many_files_open_in_system)
    why = "out of file descriptors";
  else if (code == std::errc::resource_unavailable_try_again)
    why = "out of threads or processes";
  else if (code == std::errc::not_enough_memory)
    why = "out of memory";
  else
    return std::string(what);
  return why.append(" (").append(what).append(")");
}

std::shared_ptr<detail::receive_memory> process_budget(const options& opts) {
  if (opts.max_memory == 0) return nullptr;
  return std::make_shared<detail::receive_memory>(opts.max_memory);
}

bool serve_or_refuse(const session_setup& setup, int fd, const endpoint& where, const session_ticket& session,
                     const std::atomic<bool>* stop, int stop_signals) noexcept {
  // The session's socket takes `fd` over once it is made, and closes it; a failure before that
  // leaves it open. The inode tells which: once closed, the number may already name another
  // thread's descriptor.
  const ino_t ours = inode_of(fd);
  std::string why;
  try {
    if (serve_session_here(setup, where, session, stop, stop_signals, why)) return true;
  } catch (const std::system_error& e) {
    why = start_failure(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    why = "out of memory";
  } catch (const std::exception& e) {
    why = e.what();
  }
  try {
    why.insert(0, "the server could not start a session: ");
    if (ours != 0 && inode_of(fd) == ours) {
      socket unserved(fd);
      detail::refuse(unserved, static_cast<std::uint32_t>(errc::system_shutdown), why, setup.log);
    }
    log_line(setup.log, log_level::error, why);
  } catch (...) {
    if (ours != 0 && inode_of(fd) == ours) ::close(fd);  // no memory even for the words: the close tells
  }
  return false;
}

int serve_session_process(const server_program& program, const options& opts, const serve_callback& serve,
                          const std::shared_ptr<const log_hook>& log, start_mode mode, process_session session) {
  // A session's process serves its one connection, on stdin, on this one thread: no workers to
  // start for it. SIGINT and SIGTERM (blocked) end it in order.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  const int stop_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  const session_setup setup{program, opts, serve, log ? log : log_for(opts, program.name), mode, process_budget(opts)};
  // The connection the acceptor accepted (or a pipe client's socket pair), on stdin, named as the
  // transport that accepted it: its peer is read from it as that transport's.
  endpoint where = opts.where;
  where.descriptor = 0;
  bool served = serve_or_refuse(setup, 0, where, session.session, nullptr, stop_fd);
  // A forked process asks for the next session once its own ended; the acceptor hands it a
  // connection, or closes the socket when enough processes wait already.
  while (served && session.control >= 0) {
    pollfd watch[2] = {{session.control, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(watch + 1, stop_fd >= 0 ? 1 : 0, 0) > 0) break;  // stopped: SIGINT or SIGTERM
    if (::send(session.control, &session_ended, 1, MSG_NOSIGNAL) != 1) break;
    int ready;
    do ready = ::poll(watch, stop_fd >= 0 ? 2 : 1, -1);
    while (ready < 0 && errno == EINTR);  // SIGCHLD is not blocked here: a program's helper may end
    if (ready <= 0 || (watch[1].revents & POLLIN) != 0) break;  // stopped: a connection handed now is started again
    const int next = receive_descriptor(session.control, &session.session.number);
    session.session.accepted = steady::now();  // handed over as soon as it was accepted
    if (next < 0) break;
    const bool moved = ::dup2(next, 0) == 0;
    ::close(next);
    if (!moved) break;
    if (::send(session.control, &connection_taken, 1, MSG_NOSIGNAL) != 1) break;  // the acceptor lets go of it
    served = serve_or_refuse(setup, 0, where, session.session, nullptr, stop_fd);
  }
  if (stop_fd >= 0) ::close(stop_fd);
  return served ? 0 : 1;
}

}  // namespace courier::net::detail
