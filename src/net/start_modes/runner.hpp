#pragma once
/// @file
/// The start modes of run_server (--thread, --fork, --spawn), private to the network library: what
/// the acceptor (session_acceptor.cpp) asks of the unit that runs each mode's sessions
/// (thread_runner.cpp, process_runner.cpp), and how a session is served on one thread with a
/// system of its own (session_here.cpp), in a session thread or in a session's process.
///
/// Thread-safety: a runner is driven by the acceptor's thread only; what it shares with the
/// sessions it started is its own to guard.

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/detail/wire_stream.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/log.hpp"
#include "courier/net/options.hpp"
#include "courier/net/server.hpp"
#include "courier/net/socket.hpp"
#include "courier/net/start_mode.hpp"
#include "courier/net/transport.hpp"

namespace courier::net::detail {

/// Set in the environment of a process --spawn starts: serve the connection on stdin, as the
/// session of the number it holds.
constexpr const char* session_on_stdin = "COURIER_SESSION_ON_STDIN";
/// Beside it: when the acceptor accepted the connection (steady clock, in nanoseconds since its
/// epoch, which is the boot on Linux: the same in every process), the handshake time-out's start.
constexpr const char* session_accepted_at = "COURIER_SESSION_ACCEPTED_AT";

using steady = std::chrono::steady_clock;

/// A session as the acceptor numbered it: its number, and when its connection was accepted.
struct session_ticket {
  std::uint64_t number = 0;
  steady::time_point accepted{};
};

/// A session stops within the grace on its own (its node's stop); the acceptor waits this much
/// longer for it to end (its last close, its thread's return or its process's exit) before it
/// calls the session stuck.
constexpr auto stop_margin = std::chrono::milliseconds(1000);

/// What a kept --fork process says on its control socket: it took the connection handed to it
/// (the acceptor lets go of its copy), or its session ended (it may wait for the next).
constexpr char connection_taken = 't';
constexpr char session_ended = 'e';

using serve_callback = std::function<courier::result<serving>(server_setup&)>;

/// What a session's process serves first: its session (a forked one's, or a spawned one's from its
/// environment) and, in a --fork process that may be kept, its end of the control socket (-1 when
/// not).
struct process_session {
  int control = -1;
  session_ticket session;
};

/// What the acceptor of --thread, --fork and --spawn asks of the mode that runs the sessions.
/// One unit per mode; the acceptor calls it per connection, never per message.
class start_mode_runner {
 public:
  enum class started { yes, no, in_forked_child };
  virtual ~start_mode_runner() = default;
  /// Runs `session` on `connection` (the runner takes it over, or leaves the caller to close its
  /// copy). On `no` the connection is untouched, and why_not() says why (the acceptor refuses it
  /// with that).
  virtual started start(socket& connection, const session_ticket& session) = 0;
  /// Connections handed to a session's process that ended before it took them: the acceptor
  /// starts them again (taken once: the list is cleared).
  virtual std::vector<std::pair<socket, session_ticket>> take_orphans() { return {}; }
  [[nodiscard]] const std::string& why_not() const noexcept { return why_not_; }
  /// The sessions still running, after reaping those that ended.
  virtual std::size_t running() = 0;
  /// Tells every session to stop and waits up to `grace` (and stop_margin) for them; false when
  /// some did not stop, and why_not() says what became of them.
  virtual bool stop(std::chrono::milliseconds grace) = 0;
  /// Descriptors of the runner's own the acceptor watches beside its listener (appended to `into`).
  virtual void watch(std::vector<pollfd>& into) { (void)into; }
  /// What poll() said of the descriptors watch() appended, in the same order.
  virtual void watched(const pollfd* first, std::size_t count) {
    (void)first;
    (void)count;
  }
  /// In a forked child, once start() said so: its session, and its end of the control socket.
  [[nodiscard]] virtual process_session forked_child() const { return {}; }

 protected:
  std::string why_not_;
};

/// What a session's one thread needs to serve it (the --thread sessions' thread, or a --fork or
/// --spawn session's process).
struct session_setup {
  const server_program& program;
  const options& opts;
  const serve_callback& serve;
  std::shared_ptr<const log_hook> log;
  start_mode mode;
  std::shared_ptr<detail::receive_memory> memory;  // the process's --max-memory budget, or null
};

/// How many threads (--thread) or forked processes (--fork) whose session ended wait for the next.
struct kept_runners {
  std::size_t threads = 0, processes = 0;
};

/// A resource failure in words a client's log can act on: which resource ran out, then the call.
std::string start_failure(const std::error_code& code, std::string_view what);

/// The receive memory budget that the sessions of one process share (--max-memory), or null.
std::shared_ptr<detail::receive_memory> process_budget(const options& opts);

/// Serves the session on `fd` (`where` names it: a pipe endpoint) on the calling thread, with a
/// system of its own that has no workers (config::embedded()) and its node, until the connection
/// ends, `stop` is set, or `stop_signals` (a signalfd, or -1) turns readable; then the node stops
/// within the grace. A session that cannot start (out of descriptors, threads or memory, or a
/// serve callback that failed) is refused on its connection with ERROR 260 and why, and logged:
/// no failure of one session's start ends the process.
bool serve_or_refuse(const session_setup& setup, int fd, const endpoint& where, const session_ticket& session,
                     const std::atomic<bool>* stop, int stop_signals) noexcept;

/// A session process's main (--fork, --spawn, or a session server over pipe): serves the
/// connection on stdin, `session`, on this one thread; a forked process that may be kept
/// (`session.control`) then asks the acceptor for the next one. `log` null: the process makes its
/// own. Returns the exit status.
int serve_session_process(const server_program& program, const options& opts, const serve_callback& serve,
                          const std::shared_ptr<const log_hook>& log, start_mode mode, process_session session);

/// --thread's runner: a thread per session, `kept_threads` of them kept for the next.
std::unique_ptr<start_mode_runner> make_thread_runner(const server_program& program, const options& opts,
                                                      const serve_callback& serve, std::shared_ptr<const log_hook> log,
                                                      std::size_t kept_threads);

/// --fork's and --spawn's runner: a process per session (spawn: `command`, this program again),
/// `kept_processes` forked ones kept for the next. A forked child lets go of the acceptor's
/// `acceptor_signals` and `listening`.
std::unique_ptr<start_mode_runner> make_process_runner(start_mode mode, std::vector<std::string> command,
                                                       std::shared_ptr<const log_hook> log, int acceptor_signals,
                                                       listener& listening, std::size_t kept_processes);

/// The acceptor of --thread, --fork and --spawn: accepts on the program's endpoint with no
/// courier::system in this process (so that a fork is safe), starts each connection as a session
/// through the mode's runner, refuses those past --max-connections, and stops on SIGINT or SIGTERM.
/// Returns the exit status. A forked child does not return: it serves its connection from where
/// it was forked (serve_session_process) and ends with _exit.
int accept_sessions(int argc, const char* const* argv, const server_program& program, const options& opts,
                    start_mode mode, const kept_runners& kept, const serve_callback& serve,
                    const std::shared_ptr<const log_hook>& log);

}  // namespace courier::net::detail
