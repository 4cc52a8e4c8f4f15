// A connection's byte work on socket pairs, driven by hand on the test's thread (no system, no
// reactor): where the bytes of each read go, and which receive blocks a connection holds.
#include "courier/net/detail/wire_stream.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "courier/net/socket.hpp"
#include "courier/wire/encoder.hpp"

namespace net = courier::net;
namespace wire = courier::wire;
using net::detail::wire_stream;

namespace {

/// Notes each frame a stream delivers, the block it was read into, and keeps that block when asked
/// (as a message whose fields view the frame does).
struct frames_seen {
  wire_stream* stream = nullptr;
  bool keep = false;
  int count = 0;
  wire::shared_block* read_into = nullptr;
  std::vector<std::byte> last_bytes;
  std::vector<wire::block_ref> kept;

  void on_frame(const wire::frame_view& f) {
    ++count;
    read_into = stream->frame_owner();
    last_bytes.assign(f.bytes().begin(), f.bytes().end());
    if (keep) kept.push_back(wire::block_ref::share(read_into));
  }
};

/// Both ends of one socket pair, each a wire_stream, opened by a handshake driven here.
struct stream_pair {
  std::unique_ptr<wire_stream> client, server;
  frames_seen at_client, at_server;

  explicit stream_pair(std::size_t read_chunk = net::connection_config{}.read_chunk) {
    auto sockets = net::socket_pair();
    REQUIRE(sockets);
    net::connection_config cfg;
    cfg.read_chunk = read_chunk;
    client = std::make_unique<wire_stream>(std::move(sockets->first), wire::role::initiator, cfg, nullptr);
    server = std::make_unique<wire_stream>(std::move(sockets->second), wire::role::acceptor, cfg, nullptr);
    at_client.stream = client.get();
    at_server.stream = server.get();
    client->start();
    server->start();
    for (int i = 0; i < 10 && !(client->open() && server->open()); ++i) {
      client->flush();
      server->receive(at_server);
      server->flush();
      client->receive(at_client);
    }
    REQUIRE(client->open());
    REQUIRE(server->open());
  }

  /// A one-way send of `value` from the client, read by the server.
  void send(std::int32_t value) {
    wire::frame_writer w(
        client->frames(),
        wire::frame_header{wire::protocol_version, wire::kind::send, 0, 0, courier::token("NOTH"), 0, 0},
        client->send_limits());
    w.add(value);
    REQUIRE(w.finish());
    REQUIRE(client->flush());
    const int before = at_server.count;
    server->receive(at_server);
    REQUIRE(at_server.count == before + 1);
  }
};

}  // namespace

TEST_CASE("connections that read one after another on a thread pass one receive block on", "[net][wire_stream]") {
  // Each connection used to hold a block of its own from its start: with many connections, every
  // read went to memory that had gone cold since that connection's last. Now an idle connection
  // holds none, and the block a read took goes on to the next connection that reads here.
  stream_pair a, b;
  for (std::int32_t i = 0; i < 10; ++i) {
    a.send(i);
    b.send(i);
  }
  const auto allocated = [](const stream_pair& p) {
    return p.client->stats().read_blocks + p.server->stats().read_blocks;
  };
  // Four connections, 24 reads between them, each done before the next began: one block at most
  // (none when this thread kept one from an earlier test).
  CHECK(allocated(a) + allocated(b) <= 1);
  CHECK(a.at_server.read_into == b.at_server.read_into);
}

TEST_CASE("a receive block that a frame's view keeps stays with its connection until let go", "[net][wire_stream]") {
  stream_pair a, b;
  a.at_server.keep = true;
  a.send(7);
  REQUIRE(a.at_server.kept.size() == 1);
  wire::shared_block* viewed = a.at_server.kept.front().get();
  const std::vector<std::byte> sent = a.at_server.last_bytes;

  // Other connections read on: none of them reads into the block the view holds.
  for (std::int32_t i = 0; i < 5; ++i) {
    b.send(100 + i);
    CHECK(b.at_server.read_into != viewed);
  }
  a.at_server.keep = false;
  a.send(8);  // the connection that holds it reads on behind the kept frame
  CHECK(a.at_server.read_into == viewed);
  REQUIRE(viewed->capacity() >= sent.size());
  CHECK(std::memcmp(viewed->data(), sent.data(), sent.size()) == 0);  // the kept frame is intact

  // Let go, the block is lent on once its connection has read everything in it.
  a.at_server.kept.clear();
  a.send(9);
  b.send(200);
  CHECK(b.at_server.read_into == a.at_server.read_into);
}

TEST_CASE("connections of two block sizes reading on one thread allocate no block once warm", "[net][wire_stream]") {
  // Five connections of the default size each hold a block at once (a view of a frame kept), then
  // let go: the thread keeps four, all of that size. A connection of another read_chunk must find
  // its own size kept after its first read, not allocate a block on every read.
  std::vector<std::unique_ptr<stream_pair>> large;
  for (int i = 0; i < 5; ++i) large.push_back(std::make_unique<stream_pair>());
  for (auto& p : large) {
    p->at_server.keep = true;
    p->send(1);
  }
  for (auto& p : large) {
    p->at_server.keep = false;
    p->at_server.kept.clear();
    p->send(2);  // reads behind the frame it kept, then lends its block
  }
  stream_pair small(4096);
  small.send(0);
  const std::uint64_t warm = small.server->stats().read_blocks;
  for (std::int32_t i = 0; i < 20; ++i) {
    for (auto& p : large) p->send(i);
    small.send(i);
  }
  CHECK(small.server->stats().read_blocks == warm);
}
