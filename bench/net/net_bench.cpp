// courier-net-bench: the limits of each transport between two processes, and ZeroMQ as the peer.
//   courier-net-bench [--quick] [--runs N] [--only pipe|uds|tcp|ipc|zmq|raw|courier|<figure>] [--pin | --cpus C,S]
//
// One line per figure, the median of N runs (default 5):
//   wire <pipe|uds|tcp> <raw-roundtrip|raw-roundtrip-spin|raw-pipelined> ops_per_s=<n>
//   wire <pipe|uds|tcp> <end|callback|wait|request> ops_per_s=<n>
//   wire-zmq <ipc|tcp> <reqrep|pushpull> ops_per_s=<n>
// after a header naming the machine and where the two processes run, and followed by ratios
// between figures of the same run. --quick: a smoke run of well under a second (one run).
//
// The figures (a message is 57 bytes: a 32-byte frame header and a 25-byte body, the size of a call
// with a token and five int32):
//   raw-roundtrip  a bare echo: the client writes one message, the server reads it and writes it
//                  back, the client reads it whole; one message in flight, one write per message.
//   raw-roundtrip-spin  the same echo, each side looking again without sleeping for up to 100 us
//                  (poll without waiting, sched_yield) before it sleeps, as Courier's threads do.
//   raw-pipelined  the client keeps 64 messages in flight: each side reads what is there and answers
//                  it in one write (the server echoes the bytes it read; the client sends as many
//                  new messages as it got back whole).
//   reqrep         ZeroMQ REQ (client) / REP (server, echoes), one message in flight.
//   pushpull       ZeroMQ PUSH (client) -> PULL (server), one way; timed until the server says it
//                  has every message.
// Blocking descriptors on the raw side: a blocked read sleeps in the kernel as an epoll wait would.
//
// The harness, shared by every figure: run_pair() forks two processes from this one (which starts
// no thread, so fork is safe), a server and a client, pins each to its CPU (placement: client on
// the first CPU this process may use, server on the second, or both on the one there is) before
// anything else runs in it, and gives them a control socket between them (coordination, never
// measured). The client returns ops/s; the parent only waits, with a watchdog that kills both, so
// a hung figure fails instead of stalling. run_stream_pair() adds one stream connection of a
// transport (pipe: a socket pair made before the forks; uds and tcp: a listener made before the
// forks, the server accepts, the client connects, TCP_NODELAY on both ends). ZeroMQ contexts are
// made in the children after the fork.
//
// Adding a figure (Courier's `wire <t> <end|callback|wait>` lines): write one function
//   std::optional<double> courier_wait(const run_context& c, transport t)
// that calls run_pair() (the server serves on an endpoint and sends its address over the control
// socket once it listens; the client reads it and connects) or run_stream_pair() (both sides adopt
// the connected descriptor; for pipe, the server side dup2()s it to fd 0, where a pipe server finds
// its end), add one row to figures() and its ratios to ratios(). The rounds, the medians, the
// output, the watchdog and the placement come with it. (The processes of a figure are forked
// without exec; a Courier system must therefore be made inside the side's function, after the fork,
// like the ZeroMQ contexts.)
//
// Placement matters on small hosts. On the shared 2-CPU machine this was written on (other jobs
// running), the raw pipe round trip did 20-25k/s on two CPUs (--pin), ~60k/s with both processes on
// one CPU (--cpus 0,0) and ~75k/s unpinned (the default, where the scheduler moves the woken side
// next to its waker): a wake-up across CPUs costs more than the echo itself, and a pinned side
// cannot flee a CPU that another job is using. Processes are not pinned by default: a Courier or
// ZeroMQ process runs several threads (workers, the reactor, ZeroMQ's I/O thread), and pinning a
// whole process to one CPU would make them share it, which measures the pinning, not the library;
// with --pin the raw round trip fell below Courier's own (the raw limit then bounds nothing).
// Every figure of a run gets the same placement, so the ratios within a run hold either way;
// compare figures across runs only with the same placement.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/services.hpp>

#include <future>
#include <tuple>

#include "../../src/net/perf/blocking_io.hpp"
#include "bench_util.hpp"

namespace {

using steady = std::chrono::steady_clock;

constexpr std::size_t message_size = 32 + 25;
constexpr std::size_t in_flight = 64;

// ---- placement ----------------------------------------------------------------------------------

/// Where the two processes of a figure run: the same for every figure of a run.
struct placement {
  int client_cpu = -1;  ///< -1: not pinned
  int server_cpu = -1;
  int allowed = 0;  ///< CPUs this process may use

  std::string describe() const {
    if (client_cpu < 0) return "not pinned (" + std::to_string(allowed) + " CPUs allowed)";
    std::string s = "client on cpu " + std::to_string(client_cpu) + ", server on cpu " + std::to_string(server_cpu);
    if (client_cpu == server_cpu) s += " (both on one CPU)";
    return s + " (sched_setaffinity; " + std::to_string(allowed) + " CPUs allowed)";
  }
};

/// The client on the first CPU this process may use, the server on the second (or on the same one
/// when there is only one).
placement choose_placement() {
  placement p;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return p;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  p.allowed = static_cast<int>(cpus.size());
  if (cpus.empty()) return p;
  p.client_cpu = cpus[0];
  p.server_cpu = cpus.size() > 1 ? cpus[1] : cpus[0];
  return p;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) std::perror("courier-net-bench: sched_setaffinity");
}

// ---- blocking I/O helpers -----------------------------------------------------------------------

using courier::perf::read_exact;
using courier::perf::write_all;

/// The control socket: one line of text at a time (coordination only, never on a measured path).
bool send_line(int fd, std::string_view text) {
  std::string line{text};
  line += '\n';
  return write_all(fd, line.data(), line.size());
}

std::optional<std::string> recv_line(int fd) {
  std::string line;
  char c = 0;
  while (read_exact(fd, &c, 1)) {
    if (c == '\n') return line;
    line += c;
  }
  return std::nullopt;
}

// ---- the harness --------------------------------------------------------------------------------

/// What a figure is run with.
struct run_context {
  placement where;
  bool quick = false;
  int watchdog_s = 60;         ///< a run that takes longer is killed and fails
  std::size_t roundtrips = 0;  ///< timed round trips (reqrep, raw-roundtrip)
  std::size_t messages = 0;    ///< timed messages (pushpull, raw-pipelined)
  std::string scratch;         ///< a name prefix for socket files (/tmp/courier-net-bench-<pid>)
};

/// Context switches per operation on each side (all threads of its process, voluntary and not,
/// from /proc/<pid>/task/*/status), counted by the client around its timed part: the hops of a
/// call as built, measured. Negative where a figure does not count them.
struct switch_counts {
  double client = -1, server = -1;
  double p50_us = -1, p99_us = -1;  ///< latency of one call, where a figure measures it (wait)
};
pid_t figure_server_pid = -1;   ///< in the client's process: its server's pid (set before the fork)
switch_counts figure_switches;  ///< in the client's process: filled by context_switches_end
std::uint64_t switches_at_begin[2] = {0, 0};

std::uint64_t context_switches_of(pid_t pid) {
  std::uint64_t total = 0;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::FILE* f = std::fopen((tasks + "/" + e->d_name + "/status").c_str(), "r");
    if (f == nullptr) continue;
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long long n = 0;
      if (std::sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1 ||
          std::sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1)
        total += n;
    }
    std::fclose(f);
  }
  ::closedir(dir);
  return total;
}

/// Around a figure's timed part, in its client (threads that exit meanwhile are not counted).
void context_switches_begin() {
  switches_at_begin[0] = context_switches_of(::getpid());
  switches_at_begin[1] = figure_server_pid > 0 ? context_switches_of(figure_server_pid) : 0;
}
void context_switches_end(std::size_t operations) {
  const double ops = static_cast<double>(operations);
  figure_switches.client = static_cast<double>(context_switches_of(::getpid()) - switches_at_begin[0]) / ops;
  if (figure_server_pid > 0)
    figure_switches.server = static_cast<double>(context_switches_of(figure_server_pid) - switches_at_begin[1]) / ops;
}
switch_counts last_switches;  ///< in the parent: what the last figure's client reported

using server_fn = std::function<int(int control)>;     ///< the exit status of the server process
using client_fn = std::function<double(int control)>;  ///< ops/s, negative on failure

int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

/// Runs `server` and `client` in two processes forked from this one, each pinned to its CPU of
/// `c.where`, with a control socket between them. `close_in_parent`: descriptors the children
/// inherit and this process must let go of once both are forked (so that a side that dies shows
/// as end of file to the other). Returns the client's ops/s, or nothing (and a line on stderr)
/// when a side failed, died or outlived the watchdog.
std::optional<double> run_pair(const run_context& c, const server_fn& server, const client_fn& client,
                               const std::vector<int>& close_in_parent = {}) {
  int control[2];
  int result[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, control) != 0 || ::pipe(result) != 0) {
    std::perror("courier-net-bench: socketpair/pipe");
    return std::nullopt;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t server_pid = ::fork();
  if (server_pid == 0) {
    ::close(control[1]);
    ::close(result[0]);
    ::close(result[1]);
    pin_to(c.where.server_cpu);
    ::alarm(static_cast<unsigned>(c.watchdog_s));
    std::_Exit(server(control[0]));
  }
  figure_server_pid = server_pid;
  figure_switches = {};
  const pid_t client_pid = server_pid < 0 ? -1 : ::fork();
  if (client_pid == 0) {
    ::close(control[0]);
    ::close(result[0]);
    pin_to(c.where.client_cpu);
    ::alarm(static_cast<unsigned>(c.watchdog_s));
    const double ops = client(control[1]);
    const bool sent =
        write_all(result[1], &ops, sizeof ops) && write_all(result[1], &figure_switches, sizeof figure_switches);
    std::_Exit(ops >= 0 && sent ? 0 : 1);
  }
  ::close(control[0]);
  ::close(control[1]);
  ::close(result[1]);
  for (int fd : close_in_parent) ::close(fd);
  if (server_pid < 0 || client_pid < 0) {
    std::perror("courier-net-bench: fork");
    if (server_pid > 0) {
      ::kill(server_pid, SIGKILL);
      wait_status(server_pid);
    }
    ::close(result[0]);
    return std::nullopt;
  }

  double ops = -1;
  pollfd p{result[0], POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&p, 1, (c.watchdog_s + 5) * 1000);
  } while (ready < 0 && errno == EINTR);
  last_switches = {};
  bool got = ready > 0 && read_exact(result[0], &ops, sizeof ops) &&
             read_exact(result[0], &last_switches, sizeof last_switches);
  ::close(result[0]);
  if (ready <= 0) {
    if (ready == 0)
      std::fprintf(stderr, "courier-net-bench: no result after %d s, both sides killed\n", c.watchdog_s + 5);
    if (ready < 0) std::perror("courier-net-bench: poll");
    ::kill(client_pid, SIGKILL);
    ::kill(server_pid, SIGKILL);
  }
  const int client_status = wait_status(client_pid);
  // A server still running once the client is done is stuck (or stopped): a failed client gets it
  // killed at once, a good one gives it a few seconds to see the end of its input and exit.
  if (!got || client_status != 0) ::kill(server_pid, SIGKILL);
  int server_status = -1;
  for (int waited_ms = 0; server_status < 0; waited_ms += 10) {
    int status = 0;
    const pid_t done = ::waitpid(server_pid, &status, WNOHANG);
    if (done == server_pid) {
      server_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    } else if (done < 0 && errno != EINTR) {
      server_status = 255;
    } else if (waited_ms == 5000) {
      std::fprintf(stderr, "courier-net-bench: the server outlived its client by 5 s, killed\n");
      ::kill(server_pid, SIGKILL);
    } else {
      ::usleep(10'000);
    }
  }
  if (got && (client_status != 0 || server_status != 0)) {
    std::fprintf(stderr, "courier-net-bench: client exited with %d, server with %d\n", client_status, server_status);
    got = false;
  } else if (!got) {
    std::fprintf(stderr, "courier-net-bench: the client gave no result (exit status %d)\n", client_status);
  }
  if (!got || ops < 0) return std::nullopt;
  return ops;
}

enum class transport { pipe, uds, tcp };

const char* name(transport t) {
  switch (t) {
    case transport::pipe: return "pipe";
    case transport::uds: return "uds";
    case transport::tcp: return "tcp";
  }
  return "?";
}

using stream_server_fn = std::function<int(int fd)>;
using stream_client_fn = std::function<double(int fd)>;

void no_delay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/// run_pair() with one blocking stream connection of transport `t` between the two sides.
std::optional<double> run_stream_pair(const run_context& c, transport t, const stream_server_fn& server,
                                      const stream_client_fn& client) {
  int pair[2] = {-1, -1};  // pipe: [0] the server's end, [1] the client's
  int listener = -1;
  sockaddr_un uds{};
  sockaddr_in tcp{};
  const std::string path = c.scratch + ".sock";
  if (t == transport::pipe) {
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
      std::perror("courier-net-bench: socketpair");
      return std::nullopt;
    }
  } else if (t == transport::uds) {
    uds.sun_family = AF_UNIX;
    std::snprintf(uds.sun_path, sizeof uds.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&uds), sizeof uds) != 0 ||
        ::listen(listener, 4) != 0) {
      std::perror(("courier-net-bench: listen " + path).c_str());
      if (listener >= 0) ::close(listener);
      return std::nullopt;
    }
  } else {
    tcp.sin_family = AF_INET;
    tcp.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    tcp.sin_port = 0;
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof tcp;
    const int on = 1;
    if (listener < 0 || ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        ::bind(listener, reinterpret_cast<sockaddr*>(&tcp), sizeof tcp) != 0 || ::listen(listener, 4) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&tcp), &len) != 0) {
      std::perror("courier-net-bench: listen tcp 127.0.0.1");
      if (listener >= 0) ::close(listener);
      return std::nullopt;
    }
  }

  auto server_side = [&](int) {
    int fd = pair[0];
    if (t == transport::pipe) {
      ::close(pair[1]);
    } else {
      fd = ::accept(listener, nullptr, nullptr);
      ::close(listener);
      if (fd < 0) {
        std::perror("courier-net-bench: accept");
        return 1;
      }
      if (t == transport::tcp) no_delay(fd);
    }
    const int status = server(fd);
    ::close(fd);
    return status;
  };
  auto client_side = [&](int) {
    int fd = pair[1];
    if (t == transport::pipe) {
      ::close(pair[0]);
    } else {
      ::close(listener);
      fd = ::socket(t == transport::uds ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
      const int rc = t == transport::uds ? ::connect(fd, reinterpret_cast<sockaddr*>(&uds), sizeof uds)
                                         : ::connect(fd, reinterpret_cast<sockaddr*>(&tcp), sizeof tcp);
      if (fd < 0 || rc != 0) {
        std::perror("courier-net-bench: connect");
        return -1.0;
      }
      if (t == transport::tcp) no_delay(fd);
    }
    const double ops = client(fd);
    ::close(fd);
    return ops;
  };
  std::vector<int> parent_closes;
  if (t == transport::pipe) {
    parent_closes = {pair[0], pair[1]};
  } else {
    parent_closes = {listener};
  }
  auto r = run_pair(c, server_side, client_side, parent_closes);
  if (t == transport::uds) ::unlink(path.c_str());
  return r;
}

double per_second(std::size_t count, steady::time_point start) {
  const double s = std::chrono::duration<double>(steady::now() - start).count();
  return s > 0 ? static_cast<double>(count) / s : 0;
}

// ---- raw figures --------------------------------------------------------------------------------

/// The server of both raw figures: writes back what it reads, one write per read, until EOF.
int echo_server(int fd) {
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return 0;
    if (n < 0 || !write_all(fd, buf.data(), static_cast<std::size_t>(n))) return 1;
  }
}

std::array<char, message_size> message_bytes(std::size_t i) {
  std::array<char, message_size> m{};
  for (std::size_t k = 0; k < m.size(); ++k) m[k] = static_cast<char>('a' + (i + k) % 26);
  return m;
}

/// `count` bare round trips; false when an echo is missing or wrong.
bool roundtrips(int fd, std::size_t count) {
  std::array<char, message_size> back{};
  for (std::size_t i = 0; i < count; ++i) {
    const auto m = message_bytes(i);
    if (!write_all(fd, m.data(), m.size()) || !read_exact(fd, back.data(), back.size())) return false;
    if (back != m) return false;
  }
  return true;
}

/// `count` messages, 64 in flight: sends as many new ones as came back whole, in one write.
bool pipelined(int fd, std::size_t count) {
  std::vector<char> out(in_flight * message_size);
  for (std::size_t i = 0; i < in_flight; ++i) {
    const auto m = message_bytes(i);
    std::copy(m.begin(), m.end(), out.begin() + static_cast<std::ptrdiff_t>(i * message_size));
  }
  std::vector<char> in(64 * 1024);
  std::size_t sent = std::min(in_flight, count), received = 0, partial = 0;
  if (!write_all(fd, out.data(), sent * message_size)) return false;
  while (received < count) {
    const ssize_t n = ::read(fd, in.data(), in.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    partial += static_cast<std::size_t>(n);
    const std::size_t whole = partial / message_size;
    partial %= message_size;
    received += whole;
    const std::size_t more = std::min(whole, count - sent);
    if (more > 0 && !write_all(fd, out.data(), more * message_size)) return false;
    sent += more;
  }
  return partial == 0 && received == count;
}

std::optional<double> raw_roundtrip(const run_context& c, transport t) {
  return run_stream_pair(c, t, echo_server, [&c](int fd) {
    if (!roundtrips(fd, c.roundtrips / 10)) return -1.0;  // warm-up
    const auto start = steady::now();
    context_switches_begin();
    if (!roundtrips(fd, c.roundtrips)) return -1.0;
    context_switches_end(c.roundtrips);
    return per_second(c.roundtrips, start);
  });
}

// The raw round trip of a side that does not sleep at once, as Courier's workers and a driving
// ask do not (config::io_spin): non-blocking reads, looking again (poll without waiting, then a
// sched_yield) for up to 100 us before it sleeps in poll. Where waking a sleeping CPU costs more
// than the echo (virtual machines), this is the limit Courier's wait is to be compared with.
constexpr auto raw_spin = std::chrono::microseconds(100);

/// Reads at least one byte into `into` (non-blocking `fd`), spinning first; 0 on end of file.
ssize_t read_spinning(int fd, char* into, std::size_t size) {
  const auto spin_until = steady::now() + raw_spin;
  for (;;) {
    const ssize_t n = ::read(fd, into, size);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -1;
    pollfd p{fd, POLLIN, 0};
    if (steady::now() < spin_until) {
      if (::poll(&p, 1, 0) == 0) ::sched_yield();
    } else {
      ::poll(&p, 1, -1);
    }
  }
}

int echo_server_spinning(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = read_spinning(fd, buf.data(), buf.size());
    if (n == 0) return 0;
    if (n < 0 || !write_all(fd, buf.data(), static_cast<std::size_t>(n))) return 1;
  }
}

bool roundtrips_spinning(int fd, std::size_t count) {
  std::array<char, message_size> back{};
  for (std::size_t i = 0; i < count; ++i) {
    const auto m = message_bytes(i);
    if (!write_all(fd, m.data(), m.size())) return false;
    for (std::size_t got = 0; got < back.size();) {
      const ssize_t n = read_spinning(fd, back.data() + got, back.size() - got);
      if (n <= 0) return false;
      got += static_cast<std::size_t>(n);
    }
    if (back != m) return false;
  }
  return true;
}

std::optional<double> raw_roundtrip_spinning(const run_context& c, transport t) {
  return run_stream_pair(c, t, echo_server_spinning, [&c](int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (!roundtrips_spinning(fd, c.roundtrips / 10)) return -1.0;  // warm-up
    const auto start = steady::now();
    context_switches_begin();
    if (!roundtrips_spinning(fd, c.roundtrips)) return -1.0;
    context_switches_end(c.roundtrips);
    return per_second(c.roundtrips, start);
  });
}

std::optional<double> raw_pipelined(const run_context& c, transport t) {
  return run_stream_pair(c, t, echo_server, [&c](int fd) {
    if (!pipelined(fd, c.messages / 10)) return -1.0;  // warm-up
    const auto start = steady::now();
    if (!pipelined(fd, c.messages)) return -1.0;
    return per_second(c.messages, start);
  });
}

// ---- Courier over the same connection ------------------------------------------------------------
// The same stream as the raw figures (made and placed by run_stream_pair), adopted by a Courier node
// on each side: the server serves a summing actor, the client calls it through actor_ref<api>.

/// The small call: a token and five int32 (25 bytes of body, as the raw messages).
struct small_call {
  static constexpr courier::token token{"SUM5"};
  std::int32_t a = 0, b = 0, c = 0, d = 0, e = 0;
  auto fields() { return std::tie(a, b, c, d, e); }
  auto fields() const { return std::tie(a, b, c, d, e); }
};
using small_api = courier::interface<std::int32_t(small_call)>;

class summer : public courier::actor<summer, small_call> {
 public:
  std::int32_t on(const small_call& m) { return m.a + m.b + m.c + m.d + m.e; }
};

/// The system of each side: COURIER_NET_BENCH_WORKERS / _SPIN / _IO_SPIN_US override the defaults (experiments).
courier::config bench_config() {
  courier::config cfg;
  if (const char* w = std::getenv("COURIER_NET_BENCH_WORKERS")) cfg.workers = std::strtoul(w, nullptr, 10);
  if (const char* s = std::getenv("COURIER_NET_BENCH_SPIN"))
    cfg.spin_rounds = static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10));
  if (const char* s = std::getenv("COURIER_NET_BENCH_IO_SPIN_US"))
    cfg.io_spin = std::chrono::microseconds(std::strtoul(s, nullptr, 10));
  return cfg;
}

int courier_server(int fd) {
  courier::system sys{bench_config()};
  courier::net::node net(sys);
  courier::actor_ref<small_api> target = sys.spawn<summer>();
  if (!net.serve_connection(target, courier::net::socket(::dup(fd)))) return 1;
  return net.wait_no_connections(std::chrono::seconds(120)) ? 0 : 1;
}

/// The same call served by a dynamic service (net/services.hpp): its five int32 read from the
/// call's items in the connection's turn, the sum written into the reply.
int courier_dynamic_server(int fd) {
  courier::system sys{bench_config()};
  courier::net::node net(sys);
  auto services = std::make_shared<courier::net::service_table>();
  services->add(small_call::token, [](courier::net::incoming& call) {
    std::int32_t sum = 0;
    for (int i = 0; i < 5; ++i) {
      const auto v = call.read<std::int32_t>();
      if (!v) return;
      sum += *v;
    }
    call.reply().add(sum);
  });
  if (!net.serve_connection(services, courier::net::socket(::dup(fd)))) return 1;
  return net.wait_no_connections(std::chrono::seconds(120)) ? 0 : 1;
}

/// Connects a client node on `fd` and runs `body` with the remote ref; ops/s, or -1.
template <class Body>
double courier_client(int fd, Body&& body) {
  courier::system sys{bench_config()};
  courier::net::node net(sys);
  auto ref = net.adopt<small_api>(courier::net::socket(::dup(fd)));
  if (!ref) {
    std::fprintf(stderr, "courier-net-bench: %s\n", ref.err().describe().c_str());
    return -1;
  }
  const double ops = body(*ref, sys);
  ref->stop();
  net.stop();
  return ops;
}

/// WAIT: a plain thread's ask(), one call in flight; `latencies`, if given, gets each call's time.
bool courier_asks(const courier::actor_ref<small_api>& ref, std::size_t count,
                  std::vector<double>* latencies = nullptr) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto t0 = steady::now();
    auto r = ref.ask(small_call{1, 2, 3, 4, static_cast<std::int32_t>(i)}, std::chrono::seconds(10));
    if (latencies != nullptr)
      latencies->push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
    if (!r || *r != 10 + static_cast<std::int32_t>(i)) return false;
  }
  return true;
}

/// The p50 and p99 of `us` into the figure's report.
void report_latency(std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  figure_switches.p50_us = us[us.size() / 2];
  figure_switches.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

/// CALLBACK: an actor keeps `in_flight` requests going; each reply's continuation sends the next.
struct pipeline_go {
  std::size_t count;
  std::size_t depth;  ///< requests kept in flight
  std::promise<bool>* done;
};
class pipeliner : public courier::actor<pipeliner, pipeline_go> {
 public:
  explicit pipeliner(courier::actor_ref<small_api> target) : target_(std::move(target)) {}
  void on(const pipeline_go& go) {
    count_ = go.count;
    done_ = go.done;
    sent_ = received_ = 0;
    ok_ = true;
    while (sent_ < count_ && sent_ < go.depth) next();
  }
  void on_stop() { target_.reset(); }

 private:
  void next() {
    const auto i = static_cast<std::int32_t>(sent_++);
    target_.request(small_call{1, 2, 3, 4, i}, std::chrono::seconds(10))
        .then([this, i](std::int32_t v) { settled(v == 10 + i); }, [this](const courier::error&) { settled(false); });
  }
  void settled(bool ok) {
    ok_ = ok_ && ok;
    if (++received_ == count_) {
      done_->set_value(ok_);
      return;
    }
    if (sent_ < count_) next();
  }
  courier::actor_ref<small_api> target_;
  std::size_t count_ = 0, sent_ = 0, received_ = 0;
  std::promise<bool>* done_ = nullptr;
  bool ok_ = true;
};

bool courier_pipelined(courier::system& sys, const courier::actor_ref<small_api>& ref, std::size_t count,
                       std::size_t depth = in_flight) {
  auto driver = sys.spawn<pipeliner>(ref);
  std::promise<bool> done;
  auto finished = done.get_future();
  driver.send(pipeline_go{count, depth, &done});
  const bool ok = finished.wait_for(std::chrono::seconds(50)) == std::future_status::ready && finished.get();
  driver.stop();
  return ok;
}

/// END: one-way sends from a plain thread; an ask every `window` sends keeps the client's output
/// under its high-water mark (as ZeroMQ's PUSH blocks at its HWM), and the last one tells that the
/// server handled them all (one connection keeps their order). A send or ask refused at the call
/// (the connection's bounded mailbox is full, or its output above the mark) is tried again after a
/// yield, as PUSH waits at its HWM; every send counted was accepted, so every one arrives.
bool courier_sends(const courier::actor_ref<small_api>& ref, std::size_t count) {
  constexpr std::size_t window = 16 * 1024;
  const auto ask = [&ref] {
    for (;;) {
      auto r = ref.ask(small_call{}, std::chrono::seconds(10));
      if (r || r.err() != courier::errc::mailbox_full) return static_cast<bool>(r);
      std::this_thread::yield();
    }
  };
  for (std::size_t i = 0; i < count; ++i) {
    for (;;) {
      const auto r = ref.try_send(small_call{1, 2, 3, 4, static_cast<std::int32_t>(i)});
      if (r == courier::send_result::sent) break;
      if (r != courier::send_result::full) return false;
      std::this_thread::yield();
    }
    if ((i + 1) % window == 0 && !ask()) return false;
  }
  return ask();
}

std::optional<double> courier_wait(const run_context& c, transport t, const server_fn& server = courier_server) {
  return run_stream_pair(c, t, server, [&c](int fd) {
    return courier_client(fd, [&c](const courier::actor_ref<small_api>& ref, courier::system&) {
      if (!courier_asks(ref, c.roundtrips / 10)) return -1.0;
      std::vector<double> latencies;
      latencies.reserve(c.roundtrips);
      const auto start = steady::now();
      context_switches_begin();
      if (!courier_asks(ref, c.roundtrips, &latencies)) return -1.0;
      context_switches_end(c.roundtrips);
      const double ops = per_second(c.roundtrips, start);
      report_latency(latencies);
      return ops;
    });
  });
}

std::optional<double> courier_callback(const run_context& c, transport t, const server_fn& server = courier_server) {
  return run_stream_pair(c, t, server, [&c](int fd) {
    return courier_client(fd, [&c](const courier::actor_ref<small_api>& ref, courier::system& sys) {
      if (!courier_pipelined(sys, ref, c.messages / 10)) return -1.0;
      const auto start = steady::now();
      context_switches_begin();
      if (!courier_pipelined(sys, ref, c.messages)) return -1.0;
      context_switches_end(c.messages);
      return per_second(c.messages, start);
    });
  });
}

// REQUEST: an actor's request with one call in flight, the next sent from the reply's continuation
// (what every actor server does when it calls another): the whole path runs on workers.
std::optional<double> courier_request(const run_context& c, transport t) {
  return run_stream_pair(c, t, courier_server, [&c](int fd) {
    return courier_client(fd, [&c](const courier::actor_ref<small_api>& ref, courier::system& sys) {
      if (!courier_pipelined(sys, ref, c.roundtrips / 10, 1)) return -1.0;
      const auto start = steady::now();
      context_switches_begin();
      if (!courier_pipelined(sys, ref, c.roundtrips, 1)) return -1.0;
      context_switches_end(c.roundtrips);
      return per_second(c.roundtrips, start);
    });
  });
}

// CHILD-CREATE: open a child context and close it, one after the other on one connection. The
// client writes the frames itself (no C++ client API opens children yet): both requests in one
// write, then it reads both replies. The server makes each child's services with a factory.
int courier_children_server(int fd) {
  courier::system sys{bench_config()};
  courier::net::node net(sys);
  auto child = std::make_shared<const courier::net::service_table>();
  auto table = std::make_shared<courier::net::service_table>();
  table->children([child](courier::token, std::string_view) { return child; });
  courier::net::connection_config cfg;
  cfg.max_child_contexts = 16;
  if (!net.serve_connection(table, courier::net::socket(::dup(fd)), cfg)) return 1;
  return net.wait_no_connections(std::chrono::seconds(120)) ? 0 : 1;
}

/// The client's handshake out, the server's in (its header and body).
bool raw_handshake(int fd) {
  courier::wire::out_buffer out;
  courier::wire::handshake_info info;
  info.peer_name = "bench";
  if (!courier::wire::encode_handshake(out, info)) return false;
  if (!write_all(fd, reinterpret_cast<const char*>(out.data()), out.size())) return false;
  char header[courier::wire::header_size];
  if (!read_exact(fd, header, sizeof header)) return false;
  std::uint32_t body = 0;
  std::memcpy(&body, header + 8, 4);
  std::vector<char> rest(body);
  return body == 0 || read_exact(fd, rest.data(), rest.size());
}

/// `count` children opened and closed; false when an answer is not a reply.
bool child_cycles(int fd, std::size_t count, std::uint64_t& txn, std::uint64_t& id) {
  namespace w = courier::wire;
  w::out_buffer out;
  char answers[2 * w::header_size];
  for (std::size_t i = 0; i < count; ++i, txn += 2, id += 2) {
    out.clear();
    if (!w::frame_writer(out, w::frame_header{1, w::kind::context_open, 0, 0, {}, txn, id}).finish() ||
        !w::frame_writer(out, w::frame_header{1, w::kind::context_close, 0, 0, {}, txn + 1, id}).finish())
      return false;
    if (!write_all(fd, reinterpret_cast<const char*>(out.data()), out.size()) ||
        !read_exact(fd, answers, sizeof answers))
      return false;
    if (answers[6] != static_cast<char>(w::kind::reply) ||
        answers[w::header_size + 6] != static_cast<char>(w::kind::reply))
      return false;
  }
  return true;
}

std::optional<double> courier_child_create(const run_context& c, transport t) {
  return run_stream_pair(c, t, courier_children_server, [&c](int fd) {
    if (!raw_handshake(fd)) return -1.0;
    std::uint64_t txn = 1, id = 1;
    if (!child_cycles(fd, c.roundtrips / 10, txn, id)) return -1.0;
    const auto start = steady::now();
    context_switches_begin();
    if (!child_cycles(fd, c.roundtrips, txn, id)) return -1.0;
    context_switches_end(c.roundtrips);
    return per_second(c.roundtrips, start);
  });
}

std::optional<double> courier_end(const run_context& c, transport t) {
  return run_stream_pair(c, t, courier_server, [&c](int fd) {
    return courier_client(fd, [&c](const courier::actor_ref<small_api>& ref, courier::system&) {
      if (!courier_sends(ref, c.messages / 10)) return -1.0;
      const auto start = steady::now();
      context_switches_begin();
      if (!courier_sends(ref, c.messages)) return -1.0;
      context_switches_end(c.messages);
      return per_second(c.messages, start);
    });
  });
}

// ---- ZeroMQ -------------------------------------------------------------------------------------

/// A context and one socket, made after the fork in the process that uses them; gone on scope exit.
class zmq_side {
 public:
  zmq_side(int type, int timeout_ms) : ctx_(::zmq_ctx_new()), socket_(ctx_ ? ::zmq_socket(ctx_, type) : nullptr) {
    if (socket_ == nullptr) return;
    const int linger = 0;
    ::zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
    ::zmq_setsockopt(socket_, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    ::zmq_setsockopt(socket_, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
  }
  zmq_side(const zmq_side&) = delete;
  zmq_side& operator=(const zmq_side&) = delete;
  ~zmq_side() {
    if (socket_) ::zmq_close(socket_);
    if (ctx_) ::zmq_ctx_term(ctx_);
  }

  /// Binds to `where` ("tcp://127.0.0.1:*" picks a port); returns the endpoint to connect to.
  std::optional<std::string> bind(const std::string& where) {
    char bound[256] = {};
    std::size_t size = sizeof bound;
    if (socket_ == nullptr || ::zmq_bind(socket_, where.c_str()) != 0) {
      fail("bind " + where);
      return std::nullopt;
    }
    if (::zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, bound, &size) != 0) {
      fail("ZMQ_LAST_ENDPOINT");
      return std::nullopt;
    }
    return std::string{bound};
  }
  bool connect(const std::string& where) {
    return socket_ != nullptr && (::zmq_connect(socket_, where.c_str()) == 0 || fail("connect " + where));
  }
  bool send(const char* data, std::size_t size) {
    return ::zmq_send(socket_, data, size, 0) == static_cast<int>(size) || fail("send");
  }
  bool recv(char* data, std::size_t size) {  // exactly `size` bytes expected
    return ::zmq_recv(socket_, data, size, 0) == static_cast<int>(size) || fail("recv");
  }

 private:
  static bool fail(const std::string& what) {
    std::fprintf(stderr, "courier-net-bench: zmq %s: %s\n", what.c_str(), ::zmq_strerror(::zmq_errno()));
    return false;
  }

  void* ctx_;
  void* socket_;
};

enum class zmq_transport { ipc, tcp };

const char* name(zmq_transport t) { return t == zmq_transport::ipc ? "ipc" : "tcp"; }

std::string bind_address(const run_context& c, zmq_transport t) {
  return t == zmq_transport::ipc ? "ipc://" + c.scratch + ".zmq" : "tcp://127.0.0.1:*";
}

std::optional<double> zmq_reqrep(const run_context& c, zmq_transport t) {
  const std::size_t warm = c.roundtrips / 10, total = warm + c.roundtrips;
  const int timeout_ms = c.watchdog_s * 1000;
  auto server = [&](int control) {
    zmq_side rep(ZMQ_REP, timeout_ms);
    const auto endpoint = rep.bind(bind_address(c, t));
    if (!endpoint || !send_line(control, *endpoint)) return 1;
    std::array<char, message_size> m{};
    for (std::size_t i = 0; i < total; ++i)
      if (!rep.recv(m.data(), m.size()) || !rep.send(m.data(), m.size())) return 1;
    return 0;
  };
  auto client = [&](int control) {
    const auto endpoint = recv_line(control);
    zmq_side req(ZMQ_REQ, timeout_ms);
    if (!endpoint || !req.connect(*endpoint)) return -1.0;
    std::array<char, message_size> back{};
    auto run = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i) {
        const auto m = message_bytes(i);
        if (!req.send(m.data(), m.size()) || !req.recv(back.data(), back.size()) || back != m) return false;
      }
      return true;
    };
    if (!run(0, warm)) return -1.0;
    const auto start = steady::now();
    if (!run(warm, total)) return -1.0;
    return per_second(c.roundtrips, start);
  };
  auto r = run_pair(c, server, client);
  ::unlink((c.scratch + ".zmq").c_str());
  return r;
}

std::optional<double> zmq_pushpull(const run_context& c, zmq_transport t) {
  const std::size_t warm = c.messages / 10;
  const int timeout_ms = c.watchdog_s * 1000;
  auto server = [&](int control) {
    zmq_side pull(ZMQ_PULL, timeout_ms);
    const auto endpoint = pull.bind(bind_address(c, t));
    if (!endpoint || !send_line(control, *endpoint)) return 1;
    std::array<char, message_size> m{};
    for (const std::size_t count : {warm, c.messages}) {
      for (std::size_t i = 0; i < count; ++i)
        if (!pull.recv(m.data(), m.size())) return 1;
      if (!send_line(control, "all in")) return 1;
    }
    return 0;
  };
  auto client = [&](int control) {
    const auto endpoint = recv_line(control);
    zmq_side push(ZMQ_PUSH, timeout_ms);
    if (!endpoint || !push.connect(*endpoint)) return -1.0;
    const auto m = message_bytes(0);
    auto run = [&](std::size_t count) {
      for (std::size_t i = 0; i < count; ++i)
        if (!push.send(m.data(), m.size())) return false;
      return recv_line(control).has_value();  // the server has them all
    };
    if (!run(warm)) return -1.0;
    const auto start = steady::now();
    if (!run(c.messages)) return -1.0;
    return per_second(c.messages, start);
  };
  auto r = run_pair(c, server, client);
  ::unlink((c.scratch + ".zmq").c_str());
  return r;
}

// ---- the figures and the run --------------------------------------------------------------------

struct figure {
  std::string family;  ///< "wire" or "wire-zmq"
  std::string where;   ///< the transport's name
  std::string name;
  std::function<std::optional<double>(const run_context&)> run_once;

  std::string label() const { return family + " " + where + " " + name; }
  bool selected(const std::string& only) const {
    return only.empty() || only == where || only == name || (only == "zmq" && family == "wire-zmq") ||
           (only == "raw" && family == "wire" && name.rfind("raw-", 0) == 0) ||
           (only == "courier" && family == "wire" && name.rfind("raw-", 0) != 0);
  }
};

std::vector<figure> figures() {
  std::vector<figure> f;
  for (const transport t : {transport::pipe, transport::uds, transport::tcp}) {
    f.push_back({"wire", name(t), "raw-roundtrip", [t](const run_context& c) { return raw_roundtrip(c, t); }});
    f.push_back({"wire", name(t), "raw-pipelined", [t](const run_context& c) { return raw_pipelined(c, t); }});
    f.push_back(
        {"wire", name(t), "raw-roundtrip-spin", [t](const run_context& c) { return raw_roundtrip_spinning(c, t); }});
    f.push_back({"wire", name(t), "end", [t](const run_context& c) { return courier_end(c, t); }});
    f.push_back({"wire", name(t), "callback", [t](const run_context& c) { return courier_callback(c, t); }});
    f.push_back({"wire", name(t), "wait", [t](const run_context& c) { return courier_wait(c, t); }});
    f.push_back({"wire", name(t), "request", [t](const run_context& c) { return courier_request(c, t); }});
    f.push_back({"wire", name(t), "callback-dynamic",
                 [t](const run_context& c) { return courier_callback(c, t, courier_dynamic_server); }});
    f.push_back({"wire", name(t), "wait-dynamic",
                 [t](const run_context& c) { return courier_wait(c, t, courier_dynamic_server); }});
    f.push_back({"wire", name(t), "child-create", [t](const run_context& c) { return courier_child_create(c, t); }});
  }
  for (const zmq_transport t : {zmq_transport::ipc, zmq_transport::tcp}) {
    f.push_back({"wire-zmq", name(t), "reqrep", [t](const run_context& c) { return zmq_reqrep(c, t); }});
    f.push_back({"wire-zmq", name(t), "pushpull", [t](const run_context& c) { return zmq_pushpull(c, t); }});
  }
  return f;
}

/// A ratio printed under the figures when both were measured: `of` / `to` (in ops/s).
struct ratio {
  std::string of, to;
};

std::vector<ratio> ratios() {
  // ZeroMQ against the raw limit of the same kind of socket (ipc is a Unix socket). Courier's lines
  // add theirs here: wait / raw-roundtrip, callback / raw-pipelined, end / pushpull, wait / reqrep.
  std::vector<ratio> r = {{"wire-zmq ipc reqrep", "wire uds raw-roundtrip"},
                          {"wire-zmq tcp reqrep", "wire tcp raw-roundtrip"},
                          {"wire-zmq ipc pushpull", "wire uds raw-pipelined"},
                          {"wire-zmq tcp pushpull", "wire tcp raw-pipelined"}};
  // Courier's targets: wait and request >= 0.8 x raw-roundtrip (and against the raw echo that
  // spins as Courier's threads do), callback >= 0.8 x raw-pipelined, end >= 2 x ZeroMQ push/pull,
  // wait >= ZeroMQ req/rep (ipc is a Unix socket, like uds).
  for (const char* t : {"pipe", "uds", "tcp"}) {
    const std::string w = std::string("wire ") + t;
    r.push_back({w + " wait", w + " raw-roundtrip"});
    r.push_back({w + " request", w + " raw-roundtrip"});
    r.push_back({w + " wait", w + " raw-roundtrip-spin"});
    r.push_back({w + " request", w + " raw-roundtrip-spin"});
    r.push_back({w + " callback", w + " raw-pipelined"});
    // The same call through a dynamic service (target: within 1.2x of the typed figure).
    r.push_back({w + " callback-dynamic", w + " callback"});
    r.push_back({w + " wait-dynamic", w + " wait"});
    // Opening and closing a child: one round trip (target: >= 0.5 x the raw round trip).
    r.push_back({w + " child-create", w + " raw-roundtrip"});
  }
  r.push_back({"wire uds end", "wire-zmq ipc pushpull"});
  r.push_back({"wire tcp end", "wire-zmq tcp pushpull"});
  r.push_back({"wire uds wait", "wire-zmq ipc reqrep"});
  r.push_back({"wire tcp wait", "wire-zmq tcp reqrep"});
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  std::string cpus;
  bool pin = false;
  bool no_pin = false;
  const auto opts = courier_bench::parse_options(
      argc, argv, "Courier's calls over pipe, uds and tcp beside the raw limits of the same sockets and ZeroMQ",
      [&](CLI::App& app) {
        app.add_option("--only", only,
                       "run just the figures this names: pipe, uds, tcp, ipc, zmq, raw, courier, or a figure");
        auto* cpus_option =
            app.add_option("--cpus", cpus, "the client's and the server's CPU, CLIENT,SERVER (0,0: both on one)")
                ->check(CLI::Validator(
                    [](std::string& v) -> std::string {
                      int client = -1, server = -1;
                      char rest = 0;
                      if (std::sscanf(v.c_str(), "%d,%d%c", &client, &server, &rest) == 2 && client >= 0 && server >= 0)
                        return {};
                      return "wants CLIENT,SERVER (two CPU numbers, e.g. 0,1), got '" + v + "'";
                    },
                    "CLIENT,SERVER"));
        auto* pin_flag = app.add_flag("--pin", pin, "place the two processes on two CPUs of this machine's choosing")
                             ->excludes(cpus_option);
        app.add_flag("--no-pin", no_pin, "leave both processes to the scheduler (the default)")->excludes(pin_flag);
      });
  if (!opts.ok) return opts.exit_code;

  std::vector<figure> chosen;
  for (auto& f : figures())
    if (f.selected(only)) chosen.push_back(std::move(f));
  if (chosen.empty()) {  // scripts/run hands every bench the same line
    std::printf(
        "courier-net-bench: --only %s names no figure of this benchmark (pipe, uds, tcp, ipc, zmq, raw, courier)\n",
        only.c_str());
    return 0;
  }

  ::signal(SIGPIPE, SIG_IGN);  // a dead peer is an error on write, not the end of the process
  run_context c;
  c.where = choose_placement();
  if (!pin && cpus.empty()) {
    c.where.client_cpu = c.where.server_cpu = -1;
  } else if (!cpus.empty()) {
    int client_cpu = -1, server_cpu = -1;
    (void)std::sscanf(cpus.c_str(), "%d,%d", &client_cpu, &server_cpu);  // checked by --cpus' validator
    c.where.client_cpu = client_cpu;
    c.where.server_cpu = server_cpu;
  }
  c.quick = opts.quick;
  c.watchdog_s = opts.quick ? 20 : 60;
  c.roundtrips = opts.quick ? 300 : 20'000;
  c.messages = opts.quick ? 5'000 : 1'000'000;
  c.scratch = "/tmp/courier-net-bench-" + std::to_string(::getpid());
  const int runs = std::max(opts.runs, 1);

  std::printf("machine: %s\n", courier_bench::machine_description().c_str());
  std::printf("placement: %s%s\n", c.where.describe().c_str(),
              c.where.client_cpu < 0 ? "" : "; threads a side starts (ZeroMQ's I/O thread) share its CPU");
  std::printf(
      "mode: %s, %zu round trips / %zu messages of %zu bytes per run (after a tenth as warm-up), "
      "%zu in flight when pipelined, median of %d run(s) per figure\n",
      opts.quick ? "quick" : "full", c.roundtrips, c.messages, message_size, in_flight, runs);
  std::fflush(stdout);

  // Round by round, every figure once per round (the order turning from round to round), so that a
  // change in the machine's load hits all figures alike and the ratios compare like with like.
  std::vector<std::vector<double>> results(chosen.size());
  std::vector<std::vector<double>> client_switches(chosen.size()), server_switches(chosen.size());
  std::vector<std::vector<double>> p50s(chosen.size()), p99s(chosen.size());
  std::vector<bool> failed(chosen.size(), false);
  for (int round = 0; round < runs; ++round) {
    for (std::size_t k = 0; k < chosen.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(round)) % chosen.size();
      if (failed[i]) continue;
      if (const auto ops = chosen[i].run_once(c)) {
        results[i].push_back(*ops);
        if (last_switches.client >= 0) client_switches[i].push_back(last_switches.client);
        if (last_switches.server >= 0) server_switches[i].push_back(last_switches.server);
        if (last_switches.p50_us >= 0) p50s[i].push_back(last_switches.p50_us);
        if (last_switches.p99_us >= 0) p99s[i].push_back(last_switches.p99_us);
      } else {
        std::fprintf(stderr, "courier-net-bench: %s failed\n", chosen[i].label().c_str());
        failed[i] = true;
      }
    }
  }

  bool all_ok = true;
  auto median_of = [&](const std::string& label) -> double {
    for (std::size_t i = 0; i < chosen.size(); ++i)
      if (chosen[i].label() == label && !failed[i]) return courier_bench::median(results[i]);
    return 0;
  };
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    if (failed[i]) {
      std::printf("%s FAILED\n", chosen[i].label().c_str());
      all_ok = false;
      continue;
    }
    const auto [lo, hi] = std::minmax_element(results[i].begin(), results[i].end());
    std::printf("%s ops_per_s=%.0f\n", chosen[i].label().c_str(), courier_bench::median(results[i]));
    if (runs > 1) std::printf("    %.0f..%.0f over %d runs\n", *lo, *hi, runs);
    if (!client_switches[i].empty())
      std::printf("    context switches per op: client %.2f, server %.2f\n", courier_bench::median(client_switches[i]),
                  server_switches[i].empty() ? -1.0 : courier_bench::median(server_switches[i]));
    if (!p50s[i].empty())
      std::printf("    latency per call: p50 %.1f us, p99 %.1f us (medians over the runs)\n",
                  courier_bench::median(p50s[i]), courier_bench::median(p99s[i]));
  }
  for (const auto& r : ratios()) {
    const double of = median_of(r.of), to = median_of(r.to);
    if (of > 0 && to > 0) std::printf("    ratio %s / %s = %.2f\n", r.of.c_str(), r.to.c_str(), of / to);
  }
  return all_ok ? 0 : 1;
}
