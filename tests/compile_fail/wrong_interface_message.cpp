// Must NOT compile: `counter_api` does not declare `reset`. The error must name both.
#include <courier/courier.hpp>

struct add {
  int value;
};
struct reset {};
using counter_api = courier::interface<void(add)>;

class counter : public courier::actor<counter, add, reset> {
 public:
  void on(const add&) {}
  void on(const reset&) {}
};

int main() {
  courier::system sys{courier::config::deterministic()};
  courier::actor_ref<counter_api> c = sys.spawn<counter>();
  c.send(reset{});
}
