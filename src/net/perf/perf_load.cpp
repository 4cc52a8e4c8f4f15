#include "perf_load.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <system_error>

#include "courier/net/process.hpp"
#include "courier/net/socket.hpp"
#include "courier/net/transport.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/engine.hpp"
#include "perf_protocol.hpp"
#include "perf_raw.hpp"
#include "server_process.hpp"

namespace courier::perf {

namespace {

using steady = std::chrono::steady_clock;

/// The raw echo's message: about the size of an ADD5 call (its frame is 57 bytes).
constexpr std::size_t raw_message = 64;
/// Clients connected before the loop waits for each of them to have made its first call: below
/// a listener's backlog, so no connect waits on a full one.
constexpr std::size_t connect_batch = 128;
/// Descriptors this process needs beside its clients' (stdio, epoll, the servers' pipes, libraries).
constexpr std::size_t spare_descriptors = 64;

enum class protocol : std::uint8_t { courier, raw };

courier::error system_error(const std::string& what, int code = errno) {
  return {std::error_code(code, std::system_category()), what};
}

/// One client connection of the load: one block, the engine in it, so a call touches one object.
struct load_client {
  net::socket sock;
  bool waiting = false;        // a call (or the handshake and first call) is unanswered
  bool awaiting_open = false;  // courier: the first call goes out once the handshake is done
  bool answered = false;
  bool watching_out = false;
  std::size_t written = 0;
  std::size_t echoed = 0;  // raw: bytes of the echo read so far
  std::uint64_t txn = 0;
  steady::time_point sent_at{};
  wire::out_buffer out;
  std::optional<wire::engine> engine;  // courier only
};

/// Notes the answer to a client's call as the engine delivers frames.
struct answer_handler {
  load_client& client;
  std::string& failure;
  void on_frame(const wire::frame_view& f) {
    if ((f.kind() != wire::kind::reply && f.kind() != wire::kind::error) || !client.waiting ||
        f.transaction_id() != client.txn)
      return;
    client.answered = true;
    if (f.kind() == wire::kind::error && failure.empty()) failure = "the server answered ADD5 with an ERROR frame";
  }
  void on_bad_reply(std::uint64_t txn, const wire::error&) {
    if (txn == client.txn && failure.empty()) failure = "a spoiled answer to ADD5";
  }
};

/// N clients on one epoll loop, one thread.
class load_driver {
 public:
  load_driver(protocol p, std::chrono::milliseconds timeout) : protocol_(p), timeout_(timeout) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  }
  load_driver(const load_driver&) = delete;
  load_driver& operator=(const load_driver&) = delete;
  ~load_driver() {
    clients_.clear();
    if (epoll_ >= 0) ::close(epoll_);
  }

  /// Opens `count` connections to `where`, in batches, each making one call (not counted) before
  /// the next batch opens: every client is connected and served once it returns.
  courier::result<void> connect_all(const net::endpoint& where, std::size_t count) {
    if (epoll_ < 0) return system_error("epoll_create1");
    clients_.reserve(count);
    while (clients_.size() < count) {
      const std::size_t batch = std::min(connect_batch, count - clients_.size());
      for (std::size_t i = 0; i < batch; ++i)
        if (auto ok = open_one(where); !ok) return ok;
      if (auto ok = drain("the first calls of clients up to " + std::to_string(clients_.size())); !ok) return ok;
    }
    return {};
  }

  /// Each client calls, one call at a time, for `run_for`; the figures of the calls answered within it.
  courier::result<load_figures> run(std::chrono::duration<double> run_for) {
    latencies_.clear();
    latencies_.reserve(1 << 20);
    issuing_ = true;
    const auto start = steady::now();
    const auto until = start + std::chrono::duration_cast<steady::duration>(run_for);
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      send_call(*clients_[i]);
      if (auto ok = flush(*clients_[i], i); !ok) return ok.err();
    }
    while (issuing_) {
      if (auto ok = wait_once(std::chrono::milliseconds(10)); !ok) return ok.err();
      if (steady::now() >= until) issuing_ = false;
    }
    load_figures figures;
    figures.seconds = std::chrono::duration<double>(steady::now() - start).count();
    figures.calls = latencies_.size();
    if (!latencies_.empty()) {
      const auto at = [&](double q) {
        auto nth = latencies_.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(latencies_.size() - 1));
        std::nth_element(latencies_.begin(), nth, latencies_.end());
        return static_cast<double>(*nth) / 1000.0;
      };
      figures.p50_us = at(0.50);
      figures.p99_us = at(0.99);
    }
    if (auto ok = drain("the last calls"); !ok) return ok.err();
    return figures;
  }

  /// Ends every connection: an orderly close (courier), then the sockets.
  courier::result<void> close_all() {
    if (protocol_ == protocol::courier) {
      closing_ = true;
      for (std::size_t i = 0; i < clients_.size(); ++i) {
        auto& c = *clients_[i];
        c.engine->close(c.out);
        ++open_;
        if (auto ok = flush(c, i); !ok) return ok;
      }
      const auto until = steady::now() + timeout_;
      while (open_ != 0 && steady::now() < until)
        if (auto ok = wait_once(std::chrono::milliseconds(10)); !ok) return ok;
      if (open_ != 0)
        return courier::error(errc::request_timeout, std::to_string(open_) + " connections did not close within " +
                                                         std::to_string(timeout_.count()) + " ms");
    }
    clients_.clear();
    return {};
  }

 private:
  courier::result<void> open_one(const net::endpoint& where) {
    const std::size_t index = clients_.size();
    auto connected = net::connect(where, timeout_);
    if (!connected)
      return courier::error(connected.err().code,
                            "client " + std::to_string(index + 1) + ": " + connected.err().describe());
    auto c = std::make_unique<load_client>();
    c->sock = std::move(connected->sock);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = index;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->sock.fd(), &ev) < 0) return system_error("epoll_ctl");
    if (protocol_ == protocol::courier) {
      wire::engine_config cfg;
      cfg.local.peer_name = "courier-perf --load";
      cfg.local.nonce = random_() | 1u;
      cfg.handshake_timeout = timeout_;
      cfg.ping_interval = std::chrono::milliseconds(0);  // the run is bounded by --sec and --timeout
      c->engine.emplace(wire::role::initiator, cfg);
      c->engine->start(c->out);
      c->waiting = c->awaiting_open = true;
      ++outstanding_;
    } else {
      send_call(*c);
    }
    clients_.push_back(std::move(c));
    return flush(*clients_.back(), index);
  }

  void send_call(load_client& c) {
    c.waiting = true;
    ++outstanding_;
    write_call(c);
  }

  void write_call(load_client& c) {
    c.sent_at = steady::now();
    if (protocol_ == protocol::raw) {
      std::memset(c.out.extend(raw_message), 0, raw_message);
      return;
    }
    wire::frame_writer w(c.out,
                         wire::frame_header{wire::protocol_version, wire::kind::call, 0, 0, add_five, ++c.txn, 0},
                         c.engine->agreed().peer_limits());
    for (const std::int32_t item : five_items) w.add(item);
    (void)w.finish();  // five int32 fit any limits a server may announce
    c.engine->call_sent();
  }

  courier::result<void> flush(load_client& c, std::size_t index) {
    while (c.written < c.out.size()) {
      const iovec piece{c.out.data() + c.written, c.out.size() - c.written};
      const auto put = net::write_some(c.sock, {&piece, 1});
      if (put.status == net::io_result::ok) {
        c.written += put.bytes;
      } else if (put.status == net::io_result::would_block) {
        return watch_out(c, index, true);
      } else {
        return courier::error(put.code(), "client " + std::to_string(index + 1) + ": write");
      }
    }
    c.out.clear();
    c.written = 0;
    return watch_out(c, index, false);
  }

  courier::result<void> watch_out(load_client& c, std::size_t index, bool on) {
    if (c.watching_out == on) return {};
    epoll_event ev{};
    ev.events = on ? EPOLLIN | EPOLLOUT : EPOLLIN;
    ev.data.u64 = index;
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.sock.fd(), &ev) < 0) return system_error("epoll_ctl");
    c.watching_out = on;
    return {};
  }

  /// Waits until no call is unanswered, at most the time-out.
  courier::result<void> drain(const std::string& what) {
    const auto until = steady::now() + timeout_;
    while (outstanding_ != 0) {
      if (steady::now() >= until)
        return courier::error(errc::request_timeout, what + ": " + std::to_string(outstanding_) +
                                                         " unanswered within " + std::to_string(timeout_.count()) +
                                                         " ms");
      if (auto ok = wait_once(std::chrono::milliseconds(10)); !ok) return ok;
    }
    return {};
  }

  courier::result<void> wait_once(std::chrono::milliseconds limit) {
    const int n =
        ::epoll_wait(epoll_, events_.data(), static_cast<int>(events_.size()), static_cast<int>(limit.count()));
    if (n < 0) return errno == EINTR ? courier::result<void>{} : courier::result<void>{system_error("epoll_wait")};
    warm(std::span<const epoll_event>(events_.data(), static_cast<std::size_t>(n)));
    for (int i = 0; i < n; ++i)
      if (auto ok = on_ready(static_cast<std::size_t>(events_[i].data.u64), events_[i].events); !ok) return ok;
    return {};
  }

  // As the server's reactor does: with thousands of clients each ready one's state went cold since
  // its last answer, and handled one by one every client waited for its own misses. Asked for in
  // two passes before the batch is handled (the client, then its output buffer), the loads overlap.
  void warm(std::span<const epoll_event> ready) const noexcept {
    constexpr std::size_t line = 64;
    for (const epoll_event& e : ready) {
      const auto* at = reinterpret_cast<const char*>(clients_[e.data.u64].get());
      for (std::size_t offset = 0; offset < sizeof(load_client); offset += line) __builtin_prefetch(at + offset);
    }
    for (const epoll_event& e : ready) __builtin_prefetch(clients_[e.data.u64]->out.data());
  }

  courier::result<void> on_ready(std::size_t index, std::uint32_t events) {
    load_client& c = *clients_[index];
    if (!c.sock) return {};
    if ((events & EPOLLOUT) != 0)
      if (auto ok = flush(c, index); !ok) return ok;
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
      // One read is enough for one answer; a full buffer is read again.
      for (bool more = true; more;) {
        const auto got = net::read_some(c.sock, buffer_);
        more = got.status == net::io_result::ok && got.bytes == buffer_.size();
        if (got.status == net::io_result::would_block) break;
        if (got.status != net::io_result::ok) {
          if (protocol_ == protocol::courier) c.engine->on_eof();
          if (closing_) return closed(c);
          return courier::error(
              errc::connection_lost,
              who(index) + ": the server ended the connection" +
                  (protocol_ == protocol::courier && !c.engine->failure().text.empty() ? ": " + c.engine->failure().text
                                                                                       : std::string()));
        }
        if (protocol_ == protocol::raw) {
          c.echoed += got.bytes;
          if (c.echoed >= raw_message) {
            c.echoed -= raw_message;
            c.answered = true;
          }
          continue;
        }
        std::string failure;
        answer_handler handler{c, failure};
        const auto state =
            c.engine->feed(std::span<const std::byte>(buffer_.data(), got.bytes), c.out, handler, steady::now());
        if (!failure.empty()) return courier::error(errc::protocol_error, who(index) + ": " + failure);
        if (state == wire::engine_state::failed)
          return courier::error(errc::connection_lost, who(index) + ": " + c.engine->failure().text);
        if (state == wire::engine_state::closed) return closed(c);
      }
    }
    if (c.awaiting_open && c.engine->state() == wire::engine_state::open) {
      c.awaiting_open = false;
      write_call(c);
    }
    if (c.answered) {
      c.answered = c.waiting = false;
      --outstanding_;
      if (issuing_) {
        latencies_.push_back(static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - c.sent_at).count()));
        send_call(c);
      }
    }
    return flush(c, index);
  }

  static std::string who(std::size_t index) { return "client " + std::to_string(index + 1); }

  courier::result<void> closed(load_client& c) {
    c.sock.close();  // also leaves the epoll set
    --open_;
    return {};
  }

  protocol protocol_;
  std::chrono::milliseconds timeout_;
  int epoll_ = -1;
  std::vector<std::unique_ptr<load_client>> clients_;
  std::array<epoll_event, 1024> events_{};
  std::array<std::byte, 64 * 1024> buffer_{};
  std::vector<std::uint64_t> latencies_;  // nanoseconds, of the calls answered within the run
  std::size_t outstanding_ = 0;
  std::size_t open_ = 0;  // connections whose close has not completed (close_all)
  bool issuing_ = false;
  bool closing_ = false;
  std::minstd_rand random_{std::random_device{}()};
};

/// One server under the load: what each round measured, and the most memory it held.
struct loaded_server {
  protocol kind;
  const net::endpoint& where;
  pid_t pid;
  std::uint64_t before = 0;  // the server's resident bytes before the first client connected
  std::uint64_t most = 0;    // the most it held since, with every client connected
  std::vector<load_figures> rounds;

  loaded_server(protocol p, const net::endpoint& at, pid_t server_pid)
      : kind(p), where(at), pid(server_pid), before(resident_bytes_of_tree(server_pid)) {}

  /// Connects every client, runs --sec, closes them all.
  courier::result<void> run_round(const load_options& opts) {
    load_driver driver(kind, opts.timeout);
    if (auto ok = driver.connect_all(where, opts.clients); !ok) return ok;
    most = std::max(most, resident_bytes_of_tree(pid));
    auto figures = driver.run(opts.run_for);
    if (!figures) return figures.err();
    most = std::max(most, resident_bytes_of_tree(pid));
    rounds.push_back(*figures);
    return driver.close_all();
  }
  /// The round of the median rate, with the medians of the rounds' p50 and p99.
  load_figures result(const load_options& opts) const {
    if (rounds.empty()) return {};
    std::vector<load_figures> sorted = rounds;
    const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    const auto median = [&](auto key) {
      std::nth_element(sorted.begin(), middle, sorted.end(),
                       [&](const auto& a, const auto& b) { return key(a) < key(b); });
      return *middle;
    };
    load_figures r = median([](const load_figures& f) { return f.per_second(); });
    r.p50_us = median([](const load_figures& f) { return f.p50_us; }).p50_us;
    r.p99_us = median([](const load_figures& f) { return f.p99_us; }).p99_us;
    r.server_bytes_per_client = most > before ? (most - before) / opts.clients : 0;
    return r;
  }
};

// The rounds alternate between the two servers, each first in every other round, and the figures
// are medians: a host whose speed drifts within the run (another job, a virtual CPU's neighbour)
// then moves both figures alike, where one run of each, one after the other, put the drift into
// the ratio. Both servers run throughout; a round connects its clients anew (both sets at once
// would need twice the descriptors, more than a 20,000 hard limit allows at 10,000 clients).
load_result run_one(const load_options& opts, net::transport_kind transport, net::start_mode mode) {
  load_result r{transport, mode, opts.clients, {}, {}, {}};
  net::endpoint courier_where;
  courier_where.kind = transport;
  auto server = server_process::start({opts.server, "--silent"}, mode, courier_where, opts.timeout);
  if (!server) {
    r.failures.push_back("server: " + server.err().describe());
    return r;
  }
  // The bare echo server: this binary, on a listener made here.
  net::endpoint raw_where;
  raw_where.kind = transport;
  if (transport == net::transport_kind::uds)
    raw_where.file = "/tmp/courier-perf-load-" + std::to_string(::getpid()) + ".raw";
  auto raw = raw_acceptor::start(raw_where, {opts.self, "--raw-echo-epoll"});
  if (!raw) {
    r.failures.push_back("raw echo server: " + raw.err().describe());
    return r;
  }
  loaded_server courier_side(protocol::courier, courier_where, server->pid());
  loaded_server raw_side(protocol::raw, raw_where, raw->pid());
  for (std::size_t round = 0; round < std::max<std::size_t>(opts.rounds, 1); ++round) {
    loaded_server* order[2] = {&courier_side, &raw_side};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (loaded_server* side : order)
      if (auto ok = side->run_round(opts); !ok) {
        r.failures.push_back((side == &raw_side ? "raw: " : "courier: ") + ok.err().describe());
        return r;
      }
  }
  r.courier = courier_side.result(opts);
  r.raw = raw_side.result(opts);
  return r;
}

}  // namespace

courier::result<void> raise_descriptor_limit(std::size_t clients) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) < 0) return system_error("getrlimit");
  const rlim_t needed = static_cast<rlim_t>(clients + spare_descriptors);
  if (limit.rlim_cur >= needed) return {};
  const rlim_t was = limit.rlim_cur;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed) {
    // Raising the hard limit takes privilege (root, CAP_SYS_RESOURCE): tried, and named if refused.
    rlimit raised{needed, needed};
    if (::setrlimit(RLIMIT_NOFILE, &raised) < 0)
      return courier::error(errc::invalid_argument,
                            std::to_string(clients) + " clients need " + std::to_string(needed) +
                                " descriptors, and this process may have at most " + std::to_string(limit.rlim_max) +
                                " (the hard limit: raise it with 'ulimit -Hn' as root, or in limits.conf)");
    std::fprintf(stderr, "courier-perf: raised the hard descriptor limit from %llu to %llu for %zu clients\n",
                 static_cast<unsigned long long>(limit.rlim_max), static_cast<unsigned long long>(needed), clients);
    return {};
  }
  limit.rlim_cur = needed;
  if (::setrlimit(RLIMIT_NOFILE, &limit) < 0) return system_error("setrlimit");
  std::fprintf(stderr, "courier-perf: raised the descriptor limit from %llu to %llu for %zu clients\n",
               static_cast<unsigned long long>(was), static_cast<unsigned long long>(needed), clients);
  return {};
}

std::vector<load_result> run_load(const load_options& opts, bool quiet) {
  std::vector<load_result> results;
  for (const auto transport : opts.transports)
    for (const auto mode : opts.modes) {
      results.push_back(run_one(opts, transport, mode));
      if (!quiet) {
        std::printf("%s\n", load_line(results.back()).c_str());
        std::fflush(stdout);
      }
    }
  return results;
}

std::string load_line(const load_result& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "load %s %s clients=%zu calls_per_s=%.0f p50_us=%.1f p99_us=%.1f server_rss_per_client_bytes=%llu "
                "raw_calls_per_s=%.0f ratio=%.2f raw_p50_us=%.1f raw_p99_us=%.1f",
                net::to_string(r.transport), to_string(r.mode), r.clients, r.courier.per_second(), r.courier.p50_us,
                r.courier.p99_us, static_cast<unsigned long long>(r.courier.server_bytes_per_client),
                r.raw.per_second(), r.ratio(), r.raw.p50_us, r.raw.p99_us);
  return line;
}

nlohmann::json load_json(const std::vector<load_result>& results) {
  auto all = nlohmann::json::array();
  for (const auto& r : results) {
    const auto figures = [](const load_figures& f) {
      return nlohmann::json{
          {"calls", f.calls},   {"seconds", f.seconds}, {"calls_per_s", f.per_second()},
          {"p50_us", f.p50_us}, {"p99_us", f.p99_us},   {"server_rss_per_client_bytes", f.server_bytes_per_client}};
    };
    nlohmann::json j{{"transport", net::to_string(r.transport)},
                     {"mode", to_string(r.mode)},
                     {"clients", r.clients},
                     {"courier", figures(r.courier)},
                     {"raw", figures(r.raw)},
                     {"ratio", r.ratio()}};
    if (!r.failures.empty()) j["failures"] = r.failures;
    all.push_back(std::move(j));
  }
  return all;
}

int run_raw_epoll_echo() {
  if (!net::make_nonblocking(0)) return 1;
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event listening{};
  listening.events = EPOLLIN;
  listening.data.fd = 0;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, 0, &listening) < 0) return 1;
  std::array<epoll_event, 1024> events{};
  std::array<std::byte, 64 * 1024> buffer{};
  for (;;) {
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0 && errno != EINTR) return 1;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == 0) {
        for (int conn; (conn = ::accept4(0, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.fd = conn;
          if (::epoll_ctl(ep, EPOLL_CTL_ADD, conn, &ev) < 0) ::close(conn);
        }
        continue;
      }
      const ssize_t got = ::read(fd, buffer.data(), buffer.size());
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      bool ok = got > 0;
      for (ssize_t put = 0; ok && put < got;) {
        const ssize_t w = ::send(fd, buffer.data() + put, static_cast<std::size_t>(got - put), MSG_NOSIGNAL);
        if (w > 0) {
          put += w;
        } else if (w < 0 && errno == EAGAIN) {
          pollfd room{fd, POLLOUT, 0};  // a client that does not read stalls only a bound peer
          ok = ::poll(&room, 1, 1000) > 0;
        } else if (w < 0 && errno != EINTR) {
          ok = false;
        }
      }
      if (!ok) ::close(fd);
    }
  }
}

}  // namespace courier::perf
