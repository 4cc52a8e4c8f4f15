// --fork and --spawn: the start modes that run each session in a process of its own.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "courier/net/log.hpp"
#include "courier/net/process.hpp"
#include "courier/net/server.hpp"
#include "courier/net/transport.hpp"
#include "runner.hpp"

namespace courier::net::detail {

namespace {

/// --fork and --spawn: a process per session. The forked child returns to the acceptor's
/// start_session, which serves its connection on stdin as a pipe server does and ends it; a
/// spawned one is this program again, told so by its environment.
///
/// A forked process whose session ended may wait for the next (at most `kept_processes` wait),
/// as a pre-forking web server's children do: it says so over a control socket it shares with
/// the acceptor, which hands it the next connection there (SCM_RIGHTS) rather than forking, or
/// closes the socket (the process then ends). A fork costs this process's page tables and then,
/// in the child, a page fault for each page it touches first (about a hundred for a session);
/// a kept process has them already. Sessions at once still run in processes apart.
class process_runner final : public start_mode_runner {
 public:
  process_runner(start_mode mode, std::vector<std::string> command, std::shared_ptr<const log_hook> log,
                 int acceptor_signals, listener& listening, std::size_t kept_processes)
      : mode_(mode),
        command_(std::move(command)),
        log_(std::move(log)),
        signals_(acceptor_signals),
        listening_(listening),
        kept_(mode == start_mode::fork ? kept_processes : 0) {}

  ~process_runner() override {
    for (auto& s : sessions_)
      if (s.control >= 0) ::close(s.control);
  }

  started start(socket& connection, const session_ticket& session) override {
    const std::uint64_t number = session.number;
    for (auto& s : sessions_) {
      if (s.state != process_state::waiting) continue;
      if (send_descriptor(s.control, connection.fd(), number)) {
        // Held until the process says it took it: a process that ends first (killed, or stopped
        // while it waited) leaves the connection to be started again, not dropped unanswered.
        s.state = process_state::serving;
        s.handed = std::move(connection);
        s.handed_session = session;
        log_line(log_, log_level::debug,
                 "session " + std::to_string(number) + " handed to process " + std::to_string(s.process.pid()));
        return started::yes;
      }
      // It ended meanwhile (reaped on its SIGCHLD), or cannot take descriptors: it ends.
      close_control(s);
      s.state = process_state::ending;
    }
    if (mode_ == start_mode::fork) {
      int control[2] = {-1, -1};
      if (kept_ != 0 && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) < 0)
        log_line(log_, log_level::warning,
                 std::string("socketpair: ") + std::strerror(errno) + "; the session's process ends with it");
      const pid_t pid = ::fork();
      if (pid == 0) {                      // the session: this process has no thread but this one
        for (auto& sibling : sessions_) {  // the acceptor's, not this session's
          sibling.process.disown();
          if (sibling.control >= 0) ::close(std::exchange(sibling.control, -1));
          sibling.handed.close();
        }
        orphans_.clear();
        if (control[0] >= 0) ::close(control[0]);
        child_control_ = control[1];
        child_session_ = session;
        ::close(signals_);
        listening_.abandon();
        sigset_t child_signal;
        sigemptyset(&child_signal);
        sigaddset(&child_signal, SIGCHLD);
        pthread_sigmask(SIG_UNBLOCK, &child_signal, nullptr);
        if (::dup2(connection.fd(), 0) < 0) ::_exit(1);
        connection.close();
        return started::in_forked_child;
      }
      if (control[1] >= 0) ::close(control[1]);
      if (pid < 0) {
        const int failed = errno;
        if (control[0] >= 0) ::close(control[0]);
        why_not_ = start_failure(std::error_code(failed, std::generic_category()),
                                 std::string("fork: ") + std::strerror(failed));
        return started::no;
      }
      sessions_.push_back({child_process(pid), control[0], process_state::serving, socket{}, {}});
    } else {
      const auto accepted_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(session.accepted.time_since_epoch());
      auto child = spawn_with_stdio(command_, connection.fd(),
                                    {std::string(session_on_stdin) + "=" + std::to_string(number),
                                     std::string(session_accepted_at) + "=" + std::to_string(accepted_ns.count())});
      if (!child) {
        why_not_ = start_failure(child.err().code, child.err().describe());
        return started::no;
      }
      sessions_.push_back({std::move(*child), -1, process_state::serving, socket{}, {}});
    }
    log_line(log_, log_level::debug,
             std::string("session process ") + std::to_string(sessions_.back().process.pid()) + " started");
    return started::yes;
  }

  std::size_t running() override {
    std::erase_if(sessions_, [this](session_process& s) {
      if (!s.process.try_wait().has_value()) return false;
      close_control(s);
      return true;
    });
    return static_cast<std::size_t>(std::count_if(sessions_.begin(), sessions_.end(), [](const session_process& s) {
      return s.state == process_state::serving;
    }));
  }

  bool stop(std::chrono::milliseconds grace) override {
    for (auto& s : sessions_) {
      if (s.state == process_state::waiting) close_control(s);  // it ends at once
      s.process.kill(SIGTERM);
    }
    // Each session stops in order within the grace, then its process exits: waited for that long
    // and the margin, so a session that needed all its grace is not taken for a stuck one.
    const auto until = steady::now() + grace + stop_margin;
    std::size_t killed = 0;
    for (auto& s : sessions_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - steady::now());
      if (s.process.wait(std::max(left, std::chrono::milliseconds(0))) < 0 && !s.process.try_wait()) {
        s.process.kill(SIGKILL);
        (void)s.process.wait(std::chrono::milliseconds(-1));
        ++killed;
      }
      // Once it has ended, a connection handed to it that it never said it took (close_control
      // reads its last words) was never served, and is told so below rather than closed bare.
      close_control(s);
    }
    sessions_.clear();
    for (auto& [orphan, session] : std::exchange(orphans_, {}))
      detail::refuse(orphan, static_cast<std::uint32_t>(errc::system_shutdown), "the server is shutting down", log_);
    if (killed != 0)
      why_not_ = std::to_string(killed) + " session process(es) did not end within the grace and " +
                 std::to_string(stop_margin.count()) + " ms more; killed (SIGKILL)";
    return killed == 0;
  }

  void watch(std::vector<pollfd>& into) override {
    for (const auto& s : sessions_)
      if (s.state == process_state::serving && s.control >= 0) into.push_back({s.control, POLLIN, 0});
  }

  // A serving process wrote on its control socket: it took the connection handed to it, or its
  // session ended and it waits (if fewer than kept_ do) or is told to end. A socket that closed
  // (the process ended) leaves a connection it never took to be started again.
  void watched(const pollfd* first, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) {
      if (first[i].revents == 0) continue;
      const auto s = std::find_if(sessions_.begin(), sessions_.end(),
                                  [&](const session_process& p) { return p.control == first[i].fd; });
      if (s == sessions_.end()) continue;
      char word = 0;
      ssize_t got;
      while ((got = ::recv(s->control, &word, 1, MSG_DONTWAIT)) == 1 && word == connection_taken) s->handed.close();
      if (got == 1 && word == session_ended) {
        const std::size_t waiting =
            static_cast<std::size_t>(std::count_if(sessions_.begin(), sessions_.end(), [](const session_process& p) {
              return p.state == process_state::waiting;
            }));
        if (waiting < kept_) {
          s->state = process_state::waiting;
          continue;
        }
      } else if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        continue;  // only the word that it took its connection
      }
      close_control(*s);
      s->state = process_state::ending;
    }
  }

  std::vector<std::pair<socket, session_ticket>> take_orphans() override { return std::exchange(orphans_, {}); }

  /// In a forked child: its end of the control socket (-1 when it is not to be kept), and its
  /// session.
  [[nodiscard]] process_session forked_child() const override { return {child_control_, child_session_}; }

 private:
  enum class process_state : std::uint8_t { serving, waiting, ending };
  struct session_process {
    child_process process;
    int control = -1;  // the acceptor's end of a forked process's control socket
    process_state state = process_state::serving;
    socket handed;  // a connection handed over that the process has not said it took
    session_ticket handed_session;
  };

  // The control socket closes once the process has no more to say: a connection it never took
  // is started again. Its words are read first: a process reaped before the acceptor read its
  // 't' had taken the connection (and may have served and ended it), which must not be started a
  // second time.
  void close_control(session_process& s) {
    if (s.control >= 0) {
      char word = 0;
      while (s.handed && ::recv(s.control, &word, 1, MSG_DONTWAIT) == 1)
        if (word == connection_taken) s.handed.close();
      ::close(std::exchange(s.control, -1));
    }
    if (s.handed) orphans_.emplace_back(std::move(s.handed), s.handed_session);
  }

  start_mode mode_;
  std::vector<std::string> command_;
  std::shared_ptr<const log_hook> log_;
  int signals_;
  listener& listening_;
  std::size_t kept_;
  std::vector<session_process> sessions_;
  std::vector<std::pair<socket, session_ticket>> orphans_;
  int child_control_ = -1;
  session_ticket child_session_;
};

}  // namespace

std::unique_ptr<start_mode_runner> make_process_runner(start_mode mode, std::vector<std::string> command,
                                                       std::shared_ptr<const log_hook> log, int acceptor_signals,
                                                       listener& listening, std::size_t kept_processes) {
  return std::make_unique<process_runner>(mode, std::move(command), std::move(log), acceptor_signals, listening,
                                          kept_processes);
}

}  // namespace courier::net::detail
