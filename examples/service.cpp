// A service written as actors: clients know only interfaces, the front answers after asking the
// store (a deferred reply), hands plain reads straight to the store (delegate), and finds the store
// by name in the registry. The store's mailbox is bounded: a burst beyond it is refused, not queued.
#include <courier/courier.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

struct put {
  std::string key;
  int value;
};
struct lookup {
  std::string key;
};
struct lookup_doubled {
  std::string key;
};

// What clients include: the messages and what each replies, no class.
using store_api = courier::interface<void(put), int(lookup)>;
using front_api = courier::interface<int(lookup), int(lookup_doubled)>;

class store : public courier::actor<store, put, lookup> {
 public:
  static constexpr std::size_t mailbox_capacity = 1'000;  // back-pressure instead of unbounded growth
  void on(const put& p) { values_[p.key] = p.value; }
  int on(const lookup& r) {
    auto it = values_.find(r.key);
    return it != values_.end() ? it->second : 0;
  }

 private:
  std::map<std::string, int> values_;
};

class front : public courier::actor<front, lookup, lookup_doubled> {
 public:
  void on_start() {
    auto found = system().registry().get<store_api>("store");  // by name, typed by interface
    if (found) store_ = *found;
  }
  courier::delegated<int> on(const lookup& r) { return delegate(store_, r); }  // the store answers
  courier::response_promise<int> on(const lookup_doubled& r) {
    auto answer = make_response_promise<int>();  // answered after the store replied
    store_.request(lookup{r.key}, std::chrono::seconds(1))
        .then([answer](int v) mutable { answer.deliver(2 * v); },
              [answer](const courier::error& e) mutable { answer.fail(e); });
    return answer;
  }
  void on_stop() { store_.reset(); }

 private:
  courier::actor_ref<store_api> store_;
};

int main() {
  using namespace std::chrono_literals;
  courier::system sys;
  courier::actor_ref<store_api> s = sys.spawn<store>();
  if (!sys.registry().put("store", s)) return 1;
  courier::actor_ref<front_api> f = sys.spawn<front>();

  s.send(put{"answer", 21});
  auto plain = f.ask(lookup{"answer"}, 1s);
  auto doubled = f.ask(lookup_doubled{"answer"}, 1s);
  if (!plain || !doubled) {
    std::fprintf(stderr, "request failed: %s\n", (!plain ? plain.err() : doubled.err()).describe().c_str());
    return 1;
  }
  std::printf("lookup: %d, lookup_doubled: %d\n", *plain, *doubled);

  // A burst far beyond the store's capacity: some sends are refused at once (send_result::full).
  int refused = 0;
  for (int i = 0; i < 100'000; ++i)
    if (s.try_send(put{std::to_string(i % 100), i}) == courier::send_result::full) ++refused;
  std::printf("burst of 100000 puts into a mailbox of 1000: %d refused\n", refused);
  return *plain == 21 && *doubled == 42 ? 0 : 1;
}
