#pragma once
// A test CA and the certificates the TLS tests need, made with OpenSSL in a fresh temporary folder:
// a CA; a server certificate for "localhost" and 127.0.0.1; a client certificate; one expired;
// one for another name; one self-signed (untrusted); a second CA that signed nothing we trust.
// EC P-256 keys: quick to make, so each test process makes its own set.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace courier_test::tls {

struct key_and_cert {
  std::string cert;  // PEM file
  std::string key;   // PEM file
};

struct test_pki {
  std::string folder;
  std::string ca;  // the CA's certificate: what both sides trust
  key_and_cert server, client, expired, wrong_name, self_signed, other_ca_client;
  ~test_pki() {
    std::error_code ignored;
    if (!folder.empty()) std::filesystem::remove_all(folder, ignored);
  }
};

namespace detail {

struct issued {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
};

inline void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test PKI: ") + what);
}

inline void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  check(ext != nullptr, "extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

/// A certificate for `common_name` valid from `from_days` to `to_days` (from now), signed by
/// `issuer` (itself when null), with `alt_names` ("DNS:localhost,IP:127.0.0.1") when not empty.
inline issued make(const std::string& common_name, const issued* issuer, bool is_ca, const std::string& alt_names,
                   long from_days = -1, long to_days = 30) {
  static long serial = 1;
  issued out;
  out.key = EVP_EC_gen("P-256");
  check(out.key != nullptr, "key");
  out.cert = X509_new();
  X509_set_version(out.cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(out.cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(out.cert), from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(out.cert), to_days * 86400);
  X509_set_pubkey(out.cert, out.key);
  X509_NAME* name = X509_get_subject_name(out.cert);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Courier tests"), -1, -1,
                             0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509* signer_cert = issuer != nullptr ? issuer->cert : out.cert;
  EVP_PKEY* signer_key = issuer != nullptr ? issuer->key : out.key;
  X509_set_issuer_name(out.cert, X509_get_subject_name(signer_cert));
  add_extension(out.cert, signer_cert, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (is_ca) add_extension(out.cert, signer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  if (!alt_names.empty()) add_extension(out.cert, signer_cert, NID_subject_alt_name, alt_names);
  check(X509_sign(out.cert, signer_key, EVP_sha256()) > 0, "sign");
  return out;
}

inline void write(const issued& made, const std::string& cert_file, const std::string& key_file) {
  FILE* f = std::fopen(cert_file.c_str(), "w");
  check(f != nullptr && PEM_write_X509(f, made.cert) == 1, "write certificate");
  std::fclose(f);
  if (key_file.empty()) return;
  f = std::fopen(key_file.c_str(), "w");
  check(f != nullptr && PEM_write_PrivateKey(f, made.key, nullptr, nullptr, 0, nullptr, nullptr) == 1, "write key");
  std::fclose(f);
}

inline void release(issued& made) {
  X509_free(made.cert);
  EVP_PKEY_free(made.key);
}

}  // namespace detail

/// Makes the set in a new folder under $TMPDIR (removed with the returned object).
inline test_pki make_test_pki() {
  test_pki pki;
  std::string pattern = (std::filesystem::temp_directory_path() / "courier-tls-XXXXXX").string();
  detail::check(::mkdtemp(pattern.data()) != nullptr, "mkdtemp");
  pki.folder = pattern;
  const auto path = [&](const char* name) { return pki.folder + "/" + name; };
  auto ca = detail::make("Courier test CA", nullptr, true, "", -1, 365);
  auto other_ca = detail::make("Another CA", nullptr, true, "", -1, 365);
  std::vector<detail::issued> made;
  const auto issue = [&](key_and_cert& into, const char* name, const std::string& cn, const detail::issued* by,
                         const std::string& alt, long from, long to) {
    made.push_back(detail::make(cn, by, false, alt, from, to));
    into = {path((std::string(name) + ".pem").c_str()), path((std::string(name) + ".key").c_str())};
    detail::write(made.back(), into.cert, into.key);
  };
  pki.ca = path("ca.pem");
  detail::write(ca, pki.ca, "");
  issue(pki.server, "server", "localhost", &ca, "DNS:localhost,IP:127.0.0.1", -1, 30);
  issue(pki.client, "client", "courier-test-client", &ca, "DNS:client.test,email:ops@client.test", -1, 30);
  issue(pki.expired, "expired", "localhost", &ca, "DNS:localhost,IP:127.0.0.1", -30, -1);
  issue(pki.wrong_name, "wrong-name", "elsewhere.test", &ca, "DNS:elsewhere.test", -1, 30);
  issue(pki.self_signed, "self-signed", "localhost", nullptr, "DNS:localhost,IP:127.0.0.1", -1, 30);
  issue(pki.other_ca_client, "other-ca-client", "stranger", &other_ca, "DNS:stranger.test", -1, 30);
  for (auto& m : made) detail::release(m);
  detail::release(ca);
  detail::release(other_ca);
  return pki;
}

}  // namespace courier_test::tls
