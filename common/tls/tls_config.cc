// Loading the PEM files with OpenSSL so that a wrong file fails at start with a clear message,
// not at the first handshake.
#include "common/tls/tls_config.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>

#include "common/config.h"

namespace fw::tls {

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* n) const { GENERAL_NAMES_free(n); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's queued error text (and clears the queue), for messages.
std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

BioPtr MemBio(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

X509Ptr ParseCert(std::string_view pem) {
  BioPtr bio = MemBio(pem);
  if (!bio) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(std::string(flag) + " " + path +
                            ": cannot read: " + std::strerror(errno));
  }
  std::string data(kMaxPemBytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > kMaxPemBytes) {
    return Status::InvalidArgument(std::string(flag) + " " + path + ": larger than " +
                                   std::to_string(kMaxPemBytes) + " bytes, not a PEM file");
  }
  if (data.find("-----BEGIN ") == std::string::npos) {
    return Status::InvalidArgument(std::string(flag) + " " + path + ": not a PEM file");
  }
  return data;
}

int64_t NotAfterUnix(const X509* cert) {
  const ASN1_TIME* t = X509_get0_notAfter(cert);
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

std::string FormatUtc(int64_t unix_s) {
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> NamesOf(X509* cert) {
  std::vector<std::string> names;
  std::unique_ptr<GENERAL_NAMES, NamesFree> sans(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans.get()); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans.get(), i);
      if (gn->type != GEN_DNS) continue;
      const ASN1_IA5STRING* s = gn->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         static_cast<size_t>(ASN1_STRING_length(s)));
    }
  }
  X509_NAME* subject = X509_get_subject_name(cert);
  int idx = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (idx >= 0) {
    const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
    names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)),
                       static_cast<size_t>(ASN1_STRING_length(cn)));
  }
  return names;
}

}  // namespace

void BindTlsConfig(ConfigBinding& binding, TlsFiles* files) {
  binding.Bind("tls-cert", &files->cert);
  binding.Bind("tls-key", &files->key);
  binding.Bind("tls-ca", &files->ca);
  binding.Bind("insecure", &files->insecure);
}

void AddTlsFlags(CLI::App& app, TlsFiles* files, const std::string& role) {
  app.add_option("--tls-cert", files->cert,
                 "PEM certificate (chain) of " + role + " for gRPC mTLS");
  app.add_option("--tls-key", files->key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", files->ca, "PEM CA that signs the fleet's certificates");
  app.add_flag("--insecure", files->insecure,
               "plaintext gRPC without identities (instead of the three --tls-* files)");
}

void ResolveCommandLinePrecedence(const CLI::App& app, TlsFiles* files) {
  const bool cli_insecure = app.count("--insecure") > 0;
  const bool cli_tls = app.count("--tls-cert") + app.count("--tls-key") + app.count("--tls-ca") > 0;
  if (cli_insecure && !cli_tls) {
    files->cert.clear();
    files->key.clear();
    files->ca.clear();
  } else if (cli_tls && !cli_insecure) {
    files->insecure = false;
  }
}

StatusOr<std::optional<TlsMaterial>> LoadTlsFiles(const TlsFiles& files) {
  const bool any = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  const bool all = !files.cert.empty() && !files.key.empty() && !files.ca.empty();
  if (files.insecure) {
    if (any) {
      return Status::InvalidArgument(
          "--insecure and --tls-cert/--tls-key/--tls-ca were both given: choose one");
    }
    return std::optional<TlsMaterial>();
  }
  if (!any) {
    return Status::InvalidArgument(
        "gRPC needs mTLS: give --tls-cert, --tls-key and --tls-ca, or --insecure for plaintext "
        "(anyone who reaches the port can then claim any node)");
  }
  if (!all) {
    return Status::InvalidArgument("mTLS needs all three of --tls-cert, --tls-key and --tls-ca");
  }
  TlsMaterial m;
  auto cert = ReadPem(files.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key, "--tls-key");
  if (!key.ok()) return key.status();
  auto ca = ReadPem(files.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  m.cert_pem = std::move(*cert);
  m.key_pem = std::move(*key);
  m.ca_pem = std::move(*ca);

  X509Ptr x = ParseCert(m.cert_pem);
  if (!x) {
    return Status::InvalidArgument("--tls-cert " + files.cert +
                                   ": no certificate in it: " + OpenSslError());
  }
  if (!ParseCert(m.ca_pem)) {
    return Status::InvalidArgument("--tls-ca " + files.ca +
                                   ": no certificate in it: " + OpenSslError());
  }
  BioPtr kbio = MemBio(m.key_pem);
  PkeyPtr pkey(kbio ? PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!pkey) {
    return Status::InvalidArgument("--tls-key " + files.key +
                                   ": no (unencrypted) private key in it: " + OpenSslError());
  }
  if (X509_check_private_key(x.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("--tls-key " + files.key + " does not belong to --tls-cert " +
                                   files.cert);
  }
  m.names = NamesOf(x.get());
  m.not_after_unix = NotAfterUnix(x.get());
  if (m.not_after_unix != 0 && m.not_after_unix < static_cast<int64_t>(time(nullptr))) {
    return Status::InvalidArgument("--tls-cert " + files.cert + " expired at " +
                                   FormatUtc(m.not_after_unix));
  }
  return std::optional<TlsMaterial>(std::move(m));
}

void LogTransportSecurity(std::string_view who, const std::optional<TlsMaterial>& material) {
  if (!material) {
    spdlog::warn(
        "msg=\"gRPC runs in plaintext (--insecure): no encryption, and the aggregator cannot tell "
        "which node a session comes from\" daemon={}",
        who);
    return;
  }
  std::string names;
  for (const auto& n : material->names) names += (names.empty() ? "" : ",") + n;
  const int64_t left = material->not_after_unix - static_cast<int64_t>(time(nullptr));
  if (material->not_after_unix != 0 && left < 30 * 86400) {
    spdlog::warn("msg=\"gRPC mTLS certificate expires soon\" daemon={} names={} not_after={}", who,
                 names, FormatUtc(material->not_after_unix));
  } else {
    spdlog::info("msg=\"gRPC uses mTLS\" daemon={} names={} not_after={}", who, names,
                 FormatUtc(material->not_after_unix));
  }
}

bool NamesNode(const std::vector<std::string>& names, std::string_view node) {
  if (node.empty()) return false;
  for (const auto& n : names) {
    if (n == node) return true;
  }
  return false;
}

StatusOr<std::vector<std::string>> CertificateNames(std::string_view cert_pem) {
  X509Ptr x = ParseCert(cert_pem);
  if (!x) return Status::InvalidArgument("not a PEM certificate: " + OpenSslError());
  return NamesOf(x.get());
}

}  // namespace fw::tls
