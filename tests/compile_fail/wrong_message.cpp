// Must NOT compile: `counter` does not accept `reset`. The compile-fail test checks that the error
// names both the actor and the message.
#include <courier/courier.hpp>

struct add {
  int value;
};
struct reset {};

class counter : public courier::actor<counter, add> {
 public:
  void on(const add&) {}
};

int main() {
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(reset{});
}
