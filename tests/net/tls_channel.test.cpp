// TLS over one socket (net/detail/tls_channel.hpp), driven on the test's thread over socket pairs:
// the handshake and ALPN, bytes both ways (larger than the socket's buffers too), the identity a
// certificate proves, and each way a handshake fails, with the words that say why.
#include "courier/net/detail/tls_channel.hpp"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "courier/net/socket.hpp"
#include "tls_test_pki.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
namespace net = courier::net;
using net::io_result;
using net::tls_settings;
using net::detail::tls_channel;
using net::detail::tls_context;
using net::detail::tls_side;

namespace {

const courier_test::tls::test_pki& pki() {
  static const courier_test::tls::test_pki made = courier_test::tls::make_test_pki();
  return made;
}

std::shared_ptr<const tls_context> context(tls_side side, const tls_settings& settings) {
  auto made = tls_context::make(side, settings);
  INFO((made ? std::string() : made.err().describe()));
  REQUIRE(made);
  return *made;
}

tls_settings server_settings(const courier_test::tls::key_and_cert& own = pki().server) {
  tls_settings s;
  s.cert_file = own.cert;
  s.key_file = own.key;
  return s;
}

tls_settings client_settings() {
  tls_settings s;
  s.ca_file = pki().ca;
  return s;
}

/// Two ends of a socket pair with TLS on each, driven on this thread.
struct tls_pair {
  net::socket client_socket, server_socket;
  std::unique_ptr<tls_channel> client, server;

  tls_pair(const tls_settings& client_side, const tls_settings& server_side, std::string_view host = "localhost")
      : tls_pair(context(tls_side::client, client_side), context(tls_side::server, server_side), host) {}
  tls_pair(std::shared_ptr<const tls_context> client_context, std::shared_ptr<const tls_context> server_context,
           std::string_view host = "localhost") {
    auto pair = net::socket_pair();
    REQUIRE(pair);
    client_socket = std::move(pair->first);
    server_socket = std::move(pair->second);
    client = std::make_unique<tls_channel>(std::move(client_context), client_socket, host);
    server = std::make_unique<tls_channel>(std::move(server_context), server_socket);
  }

  /// Steps both handshakes until each is done or failed (or the time is up: a hang fails).
  void handshake() {
    auto c = tls_channel::step::want_write, s = tls_channel::step::want_read;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      const auto settled = [](tls_channel::step x) {
        return x == tls_channel::step::done || x == tls_channel::step::failed;
      };
      if (!settled(c)) c = client->handshake();
      if (!settled(s)) s = server->handshake();
      if (settled(c) && settled(s)) return;
      // One side failed and the other waits for bytes that will not come: that is the outcome.
      if ((c == tls_channel::step::failed || s == tls_channel::step::failed) && wait_quiet()) return;
    }
    FAIL("the handshakes did not settle within 5 s");
  }

  /// True when neither socket becomes readable within 100 ms.
  bool wait_quiet() {
    pollfd fds[2] = {{client_socket.fd(), POLLIN, 0}, {server_socket.fd(), POLLIN, 0}};
    return ::poll(fds, 2, 100) == 0;
  }
};

/// Writes `text` from one channel and reads it whole at the other, pumping both.
std::string carry(tls_channel& from, tls_channel& to, const std::string& text) {
  std::string got;
  std::size_t written = 0;
  std::vector<std::byte> buffer(64 * 1024);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got.size() < text.size() && std::chrono::steady_clock::now() < until) {
    if (written < text.size()) {
      // Three pieces at a time, as the wire stream's gathering write hands them over.
      const std::size_t left = text.size() - written;
      const std::size_t a = std::min<std::size_t>(left, 7), b = std::min<std::size_t>(left - a, 100000);
      const iovec pieces[3] = {{const_cast<char*>(text.data() + written), a},
                               {const_cast<char*>(text.data() + written + a), b},
                               {const_cast<char*>(text.data() + written + a + b), left - a - b}};
      const io_result put = from.write_some(pieces);
      REQUIRE(put.status != io_result::failed);
      if (put.status == io_result::ok) written += put.bytes;
    }
    const io_result r = to.read_some(buffer);
    REQUIRE(r.status != io_result::failed);
    REQUIRE(r.status != io_result::eof);
    if (r.status == io_result::ok) got.append(reinterpret_cast<const char*>(buffer.data()), r.bytes);
  }
  return got;
}

std::string fingerprint_by_the_cli(const std::string& cert_file) {
  const std::string command = "openssl x509 -noout -fingerprint -sha256 -in " + cert_file;
  FILE* out = ::popen(command.c_str(), "r");
  REQUIRE(out != nullptr);
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, out) != nullptr;
  ::pclose(out);
  REQUIRE(read);
  // "sha256 Fingerprint=AB:CD:...": lower-case hex without the colons.
  std::string text(line), hex;
  for (char ch : text.substr(text.find('=') + 1))
    if (std::isxdigit(static_cast<unsigned char>(ch))) hex.push_back(static_cast<char>(std::tolower(ch)));
  return hex;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_CASE("tls: a client and a server agree on TLS 1.3 and courier/1, and bytes go both ways whole") {
  courier_test::watchdog wd{"tls: handshake and bytes", 30s};
  tls_pair p(client_settings(), server_settings());
  p.handshake();
  INFO(p.client->failure().text << " | " << p.server->failure().text);
  REQUIRE(p.client->established());
  REQUIRE(p.server->established());
  CHECK(p.client->version() == "TLSv1.3");
  CHECK(carry(*p.client, *p.server, "COURIER over TLS") == "COURIER over TLS");
  CHECK(carry(*p.server, *p.client, "and back") == "and back");
  // Larger than the socket pair's buffers: partial writes, records split across reads.
  std::string big(3 * 1024 * 1024 + 17, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 12));
  CHECK(carry(*p.client, *p.server, big) == big);
  CHECK(carry(*p.server, *p.client, big) == big);

  // What the server's certificate proves to the client; the server asked the client for none.
  const net::tls_identity server = p.client->peer_identity();
  CHECK(server.verified);
  CHECK(server.subject == "CN=localhost,O=Courier tests");
  CHECK(contains(server.names, "DNS:localhost"));
  CHECK(contains(server.names, "IP:127.0.0.1"));
  CHECK(server.sha256 == fingerprint_by_the_cli(pki().server.cert));
  const net::tls_identity client = p.server->peer_identity();
  CHECK_FALSE(client.verified);
  CHECK(client.subject.empty());
}

TEST_CASE("tls: the peer's close ends the stream as end of file, with close_notify or without") {
  courier_test::watchdog wd{"tls: close", 30s};
  for (const bool notify : {true, false}) {
    INFO((notify ? "close_notify" : "a bare close"));
    tls_pair p(client_settings(), server_settings());
    p.handshake();
    REQUIRE(p.client->established());
    REQUIRE(p.server->established());
    if (notify) p.client->shutdown();
    p.client.reset();
    p.client_socket.close();
    std::vector<std::byte> buffer(1024);
    io_result r{};
    for (int i = 0; i < 100 && (r = p.server->read_some(buffer)).status == io_result::would_block; ++i)
      std::this_thread::sleep_for(1ms);
    INFO("status " << int(r.status) << " errno " << r.error);
    CHECK(r.status == io_result::eof);
  }
}

TEST_CASE("tls: mutual TLS, the server reads who the client is from its certificate") {
  courier_test::watchdog wd{"tls: mutual", 30s};
  tls_settings server = server_settings();
  server.ca_file = pki().ca;
  server.require_client_cert = true;
  tls_settings client = client_settings();
  client.cert_file = pki().client.cert;
  client.key_file = pki().client.key;
  tls_pair p(client, server);
  p.handshake();
  INFO(p.client->failure().text << " | " << p.server->failure().text);
  REQUIRE(p.server->established());
  const net::tls_identity id = p.server->peer_identity();
  CHECK(id.verified);
  CHECK(id.subject == "CN=courier-test-client,O=Courier tests");
  CHECK(contains(id.names, "DNS:client.test"));
  CHECK(contains(id.names, "email:ops@client.test"));
  CHECK(id.sha256 == fingerprint_by_the_cli(pki().client.cert));
  CHECK(carry(*p.client, *p.server, "who am I") == "who am I");
}

TEST_CASE("tls: a server certificate that does not verify is refused, and the error says why") {
  courier_test::watchdog wd{"tls: server certificate refused", 30s};
  struct refusal {
    const courier_test::tls::key_and_cert* own;
    const char* host;
    const char* words;
  };
  const refusal cases[] = {
      {&pki().self_signed, "localhost", "the server's certificate: self-signed certificate"},
      {&pki().expired, "localhost", "the server's certificate: certificate has expired"},
      {&pki().wrong_name, "localhost", "the server's certificate: hostname mismatch"},
      {&pki().server, "elsewhere.test", "the server's certificate: hostname mismatch"},
      {&pki().wrong_name, "127.0.0.1", "the server's certificate: IP address mismatch"},
  };
  for (const refusal& c : cases) {
    INFO(c.own->cert << " as " << c.host);
    tls_pair p(client_settings(), server_settings(*c.own), c.host);
    p.handshake();
    CHECK_FALSE(p.client->established());
    CHECK_FALSE(p.server->established());  // the client's alert ends the server's handshake too
    CHECK(p.client->failure().text == std::string("TLS: ") + c.words);
    CHECK(p.client->failure() == courier::errc::connection_lost);
  }
  // The option whose name says it is insecure takes any certificate; the name is not checked.
  tls_settings careless;
  careless.insecure_skip_verify = true;
  tls_pair p(careless, server_settings(pki().self_signed), "elsewhere.test");
  p.handshake();
  CHECK(p.client->established());
  CHECK_FALSE(p.client->peer_identity().verified);
}

TEST_CASE("tls: a server that requires client certificates refuses a client without one or from another CA") {
  courier_test::watchdog wd{"tls: client certificate refused", 30s};
  tls_settings server = server_settings();
  server.ca_file = pki().ca;
  server.require_client_cert = true;
  for (const auto* own : {static_cast<const courier_test::tls::key_and_cert*>(nullptr), &pki().other_ca_client}) {
    INFO((own == nullptr ? "no certificate" : "a certificate of another CA"));
    tls_settings client = client_settings();
    if (own != nullptr) {
      client.cert_file = own->cert;
      client.key_file = own->key;
    }
    tls_pair p(client, server);
    p.handshake();
    CHECK_FALSE(p.server->established());
    if (own == nullptr)
      CHECK(p.server->failure().text == "TLS: the handshake: peer did not return a certificate");
    else
      CHECK(p.server->failure().text == "TLS: the client's certificate: unable to get local issuer certificate");
    // In TLS 1.3 the client's handshake ends before the server has checked its certificate: the
    // server's alert is what its first read finds.
    std::vector<std::byte> buffer(1024);
    io_result r{};
    for (int i = 0; i < 100; ++i) {
      if (!p.client->established()) break;
      r = p.client->read_some(buffer);
      if (r.status != io_result::would_block) break;
      std::this_thread::sleep_for(1ms);
    }
    const std::string said = p.client->failure().text;
    INFO(said);
    CHECK(r.status == io_result::failed);
    if (own == nullptr)
      CHECK(said == "TLS: a record: tlsv13 alert certificate required");
    else
      CHECK(said == "TLS: a record: tlsv1 alert unknown ca");
  }
}

TEST_CASE("tls: TLS 1.2 is refused unless the settings allow it") {
  courier_test::watchdog wd{"tls: versions", 30s};
  for (const bool allowed : {false, true}) {
    INFO((allowed ? "allowed" : "not allowed"));
    tls_settings old_client = client_settings();
    old_client.allow_tls12 = true;
    auto client_context = context(tls_side::client, old_client);
    REQUIRE(SSL_CTX_set_max_proto_version(client_context->native(), TLS1_2_VERSION) == 1);
    tls_settings server = server_settings();
    server.allow_tls12 = allowed;
    tls_pair p(client_context, context(tls_side::server, server));
    p.handshake();
    CHECK(p.server->established() == allowed);
    if (allowed)
      CHECK(p.server->version() == "TLSv1.2");
    else
      CHECK(p.server->failure().text == "TLS: the handshake: unsupported protocol");
  }
}

TEST_CASE("tls: a plaintext peer is told apart, and a handshake with one fails with why, never hangs") {
  courier_test::watchdog wd{"tls: plaintext peers", 30s};
  // What a server's first read shows: a ClientHello opens with a handshake record.
  const auto bytes = [](std::string_view text) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size());
  };
  CHECK(tls_channel::looks_like_tls(bytes("\x16\x03\x01\x02\x00")));
  CHECK_FALSE(tls_channel::looks_like_tls(bytes("COUR\x01")));
  CHECK_FALSE(tls_channel::looks_like_tls(bytes("GET / HTTP/1.1\r\n")));

  auto pair = net::socket_pair();
  REQUIRE(pair);
  {  // a TLS server that is sent a plaintext handshake
    tls_channel server(context(tls_side::server, server_settings()), pair->second);
    const std::string plain = "COUR" + std::string(60, '\x01');
    REQUIRE(::send(pair->first.fd(), plain.data(), plain.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(plain.size()));
    CHECK(server.handshake() == tls_channel::step::failed);
    CHECK(server.failure().text.rfind("TLS: the handshake: ", 0) == 0);
  }
  {  // a TLS client whose server answers in plaintext
    auto other = net::socket_pair();
    REQUIRE(other);
    tls_channel client(context(tls_side::client, client_settings()), other->first, "localhost");
    CHECK(client.handshake() == tls_channel::step::want_read);
    const std::string plain = "COUR" + std::string(60, '\x02');
    REQUIRE(::send(other->second.fd(), plain.data(), plain.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(plain.size()));
    CHECK(client.handshake() == tls_channel::step::failed);
    CHECK(client.failure().text.rfind("TLS: the handshake: ", 0) == 0);
  }
  {  // a peer that closes in the middle of the handshake
    auto other = net::socket_pair();
    REQUIRE(other);
    tls_channel client(context(tls_side::client, client_settings()), other->first, "localhost");
    CHECK(client.handshake() == tls_channel::step::want_read);
    other->second.close();
    CHECK(client.handshake() == tls_channel::step::failed);
    CHECK(client.failure().text.rfind("TLS: the peer closed the connection during the handshake", 0) == 0);
  }
}

TEST_CASE("tls: settings that cannot work are refused when the context is made, naming the file") {
  courier_test::watchdog wd{"tls: settings", 30s};
  const auto refused = [](tls_side side, const tls_settings& s) {
    auto made = tls_context::make(side, s);
    REQUIRE_FALSE(made);
    CHECK(made.err() == courier::errc::invalid_argument);
    return made.err().text;
  };
  CHECK(refused(tls_side::server, {}) == "TLS: a server needs a certificate and its key");
  tls_settings no_key;
  no_key.cert_file = pki().server.cert;
  CHECK(refused(tls_side::server, no_key) == "TLS: a certificate needs its key, and a key its certificate");
  tls_settings missing = server_settings();
  missing.cert_file = pki().folder + "/missing.pem";
  CHECK(refused(tls_side::server, missing).rfind("TLS: the certificate " + missing.cert_file + ": ", 0) == 0);
  tls_settings mismatched = server_settings();
  mismatched.key_file = pki().client.key;
  CHECK(refused(tls_side::server, mismatched) == "TLS: the key " + mismatched.key_file + ": key values mismatch");
  tls_settings no_ca = server_settings();
  no_ca.require_client_cert = true;
  CHECK(refused(tls_side::server, no_ca) == "TLS: requiring client certificates needs a CA file");
  tls_settings bad_ca = client_settings();
  bad_ca.ca_file = pki().folder + "/missing-ca.pem";
  CHECK(refused(tls_side::client, bad_ca).rfind("TLS: the CA file " + bad_ca.ca_file + ": ", 0) == 0);
}

TEST_CASE(
    "tls: once its socket is closed a channel reads and writes nothing, not even a descriptor that took the number") {
  courier_test::watchdog wd{"tls: closed socket", 30s};
  tls_pair p(client_settings(), server_settings());
  p.handshake();
  REQUIRE(p.client->established());
  const int number = p.client_socket.fd();
  p.client_socket.close();
  auto other = net::socket_pair();  // the lowest free numbers: the closed one among them
  REQUIRE(other);
  const bool reused = other->first.fd() == number || other->second.fd() == number;
  const std::string text = "late";
  const iovec piece{const_cast<char*>(text.data()), text.size()};
  CHECK(p.client->write_some({&piece, 1}).status == io_result::failed);
  std::vector<std::byte> buffer(64);
  CHECK(p.client->read_some(buffer).status == io_result::failed);
  if (reused) {  // nothing went out through the new socket's number
    const net::socket& peer = other->first.fd() == number ? other->second : other->first;
    CHECK(net::read_some(peer, buffer).status == io_result::would_block);
  }
}
