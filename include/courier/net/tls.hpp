#pragma once
/// @file
/// TLS between the socket and the wire stream (OpenSSL 3): what a program asks of it and what it
/// proves about the peer. The channel that does it is private (detail/tls_channel.hpp).
///
/// A server needs a certificate and its key; with a CA file it also verifies the certificates
/// clients offer, and with `require_client_cert` refuses a client that offers none the CAs verify.
/// A client verifies the server's certificate against its CA file (or the system's CAs) and the
/// name it connects to, unless told not to by the option whose name says it is insecure. TLS 1.3
/// only unless `allow_tls12`; the protocol is negotiated by ALPN as `courier/1`.
///
/// Thread-safety: value types.

#include <string>
#include <string_view>
#include <vector>

namespace courier::net {

/// The ALPN protocol name of Courier over TLS.
inline constexpr std::string_view tls_alpn = "courier/1";

struct tls_settings {
  /// PEM: this side's certificate chain (a server's is required; a client's for mutual TLS).
  std::string cert_file;
  /// PEM: the private key of cert_file.
  std::string key_file;
  /// PEM: the CAs the peer's certificate must chain to. A client without one uses the system's
  /// CAs; a server without one asks clients for no certificate.
  std::string ca_file;
  /// Server: refuse a client that offers no certificate the CAs verify.
  bool require_client_cert = false;
  /// Client: the name the server's certificate must carry, and the SNI sent (empty: the host
  /// connected to). An IP address is matched against the certificate's IP addresses.
  std::string server_name;
  /// Client: accept any server certificate, verified or not. Only for tests and first set-ups:
  /// anyone on the path can then read and change the traffic.
  bool insecure_skip_verify = false;
  /// Allow TLS 1.2 as well as 1.3.
  bool allow_tls12 = false;
};

/// Who the peer proved to be with its certificate.
struct tls_identity {
  /// A certificate was offered and the CAs verified it.
  bool verified = false;
  /// The certificate's subject, one line as RFC 2253 writes it ("CN=client,O=example").
  std::string subject;
  /// Its subject alternative names, each with its kind: "DNS:host.example", "IP:10.0.0.1",
  /// "email:ops@example", "URI:spiffe://example/service".
  std::vector<std::string> names;
  /// SHA-256 of the certificate (DER), 64 lower-case hex digits.
  std::string sha256;
};

}  // namespace courier::net
