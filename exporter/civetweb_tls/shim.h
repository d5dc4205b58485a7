// The OpenSSL-name shims civetweb's run-time TLS loading needs (ssl_shim.c explains why).
#pragma once

extern "C" {
int fw_civetweb_ssl_shim(void);
int fw_civetweb_crypto_shim(void);
}
