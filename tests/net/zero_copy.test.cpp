// Zero-copy receive: a message whose fields are wire::string_ref / bytes_ref reaches the served
// actor (one mailbox hop after the connection decoded it) as views into the connection's receive
// block, which stays alive for as long as the message (or a copy of the field) does; the block is
// read into again only when nothing holds it, and a connection whose blocks are all held stops
// reading until one is let go. Replies may be string_refs too (views into the client's block).
#include "courier/net/node.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "courier/actor.hpp"
#include "courier/system.hpp"
#include "net_test_util.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::wire::bytes_ref;
using courier::wire::string_ref;

namespace {

// The text of message `seq`: its length and bytes both depend on seq, so a view into a block that
// was read into again shows up as a wrong text.
std::string text_of(std::uint32_t seq) {
  std::string s(20 + seq % 97, '\0');
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>('a' + (seq * 7 + i) % 26);
  return s;
}

struct note {  // a call: the reply says whether the text arrived as a view into a receive block
  static constexpr courier::token token{"NOTE"};
  std::uint32_t seq = 0;
  string_ref text;
  auto fields() { return std::tie(seq, text); }
  auto fields() const { return std::tie(seq, text); }
};
struct keep {  // one-way: the served actor keeps the fields (sharing their block) for a while
  static constexpr courier::token token{"KEEP"};
  std::uint32_t seq = 0;
  string_ref text;
  bytes_ref data;
  auto fields() { return std::tie(seq, text, data); }
  auto fields() const { return std::tie(seq, text, data); }
};
struct report {
  static constexpr courier::token token{"RPRT"};
  auto fields() { return std::tie(); }
  auto fields() const { return std::tie(); }
};
struct kept_report {
  std::uint32_t received = 0;
  std::uint32_t wrong = 0;        // a kept text or binary that no longer matched its seq
  std::uint32_t not_viewed = 0;   // a field that was not a view into a shared block
  std::uint32_t most_blocks = 0;  // the most distinct blocks the kept fields held at one time
  auto fields() { return std::tie(received, wrong, not_viewed, most_blocks); }
  auto fields() const { return std::tie(received, wrong, not_viewed, most_blocks); }
};
struct echo_ref {  // the reply is a string_ref: the client's ask returns a view into its own block
  static constexpr courier::token token{"ECHR"};
  string_ref text;
  auto fields() { return std::tie(text); }
  auto fields() const { return std::tie(text); }
};

struct where_is {  // the reply is the capacity of the receive block the text lies in (0: none)
  static constexpr courier::token token{"WHER"};
  string_ref text;
  auto fields() { return std::tie(text); }
  auto fields() const { return std::tie(text); }
};

using api =
    courier::interface<bool(note), void(keep), kept_report(report), string_ref(echo_ref), std::uint64_t(where_is)>;

struct check_kept {};

bool viewed(const auto& field) { return field.owner() && field.owner()->holds(field.data()); }

class service : public courier::actor<service, note, keep, report, echo_ref, where_is, check_kept> {
 public:
  void on_start() { ticks_ = send_periodic(std::chrono::milliseconds(10), check_kept{}); }
  void on_stop() { ticks_.cancel(); }

  bool on(const note& m) { return viewed(m.text) && m.text.view() == text_of(m.seq); }

  void on(const keep& m) {
    ++report_.received;
    if (!viewed(m.text) || !viewed(m.data)) ++report_.not_viewed;
    kept_.push_back(m);  // shares the block: the connection must not read into it again
  }

  // Every 10 ms: check every kept field, count the blocks they hold, let them go.
  void on(const check_kept&) {
    std::set<const void*> blocks;
    for (const keep& k : kept_) {
      const std::string want = text_of(k.seq);
      if (k.text.view() != want) ++report_.wrong;
      const auto d = k.data.view();
      if (d.size() != 4 || std::to_integer<std::uint32_t>(d[0]) != (k.seq & 0xff)) ++report_.wrong;
      blocks.insert(k.text.owner().get());
      blocks.insert(k.data.owner().get());
    }
    if (blocks.size() > report_.most_blocks) report_.most_blocks = static_cast<std::uint32_t>(blocks.size());
    kept_.clear();
  }

  kept_report on(const report&) {
    on(check_kept{});
    return report_;
  }

  string_ref on(const echo_ref& m) { return m.text; }  // shares the server's block into the reply
  std::uint64_t on(const where_is& m) { return viewed(m.text) ? m.text.owner()->capacity() : 0; }

 private:
  std::vector<keep> kept_;
  kept_report report_;
  courier::timer_handle ticks_;
};

courier::net::endpoint uds_endpoint() {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::uds;
  e.file = courier_test::temp_socket_path("zero-copy");
  return e;
}

courier::net::endpoint tcp_endpoint() {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::tcp;
  e.host = "127.0.0.1";
  e.port = 0;
  return e;
}

struct pair {
  courier::system server_sys;
  courier::net::node server_net{server_sys};
  courier::actor_ref<api> target = server_sys.spawn<service>();
  courier::system client_sys;
  courier::net::node client_net{client_sys};
  courier::actor_ref<api> remote;

  pair(courier::net::endpoint where, const courier::net::connection_config& server_cfg) {
    auto s = server_net.serve(target, where, server_cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
    auto r = client_net.connect<api>(where);
    REQUIRE(r);
    remote = std::move(*r);
  }
  ~pair() {
    remote.reset();
    client_net.stop();
    server_net.stop();
  }
};

const char* name_of(const courier::net::endpoint& e) {
  return e.kind == courier::net::transport_kind::uds ? "uds" : "tcp";
}

}  // namespace

TEST_CASE("string_ref fields reach the served actor as views into the receive block", "[net][zero-copy]") {
  courier_test::watchdog wd{"zero copy: views", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    pair p(where, {});
    std::uint32_t wrong = 0;
    for (std::uint32_t seq = 0; seq < 2'000; ++seq) {
      const std::string text = text_of(seq);
      auto ok = p.remote.ask(note{seq, string_ref(text)}, 10s);  // ask: `text` outlives the call
      if (!ok || !*ok) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("kept views stay valid while the connection reads on, and bound its blocks", "[net][zero-copy]") {
  courier_test::watchdog wd{"zero copy: kept views", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    // Small blocks and few of them: the served actor keeps every message for up to 10 ms, so the
    // connection runs out of free blocks, waits, and reads on once the views are let go.
    courier::net::connection_config cfg;
    cfg.read_chunk = 4096;
    cfg.max_read_blocks = 4;
    pair p(where, cfg);
    constexpr std::uint32_t count = 20'000;
    std::uint32_t refused = 0;
    for (std::uint32_t seq = 0; seq < count; ++seq) {
      // A send is encoded later, on the connection's thread: the fields own copies of their bytes.
      const std::byte data[4] = {std::byte(seq & 0xff), std::byte(1), std::byte(2), std::byte(3)};
      // The client connection's mailbox is bounded: faster than the stalled server, the sender is
      // refused at the call (back-pressure) and sends again, so every message is sent once.
      while (!p.remote.send(keep{seq, string_ref::copy_of(text_of(seq)), bytes_ref::copy_of(data)})) {
        ++refused;
        std::this_thread::sleep_for(100us);
      }
    }
    courier::result<kept_report> r = p.remote.ask(report{}, 30s);
    while (!r && r.err().code == courier::errc::mailbox_full) {  // refused at the call, as a send is
      std::this_thread::sleep_for(1ms);
      r = p.remote.ask(report{}, 30s);
    }
    INFO("sends refused at the call and sent again: " << refused);
    REQUIRE(r);
    CHECK(r->received == count);
    CHECK(r->wrong == 0);
    CHECK(r->not_viewed == 0);
    CHECK(r->most_blocks >= 1);
    CHECK(r->most_blocks <= cfg.max_read_blocks);
  }
}

TEST_CASE("a string_ref reply views the client's receive block", "[net][zero-copy]") {
  courier_test::watchdog wd{"zero copy: reply", 60s};
  pair p(uds_endpoint(), {});
  std::vector<string_ref> replies;
  for (std::uint32_t seq = 0; seq < 500; ++seq) {
    const std::string text = text_of(seq);
    auto r = p.remote.ask(echo_ref{string_ref(text)}, 10s);
    REQUIRE(r);
    CHECK(viewed(*r));
    replies.push_back(std::move(*r));  // kept while later replies are read
  }
  std::uint32_t wrong = 0;
  for (std::uint32_t seq = 0; seq < replies.size(); ++seq) wrong += replies[seq].view() == text_of(seq) ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE("a frame larger than a receive block gets a block of its own", "[net][zero-copy]") {
  courier_test::watchdog wd{"zero copy: large", 60s};
  courier::net::connection_config cfg;
  cfg.read_chunk = 4096;
  pair p(uds_endpoint(), cfg);
  for (std::uint32_t size : {4000u, 5000u, 100'000u, 10u, 70'000u}) {
    std::string big(size, 'q');
    big[size / 2] = 'x';
    auto r = p.remote.ask(echo_ref{string_ref(big)}, 10s);
    REQUIRE(r);
    CHECK(r->view() == big);
    // A small frame after it lands in a standard block again, not in the large frame's block
    // (whose memory a kept view of a small frame would otherwise hold).
    const std::string small(40, 's');
    auto at = p.remote.ask(where_is{string_ref(small)}, 10s);
    REQUIRE(at);
    CHECK(*at == cfg.read_chunk);
  }
}
