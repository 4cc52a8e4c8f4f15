// Two actors play ping-pong; the main thread waits for the rally to end and prints the rate.
#include <courier/courier.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

struct ball {
  int remaining;
};
class player;
struct partner {
  courier::actor_ref<player> other;
};

class player : public courier::actor<player, partner, ball> {
 public:
  player(const char* name, std::atomic<bool>* done) : name_(name), done_(done) {}
  void on(const partner& p) { other_ = p.other; }
  void on(const ball& b) {
    if (b.remaining == 0) {
      std::printf("%s caught the last ball\n", name_);
      done_->store(true);
      return;
    }
    other_.send(ball{b.remaining - 1});
  }
  // Partners reference each other; break the cycle when stopping.
  void on_stop() { other_.reset(); }

 private:
  const char* name_;
  std::atomic<bool>* done_;
  courier::actor_ref<player> other_;
};

int main() {
  courier::system sys;
  std::atomic<bool> done{false};
  auto ping = sys.spawn<player>("ping", &done);
  auto pong = sys.spawn<player>("pong", &done);
  ping.send(partner{pong});
  pong.send(partner{ping});
  constexpr int hops = 1'000'000;
  auto t0 = std::chrono::steady_clock::now();
  ping.send(ball{hops});
  while (!done.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d hops in %.3f s (%.1f ns per hop)\n", hops, s, s * 1e9 / hops);
  return 0;
}
