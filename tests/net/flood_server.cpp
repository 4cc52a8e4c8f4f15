// The slow server of the back-pressure flood (flood.test.cpp): serves flood::api on a Unix socket
// with a handler that sleeps `pause_us` microseconds every `every` messages, so it falls behind any
// client that sends as fast as it can. Runs until killed.
//
//     courier-test-flood-server SOCKET_PATH PAUSE_US EVERY
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "flood_api.hpp"

namespace {

class slow_sink : public courier::actor<slow_sink, flood::drip, flood::handled> {
 public:
  slow_sink(long pause_us, long every) : pause_(pause_us), every_(every > 0 ? every : 1) {}
  void on(const flood::drip& d) {
    ++count_;
    if (d.n <= last_) ++out_of_order_;  // the client numbers its drips 1, 2, 3...; refused ones leave gaps
    last_ = d.n;
    if (count_ % static_cast<std::uint64_t>(every_) == 0) std::this_thread::sleep_for(pause_);
  }
  // The count, or -1 when a drip came out of order (per-sender order is part of the claim).
  std::int64_t on(const flood::handled&) { return out_of_order_ == 0 ? static_cast<std::int64_t>(count_) : -1; }

 private:
  std::chrono::microseconds pause_;
  long every_;
  std::uint64_t count_ = 0;
  std::uint64_t out_of_order_ = 0;
  std::int32_t last_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET_PATH PAUSE_US EVERY\n", argv[0]);
    return 2;
  }
  courier::system sys;
  courier::net::node net{sys};
  courier::net::endpoint where;
  where.kind = courier::net::transport_kind::uds;
  where.file = argv[1];
  auto sink = sys.spawn<slow_sink>(std::atol(argv[2]), std::atol(argv[3]));
  auto s = net.serve(courier::actor_ref<flood::api>(sink), where);
  if (!s) {
    std::fprintf(stderr, "flood server: %s\n", s.err().text.c_str());
    return 1;
  }
  std::fprintf(stderr, "flood server: serving on %s\n", s->where.c_str());
  net.wait_stopped();  // until killed
  return 0;
}
