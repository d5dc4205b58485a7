// libFuzzer target: the web config parser returns a Status on any bytes, never crashes, and what
// it accepts holds only bounded, well-formed users and TLS settings.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "exporter/web_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = fw::http::ParseWebConfig(text, "fuzz", "/etc/fabricwatch");
  if (!c.ok()) return 0;
  if (c->users.size() > fw::http::kMaxWebUsers) std::abort();
  for (const auto& [user, hash] : c->users) {
    if (user.empty() || user.size() > fw::http::kMaxUserNameBytes) std::abort();
    if (hash.size() < 4 || hash[0] != '$') std::abort();
  }
  if (c->tls && (c->tls_config.cert_file.empty() || c->tls_config.key_file.empty())) std::abort();
  return 0;
}
