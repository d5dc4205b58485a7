// Transport security settings shared by both daemons and the simulator: the --tls-* and --insecure
// flags, loading and checking the PEM files, and matching a certificate's names to a node.
//
// gRPC-free: the credentials built from this live in grpc_credentials.{h,cc}.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}

namespace fw {

class ConfigBinding;

namespace tls {

// The files named on the command line or in the config file (keys tls-cert, tls-key, tls-ca,
// insecure). Either all three files, or `insecure` alone.
struct TlsFiles {
  std::string cert;  // this process's certificate chain (PEM)
  std::string key;   // its private key (PEM)
  std::string ca;    // the fleet CA that signs the peers' certificates (PEM)
  bool insecure = false;
};

// The loaded and cross-checked material.
struct TlsMaterial {
  std::string cert_pem, key_pem, ca_pem;
  // The DNS names in the certificate's subjectAltName, then its subject CN (if any).
  std::vector<std::string> names;
  int64_t not_after_unix = 0;  // the certificate's expiry
};

// Binds the config-file keys tls-cert, tls-key, tls-ca and insecure (before the file is loaded).
void BindTlsConfig(ConfigBinding& binding, TlsFiles* files);
// Adds --tls-cert, --tls-key, --tls-ca and --insecure to `app`. `role` words the help text
// ("the aggregator" / "this agent").
void AddTlsFlags(CLI::App& app, TlsFiles* files, const std::string& role);

// After `app` parsed: the command line wins over the config file for the TLS group as a whole, so
// `--insecure` given on the command line drops the file's tls-* keys, and any --tls-* given there
// drops the file's `insecure: true`.
void ResolveCommandLinePrecedence(const CLI::App& app, TlsFiles* files);

// Largest PEM file read (a chain of a few certificates is a few KiB).
inline constexpr size_t kMaxPemBytes = 1 << 20;

// Returns the material for mTLS, or nullopt for plaintext (files.insecure). Fails, naming the flag
// and the file, when: neither TLS files nor --insecure are given; --insecure is given together with
// TLS files; only some of the three files are given; a file is unreadable, over kMaxPemBytes or not
// PEM of the right kind; the key does not belong to the certificate; the certificate has expired.
StatusOr<std::optional<TlsMaterial>> LoadTlsFiles(const TlsFiles& files);

// Logs how the gRPC transport is secured, once at start: a warning for plaintext (anyone who can
// reach the port may claim any node), an info line with the certificate's names and expiry
// otherwise (a warning if it expires within 30 days). `who` is "aggregator" or "agent".
void LogTransportSecurity(std::string_view who, const std::optional<TlsMaterial>& material);

// True when `node` is exactly one of `names` (certificate names are compared byte for byte:
// node names are identities here, not host lookups).
bool NamesNode(const std::vector<std::string>& names, std::string_view node);

// Parses the DNS subjectAltNames and the subject CN of a PEM certificate (the first of a chain).
StatusOr<std::vector<std::string>> CertificateNames(std::string_view cert_pem);

}  // namespace tls
}  // namespace fw
