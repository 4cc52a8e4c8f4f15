#include <courier/courier.hpp>

#include <chrono>
#include <cstdio>

struct question {};

class oracle : public courier::actor<oracle, question> {
 public:
  int on(const question&) { return 42; }
};

int main() {
  courier::system sys;
  auto o = sys.spawn<oracle>();
  auto answer = o.ask(question{}, std::chrono::seconds(5));
  if (!answer) return 1;
  std::printf("consumer: %d\n", *answer);
  return 0;
}
