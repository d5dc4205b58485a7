/* Debian 12's civetweb 1.15 loads OpenSSL at run time with dlopen("libssl.so") and
 * dlopen("libcrypto.so"), names only libssl-dev installs, and it looks up
 * SSL_get_peer_certificate, a symbol OpenSSL 3 no longer exports (it became a macro for
 * SSL_get1_peer_certificate). Without help, HTTPS fails to start with "load_tls_dll: libssl.so:
 * cannot find SSL_get_peer_certificate".
 *
 * This library has the SONAME "libssl.so" and needs libssl.so.3. An HTTPS server loads it by path
 * first (exporter/http_server.cc); glibc's dlopen matches an already loaded object by its SONAME,
 * so civetweb's dlopen("libssl.so") returns this object, and dlsym() on it finds OpenSSL's
 * functions in its dependency libssl.so.3, and the one missing function here. */
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate
X509* SSL_get_peer_certificate(const SSL* ssl);
X509* SSL_get_peer_certificate(const SSL* ssl) { return SSL_get1_peer_certificate(ssl); }

/* A symbol of its own, so the library is never empty. */
int fw_civetweb_ssl_shim(void);
int fw_civetweb_ssl_shim(void) { return 3; }
