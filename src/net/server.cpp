#include "courier/net/server.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "courier/config.hpp"
#include "courier/net/process.hpp"
#include "courier/net/session.hpp"
#include "courier/net/signals.hpp"
#include "courier/net/transport.hpp"

namespace courier::net {

namespace {

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

std::string self_path(const char* argv0) {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string(argv0);
}

/// What the acceptor of --thread, --fork and --spawn asks of the mode that runs the sessions.
/// One unit per mode, below; the acceptor calls it per connection, never per message.
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

 protected:
  std::string why_not_;
};

/// A resource failure in words a client's log can act on: which resource ran out, then the call.
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

bool out_of_descriptors(const courier::error& e) noexcept {
  return e.code == std::errc::too_many_files_open || e.code == std::errc::too_many_files_open_in_system;
}

ino_t inode_of(int fd) noexcept {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/// --fork and --spawn: a process per session. The forked child returns to run_server and serves
/// its connection on stdin as a pipe server does; a spawned one is this program again, told so
/// by its environment.
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
  [[nodiscard]] int child_control() const noexcept { return child_control_; }
  [[nodiscard]] const session_ticket& child_session() const noexcept { return child_session_; }

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

/// How long a session's thread looks for work before it sleeps in poll.
constexpr auto spin_before_sleep = std::chrono::microseconds(100);

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

/// The receive memory budget that the sessions of one process share (--max-memory), or null.
std::shared_ptr<detail::receive_memory> process_budget(const options& opts) {
  if (opts.max_memory == 0) return nullptr;
  return std::make_shared<detail::receive_memory>(opts.max_memory);
}

/// Serves one session's connection (`where`, a pipe endpoint), the server's `session`, on
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

/// Serves the session on `fd` (where names it) as serve_session_here does; a session that cannot
/// start (out of descriptors, threads or memory, or a serve callback that failed) is refused on its
/// connection with ERROR 260 and why, and logged: no failure of one session's start ends the process.
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

/// --thread: a thread per session, driving a system of its own (embedded: no workers) with the
/// session's actors and its one connection, so a handler that blocks stalls only its session.
/// A thread whose session ended waits for the next connection (at most `kept_threads` of them
/// wait), as a database server's thread cache does: a connection then costs one wake-up of a
/// waiting thread instead of a thread's start and end (clone, its stack, its allocator heap
/// abandoned and reclaimed), which here cost more than the session's own work.
class thread_runner final : public start_mode_runner {
 public:
  thread_runner(const server_program& program, const options& opts, const serve_callback& serve,
                std::shared_ptr<const log_hook> log, std::size_t kept_threads)
      : program_(program),
        opts_(opts),
        serve_(serve),
        log_(std::move(log)),
        memory_(process_budget(opts)),
        kept_threads_(kept_threads) {}

  ~thread_runner() override {
    for (auto& s : threads_)
      if (s.thread.joinable()) s.thread.detach();  // only those stop() gave up on
  }

  started start(socket& connection, const session_ticket& session) override {
    serving_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(handover_);
      if (waiting_ > handed_.size()) {
        handed_.emplace_back(connection.release(), session);
        next_.notify_one();
        return started::yes;
      }
    }
    const int fd = connection.fd();
    try {
      auto& s = threads_.emplace_back();
      try {
        s.thread = std::thread([this, &s, fd, session] {
          serve_sessions(fd, session);
          s.done.store(true, std::memory_order_release);
        });
      } catch (...) {
        threads_.pop_back();
        throw;
      }
    } catch (const std::system_error& e) {  // no thread to be had (EAGAIN): the acceptor refuses it
      serving_.fetch_sub(1, std::memory_order_relaxed);
      why_not_ = start_failure(e.code(), std::string("a session thread: ") + e.what());
      return started::no;
    } catch (const std::bad_alloc&) {
      serving_.fetch_sub(1, std::memory_order_relaxed);
      why_not_ = "out of memory (a session thread)";
      return started::no;
    }
    (void)connection.release();  // the thread's now
    return started::yes;
  }

  std::size_t running() override {
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (it->done.load(std::memory_order_acquire)) {
        it->thread.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    return serving_.load(std::memory_order_acquire);
  }

  bool stop(std::chrono::milliseconds grace) override {
    {
      std::lock_guard lock(handover_);
      stopping_.store(true, std::memory_order_release);
    }
    next_.notify_all();
    // Each session stops its connection within the grace; a handler that never returns keeps
    // its thread, which is left behind (and reported) rather than waited for.
    const auto until = steady::now() + grace + stop_margin;
    while (!threads_ended() && steady::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (threads_ended()) return true;
    why_not_ = std::to_string(threads_.size()) + " session thread(s) did not end within the grace and " +
               std::to_string(stop_margin.count()) + " ms more (a handler that does not return); abandoned";
    return false;
  }

 private:
  struct session_thread {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  bool threads_ended() {
    running();
    return threads_.empty();
  }

  /// Serves `fd`, then the connections handed to this thread while it waits, until it is not
  /// wanted as a waiting thread or the server stops.
  void serve_sessions(int fd, session_ticket session) noexcept {
    for (;;) {
      run_session(fd, session);
      serving_.fetch_sub(1, std::memory_order_release);
      std::unique_lock lock(handover_);
      if (waiting_ >= kept_threads_) return;
      ++waiting_;
      // Said once the acceptor counts this thread as waiting: the next connection is then its.
      if (logs(log_, log_level::debug))
        log_->write(log_level::debug, "session thread " + std::to_string(::gettid()) +
                                          " waits for the next connection (" + std::to_string(waiting_) + " of " +
                                          std::to_string(kept_threads_) + " kept)");
      next_.wait(lock, [&] { return !handed_.empty() || stopping_.load(std::memory_order_relaxed); });
      --waiting_;
      if (handed_.empty()) return;  // stopping, with nothing handed over
      std::tie(fd, session) = handed_.back();
      handed_.pop_back();
    }
  }

  void run_session(int fd, const session_ticket& session) noexcept {
    endpoint where;
    where.descriptor = fd;
    const session_setup setup{program_, opts_, serve_, log_, start_mode::thread, memory_};
    (void)serve_or_refuse(setup, fd, where, session, &stopping_, -1);
  }

  const server_program& program_;
  const options& opts_;
  const serve_callback& serve_;
  std::shared_ptr<const log_hook> log_;
  const std::shared_ptr<detail::receive_memory> memory_;  // one budget for every session thread
  const std::size_t kept_threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> serving_{0};  // sessions started and not yet ended
  std::mutex handover_;
  std::condition_variable next_;                        // a connection handed over, or the server stopping
  std::vector<std::pair<int, session_ticket>> handed_;  // connections (and their sessions) for waiting threads
  std::size_t waiting_ = 0;                             // threads waiting for a connection
  std::list<session_thread> threads_;                   // a list: each thread holds a reference to its entry
};

/// How many threads (--thread) or forked processes (--fork) whose session ended wait for the next.
struct kept_runners {
  std::size_t threads = 0, processes = 0;
};

/// The acceptor of --thread, --fork and --spawn: accepts on the program's endpoint with no
/// courier::system in this process (so that a fork is safe), starts each connection as a session
/// through `runner`, refuses those past --max-connections, and stops on SIGINT or SIGTERM.
/// Returns the exit status, or nothing in a forked child, which goes on to serve its connection
/// (`forked.session`; `forked.control` is its control socket when it may be kept).
struct forked_session {
  int control = -1;
  session_ticket session;
};
std::optional<int> accept_sessions(int argc, const char* const* argv, const server_program& program,
                                   const options& opts, start_mode mode, const kept_runners& kept,
                                   const serve_callback& serve, const std::shared_ptr<const log_hook>& log,
                                   forked_session& forked) {
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
  process_runner* processes = nullptr;
  if (mode == start_mode::thread) {
    runner = std::make_unique<thread_runner>(program, opts, serve, log, kept.threads);
  } else {
    std::vector<std::string> command{self_path(argv[0])};
    for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);
    auto p = std::make_unique<process_runner>(mode, std::move(command), log, signals, *listening, kept.processes);
    processes = p.get();
    runner = std::move(p);
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
  // Starts `session` on `connection`, or refuses it with why. False in a forked child.
  const auto start_session = [&](socket& connection, const session_ticket& session) {
    if (opts.max_connections != 0 && runner->running() >= opts.max_connections) {
      detail::refuse(connection, static_cast<std::uint32_t>(errc::system_shutdown),
                     "too many connections (this server serves at most " + std::to_string(opts.max_connections) + ")",
                     log);
      return true;
    }
    const auto started = runner->start(connection, session);
    if (started == start_mode_runner::started::in_forked_child) {
      if (spare >= 0) ::close(spare);
      forked = {processes->child_control(), processes->child_session()};
      return false;
    }
    if (started == start_mode_runner::started::no) {
      log_line(log, log_level::error, "a session could not start: " + runner->why_not());
      detail::refuse(connection, static_cast<std::uint32_t>(errc::system_shutdown),
                     "the server could not start a session: " + runner->why_not(), log);
    }
    return true;
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
      if (!start_session(*accepted, {++sessions_started, steady::now()})) return std::nullopt;
    }
    if (stopping) break;
    runner->running();  // reap what ended (SIGCHLD, or a thread's session)
    for (auto& [orphan, session] : runner->take_orphans()) {
      log_line(log, log_level::warning,
               "session " + std::to_string(session.number) +
                   ": its process ended before it took the connection; started again");
      if (!start_session(orphan, session)) return std::nullopt;
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

}  // namespace

const char* to_string(start_mode mode) noexcept {
  switch (mode) {
    case start_mode::thread: return "thread";
    case start_mode::fork: return "fork";
    case start_mode::spawn: return "spawn";
    case start_mode::pool: break;
  }
  return "pool";
}

int run_server(int argc, const char* const* argv, const server_program& program, const serve_callback& serve) {
  constexpr auto kind = program_kind::server;
  bool pool_mode = false, thread_mode = false, fork_mode = false, spawn_mode = false;
  kept_runners kept{program.kept_threads, program.kept_processes};
  extra_options extra = program.extra;
  if (program.offers_start_modes) {
    extra = [&, own = program.extra](CLI::App& app) {
      const auto unless_supported = [&](start_mode m) {
        return program.supported_modes.contains(m) ? std::string() : std::string(" (not supported by this program)");
      };
      auto* pool = app.add_flag("--pool", pool_mode,
                                "Sessions on the shared workers of this process, sharing all it holds (the default on "
                                "uds and tcp; over pipe, without it, the one session runs on the main thread)" +
                                    unless_supported(start_mode::pool));
      auto* thread = app.add_flag("--thread", thread_mode,
                                  "A thread per session with a system of its own, for handlers that block; sessions "
                                  "share only what the process holds outside the systems (uds and tcp)" +
                                      unless_supported(start_mode::thread));
      auto* forked = app.add_flag(
          "--fork", fork_mode,
          "A process per session, forked; sessions share nothing (uds and tcp)" + unless_supported(start_mode::fork));
      auto* spawned = app.add_flag("--spawn", spawn_mode,
                                   "A process per session, this program started again; sessions share nothing (uds "
                                   "and tcp)" +
                                       unless_supported(start_mode::spawn));
      const std::vector<CLI::Option*> modes{pool, thread, forked, spawned};
      for (auto* a : modes)
        for (auto* b : modes)
          if (a != b) a->excludes(b);
      app.add_option("--kept-threads", kept.threads,
                     "--thread: threads whose session ended that wait for the next (0: each ends with its session)")
          ->needs(thread)
          ->default_val(program.kept_threads);
      app.add_option("--kept-processes", kept.processes,
                     "--fork: processes whose session ended that wait for the next (0: each ends with its session)")
          ->needs(forked)
          ->default_val(program.kept_processes);
      if (own) own(app);
    };
  }
  // With no arguments the session modes keep their defaults: no parser for them (parse_options).
  auto opts = parse_options(argc, argv, program.name, argc > 1 || program.extra ? extra : extra_options{}, kind);
  if (!opts) {
    std::fprintf(stderr, "%s", options_error(program.name, opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", options_help(program.name, extra, kind).c_str());
    return 0;
  }
  start_mode mode = thread_mode  ? start_mode::thread
                    : fork_mode  ? start_mode::fork
                    : spawn_mode ? start_mode::spawn
                                 : start_mode::pool;
  if (!program.supported_modes.contains(mode)) {
    std::string supported;
    for (const start_mode m : {start_mode::pool, start_mode::thread, start_mode::fork, start_mode::spawn})
      if (program.supported_modes.contains(m))
        supported += std::string(supported.empty() ? "" : ", ") + "--" + to_string(m);
    std::fprintf(stderr,
                 "%s: --%s is not supported (this program runs with %s): each session would get a %s of its own, "
                 "and this program's sessions share what its serve callback makes\n",
                 program.name.c_str(), to_string(mode), supported.c_str(),
                 mode == start_mode::thread ? "system" : "process");
    return 2;
  }
  server_signals signals;  // before any thread starts: they inherit the blocked mask
  // A process per session serves its one connection on stdin, as a pipe server does.
  endpoint where = opts->where;
  bool session_process = false, forked = false;
  forked_session session;  // a forked process's number, and its control socket when it may be kept
  std::shared_ptr<const log_hook> session_log;
  if (const char* number = std::getenv(session_on_stdin); number != nullptr) {
    session.session.number = std::strtoull(number, nullptr, 10);
    if (const char* at = std::getenv(session_accepted_at); at != nullptr)
      session.session.accepted = steady::time_point(std::chrono::nanoseconds(std::strtoll(at, nullptr, 10)));
    ::unsetenv(session_on_stdin);
    ::unsetenv(session_accepted_at);
    session_process = true;
  } else if (program.offers_start_modes && where.kind == transport_kind::pipe && !pool_mode) {
    // Over pipe the client starts a process per connection: its one session is served as a
    // spawned session's is, on this thread with no workers to start (and join), unless --pool
    // asks for them. The serve callback is told so.
    session_process = true;
    mode = start_mode::spawn;
  } else if (mode != start_mode::pool && where.kind != transport_kind::pipe) {
    session_log = log_for(*opts, program.name);  // a forked session writes through the acceptor's
    if (auto status = accept_sessions(argc, argv, program, *opts, mode, kept, serve, session_log, session))
      return *status;
    session_process = forked = true;
  }
  if (session_process) {
    // A session's process serves its one connection, on stdin, on this one thread: no workers to
    // start for it. SIGINT and SIGTERM (blocked) end it in order.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    const int stop_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
    const session_setup setup{
        program, *opts, serve, session_log ? session_log : log_for(*opts, program.name), mode, process_budget(*opts)};
    bool served = serve_or_refuse(setup, 0, endpoint{}, session.session, nullptr, stop_fd);
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
      served = serve_or_refuse(setup, 0, endpoint{}, session.session, nullptr, stop_fd);
    }
    if (stop_fd >= 0) ::close(stop_fd);
    if (forked) {
      // The static objects and exit handlers are copies of the acceptor's: not this process's to
      // run (a forked child ends with _exit), and running them made each session slower.
      std::fflush(nullptr);
      ::_exit(served ? 0 : 1);
    }
    return served ? 0 : 1;
  }
  const bool quiet = opts->silent || where.kind == transport_kind::pipe;

  courier::system sys;
  node net(sys);
  connection_config base = program.base;
  if (base.name == connection_config{}.name) base.name = program.name;
  const connection_config cfg = config_from(*opts, base);
  server_setup context{sys, net, *opts, where, cfg, mode};
  auto served = serve(context);
  if (!served) {
    std::fprintf(stderr, "%s: %s\n", program.name.c_str(), served.err().describe().c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "%s: serving on %s\n", program.name.c_str(), served->where.c_str());
  signals.wait(net, where);
  net.stop(program.grace);
  return 0;
}

}  // namespace courier::net
