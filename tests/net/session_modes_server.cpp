// The server of the start modes' tests: a session per connection in the start mode its options choose
// (--pool, --thread, --fork, --spawn), with services that tell which process and thread serve the
// session (PID_, TID_) and how many workers its system has (WRKS), who the session's peer is and its number (PEER), the
// endpoint the serve callback was given (WHER), one that blocks its thread for the milliseconds it is given (SLEP), one
// that aborts its process (ABRT) and one that makes the process wait the milliseconds it is given after its sessions
// ended before it exits (LNGR). With COURIER_TEST_SLOW_START_MS in its environment, each session's serve callback first
// sleeps that long.
#include <sys/resource.h>
#include <unistd.h>
#include <courier/courier.hpp>
#include <courier/net/server.hpp>
#include <courier/net/services.hpp>
#include <courier/net/session.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

namespace net = courier::net;

namespace {
std::atomic<int> linger_ms{0};
}  // namespace

int main(int argc, char** argv) {
  net::server_program program{.name = "courier-test-session-modes-server"};
  program.offers_start_modes = true;
  const int status = net::run_server(argc, argv, program, [](net::server_setup& s) {
    // A session that is slow to start (a loaded host, a program with much to set up).
    if (const char* ms = std::getenv("COURIER_TEST_SLOW_START_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
    const std::string served = net::to_string(s.where);
    const auto workers = static_cast<std::int64_t>(s.sys.worker_count());
    return s.net.serve_sessions(
        [served, workers](const net::peer_info& peer, net::context_ref) {
          auto table = std::make_shared<net::service_table>();
          table->add(courier::token("PID_"),
                     [](net::incoming& call) { call.reply().add(static_cast<std::int64_t>(::getpid())); });
          table->add(courier::token("TID_"),
                     [](net::incoming& call) { call.reply().add(static_cast<std::int64_t>(::gettid())); });
          table->add(courier::token("WRKS"), [workers](net::incoming& call) { call.reply().add(workers); });
          table->add(courier::token("SLEP"), [](net::incoming& call) {
            auto ms = call.read<std::int32_t>();
            if (!ms) return;  // the call fails, naming the argument
            std::this_thread::sleep_for(std::chrono::milliseconds(*ms));
            call.reply().add(*ms);
          });
          table->add(courier::token("PEER"), [peer](net::incoming& call) {
            call.reply()
                .add(std::string_view(net::to_string(peer.transport)))
                .add(std::string_view(peer.address))
                .add(static_cast<std::uint64_t>(peer.id));
          });
          table->add(courier::token("WHER"),
                     [served](net::incoming& call) { call.reply().add(std::string_view(served)); });
          table->add(courier::token("LNGR"), [](net::incoming& call) {
            auto ms = call.read<std::int32_t>();
            if (!ms) return;
            linger_ms.store(*ms);
            call.reply().add(*ms);
          });
          table->add(courier::token("ABRT"), [](net::incoming&) {
            const rlimit no_core{0, 0};  // the crash is the test's: no core file for it
            ::setrlimit(RLIMIT_CORE, &no_core);
            std::abort();
          });
          net::session session;
          session.services = std::move(table);
          return session;
        },
        s.where, s.config);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(linger_ms.load()));
  return status;
}
