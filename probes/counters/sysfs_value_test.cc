// Parsing of real sysfs value formats, including the odd ones.
#include "probes/counters/sysfs_value.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fw::counters {
namespace {

TEST(SysfsValue, Counters) {
  EXPECT_EQ(*ParseCounterValue("2489603687"), 2489603687u);  // no trailing newline (gpud tree)
  EXPECT_EQ(*ParseCounterValue("255\n"), 255u);
  EXPECT_EQ(*ParseCounterValue(" 0 \n"), 0u);
  EXPECT_EQ(*ParseCounterValue("18446744073709551615"), ~uint64_t{0});
  EXPECT_EQ(ParseCounterValue("N/A (no PMA)\n").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ParseCounterValue("18446744073709551616").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCounterValue("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCounterValue("-1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCounterValue("12abc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCounterValue("0x10").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ParseCounterValue(std::string("1\0"
                                          "2",
                                          3))
                .status()
                .message()
                .find("'1?2'"),
            std::string::npos);
}

TEST(SysfsValue, StatesAndRates) {
  auto s = ParseEnumValue("4: ACTIVE");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->id, 4);
  EXPECT_EQ(s->name, "ACTIVE");
  EXPECT_EQ(ParseEnumValue("5: LinkUp\n")->name, "LinkUp");
  EXPECT_FALSE(ParseEnumValue("ACTIVE").ok());
  EXPECT_FALSE(ParseEnumValue(": ACTIVE").ok());
  EXPECT_FALSE(ParseEnumValue("-4: ACTIVE").ok());
  EXPECT_DOUBLE_EQ(*ParseRateGbps("400 Gb/sec (4X NDR)"), 400);
  EXPECT_DOUBLE_EQ(*ParseRateGbps("200 Gb/sec (2X NDR)\n"), 200);
  EXPECT_DOUBLE_EQ(*ParseRateGbps("2.5 Gb/sec (1X SDR)"), 2.5);
  EXPECT_DOUBLE_EQ(*ParseRateGbps("0 GB/sec"), 0);
  EXPECT_FALSE(ParseRateGbps("fast").ok());
  EXPECT_FALSE(ParseRateGbps("400 Mb/sec").ok());
  EXPECT_FALSE(ParseRateGbps("nan Gb/sec").ok());
}

TEST(SysfsValue, ReadSmallFileAt) {
  char dir_tmpl[] = "/tmp/fw-read-XXXXXX";
  ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
  const std::string dir = dir_tmpl;
  {
    const int fd = open((dir + "/v").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "12345\n", 6), 6);
    ASSERT_EQ(close(fd), 0);
  }
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  char buf[4];
  size_t len = 0;
  int err = 0;
  EXPECT_EQ(ReadSmallFileAt(dfd, "v", buf, sizeof(buf), len, err), ReadResult::kOk);
  EXPECT_EQ(std::string(buf, len), "123");  // truncated to cap - 1, NUL-terminated
  EXPECT_EQ(ReadSmallFileAt(dfd, "missing", buf, sizeof(buf), len, err), ReadResult::kMissing);
  EXPECT_EQ(err, ENOENT);
  EXPECT_EQ(ReadSmallFileAt(-1, "v", buf, sizeof(buf), len, err), ReadResult::kIoError);
  EXPECT_EQ(close(dfd), 0);
  EXPECT_EQ(unlink((dir + "/v").c_str()), 0);
  EXPECT_EQ(rmdir(dir.c_str()), 0);
}

}  // namespace
}  // namespace fw::counters
