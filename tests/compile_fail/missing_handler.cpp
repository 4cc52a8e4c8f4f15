// Must NOT compile: `counter` declares `reset` but has no handler for it. The error must name both.
#include <courier/courier.hpp>

struct add {
  int value;
};
struct reset {};

class counter : public courier::actor<counter, add, reset> {
 public:
  void on(const add&) {}
};

int main() {
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(add{1});
}
