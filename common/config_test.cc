// Config files: valid keys, overrides, and clear errors for bad input.
#include "common/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace fw {
namespace {

struct Cfg {
  std::string listen = "0.0.0.0:9751";
  int port = 9753;
  double ratio = 0.5;
  bool verbose = false;
  Seconds tick{1};
  std::vector<std::string> nodes;
};

ConfigBinding Bind(Cfg& c) {
  ConfigBinding b;
  b.Bind("http-listen", &c.listen);
  b.Bind("probe-port", &c.port);
  b.Bind("ratio", &c.ratio);
  b.Bind("verbose", &c.verbose);
  b.Bind("tick", &c.tick);
  b.Bind("nodes", &c.nodes);
  return b;
}

TEST(ConfigTest, LoadsEveryType) {
  Cfg c;
  ASSERT_TRUE(Bind(c).LoadString("http_listen: 127.0.0.1:1\nprobe-port: 7\nratio: 0.25\n"
                                 "verbose: true\ntick: 250ms\nnodes: [a, b]\n",
                                 "x.yaml")
                  .ok());
  EXPECT_EQ(c.listen, "127.0.0.1:1");
  EXPECT_EQ(c.port, 7);
  EXPECT_DOUBLE_EQ(c.ratio, 0.25);
  EXPECT_TRUE(c.verbose);
  EXPECT_DOUBLE_EQ(c.tick.value, 0.25);
  EXPECT_EQ(c.nodes, (std::vector<std::string>{"a", "b"}));
}

TEST(ConfigTest, EmptyFileKeepsDefaults) {
  Cfg c;
  ASSERT_TRUE(Bind(c).LoadString("", "empty.yaml").ok());
  EXPECT_EQ(c.port, 9753);
}

TEST(ConfigTest, UnknownKeyNamesKeyFileAndLine) {
  Cfg c;
  Status s = Bind(c).LoadString("probe-port: 1\nbogus: 2\n", "agent.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "config file agent.yaml: key 'bogus' (line 2): unknown key");
}

TEST(ConfigTest, WrongTypeNamesKey) {
  Cfg c;
  Status s = Bind(c).LoadString("probe-port: lots\n", "agent.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'probe-port'"), std::string::npos);
  EXPECT_NE(s.message().find("wrong type"), std::string::npos);
  EXPECT_FALSE(Bind(c).LoadString("tick: soon\n", "a.yaml").ok());
  EXPECT_FALSE(Bind(c).LoadString("nodes: a\n", "a.yaml").ok());
}

TEST(ConfigTest, MalformedYamlAndMissingFile) {
  Cfg c;
  Status s = Bind(c).LoadString("a: [1, 2\n", "broken.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("broken.yaml: invalid YAML"), std::string::npos);
  Status m = Bind(c).LoadFile("/nonexistent/fw.yaml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("/nonexistent/fw.yaml"), std::string::npos);
  EXPECT_FALSE(Bind(c).LoadString("- a\n- b\n", "list.yaml").ok());
}

TEST(ConfigTest, Durations) {
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("2m"), 120);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("1.5"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("100us"), 1e-4);
  EXPECT_FALSE(ParseDurationSeconds("-1s").ok());
  EXPECT_FALSE(ParseDurationSeconds("1parsec").ok());
  EXPECT_FALSE(ParseDurationSeconds("nan").ok());
}

TEST(ConfigTest, FindsConfigFlag) {
  const char* a[] = {"prog", "--x", "--config", "f.yaml"};
  EXPECT_EQ(FindConfigFlag(4, const_cast<char**>(a)), "f.yaml");
  const char* b[] = {"prog", "--config=g.yaml"};
  EXPECT_EQ(FindConfigFlag(2, const_cast<char**>(b)), "g.yaml");
}

}  // namespace
}  // namespace fw
