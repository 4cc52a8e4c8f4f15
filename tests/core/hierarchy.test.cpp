// What an actor reaches from its handlers: system(), spawn and spawn_linked (parents, children and
// their links), on_start, waiting for every actor to stop, and the plain thread's inbox.

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "courier/courier.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

// ----------------------------------------------------------------------------------------------
// Fixtures: every actor reports to the test through an inbox.

class child;
struct note {
  std::string what;
  std::uint64_t from = 0;
  courier::actor_ref<child> sender = {};
};
using notes = courier::inbox<note, courier::down>;
using notes_ref = courier::actor_ref<notes::actor_type>;

struct ping {};
struct fail {};
struct quit {};

/// Reports what happens to it; `fail` throws, `quit` stops normally.
class child : public courier::actor<child, ping, fail, quit> {
 public:
  explicit child(notes_ref out, std::atomic<int>* destroyed = nullptr) : out_(std::move(out)), destroyed_(destroyed) {}
  ~child() {
    if (destroyed_ != nullptr) destroyed_->fetch_add(1);
  }
  void on(const ping&) { out_.send(note{"child got ping", self().id(), self()}); }
  void on(const fail&) { throw std::runtime_error("child failed"); }
  void on(const quit&) { stop(); }
  // The inbox may hold notes that refer to this child: drop the way back so no cycle remains.
  void on_stop() { out_.reset(); }

 private:
  notes_ref out_;
  std::atomic<int>* destroyed_;
};

struct make_child {
  bool linked = false;
  std::atomic<int>* destroyed = nullptr;
};
struct tell_child {
  std::size_t index;
  bool fail = false;
  bool quit = false;
};
struct check_system {
  courier::system* expected;
};

/// A parent that does not accept `down`: an abnormal child exit stops it.
class parent : public courier::actor<parent, make_child, tell_child, check_system, quit> {
 public:
  explicit parent(notes_ref out) : out_(std::move(out)) {}
  void on(const make_child& m) {
    auto c = m.linked ? spawn_linked<child>(out_, m.destroyed) : spawn<child>(out_, m.destroyed);
    c.send(ping{});
    children_.push_back(std::move(c));
  }
  void on(const tell_child& t) {
    auto& c = children_.at(t.index);
    if (t.fail)
      c.send(fail{});
    else if (t.quit)
      c.send(quit{});
    else
      c.send(ping{});
  }
  void on(const check_system& c) { out_.send(note{&system() == c.expected ? "same system" : "other system", 0}); }
  void on(const quit&) { stop(); }
  void on_stop() { children_.clear(); }

 private:
  notes_ref out_;
  std::vector<courier::actor_ref<child>> children_;
};

/// A parent that accepts `down`: it hears of every linked child's exit and keeps running.
class supervisor : public courier::actor<supervisor, make_child, tell_child, courier::down, quit> {
 public:
  explicit supervisor(notes_ref out) : out_(std::move(out)) {}
  void on(const make_child& m) {
    auto c = spawn_linked<child>(out_, m.destroyed);
    children_.push_back(std::move(c));
  }
  void on(const tell_child& t) {
    if (t.fail) children_.at(t.index).send(fail{});
    if (t.quit) children_.at(t.index).send(quit{});
  }
  void on(const courier::down& d) {
    for (auto& c : children_)
      if (c && c.id() == d.id) c.reset();  // keep the indices stable
    out_.send(d);
  }
  void on(const quit&) { stop(); }
  void on_stop() { children_.clear(); }

 private:
  notes_ref out_;
  std::vector<courier::actor_ref<child>> children_;
};

/// Watches any actor for the test: forwards its `down` to the inbox.
template <class T>
struct watch {
  courier::actor_ref<T> target;
};
class watcher : public courier::actor<watcher, watch<child>, watch<parent>, watch<supervisor>, courier::down> {
 public:
  explicit watcher(notes_ref out) : out_(std::move(out)) {}
  void on(const watch<child>& w) { monitor(w.target); }
  void on(const watch<parent>& w) { monitor(w.target); }
  void on(const watch<supervisor>& w) { monitor(w.target); }
  void on(const courier::down& d) { out_.send(d); }

 private:
  notes_ref out_;
};

// on_start ---------------------------------------------------------------------------------------

struct greet {
  std::string text;
};

/// Sends to itself and spawns in on_start; everything it sees goes to the inbox in order.
class starter : public courier::actor<starter, greet> {
 public:
  explicit starter(notes_ref out) : out_(std::move(out)) {}
  void on_start() {
    out_.send(note{"on_start", self().id()});
    self().send(greet{"from on_start"});
    spawn<child>(out_).send(ping{});
  }
  void on(const greet& g) { out_.send(note{g.text, self().id()}); }

 private:
  notes_ref out_;
};

class failing_starter : public courier::actor<failing_starter, greet> {
 public:
  explicit failing_starter(notes_ref out) : out_(std::move(out)) {}
  void on_start() { throw std::runtime_error("no start"); }
  void on(const greet& g) { out_.send(note{g.text, self().id()}); }

 private:
  notes_ref out_;
};

/// No on_start: spawning it queues nothing.
class plain : public courier::actor<plain, greet> {
 public:
  void on(const greet&) { stop(); }
};

static_assert(courier::detail::has_on_start<starter>);
static_assert(!courier::detail::has_on_start<plain>);

note take_note(notes& in) {
  auto r = in.receive<note>(2s);
  REQUIRE(r.has_value());
  return *r;
}

courier::down take_down(notes& in) {
  auto r = in.receive<courier::down>(2s);
  REQUIRE(r.has_value());
  return *r;
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// system() and spawn from a handler

TEST_CASE("system() inside a handler is the actor's own system", "[hierarchy][deterministic]") {
  courier_test::watchdog wd("system() from a handler");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto p = sys.spawn<parent>(in.ref());
  p.send(check_system{&sys});
  CHECK(take_note(in).what == "same system");
}

TEST_CASE("a child spawned from a handler gets the message its parent sent it", "[hierarchy][deterministic]") {
  courier_test::watchdog wd("spawn from a handler");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto p = sys.spawn<parent>(in.ref());
  REQUIRE(sys.live_actors() == 2);  // the inbox's actor and the parent
  p.send(make_child{});
  REQUIRE(sys.run_one());  // the parent spawns the child and sends it ping
  CHECK(sys.live_actors() == 3);
  const note n = take_note(in);
  CHECK(n.what == "child got ping");
  CHECK(n.from != p.id());
}

TEST_CASE("an unlinked child outlives its parent", "[hierarchy][deterministic]") {
  courier_test::watchdog wd("unlinked child");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto p = sys.spawn<parent>(in.ref());
  auto w = sys.spawn<watcher>(in.ref());
  p.send(make_child{});
  CHECK(take_note(in).what == "child got ping");
  p.send(quit{});
  w.send(watch<parent>{p});
  CHECK_FALSE(take_down(in).reason);
  sys.run_until_idle();
  CHECK(sys.live_actors() == 3);  // inbox, watcher and the child
}

// ----------------------------------------------------------------------------------------------
// Linked children

TEST_CASE("a linked child stops with parent_stopped when its parent stops", "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("linked child stops with parent");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto p = sys.spawn<parent>(in.ref());
  auto w = sys.spawn<watcher>(in.ref());
  p.send(make_child{true});
  const note n = take_note(in);
  w.send(watch<child>{n.sender});
  sys.run_until_idle();
  p.send(quit{});
  const courier::down d = take_down(in);
  CHECK(d.id == n.from);
  CHECK(d.reason == errc::parent_stopped);
  sys.run_until_idle();
  CHECK(sys.live_actors() == 2);  // inbox and watcher
}

TEST_CASE("a stopped supervisor frees its linked children and hears nothing more", "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("supervisor stops");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  std::atomic<int> destroyed{0};
  auto p = sys.spawn<supervisor>(in.ref());
  auto w = sys.spawn<watcher>(in.ref());
  p.send(make_child{true, &destroyed});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 4);
  p.send(quit{});
  REQUIRE(sys.run_one());  // the supervisor stops; its child is asked to stop
  sys.run_until_idle();
  CHECK(sys.live_actors() == 2);
  CHECK(destroyed.load() == 1);  // neither side of the link kept the child alive
  CHECK(in.size() == 0);         // the supervisor had stopped: it hears nothing of the child
}

TEST_CASE("a parent that accepts down receives it for an abnormal child exit and keeps running",
          "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("down from a linked child");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  std::atomic<int> destroyed{0};
  auto s = sys.spawn<supervisor>(in.ref());
  s.send(make_child{true, &destroyed});
  s.send(tell_child{0, true});
  const courier::down d = take_down(in);
  CHECK(d.reason == errc::handler_failed);
  CHECK(d.reason.text == "child failed");
  sys.run_until_idle();
  CHECK(destroyed.load() == 1);   // the parent dropped its link when it heard of the exit
  CHECK(sys.live_actors() == 2);  // inbox and supervisor
  s.send(make_child{true, &destroyed});
  s.send(tell_child{1, false, true});  // a normal exit: down with no error
  CHECK_FALSE(take_down(in).reason);
  sys.run_until_idle();
  CHECK(destroyed.load() == 2);
}

TEST_CASE("a parent without a down handler stops with the reason of an abnormal child exit",
          "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("abnormal exit stops the parent");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  std::atomic<int> destroyed{0};
  auto p = sys.spawn<parent>(in.ref());
  auto w = sys.spawn<watcher>(in.ref());
  w.send(watch<parent>{p});
  p.send(make_child{true, &destroyed});
  p.send(make_child{true, &destroyed});
  CHECK(take_note(in).what == "child got ping");
  CHECK(take_note(in).what == "child got ping");
  p.send(tell_child{0, true});
  const courier::down d = take_down(in);
  CHECK(d.id == p.id());
  CHECK(d.reason == errc::handler_failed);
  CHECK(d.reason.text == "child failed");
  sys.run_until_idle();
  CHECK(destroyed.load() == 2);   // the second child stopped with its parent
  CHECK(sys.live_actors() == 2);  // inbox and watcher
}

TEST_CASE("a parent without a down handler ignores a normal child exit", "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("normal exit is silent");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  std::atomic<int> destroyed{0};
  auto p = sys.spawn<parent>(in.ref());
  p.send(make_child{true, &destroyed});
  CHECK(take_note(in).what == "child got ping");
  p.send(tell_child{0, false, true});
  sys.run_until_idle();
  p.send(check_system{&sys});
  CHECK(take_note(in).what == "same system");  // still running
  CHECK(sys.live_actors() == 2);
}

TEST_CASE("links do not leak: children that stop before their long-lived parent are freed at once",
          "[hierarchy][link][deterministic]") {
  courier_test::watchdog wd("links do not leak");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  std::atomic<int> destroyed{0};
  auto s = sys.spawn<supervisor>(in.ref());
  constexpr int n = 100;
  for (int i = 0; i < n; ++i) s.send(make_child{true, &destroyed});
  for (int i = 0; i < n; ++i) s.send(tell_child{static_cast<std::size_t>(i), false, true});
  s.send(quit{});  // the supervisor's refs are dropped in on_stop, but its links must be gone too
  sys.run_until_idle();
  // Half of the children may have been stopped by quit or by their parent, none is left alive.
  CHECK(sys.live_actors() == 1);
  CHECK(destroyed.load() == n);
}

TEST_CASE("linked children in a threaded system: every child stops with the parent, nothing leaks",
          "[hierarchy][link][concurrent]") {
  courier_test::watchdog wd("linked children threaded");
  std::atomic<int> destroyed{0};
  constexpr int rounds = 20;
  constexpr int children = 20;
  {
    courier::system sys{courier::config{}};
    notes in{sys};
    auto w = sys.spawn<watcher>(in.ref());
    for (int r = 0; r < rounds; ++r) {
      auto p = sys.spawn<parent>(in.ref());
      for (int i = 0; i < children; ++i) {
        p.send(make_child{true, &destroyed});
        if (i % 5 == 0) w.send(watch<parent>{p});  // pushes onto the list the parent unlinks from
      }
      for (int i = 0; i < children; i += 3) p.send(tell_child{static_cast<std::size_t>(i), false, true});
      p.send(quit{});
    }
    REQUIRE(courier_test::eventually([&] { return sys.live_actors() == 2; }));  // inbox and watcher
    for (int i = 0; i < rounds * children / 5; ++i) REQUIRE(in.receive<courier::down>(5s).has_value());
  }
  CHECK(destroyed.load() == rounds * children);
}

// ----------------------------------------------------------------------------------------------
// on_start

TEST_CASE("on_start runs before the first message and may send to self and spawn",
          "[hierarchy][on_start][deterministic]") {
  courier_test::watchdog wd("on_start");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto s = sys.spawn<starter>(in.ref());
  s.send(greet{"from main"});  // queued behind the start message
  CHECK(take_note(in).what == "on_start");
  // The starter's own messages keep their order; the child runs in between at some point.
  std::vector<std::string> mine;
  int child_pings = 0;
  for (int i = 0; i < 3; ++i) {
    const note n = take_note(in);
    if (n.what == "child got ping")
      ++child_pings;
    else
      mine.push_back(n.what);
  }
  CHECK(child_pings == 1);
  CHECK(mine == std::vector<std::string>{"from main", "from on_start"});
}

TEST_CASE("an actor without on_start is spawned with nothing queued", "[hierarchy][on_start][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  auto p = sys.spawn<plain>();
  CHECK_FALSE(sys.run_one());
  p.send(greet{});
  CHECK(sys.run_one());
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("an exception from on_start stops the actor like a handler's", "[hierarchy][on_start][deterministic]") {
  courier_test::watchdog wd("on_start throws");
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  auto f = sys.spawn<failing_starter>(in.ref());
  f.send(greet{"never"});
  sys.run_until_idle();
  CHECK(sys.live_actors() == 1);
  CHECK(in.size() == 0);
  CHECK(f.base()->exit_reason() == errc::handler_failed);
  CHECK(f.base()->exit_reason().text == "no start");
  CHECK(sys.dead_letters() == 1);  // greet was dropped unhandled
}

// ----------------------------------------------------------------------------------------------
// await_all_stopped

TEST_CASE("await_all_stopped drives a manual system until every actor has stopped",
          "[hierarchy][await][deterministic]") {
  courier_test::watchdog wd("await deterministic");
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<plain>();
  auto b = sys.spawn<plain>();
  a.send(greet{});
  b.send(greet{});
  CHECK(sys.await_all_stopped(1s));
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("await_all_stopped returns false at the deadline while an actor is alive",
          "[hierarchy][await][deterministic]") {
  courier_test::watchdog wd("await deadline");
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<plain>();
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(sys.await_all_stopped(20ms));
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
  a.send(greet{});
  CHECK(sys.await_all_stopped(0ms) == false);  // a zero deadline does not drive
  CHECK(sys.await_all_stopped(1s));
}

TEST_CASE("await_all_stopped on a threaded system waits for actors that stop later", "[hierarchy][await][concurrent]") {
  courier_test::watchdog wd("await threaded");
  courier::system sys{courier::config{}};
  auto a = sys.spawn<plain>();
  auto b = sys.spawn<plain>();
  CHECK_FALSE(sys.await_all_stopped(10ms));
  a.delayed_send(greet{}, 20ms);
  std::thread late([b] {
    std::this_thread::sleep_for(30ms);
    b.send(greet{});
  });
  CHECK(sys.await_all_stopped(10s));
  late.join();
  CHECK(sys.live_actors() == 0);
  CHECK(sys.await_all_stopped(courier::infinite));  // nothing left: returns at once
}

// ----------------------------------------------------------------------------------------------
// inbox

struct answer {
  int value;
};
struct compute {
  int x;
  courier::actor_ref<courier::inbox_actor<answer>> reply_to;
};
class doubler : public courier::actor<doubler, compute> {
 public:
  void on(const compute& c) { c.reply_to.send(answer{c.x * 2}); }
};

struct try_receive {
  courier::inbox<answer>* in;
  std::atomic<int>* code;
};
class receiver_in_handler : public courier::actor<receiver_in_handler, try_receive> {
 public:
  void on(const try_receive& t) { t.code->store(t.in->receive<answer>(1s).err().code.value()); }
};

TEST_CASE("inbox: an actor replies to a plain thread (threaded)", "[hierarchy][inbox][concurrent]") {
  courier_test::watchdog wd("inbox threaded");
  courier::system sys{courier::config{}};
  courier::inbox<answer> in{sys};
  auto d = sys.spawn<doubler>();
  for (int i = 0; i < 100; ++i) d.send(compute{i, in.ref()});
  for (int i = 0; i < 100; ++i) {
    auto r = in.receive<answer>(5s);
    REQUIRE(r.has_value());
    CHECK(r->value == 2 * i);
  }
  auto none = in.receive<answer>(10ms);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.err() == errc::request_timeout);
}

TEST_CASE("inbox: receive drives a deterministic system", "[hierarchy][inbox][deterministic]") {
  courier_test::watchdog wd("inbox deterministic");
  courier::system sys{courier::config::deterministic()};
  courier::inbox<answer> in{sys};
  auto d = sys.spawn<doubler>();
  d.send(compute{21, in.ref()});
  auto r = in.receive(1s);
  REQUIRE(r.has_value());
  CHECK(std::get<answer>(*r).value == 42);
  CHECK(in.receive(0ms).err() == errc::request_timeout);
}

TEST_CASE("inbox: receive<M> takes the oldest M and leaves other types queued", "[hierarchy][inbox][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  notes in{sys};
  in.ref().send(note{"first"});
  in.ref().send(courier::down{7, {}});
  in.ref().send(note{"second"});
  sys.run_until_idle();
  REQUIRE(in.size() == 3);
  CHECK(take_down(in).id == 7);
  CHECK(take_note(in).what == "first");
  auto any = in.receive(0ms);
  REQUIRE(any.has_value());
  CHECK(std::get<note>(*any).what == "second");
  CHECK(in.size() == 0);
}

TEST_CASE("inbox: receive inside a handler is refused with would_deadlock", "[hierarchy][inbox][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  courier::inbox<answer> in{sys};
  std::atomic<int> code{0};
  auto r = sys.spawn<receiver_in_handler>();
  r.send(try_receive{&in, &code});
  sys.run_until_idle();
  CHECK(code.load() == static_cast<int>(errc::would_deadlock));
}

TEST_CASE("inbox: its actor stops with the inbox", "[hierarchy][inbox][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  courier::actor_ref<courier::inbox_actor<answer>> kept;
  {
    courier::inbox<answer> in{sys};
    kept = in.ref();
  }
  sys.run_until_idle();
  CHECK(sys.live_actors() == 0);
  CHECK_FALSE(kept.send(answer{1}));
}

// ----------------------------------------------------------------------------------------------
// The actor guide's example of the actor's context (docs/guide/actors.md), as written there.

namespace readme {

struct job {
  int n;
};
struct done {
  int n;
};
using done_ref = courier::actor_ref<courier::inbox_actor<done>>;

class worker : public courier::actor<worker, job> {
 public:
  explicit worker(done_ref out) : out_(std::move(out)) {}
  void on(const job& j) { out_.send(done{j.n * 2}); }

 private:
  done_ref out_;
};

class boss : public courier::actor<boss, job, courier::down> {
 public:
  explicit boss(done_ref out) : out_(std::move(out)) {}
  void on_start() { self().send(job{1}); }
  void on(const job& j) { spawn_linked<worker>(out_).send(j); }
  void on(const courier::down&) {}

 private:
  done_ref out_;
};

int run(std::vector<int>& got) {
  courier::system sys;
  courier::inbox<done> in{sys};
  if (!sys.registry().put("boss", sys.spawn<boss>(in.ref()))) return 1;
  if (auto b = sys.registry().get<boss>("boss")) b->send(job{21});
  courier::result<done> a = in.receive<done>(std::chrono::seconds(1));
  courier::result<done> b = in.receive<done>(std::chrono::seconds(1));
  if (!a.has_value() || !b.has_value()) return 2;
  got = {a->n, b->n};
  return 0;
}

}  // namespace readme

TEST_CASE("the README's context example runs", "[hierarchy][concurrent]") {
  courier_test::watchdog wd("README context example");
  std::vector<int> got;
  REQUIRE(readme::run(got) == 0);
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int>{2, 42});
}
