#pragma once
/// Messages and actors that several core tests share: a counter that adds, answers, renames,
/// throws, stops and resets on request, and the probe it reports to. Header-only; a test that
/// needs its own variant declares it locally instead.

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "courier/actor.hpp"

namespace courier_test {

struct add {
  int a, b;
};
struct get {};
struct set_name {
  std::string name;
};
struct boom {
  std::string why;
};
struct quit {};
struct reset {};

/// What an actor reports to its test; the test owns it, the actor writes it from its handlers.
struct probe_state {
  std::mutex mutex;
  std::vector<std::string> events;
  bool on_stop_called = false;
  int total_at_stop = -1;
  void note(std::string e) {
    std::lock_guard lock(mutex);
    events.push_back(std::move(e));
  }
};

/// add: adds a + b; get: replies the total; set_name: replies the old name; boom: throws `why`;
/// quit: stop(); reset: total = 0. With a probe, notes each handler and what on_stop saw.
class counter : public courier::actor<counter, add, get, set_name, boom, quit, reset> {
 public:
  explicit counter(probe_state* state = nullptr) : state_(state) {}

  void on(const add& m) {
    total_ += m.a + m.b;
    note("add");
  }
  int on(const get&) {
    note("get");
    return total_;
  }
  std::string on(const set_name& r) {
    note("set_name");
    std::string old = std::move(name_);
    name_ = r.name;
    return old;
  }
  int on(const boom& b) {
    note("boom");
    throw std::runtime_error(b.why);
  }
  void on(const quit&) {
    note("quit");
    stop();
  }
  void on(const reset&) {
    note("reset");
    total_ = 0;
  }
  void on_stop() {
    if (state_ == nullptr) return;
    std::lock_guard lock(state_->mutex);
    state_->on_stop_called = true;
    state_->total_at_stop = total_;
  }

 private:
  void note(const char* what) {
    if (state_ != nullptr) state_->note(what);
  }
  probe_state* state_;
  int total_ = 0;
  std::string name_ = "initial";
};

}  // namespace courier_test
