// A TCP line server in which asio owns the only thread and Courier runs inside it (embedded mode):
// the running total lives in a counter actor, each connection is a coroutine that asks it.
//
//   add N   ->  the total after adding N
//   get     ->  the total
//   other   ->  "error: ..."
//
// Usage: courier-example-asio_server [--port P] [--self-test]
// SIGINT (or SIGTERM) shuts the system down from inside the loop, then io.run() returns.
// --self-test listens on a free loopback port, runs clients against itself on the same thread,
// checks every reply, then raises SIGINT and exits 0 only if all went as expected.
#include <courier/asio.hpp>
#include <courier/courier.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace std::chrono_literals;
using ::asio::ip::tcp;

struct add {
  std::int64_t amount;
};
struct get {};

class counter : public courier::actor<counter, add, get> {
 public:
  std::int64_t on(const add& m) { return total_ += m.amount; }
  std::int64_t on(const get&) { return total_; }

 private:
  std::int64_t total_ = 0;
};
using counter_api = courier::interface<std::int64_t(add), std::int64_t(get)>;

namespace {

/// One reply line for one request line.
::asio::awaitable<std::string> answer(std::string_view line, courier::actor_ref<counter_api> total) {
  courier::result<std::int64_t> r = courier::error(courier::errc::invalid_argument, "unknown command");
  if (line.starts_with("add ")) {
    std::int64_t n = 0;
    const std::string_view digits = line.substr(4);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc{} || end != digits.data() + digits.size()) co_return "error: add takes an integer\n";
    r = co_await courier::asio::async_request(total, add{n}, 1s, ::asio::use_awaitable);
  } else if (line == "get") {
    r = co_await courier::asio::async_request(total, get{}, 1s, ::asio::use_awaitable);
  }
  if (!r) co_return "error: " + r.error().describe() + "\n";
  co_return std::to_string(*r) + "\n";
}

::asio::awaitable<void> session(tcp::socket socket, courier::actor_ref<counter_api> total,
                                std::set<tcp::socket*>& sessions) {
  sessions.insert(&socket);  // so that shutdown can close idle connections
  std::string buffer;
  for (;;) {
    std::error_code ec;
    const std::size_t n = co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(buffer, 4096), '\n',
                                                            ::asio::redirect_error(::asio::use_awaitable, ec));
    if (ec) break;  // closed by the peer, by shutdown, or a line longer than 4 KiB
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string reply = co_await answer(line, total);
    co_await ::asio::async_write(socket, ::asio::buffer(reply), ::asio::redirect_error(::asio::use_awaitable, ec));
    if (ec) break;
  }
  sessions.erase(&socket);
}

::asio::awaitable<void> listen(tcp::acceptor& acceptor, courier::actor_ref<counter_api> total,
                               std::set<tcp::socket*>& sessions) {
  for (;;) {
    std::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(::asio::redirect_error(::asio::use_awaitable, ec));
    if (ec) co_return;  // the acceptor was closed: shutting down
    ::asio::co_spawn(acceptor.get_executor(), session(std::move(socket), total, sessions), ::asio::detached);
  }
}

/// A client that sends `lines` and expects `replies`, one for one; false on any difference.
::asio::awaitable<bool> client(tcp::endpoint server, std::vector<std::string> lines, std::vector<std::string> replies) {
  tcp::socket socket(co_await ::asio::this_coro::executor);
  co_await socket.async_connect(server, ::asio::use_awaitable);
  std::string buffer;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    co_await ::asio::async_write(socket, ::asio::buffer(lines[i] + "\n"), ::asio::use_awaitable);
    const std::size_t n =
        co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(buffer), '\n', ::asio::use_awaitable);
    const std::string got = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (replies[i] != "*" && got != replies[i]) {
      std::fprintf(stderr, "self-test: sent '%s', expected '%s', got '%s'\n", lines[i].c_str(), replies[i].c_str(),
                   got.c_str());
      co_return false;
    }
  }
  co_return true;
}

/// Clients in parallel (each adds 1 to 100 in its own order: the sum is the same), then one that
/// checks the total and the error replies.
::asio::awaitable<void> self_test(tcp::endpoint server, bool& passed) {
  constexpr int clients = 4;
  int finished = 0;
  int good = 0;
  auto ex = co_await ::asio::this_coro::executor;
  for (int c = 0; c < clients; ++c) {
    std::vector<std::string> lines, replies;
    for (int i = 1; i <= 100; ++i) {
      lines.push_back("add " + std::to_string(c % 2 == 0 ? i : 101 - i));
      replies.push_back("*");  // interleaved with the other clients: any running total
    }
    ::asio::co_spawn(ex, client(server, std::move(lines), std::move(replies)), [&](std::exception_ptr e, bool ok) {
      ++finished;
      if (!e && ok) ++good;
    });
  }
  ::asio::steady_timer wait(ex);
  while (finished < clients) {
    wait.expires_after(1ms);
    co_await wait.async_wait(::asio::use_awaitable);
  }
  const std::string expected = std::to_string(clients * 5050);
  std::vector<std::string> lines{"get", "add 1", "add -1", "nonsense", "add x"};
  std::vector<std::string> replies{
      expected, std::to_string(clients * 5050 + 1), expected,
      "error: " + courier::error(courier::errc::invalid_argument, "unknown command").describe(),
      "error: add takes an integer"};
  const bool last = co_await client(server, std::move(lines), std::move(replies));
  passed = good == clients && last;
  std::printf("self-test: %d/%d clients ok, checks %s; total %s\n", good, clients, last ? "passed" : "FAILED",
              expected.c_str());
  std::raise(SIGINT);  // the same path as a ^C
}

}  // namespace

int main(int argc, char** argv) {
  unsigned short port = 0;
  bool test = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--self-test") == 0) {
      test = true;
    } else if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      port = static_cast<unsigned short>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--port P] [--self-test]\n", argv[0]);
      return 2;
    }
  }

  ::asio::io_context io(1);  // one thread: this one
  // on_wake posts to io (no eventfd): a request made in a session costs no system call to wake
  // the loop. The system comes after io and before the loop, which polls it.
  courier::system sys{courier::asio::embedded_config(io)};
  courier::asio::embedded_loop loop(io, sys);
  courier::actor_ref<counter_api> total = sys.spawn<counter>();

  tcp::acceptor acceptor(io, tcp::endpoint(::asio::ip::make_address("127.0.0.1"), port));
  const tcp::endpoint server = acceptor.local_endpoint();
  std::printf("listening on %s:%u\n", server.address().to_string().c_str(), server.port());
  std::fflush(stdout);
  std::set<tcp::socket*> sessions;
  ::asio::co_spawn(io, listen(acceptor, total, sessions), ::asio::detached);

  bool clean = false;
  ::asio::steady_timer watchdog(io);
  ::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code ec, int) {
    if (ec) return;
    std::printf("shutting down\n");
    acceptor.close();
    for (tcp::socket* s : sessions) s->close();  // their coroutines end and erase themselves
    loop.async_shutdown(2s, [&](courier::shutdown_report report) {
      clean = report.clean;
      std::printf("courier shut down %s\n", report.clean ? "cleanly" : "with actors left running");
      watchdog.cancel();
    });
  });

  bool passed = !test;
  if (test) {
    ::asio::co_spawn(io, self_test(server, passed), ::asio::detached);
    watchdog.expires_after(30s);  // a hang fails the test, with a reason
    watchdog.async_wait([](std::error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "self-test: no result within 30 s\n");
      std::_Exit(1);
    });
  }

  io.run();  // returns once the system has shut down and every connection has closed
  return passed && clean ? 0 : 1;
}
