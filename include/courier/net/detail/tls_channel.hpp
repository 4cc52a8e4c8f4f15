#pragma once
/// @file
/// TLS over one non-blocking socket (OpenSSL 3), for the wire stream: a handshake driven by
/// readiness, then `read_some` and `write_some` with the socket's outcomes (`io_result`), so the
/// layer above reads and writes as it does on a plain socket.
///
/// A `tls_context` holds what the connections of one side share (OpenSSL's SSL_CTX: certificates,
/// CAs, versions, ALPN); it is made once per listener or client configuration. A `tls_channel` is
/// one connection's TLS state; it writes to the socket with `MSG_NOSIGNAL` (a peer that went away
/// is an error, never a SIGPIPE) and never owns the socket. A plaintext peer, a certificate
/// that does not verify, a peer that does not speak `courier/1`: the handshake fails with
/// `failure()` saying which.
///
/// Thread-safety: a context is immutable once made and may be shared by connections on any
/// thread; a channel is used by one thread at a time (the connection's turn).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "courier/error.hpp"
#include "courier/net/socket.hpp"
#include "courier/net/tls.hpp"

struct ssl_st;
struct ssl_ctx_st;

namespace courier::net::detail {

enum class tls_side : std::uint8_t { client, server };

class tls_context {
 public:
  /// Loads the certificates and keys `settings` names: a server needs cert_file and key_file.
  /// Errors name the file and what was wrong with it.
  [[nodiscard]] static courier::result<std::shared_ptr<const tls_context>> make(tls_side side,
                                                                                const tls_settings& settings);
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  ~tls_context();

  tls_side side() const noexcept { return side_; }
  const tls_settings& settings() const noexcept { return settings_; }
  ssl_ctx_st* native() const noexcept { return ctx_; }

 private:
  tls_context(tls_side side, tls_settings settings, ssl_ctx_st* ctx) noexcept
      : side_(side), settings_(std::move(settings)), ctx_(ctx) {}
  tls_side side_;
  tls_settings settings_;
  ssl_ctx_st* ctx_;
};

class tls_channel {
 public:
  /// TLS on `sock` (not owned; it must outlive the channel, and once it is closed the channel reads
  /// and writes nothing). A client's `host` is the name its server certificate must carry when the
  /// settings name none.
  tls_channel(std::shared_ptr<const tls_context> context, const socket& sock, std::string_view host = {});
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;
  ~tls_channel();

  enum class step : std::uint8_t {
    done,        ///< the handshake is complete: read and write
    want_read,   ///< call again when the socket is readable
    want_write,  ///< call again when the socket is writable
    failed,      ///< failure() says why; the connection is over
  };
  /// Takes the handshake as far as the socket allows.
  step handshake() noexcept;
  bool established() const noexcept { return established_; }

  /// As net::read_some: ok with the bytes decrypted, would_block, eof (the peer closed, with or
  /// without close_notify: Courier's frames carry their length, so a cut frame is still seen),
  /// failed (failure() says why).
  io_result read_some(std::span<std::byte> into) noexcept;
  /// As net::write_some: the pieces' bytes in order, as many as the socket takes. A would_block
  /// write must be retried with the same bytes first (the record is already sealed).
  io_result write_some(std::span<const iovec> pieces) noexcept;
  /// The last would_block of a read or a write waits for writability (or for readability).
  bool wants_write() const noexcept { return wants_write_; }

  /// Sends close_notify (once; best effort on a non-blocking socket).
  void shutdown() noexcept;

  const courier::error& failure() const noexcept { return failure_; }
  /// What the peer's certificate proves (empty when it offered none).
  tls_identity peer_identity() const;
  /// The TLS version agreed, e.g. "TLSv1.3".
  std::string version() const;

  /// Whether the first bytes a server reads open a TLS handshake record: a Courier handshake
  /// (or anything else) sent in plaintext does not.
  static bool looks_like_tls(std::span<const std::byte> first) noexcept;

 private:
  void fail(std::string what) noexcept;
  io_result failed_result() noexcept;

  std::shared_ptr<const tls_context> context_;
  ssl_st* ssl_ = nullptr;
  bool established_ = false;
  bool wants_write_ = false;
  bool shut_down_ = false;
  int socket_errno_ = 0;  // the socket's errno when a read or write of the record layer failed
  courier::error failure_;
};

}  // namespace courier::net::detail
