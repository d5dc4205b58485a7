// The web config parser (the Prometheus exporter-toolkit format) and basic-auth password checks.
#include "exporter/web_config.h"

#include <crypt.h>
#include <gtest/gtest.h>

namespace fw::http {
namespace {

// A crypt(3) hash of `password` with libxcrypt's own salt generator: "$2b$" (bcrypt) or "$5$".
std::string Hash(const std::string& prefix, const std::string& password, unsigned long cost) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn(prefix.c_str(), cost, nullptr, 0, setting, sizeof setting), nullptr);
  struct crypt_data data {};
  const char* out = crypt_r(password.c_str(), setting, &data);
  EXPECT_NE(out, nullptr);
  return out;
}

TEST(WebConfigTest, ParsesTheToolkitFormatAndResolvesRelativePaths) {
  const std::string bcrypt = Hash("$2b$", "secret", 4);
  auto c = ParseWebConfig(
      "tls_server_config:\n"
      "  cert_file: web.crt\n"
      "  key_file: /abs/web.key\n"
      "  client_auth_type: RequireAndVerifyClientCert\n"
      "  client_ca_file: ca.crt\n"
      "  min_version: TLS13\n"
      "basic_auth_users:\n"
      "  alice: " +
          bcrypt + "\n",
      "w.yaml", "/etc/fw");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->tls);
  EXPECT_EQ(c->tls_config.cert_file, "/etc/fw/web.crt");
  EXPECT_EQ(c->tls_config.key_file, "/abs/web.key");
  EXPECT_EQ(c->tls_config.client_ca_file, "/etc/fw/ca.crt");
  EXPECT_EQ(c->tls_config.client_auth, ClientAuth::kRequireAndVerifyClientCert);
  EXPECT_TRUE(c->tls_config.min_tls13);
  ASSERT_EQ(c->users.size(), 1u);
  EXPECT_EQ(c->users.at("alice"), bcrypt);
  EXPECT_TRUE(c->auth_configured());

  auto empty = ParseWebConfig("", "e.yaml", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->tls);
  EXPECT_FALSE(empty->auth_configured());
}

TEST(WebConfigTest, RefusesWhatItCannotHonour) {
  auto err = [](const std::string& yaml) {
    auto c = ParseWebConfig(yaml, "w.yaml", "");
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(err("basic_auth_users:\n  alice: plaintext\n").find("plain passwords"),
            std::string::npos);
  EXPECT_NE(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n")
                .find("cipher_suites"),
            std::string::npos);
  EXPECT_NE(err("http_server_config:\n  http2: true\n").find("http_server_config"),
            std::string::npos);
  EXPECT_NE(err("tls_server_config:\n  cert_file: a\n").find("key_file"), std::string::npos);
  EXPECT_NE(err("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                "  client_auth_type: RequireAndVerifyClientCert\n")
                .find("client_ca_file"),
            std::string::npos);
  EXPECT_NE(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n")
                .find("Maybe"),
            std::string::npos);
  EXPECT_NE(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n")
                .find("TLS10"),
            std::string::npos);
  // A bcrypt cost past the bound would make every request take minutes.
  std::string slow = Hash("$2b$", "x", 4);
  slow.replace(4, 2, "31");
  EXPECT_NE(err("basic_auth_users:\n  a: " + slow + "\n").find("cost 31"), std::string::npos);
  EXPECT_FALSE(
      err("basic_auth_users:\n  a: $5$rounds=999999999$salt$" + std::string(43, 'a') + "\n")
          .empty());
  EXPECT_FALSE(err("basic_auth_users:\n  \"a:b\": " + Hash("$2b$", "x", 4) + "\n").empty());
  EXPECT_FALSE(err(std::string(100, '[')).empty());
  EXPECT_FALSE(err(std::string(kMaxWebConfigBytes + 1, ' ')).empty());
  EXPECT_FALSE(err("- a\n").empty());
  EXPECT_FALSE(err("tls_server_config: [1, 2]\n").empty());
}

TEST(BasicAuthTest, BcryptAndSha256CryptPasswords) {
  const std::string b = Hash("$2b$", "s3cret", 4);
  const std::string s = Hash("$5$", "hunter2", 5000);
  EXPECT_TRUE(BasicAuth::VerifyPassword("s3cret", b));
  EXPECT_FALSE(BasicAuth::VerifyPassword("s3cret ", b));
  EXPECT_FALSE(BasicAuth::VerifyPassword("", b));
  EXPECT_TRUE(BasicAuth::VerifyPassword("hunter2", s));
  EXPECT_FALSE(BasicAuth::VerifyPassword("hunter3", s));
  // $2y$ (htpasswd -B) is accepted as written.
  std::string y = b;
  y[2] = 'y';
  EXPECT_TRUE(ParseWebConfig("basic_auth_users:\n  u: " + y + "\n", "w", "").ok());
  EXPECT_TRUE(BasicAuth::VerifyPassword("s3cret", y));

  BasicAuth auth({{"alice", b}, {"bob", s}});
  std::string user;
  EXPECT_TRUE(auth.Check("Basic YWxpY2U6czNjcmV0", &user));  // alice:s3cret
  EXPECT_EQ(user, "alice");
  EXPECT_TRUE(auth.Check("basic YWxpY2U6czNjcmV0"));   // the scheme is case-insensitive
  EXPECT_TRUE(auth.Check("Basic Ym9iOmh1bnRlcjI="));   // bob:hunter2
  EXPECT_FALSE(auth.Check("Basic Ym9iOmh1bnRlcjM="));  // bob:hunter3
  EXPECT_FALSE(auth.Check("Basic ZXZlOnMzY3JldA=="));  // eve:s3cret
  EXPECT_FALSE(auth.Check("Basic YWxpY2U="));          // no colon
  EXPECT_FALSE(auth.Check("Basic !!!!"));
  EXPECT_FALSE(auth.Check("Bearer YWxpY2U6czNjcmV0"));
  EXPECT_FALSE(auth.Check(""));
}

TEST(Base64Test, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(*DecodeBase64("YWxpY2U6czNjcmV0"), "alice:s3cret");
  EXPECT_EQ(*DecodeBase64("YQ=="), "a");
  EXPECT_EQ(*DecodeBase64("YQ"), "a");
  EXPECT_FALSE(DecodeBase64("Y").ok());
  EXPECT_FALSE(DecodeBase64("YW-x").ok());
}

}  // namespace
}  // namespace fw::http
