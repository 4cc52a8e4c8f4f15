// Must NOT compile: `counter` replies `int` to `get`, the interface declares `std::string`.
#include <courier/courier.hpp>

#include <string>

struct get {};
using named_api = courier::interface<std::string(get)>;

class counter : public courier::actor<counter, get> {
 public:
  int on(const get&) { return 0; }
};

int main() {
  courier::system sys{courier::config::deterministic()};
  courier::actor_ref<named_api> c = sys.spawn<counter>();
  (void)c;
}
