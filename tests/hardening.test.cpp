// Regression tests for core hardening: reference lifetime across shutdown, spawn racing shutdown,
// shutdown deadlines, continuations of plain threads, leaks on crash and on throwing messages,
// alignment of actors and messages.
#include "courier/system.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  int a, b;
};
struct get {};
struct quit {};
struct boom {};

class counter : public courier::actor<counter, add, get, quit, boom> {
 public:
  void on(const add& m) { total_ += m.a + m.b; }
  int on(const get&) { return total_; }
  void on(const quit&) { stop(); }
  int on(const boom&) { throw std::runtime_error("boom"); }

 private:
  int total_ = 0;
};

bool aligned_to(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Alignment

TEST_CASE("pool allocations honour every alignment from 16 to 4096", "[hardening][alignment]") {
  for (std::size_t alignment = 16; alignment <= 4096; alignment *= 2) {
    for (std::size_t size : {std::size_t{1}, std::size_t{16}, std::size_t{100}, alignment, alignment + 8,
                             2 * alignment, std::size_t{4096}, std::size_t{5000}, std::size_t{10000}}) {
      std::vector<void*> blocks;
      bool all_aligned = true;
      for (int i = 0; i < 16; ++i) {
        void* p = courier::pool::allocate(size, alignment);
        all_aligned = all_aligned && aligned_to(p, alignment);
        std::memset(p, 0xab, size);
        blocks.push_back(p);
      }
      INFO("size " << size << " alignment " << alignment);
      CHECK(all_aligned);
      for (void* p : blocks) courier::pool::deallocate(p, size, alignment);
    }
  }
}

namespace {

template <std::size_t A>
struct alignas(A) aligned_message {
  char bytes[A];
};
template <std::size_t... A>
class aligned_sink : public courier::actor<aligned_sink<A...>, aligned_message<A>...> {
 public:
  template <std::size_t N>
  void on(const aligned_message<N>& m) {
    if (!aligned_to(&m, N)) ++misaligned;
    ++seen;
  }
  int misaligned = 0;
  int seen = 0;
};

}  // namespace

TEST_CASE("messages aligned from 16 to 4096 arrive aligned", "[hardening][alignment]") {
  courier_test::watchdog wd("message alignment");
  courier::system sys{courier::config::deterministic()};
  using sink = aligned_sink<16, 32, 64, 128, 256, 512, 1024, 2048, 4096>;
  auto s = sys.spawn<sink>();
  for (int i = 0; i < 8; ++i) {
    s.send(aligned_message<16>{});
    s.send(aligned_message<32>{});
    s.send(aligned_message<64>{});
    s.send(aligned_message<128>{});
    s.send(aligned_message<256>{});
    s.send(aligned_message<512>{});
    s.send(aligned_message<1024>{});
    s.send(aligned_message<2048>{});
    s.send(aligned_message<4096>{});
  }
  sys.run_until_idle();
  auto* impl = static_cast<sink*>(s.base());
  CHECK(impl->seen == 72);
  CHECK(impl->misaligned == 0);
}

// ---------------------------------------------------------------------------------------------
// Large messages across threads (ThreadSanitizer must stay quiet)

namespace {

struct big {
  char bytes[8192];
  int index;
};
class big_sink : public courier::actor<big_sink, big, get> {
 public:
  void on(const big& b) {
    if (b.bytes[100] == static_cast<char>(b.index)) ++ok_;
  }
  int on(const get&) { return ok_; }

 private:
  int ok_ = 0;
};

}  // namespace

TEST_CASE("messages above 4 KiB cross threads cleanly", "[hardening][concurrent]") {
  courier_test::watchdog wd("large messages");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto s = sys.spawn<big_sink>();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([s] {
      for (int i = 0; i < 500; ++i) {
        auto b = std::make_unique<big>();
        b->index = i % 100;
        b->bytes[100] = static_cast<char>(b->index);
        s.send(*b);
      }
    });
  for (auto& t : threads) t.join();
  auto r = s.ask(get{}, 10s);
  REQUIRE(r.has_value());
  CHECK(*r == 1000);
}
