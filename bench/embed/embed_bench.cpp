// courier-embed-bench: Courier inside an asio TCP server, beside the same server without Courier.
//   courier-embed-bench [--quick] [--runs N] [--only E1|E2]   (another --only: nothing to run)
//
// The scenario: a line server on loopback ("add N\n" -> "<total>\n") and a closed-loop client
// (each connection sends one request and waits for its reply before the next; all connections on
// one io_context thread), 100,000 requests per run in total, with 1, 8 and 64 connections. The
// server has its own thread and io_context and three variants, the session code shared:
//   baseline  the total is a plain integer, updated inline in the read handler;
//   E1        embedded Courier driven from the server's io_context by courier::asio::embedded_loop
//             with embedded_config(io) (on_wake posts a turn; budgeted poll, next_deadline);
//             the total lives in a counter actor, `request(add{n}).then(on_value, on_error)` from
//             the read handler: the continuation runs on the host lane, inside a turn on the io
//             thread. A second line measures the loop's other mode (wake_fd in a
//             stream_descriptor);
//   E2        threaded Courier (one worker); `then(executor, ...)` with an executor that
//             asio::post()s to the io_context, so the continuation runs on the io thread.
// E2 also prints its floor: the same two thread hops with a plain thread and no Courier.
// Each figure is the median of N runs (default 5); in every run the servers run one after
// another (the order turning from run to run), each with a fresh client and a fresh Courier
// system, and ratio = courier req/s / baseline req/s of that run. p99 is the 99th percentile of
// the per-request round trip seen by the client. --quick is the CI smoke run (1,000 requests,
// one run). E1 polls with a budget of 64 messages, then lets the io_context's other handlers run.
//
// E1 uses the bundled integration (courier/asio.hpp), as a user would; E2 uses only then(executor).
#include <asio.hpp>
#include <courier/asio.hpp>
#include <courier/courier.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace {

using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

struct add {
  std::int64_t amount;
};

class counter : public courier::actor<counter, add> {
 public:
  std::int64_t on(const add& m) { return total_ += m.amount; }

 private:
  std::int64_t total_ = 0;
};

// ---- the three ways to keep the total ---------------------------------------------------------

/// The peer: a plain integer, updated inline; the reply is written at once.
class baseline_backend {
 public:
  explicit baseline_backend(asio::io_context&) {}
  template <class Done>
  void add(std::int64_t n, Done done) {
    done(total_ += n);
  }
  void detach() {}  // on the io thread, when the server closes
  void finish() {}  // after the io thread has returned
  bool contract_kept() const { return true; }

 private:
  std::int64_t total_ = 0;
};

/// E1: an embedded system driven by the bundled integration (courier/asio.hpp): the io_context's
/// thread is the only thread. `Mode` picks how the loop learns of new work: `embedded_config(io)`
/// (config::on_wake posts a turn: no eventfd), or `config::embedded()` (wake_fd in a
/// stream_descriptor). The contract is checked per request: the continuation runs on the io
/// thread and never inline in then().
enum class wake_mode { callback, descriptor };

template <wake_mode Mode>
class embedded_backend {
 public:
  explicit embedded_backend(asio::io_context& io)
      : sys_(Mode == wake_mode::callback ? courier::asio::embedded_config(io) : courier::config::embedded()),
        loop_(io, sys_, budget),
        counter_(sys_.spawn<counter>()) {
    asio::post(io, [this] { io_thread_ = std::this_thread::get_id(); });
  }
  embedded_backend(const embedded_backend&) = delete;
  embedded_backend& operator=(const embedded_backend&) = delete;

  template <class Done>
  void add(std::int64_t n, Done done) {
    in_then_ = true;
    counter_.request(::add{n}).then(
        [this, done](std::int64_t total) {
          check();
          done(total);
        },
        [this, done](const courier::error&) {
          check();
          done(-1);
        });
    in_then_ = false;
  }

  void detach() { loop_.stop(); }  // on the io thread, when the server closes

  void finish() {  // the io thread is gone: this thread drives the system down
    sys_.begin_shutdown();
    const auto give_up = steady::now() + std::chrono::seconds(5);
    while (!sys_.stopped() && steady::now() < give_up) {
      if (sys_.poll().messages == 0) std::this_thread::yield();
    }
    (void)sys_.shutdown();
  }

  bool contract_kept() const {
    if (broken_ > 0) std::fprintf(stderr, "E1: %zu continuation(s) ran inline or off the io thread\n", broken_);
    return broken_ == 0;
  }

 private:
  static constexpr std::size_t budget = 64;  // messages per turn, then asio's other handlers run

  void check() { broken_ += in_then_ || std::this_thread::get_id() != io_thread_; }

  courier::system sys_;
  courier::asio::embedded_loop loop_;
  courier::actor_ref<counter> counter_;
  std::thread::id io_thread_;
  bool in_then_ = false;
  std::size_t broken_ = 0;
};

/// Courier's executor concept is `e.execute(fn)`; asio 1.22 keeps its executors' execute() private
/// (spelled asio::execution::execute(ex, fn)), hence this wrapper. post: never inline.
struct io_executor {
  asio::io_context::executor_type io;
  template <class F>
  void execute(F&& f) const {
    asio::post(io, std::forward<F>(f));
  }
};

/// E2: a threaded system with one worker; the worker hands the continuation to io_executor,
/// which posts it to the io thread.
class threaded_backend {
 public:
  explicit threaded_backend(asio::io_context& io)
      : sys_(one_worker()), counter_(sys_.spawn<counter>()), io_executor_{io.get_executor()} {}

  template <class Done>
  void add(std::int64_t n, Done done) {
    counter_.request(::add{n}).then(
        io_executor_, [done](std::int64_t total) { done(total); }, [done](const courier::error&) { done(-1); });
  }

  void detach() {}
  void finish() { (void)sys_.shutdown(); }
  bool contract_kept() const { return true; }  // asio::post: only the io thread runs the continuation

 private:
  static courier::config one_worker() {
    courier::config c;
    c.workers = 1;
    return c;
  }

  courier::system sys_;
  courier::actor_ref<counter> counter_;
  io_executor io_executor_;
};

/// The raw limit of E2's path, in the same binary: the same two thread hops without Courier. The
/// read handler hands the request to one plain thread (a mutex and a condition variable, as
/// anyone would write it), which keeps the total and asio::post()s the reply back. E2 cannot beat
/// this; its distance to this line is Courier's cost, the rest is the machine's wake-up price.
class hop_floor_backend {
 public:
  explicit hop_floor_backend(asio::io_context& io) : io_(io), thread_([this] { loop(); }) {}
  hop_floor_backend(const hop_floor_backend&) = delete;
  hop_floor_backend& operator=(const hop_floor_backend&) = delete;
  ~hop_floor_backend() { finish(); }

  template <class Done>
  void add(std::int64_t n, Done done) {
    static_assert(sizeof(Done) <= 16, "the reply callback must fit std::function's inline buffer");
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back({n, std::function<void(std::int64_t)>(std::move(done))});
    }
    ready_.notify_one();
  }
  void detach() {}
  void finish() {
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }
  bool contract_kept() const { return true; }

 private:
  struct job {
    std::int64_t amount;
    std::function<void(std::int64_t)> done;
  };
  void loop() {
    std::vector<job> batch;
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, nothing left
      batch.swap(jobs_);
      lock.unlock();
      for (auto& j : batch) {
        total_ += j.amount;
        asio::post(io_, [done = std::move(j.done), t = total_] { done(t); });
      }
      batch.clear();
      lock.lock();
    }
  }

  asio::io_context& io_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<job> jobs_;
  bool stop_ = false;
  std::int64_t total_ = 0;  // the plain thread's
  std::thread thread_;
};

// ---- the server: the same sessions for all of them --------------------------------------------

constexpr char request_line[] = "add 1\n";

/// One connection: read a line, hand "add N" to the backend, write its reply, read the next.
/// Owned by the server (raw pointers in the handlers): it lives until the server is destroyed,
/// after the io thread and every continuation have finished.
template <class Backend>
class session {
 public:
  session(tcp::socket socket, Backend& backend) : socket_(std::move(socket)), backend_(backend) {}

  void start() { next(); }
  void close() {
    asio::error_code ignored;
    socket_.close(ignored);
  }

 private:
  void next() {  // a whole line already buffered is served first
    char* end = std::find(in_, in_ + used_, '\n');
    if (end == in_ + used_) {
      if (used_ == sizeof in_) return;  // no line this long in this protocol: drop the connection
      socket_.async_read_some(asio::buffer(in_ + used_, sizeof in_ - used_),
                              [this](const asio::error_code& ec, std::size_t n) {
                                if (ec) return;
                                used_ += n;
                                next();
                              });
      return;
    }
    std::int64_t n = 0;
    const bool ok =
        end - in_ > 4 && std::memcmp(in_, "add ", 4) == 0 && std::from_chars(in_ + 4, end, n).ec == std::errc{};
    used_ -= static_cast<std::size_t>(end + 1 - in_);
    std::memmove(in_, end + 1, used_);
    if (!ok) {
      reply(-1);
      return;
    }
    backend_.add(n, [this](std::int64_t total) { reply(total); });
  }

  void reply(std::int64_t total) {
    char* end = std::to_chars(out_, out_ + sizeof out_ - 1, total).ptr;
    *end++ = '\n';
    asio::async_write(socket_, asio::buffer(out_, static_cast<std::size_t>(end - out_)),
                      [this](const asio::error_code& ec, std::size_t) {
                        if (!ec) next();
                      });
  }

  tcp::socket socket_;
  Backend& backend_;
  char in_[64];
  std::size_t used_ = 0;
  char out_[24];
};

template <class Backend>
class server {
 public:
  server(asio::io_context& io, Backend& backend)
      : acceptor_(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)), backend_(backend) {
    accept();
  }

  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  void close() {  // on the io thread
    asio::error_code ignored;
    acceptor_.close(ignored);
    for (auto& s : sessions_) s->close();
    backend_.detach();
  }

 private:
  void accept() {
    acceptor_.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
      if (ec) return;
      socket.set_option(tcp::no_delay(true));
      sessions_.push_back(std::make_unique<session<Backend>>(std::move(socket), backend_));
      sessions_.back()->start();
      accept();
    });
  }

  tcp::acceptor acceptor_;
  Backend& backend_;
  std::vector<std::unique_ptr<session<Backend>>> sessions_;
};

// ---- the closed-loop client -------------------------------------------------------------------

struct run_result {
  double requests_per_s = 0;
  double p99_us = 0;
  bool replies_ok = false;  // every reply a number, the last total = the number of requests, and
                            // (E1) every continuation ran inside poll()
};

class client {
 public:
  client(unsigned short port, std::size_t connections, std::size_t requests) : requests_(requests), watchdog_(io_) {
    latencies_ns_.reserve(requests);
    const tcp::endpoint server{asio::ip::address_v4::loopback(), port};
    for (std::size_t i = 0; i < connections; ++i) {
      auto c = std::make_unique<connection>(io_);
      c->socket.connect(server);
      c->socket.set_option(tcp::no_delay(true));
      connections_.push_back(std::move(c));
    }
  }

  run_result run() {
    // A server that stops answering fails the run instead of hanging it.
    watchdog_.expires_after(std::chrono::seconds(60));
    watchdog_.async_wait([this](const asio::error_code& ec) {
      if (ec) return;
      failed_ = true;
      std::fprintf(stderr, "courier-embed-bench: no reply for 60 s, run abandoned\n");
      for (auto& c : connections_) {
        asio::error_code ignored;
        c->socket.close(ignored);
      }
    });
    const auto start = steady::now();
    for (auto& c : connections_) send(*c);
    io_.run();
    const double seconds = std::chrono::duration<double>(steady::now() - start).count();
    for (auto& c : connections_) {
      asio::error_code ignored;
      c->socket.close(ignored);
    }
    run_result r;
    r.requests_per_s = seconds > 0 ? static_cast<double>(latencies_ns_.size()) / seconds : 0;
    if (!latencies_ns_.empty()) {
      const std::size_t at = latencies_ns_.size() * 99 / 100;
      std::nth_element(latencies_ns_.begin(), latencies_ns_.begin() + static_cast<std::ptrdiff_t>(at),
                       latencies_ns_.end());
      r.p99_us = latencies_ns_[at] / 1e3;
    }
    r.replies_ok = !failed_ && latencies_ns_.size() == requests_ && max_total_ == static_cast<std::int64_t>(requests_);
    return r;
  }

 private:
  struct connection {
    explicit connection(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    char in[32];
    std::size_t used = 0;
    steady::time_point sent;
  };

  void send(connection& c) {
    if (issued_ == requests_ || failed_) {
      finished();
      return;
    }
    ++issued_;
    c.sent = steady::now();
    asio::async_write(c.socket, asio::buffer(request_line, sizeof request_line - 1),
                      [this, &c](const asio::error_code& ec, std::size_t) {
                        if (ec) {
                          failed_ = true;
                          finished();
                          return;
                        }
                        receive(c);
                      });
  }

  void receive(connection& c) {
    c.socket.async_read_some(
        asio::buffer(c.in + c.used, sizeof c.in - c.used), [this, &c](const asio::error_code& ec, std::size_t n) {
          if (ec) {
            failed_ = true;
            finished();
            return;
          }
          c.used += n;
          char* end = std::find(c.in, c.in + c.used, '\n');
          if (end == c.in + c.used) {
            if (c.used == sizeof c.in) {
              failed_ = true;
              finished();
              return;
            }
            receive(c);
            return;
          }
          latencies_ns_.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - c.sent).count(), UINT32_MAX)));
          std::int64_t total = -1;
          if (std::from_chars(c.in, end, total).ec != std::errc{} || total < 0) failed_ = true;
          max_total_ = std::max(max_total_, total);
          c.used = 0;  // closed loop: nothing follows the reply
          send(c);
        });
  }

  void finished() {  // one connection's loop has ended; with the last, the watchdog goes too
    if (++finished_ == connections_.size()) watchdog_.cancel();
  }

  asio::io_context io_{1};
  std::vector<std::unique_ptr<connection>> connections_;
  std::size_t finished_ = 0;
  std::size_t requests_;
  std::size_t issued_ = 0;
  std::vector<std::uint32_t> latencies_ns_;
  std::int64_t max_total_ = 0;
  bool failed_ = false;
  asio::steady_timer watchdog_;
};

/// One run: a fresh server (and Courier system) on its own thread, the client on this one.
template <class Backend>
run_result run_once(std::size_t connections, std::size_t requests) {
  asio::io_context io{1};
  Backend backend{io};
  server<Backend> srv{io, backend};
  std::thread server_thread{[&io] { io.run(); }};  // returns once close() has ended every operation
  run_result r;
  {
    client c{srv.port(), connections, requests};
    r = c.run();
  }
  asio::post(io, [&srv] { srv.close(); });
  server_thread.join();
  backend.finish();
  r.replies_ok = r.replies_ok && backend.contract_kept();
  return r;
}

// ---- figures ----------------------------------------------------------------------------------

using courier_bench::median;

struct series {
  std::vector<double> rate, p99, ratio;
  bool ok = true;
  void add(const run_result& r, const run_result* baseline) {
    rate.push_back(r.requests_per_s);
    p99.push_back(r.p99_us);
    if (baseline != nullptr)
      ratio.push_back(baseline->requests_per_s > 0 ? r.requests_per_s / baseline->requests_per_s : 0);
    ok = ok && r.replies_ok;
  }
};

void courier_line(const char* name, std::size_t connections, const series& s) {
  const auto [lo, hi] = std::minmax_element(s.ratio.begin(), s.ratio.end());
  std::printf("%s conns=%zu ratio=%.2f p99_us=%.1f\n", name, connections, median(s.ratio), median(s.p99));
  std::printf("    courier %.0f req/s; ratio %.2f..%.2f over %zu run(s)%s\n", median(s.rate), *lo, *hi, s.ratio.size(),
              s.ok ? "" : "; REPLIES WRONG");
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  const auto opts = courier_bench::parse_options(
      argc, argv, "Courier inside an asio server, against the same server without it",
      [&](CLI::App& app) { app.add_option("--only", only, "run just this figure (E1, E2)"); });
  if (!opts.ok) return opts.exit_code;
  if (!only.empty() && only != "E1" && only != "E2") {  // scripts/run hands every bench the same line
    std::printf("courier-embed-bench: --only %s names no figure of this benchmark (E1, E2)\n", only.c_str());
    return 0;
  }
  const bool e1 = only.empty() || only == "E1", e2 = only.empty() || only == "E2";
  const std::size_t requests = opts.quick ? 1'000 : 100'000;

  std::printf("machine: %s\n", courier_bench::machine_description().c_str());
  std::printf("mode: %s, %zu requests per run over loopback TCP, closed loop, median of %d run(s) per figure\n",
              opts.quick ? "quick" : "full", requests, opts.runs);
  std::fflush(stdout);

  bool all_ok = true;
  for (const std::size_t connections : {std::size_t{1}, std::size_t{8}, std::size_t{64}}) {
    series base, embedded, embedded_fd, threaded, floor;
    for (int run = 0; run < std::max(opts.runs, 1); ++run) {
      // The three one after another in one run, so that a change in the machine's load hits them
      // alike; the order turns from run to run, so that none always goes first.
      run_result b, e, d, t, f;
      for (int k = 0; k < 5; ++k) {
        const int which = (k + run) % 5;
        if (which == 0) b = run_once<baseline_backend>(connections, requests);
        if (which == 1 && e1) e = run_once<embedded_backend<wake_mode::callback>>(connections, requests);
        if (which == 2 && e1) d = run_once<embedded_backend<wake_mode::descriptor>>(connections, requests);
        if (which == 3 && e2) t = run_once<threaded_backend>(connections, requests);
        if (which == 4 && e2) f = run_once<hop_floor_backend>(connections, requests);
      }
      base.add(b, nullptr);
      if (e1) embedded.add(e, &b);
      if (e1) embedded_fd.add(d, &b);
      if (e2) threaded.add(t, &b);
      if (e2) floor.add(f, &b);
      if (!(base.ok && embedded.ok && embedded_fd.ok && threaded.ok && floor.ok))
        break;  // a broken server: no point in more runs
    }
    std::printf("baseline asio-plain conns=%zu req_s=%.0f p99_us=%.1f%s\n", connections, median(base.rate),
                median(base.p99), base.ok ? "" : " REPLIES WRONG");
    if (e1) {
      courier_line("E1 asio-embedded", connections, embedded);
      std::printf("    the loop's wake_fd mode instead of embedded_config: ratio=%.2f p99_us=%.1f\n",
                  median(embedded_fd.ratio), median(embedded_fd.p99));
    }
    if (e2) {
      courier_line("E2 asio-threaded", connections, threaded);
      // Not a Courier figure: the bound on E2 (two bare thread hops), ratio against the baseline.
      std::printf("    floor: two plain thread hops without Courier: ratio=%.2f p99_us=%.1f\n", median(floor.ratio),
                  median(floor.p99));
    }
    std::fflush(stdout);
    all_ok = all_ok && base.ok && embedded.ok && embedded_fd.ok && threaded.ok && floor.ok;
    if (!all_ok) break;
  }
  return all_ok ? 0 : 1;
}
