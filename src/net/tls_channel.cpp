#include "courier/net/detail/tls_channel.hpp"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace courier::net::detail {

namespace {

// OpenSSL's own socket BIO writes with write(2): a peer that went away would raise SIGPIPE in the
// whole process. This one moves bytes with the socket layer's calls (send with MSG_NOSIGNAL), and
// through the socket object rather than its number: once the wire stream closed it, a late read or
// write fails instead of reaching whatever descriptor took the number since.
struct socket_bio_state {
  const socket* sock;
  int* last_errno;
  bool at_end = false;  // a read found the end of the stream (BIO_eof: the record layer asks)
};

int bio_write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
  auto* state = static_cast<socket_bio_state*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const iovec piece{const_cast<char*>(data), size};
  const io_result r = write_some(*state->sock, {&piece, 1});
  switch (r.status) {
    case io_result::ok: *written = r.bytes; return 1;
    case io_result::would_block: BIO_set_retry_write(bio); return 0;
    default: *state->last_errno = r.error; return 0;
  }
}

int bio_read(BIO* bio, char* into, std::size_t size, std::size_t* read) {
  auto* state = static_cast<socket_bio_state*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  const io_result r = read_some(*state->sock, {reinterpret_cast<std::byte*>(into), size});
  switch (r.status) {
    case io_result::ok: *read = r.bytes; return 1;
    case io_result::eof: state->at_end = true; return 0;  // no retry flag: the end of the stream
    case io_result::would_block: BIO_set_retry_read(bio); return 0;
    default: *state->last_errno = r.error; return 0;
  }
}

long bio_ctrl(BIO* bio, int command, long, void*) {
  switch (command) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_EOF: return static_cast<socket_bio_state*>(BIO_get_data(bio))->at_end ? 1 : 0;
    default: return 0;
  }
}

int bio_destroy(BIO* bio) {
  delete static_cast<socket_bio_state*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "courier socket");
    BIO_meth_set_write_ex(m, bio_write);
    BIO_meth_set_read_ex(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_destroy(m, bio_destroy);
    return m;
  }();
  return method;
}

/// The oldest error on this thread's OpenSSL queue, in words, and the queue emptied.
std::string openssl_error_text() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    if (text.empty()) {
      std::array<char, 256> buffer{};
      ERR_error_string_n(code, buffer.data(), buffer.size());
      // "error:0A000086:SSL routines::certificate verify failed": the reason is after the last colon.
      const std::string_view line(buffer.data());
      const auto colon = line.rfind(':');
      text = std::string(colon == std::string_view::npos ? line : line.substr(colon + 1));
    }
  }
  return text.empty() ? std::string("unknown TLS error") : text;
}

courier::error settings_error(const std::string& what) {
  return {errc::invalid_argument, "TLS: " + what + ": " + openssl_error_text()};
}

// The server's choice among the protocols a client offers: courier/1 or none (the handshake then
// fails with the no_application_protocol alert, which the client names).
int select_alpn(SSL*, const unsigned char** out, unsigned char* out_size, const unsigned char* offered,
                unsigned int offered_size, void*) {
  for (unsigned int at = 0; at < offered_size;) {
    const unsigned int size = offered[at];
    if (at + 1 + size > offered_size) break;
    if (std::string_view(reinterpret_cast<const char*>(offered + at + 1), size) == tls_alpn) {
      *out = offered + at + 1;
      *out_size = static_cast<unsigned char>(size);
      return SSL_TLSEXT_ERR_OK;
    }
    at += 1 + size;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

std::string hex(const unsigned char* bytes, unsigned int size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace

courier::result<std::shared_ptr<const tls_context>> tls_context::make(tls_side side, const tls_settings& settings) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(side == tls_side::server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return settings_error("SSL_CTX_new");
  std::shared_ptr<const tls_context> made(new tls_context(side, settings, ctx));
  SSL_CTX_set_min_proto_version(ctx, settings.allow_tls12 ? TLS1_2_VERSION : TLS1_3_VERSION);
  // A peer that closes without close_notify ends the stream as any other close: frames carry
  // their length, so a frame cut short is still seen as one.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  // The wire stream retries a write from its own buffer, which may have moved or grown since.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const bool has_cert = !settings.cert_file.empty();
  if (has_cert != !settings.key_file.empty())
    return courier::error(errc::invalid_argument, "TLS: a certificate needs its key, and a key its certificate");
  if (side == tls_side::server && !has_cert)
    return courier::error(errc::invalid_argument, "TLS: a server needs a certificate and its key");
  if (has_cert) {
    if (SSL_CTX_use_certificate_chain_file(ctx, settings.cert_file.c_str()) != 1)
      return settings_error("the certificate " + settings.cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, settings.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return settings_error("the key " + settings.key_file);
    if (SSL_CTX_check_private_key(ctx) != 1)
      return settings_error("the key " + settings.key_file + " does not belong to " + settings.cert_file);
  }
  if (!settings.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, settings.ca_file.c_str(), nullptr) != 1)
      return settings_error("the CA file " + settings.ca_file);
  } else if (side == tls_side::client && !settings.insecure_skip_verify) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) return settings_error("the system's CAs");
  }
  if (side == tls_side::server) {
    int mode = SSL_VERIFY_NONE;
    if (settings.require_client_cert)
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    else if (!settings.ca_file.empty())
      mode = SSL_VERIFY_PEER;  // a certificate is asked for and verified when offered
    if (settings.require_client_cert && settings.ca_file.empty())
      return courier::error(errc::invalid_argument, "TLS: requiring client certificates needs a CA file");
    SSL_CTX_set_verify(ctx, mode, nullptr);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, nullptr);
    // No session tickets: Courier's connections are long-lived, and resumption is not offered.
    SSL_CTX_set_num_tickets(ctx, 0);
  } else {
    SSL_CTX_set_verify(ctx, settings.insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
    std::array<unsigned char, 1 + tls_alpn.size()> protocols{};
    protocols[0] = static_cast<unsigned char>(tls_alpn.size());
    std::memcpy(protocols.data() + 1, tls_alpn.data(), tls_alpn.size());
    if (SSL_CTX_set_alpn_protos(ctx, protocols.data(), static_cast<unsigned int>(protocols.size())) != 0)
      return settings_error("ALPN");
  }
  return made;
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

tls_channel::tls_channel(std::shared_ptr<const tls_context> context, const socket& sock, std::string_view host)
    : context_(std::move(context)) {
  ERR_clear_error();
  ssl_ = SSL_new(context_->native());
  BIO* bio = ssl_ != nullptr ? BIO_new(socket_bio_method()) : nullptr;
  if (bio == nullptr) {
    fail("cannot make the TLS state: " + openssl_error_text());
    return;
  }
  BIO_set_data(bio, new socket_bio_state{&sock, &socket_errno_, false});
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_, bio, bio);
  if (context_->side() == tls_side::server) {
    SSL_set_accept_state(ssl_);
    return;
  }
  SSL_set_connect_state(ssl_);
  const tls_settings& s = context_->settings();
  const std::string name = !s.server_name.empty() ? s.server_name : std::string(host);
  if (name.empty() || s.insecure_skip_verify) return;
  in6_addr address{};
  const bool is_ip =
      ::inet_pton(AF_INET, name.c_str(), &address) == 1 || ::inet_pton(AF_INET6, name.c_str(), &address) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, name.c_str());
    SSL_set1_host(ssl_, name.c_str());
  }
}

tls_channel::~tls_channel() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // frees the BIO and its state
}

void tls_channel::fail(std::string what) noexcept {
  if (failure_.text.empty()) failure_ = courier::error(errc::connection_lost, "TLS: " + std::move(what));
}

io_result tls_channel::failed_result() noexcept {
  return {io_result::failed, 0, socket_errno_ != 0 ? socket_errno_ : EPROTO};
}

tls_channel::step tls_channel::handshake() noexcept {
  if (ssl_ == nullptr || !failure_.text.empty()) return step::failed;
  if (established_) return step::done;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    const unsigned char* chosen = nullptr;
    unsigned int chosen_size = 0;
    SSL_get0_alpn_selected(ssl_, &chosen, &chosen_size);
    if (std::string_view(reinterpret_cast<const char*>(chosen), chosen_size) != tls_alpn) {
      fail("the peer does not speak " + std::string(tls_alpn) + " (ALPN)");
      return step::failed;
    }
    established_ = true;
    return step::done;
  }
  switch (SSL_get_error(ssl_, r)) {
    case SSL_ERROR_WANT_READ: wants_write_ = false; return step::want_read;
    case SSL_ERROR_WANT_WRITE: wants_write_ = true; return step::want_write;
    default: break;
  }
  const long verified = SSL_get_verify_result(ssl_);
  std::string why = openssl_error_text();
  if (verified != X509_V_OK) {
    const bool server = context_->side() == tls_side::server;
    why = std::string(server ? "the client's" : "the server's") +
          " certificate: " + X509_verify_cert_error_string(verified);
  } else if (socket_errno_ == ECONNRESET || socket_errno_ == EPIPE) {
    why = std::string("the peer closed the connection during the handshake (") + std::strerror(socket_errno_) + ")";
  } else if (socket_errno_ != 0) {
    why = std::string("the handshake: ") + std::strerror(socket_errno_);
  } else if (why == "unexpected eof while reading" || why == "unknown TLS error") {
    why = "the peer closed the connection during the handshake";
  } else {
    why = "the handshake: " + why;
  }
  fail(std::move(why));
  return step::failed;
}

io_result tls_channel::read_some(std::span<std::byte> into) noexcept {
  if (!established_) return failure_.text.empty() ? io_result{io_result::would_block, 0, 0} : failed_result();
  if (into.empty()) return {io_result::ok, 0, 0};
  ERR_clear_error();
  std::size_t got = 0;
  if (SSL_read_ex(ssl_, into.data(), into.size(), &got) == 1) return {io_result::ok, got, 0};
  switch (SSL_get_error(ssl_, 0)) {
    case SSL_ERROR_WANT_READ: wants_write_ = false; return {io_result::would_block, 0, 0};
    case SSL_ERROR_WANT_WRITE: wants_write_ = true; return {io_result::would_block, 0, 0};
    case SSL_ERROR_ZERO_RETURN: return {io_result::eof, 0, 0};
    default: break;
  }
  if (socket_errno_ != 0) return {io_result::failed, 0, socket_errno_};
  fail("a record: " + openssl_error_text());
  return failed_result();
}

io_result tls_channel::write_some(std::span<const iovec> pieces) noexcept {
  if (!established_) return failure_.text.empty() ? io_result{io_result::would_block, 0, 0} : failed_result();
  // Small pieces go out together: each SSL_write seals at least one record of its own.
  std::array<std::byte, 16 * 1024> joined;
  std::size_t total = 0;
  for (std::size_t next = 0; next < pieces.size();) {
    const void* data = pieces[next].iov_base;
    std::size_t size = pieces[next].iov_len;
    std::size_t used = 1;
    if (size < joined.size() && next + 1 < pieces.size()) {
      size = 0;
      used = 0;
      while (next + used < pieces.size() && size + pieces[next + used].iov_len <= joined.size()) {
        std::memcpy(joined.data() + size, pieces[next + used].iov_base, pieces[next + used].iov_len);
        size += pieces[next + used].iov_len;
        ++used;
      }
      if (used == 0) {  // the next piece alone is larger than what is left: as it is
        size = pieces[next].iov_len;
        used = 1;
      } else {
        data = joined.data();
      }
    }
    next += used;
    if (size == 0) continue;
    ERR_clear_error();
    std::size_t put = 0;
    if (SSL_write_ex(ssl_, data, size, &put) == 1) {
      total += put;
      if (put < size) break;
      continue;
    }
    const int code = SSL_get_error(ssl_, 0);
    if (code == SSL_ERROR_WANT_WRITE || code == SSL_ERROR_WANT_READ) {
      wants_write_ = code == SSL_ERROR_WANT_WRITE;
      return total > 0 ? io_result{io_result::ok, total, 0} : io_result{io_result::would_block, 0, 0};
    }
    if (total > 0) return {io_result::ok, total, 0};  // the failure shows on the next write
    if (socket_errno_ != 0) return {io_result::failed, 0, socket_errno_};
    fail("a write: " + openssl_error_text());
    return failed_result();
  }
  return {io_result::ok, total, 0};
}

void tls_channel::shutdown() noexcept {
  if (ssl_ == nullptr || !established_ || shut_down_) return;
  shut_down_ = true;
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

tls_identity tls_channel::peer_identity() const {
  tls_identity id;
  if (ssl_ == nullptr) return id;
  X509* cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr) return id;
  id.verified = SSL_get_verify_result(ssl_) == X509_V_OK;
  if (BIO* text = BIO_new(BIO_s_mem())) {
    X509_NAME_print_ex(text, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
    char* data = nullptr;
    const long size = BIO_get_mem_data(text, &data);
    if (size > 0) id.subject.assign(data, static_cast<std::size_t>(size));
    BIO_free(text);
  }
  if (auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
      const auto text_of = [](const ASN1_STRING* s) {
        return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                           static_cast<std::size_t>(ASN1_STRING_length(s)));
      };
      switch (name->type) {
        case GEN_DNS: id.names.push_back("DNS:" + text_of(name->d.dNSName)); break;
        case GEN_EMAIL: id.names.push_back("email:" + text_of(name->d.rfc822Name)); break;
        case GEN_URI: id.names.push_back("URI:" + text_of(name->d.uniformResourceIdentifier)); break;
        case GEN_IPADD: {
          const ASN1_OCTET_STRING* ip = name->d.iPAddress;
          std::array<char, INET6_ADDRSTRLEN> buffer{};
          const int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
          if (ASN1_STRING_length(ip) == 4 || ASN1_STRING_length(ip) == 16)
            if (::inet_ntop(family, ASN1_STRING_get0_data(ip), buffer.data(), buffer.size()) != nullptr)
              id.names.push_back(std::string("IP:") + buffer.data());
          break;
        }
        default: break;
      }
    }
    GENERAL_NAMES_free(names);
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (X509_digest(cert, EVP_sha256(), digest.data(), &size) == 1) id.sha256 = hex(digest.data(), size);
  return id;
}

std::string tls_channel::version() const { return ssl_ != nullptr ? SSL_get_version(ssl_) : ""; }

bool tls_channel::looks_like_tls(std::span<const std::byte> first) noexcept {
  // A TLS record of type handshake (22), version major 3.
  if (first.empty()) return false;
  if (first[0] != std::byte{0x16}) return false;
  return first.size() < 2 || first[1] == std::byte{0x03};
}

}  // namespace courier::net::detail
