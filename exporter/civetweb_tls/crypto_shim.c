/* The SONAME "libcrypto.so" for civetweb's dlopen("libcrypto.so"), needing libcrypto.so.3; see
 * ssl_shim.c. OpenSSL 3's libcrypto exports everything civetweb asks of it. */
int fw_civetweb_crypto_shim(void);
int fw_civetweb_crypto_shim(void) { return 3; }
