#include "common/code_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "common/testing/temp_dir.h"

namespace fw {
namespace {

// /proc/PID/smaps of `sleep` (Linux 6.18), some fields left out: its read-only headers, text and
// rodata (releasable), the RELRO page the loader relocated (Anonymous 4 kB), its data, the heap,
// and the vdso.
constexpr char kSleep[] =
    "558b68fd0000-558b68fd2000 r--p 00000000 fe:00 248056                     /usr/bin/sleep\n"
    "Size:                  8 kB\n"
    "KernelPageSize:        4 kB\n"
    "Rss:                   8 kB\n"
    "Pss:                   8 kB\n"
    "Anonymous:             0 kB\n"
    "VmFlags: rd mr mw me \n"
    "558b68fd2000-558b68fd7000 r-xp 00002000 fe:00 248056                     /usr/bin/sleep\n"
    "Size:                 20 kB\n"
    "Rss:                  20 kB\n"
    "Anonymous:             0 kB\n"
    "VmFlags: rd ex mr mw me \n"
    "558b68fd9000-558b68fda000 r--p 00009000 fe:00 248056                     /usr/bin/sleep\n"
    "Size:                  4 kB\n"
    "Rss:                   4 kB\n"
    "Anonymous:             4 kB\n"
    "VmFlags: rd mr mw me ac \n"
    "558b68fda000-558b68fdb000 rw-p 0000a000 fe:00 248056                     /usr/bin/sleep\n"
    "Rss:                   4 kB\n"
    "Anonymous:             4 kB\n"
    "558b8a0c1000-558b8a0e2000 rw-p 00000000 00:00 0                          [heap]\n"
    "Rss:                   8 kB\n"
    "Anonymous:             8 kB\n"
    "7f2b1c3a0000-7f2b1c3c6000 r--p 00000000 fe:00 262537                     "
    "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "Rss:                 152 kB\n"
    "Anonymous:             0 kB\n"
    "7f2b1c3c6000-7f2b1c3d0000 r-xp 00026000 fe:00 262537                     "
    "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "Rss:                   0 kB\n"
    "Anonymous:             0 kB\n"
    "7ffd2a5f2000-7ffd2a5f4000 r-xp 00000000 00:00 0                          [vdso]\n"
    "Rss:                   4 kB\n"
    "Anonymous:             0 kB\n";

TEST(CodePages, OnlyCleanReadOnlyFileMappingsWithResidentPages) {
  std::vector<CodeRange> r;
  ASSERT_TRUE(ParseReleasableRanges(kSleep, r).ok());
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].start, 0x558b68fd0000u);
  EXPECT_EQ(r[0].end, 0x558b68fd2000u);
  EXPECT_EQ(r[0].rss_bytes, 8u << 10);
  EXPECT_EQ(r[0].path, "/usr/bin/sleep");
  EXPECT_EQ(r[1].start, 0x558b68fd2000u);  // the text
  EXPECT_EQ(r[1].rss_bytes, 20u << 10);
  EXPECT_EQ(r[2].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");  // the resident one of libc's two
  EXPECT_EQ(r[2].rss_bytes, 152u << 10);
}

TEST(CodePages, AMappingWithoutAnAnonymousLineIsNotProvenClean) {
  std::vector<CodeRange> r;
  ASSERT_TRUE(ParseReleasableRanges("1000-3000 r-xp 00000000 fe:00 7 /bin/x\nRss: 8 kB\n"
                                    "2000000-2001000 r-xp 00000000 fe:00 7 /bin/x\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\n",
                                    r)
                  .ok());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].start, 0x2000000u);
}

// An RDMA NIC's clock page and a GPU driver's read-only mapping are device pages (madvise refuses
// them: EINVAL); locked and hugetlb mappings are left alone too.
TEST(CodePages, DeviceLockedAndHugetlbMappingsAreLeftAlone) {
  std::vector<CodeRange> r;
  ASSERT_TRUE(ParseReleasableRanges("1000-2000 r--s 00000000 00:06 512 /dev/infiniband/uverbs0\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\nVmFlags: rd sh mr io pf dd\n"
                                    "2000-3000 r--s 00000000 00:06 513 /dev/nvidiactl\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\n"
                                    "3000-4000 r-xp 00000000 fe:00 7 /opt/locked\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\nVmFlags: rd ex mr lo\n"
                                    "4000-5000 r--p 00000000 00:10 8 /mnt/huge/table\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\nVmFlags: rd mr ht\n"
                                    "5000-6000 r-xp 00000000 fe:00 9 /usr/lib/libok.so\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB\nVmFlags: rd ex mr mw me\n",
                                    r)
                  .ok());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].path, "/usr/lib/libok.so");
}

TEST(CodePages, PathsWithSpacesAndDeletedFilesKeepTheirName) {
  std::vector<CodeRange> r;
  ASSERT_TRUE(ParseReleasableRanges("1000-3000 r-xp 00000000 fe:00 7   /opt/my dir/agent (deleted)\n"
                                    "Rss: 8 kB\nAnonymous: 0 kB\n",
                                    r)
                  .ok());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].path, "/opt/my dir/agent (deleted)");
}

TEST(CodePages, MalformedHeadersAndValuesAreErrors) {
  std::vector<CodeRange> r;
  EXPECT_FALSE(ParseReleasableRanges("zz-3000 r-xp 0 fe:00 7 /bin/x\n", r).ok());
  EXPECT_FALSE(ParseReleasableRanges("3000-1000 r-xp 0 fe:00 7 /bin/x\n", r).ok());
  EXPECT_FALSE(ParseReleasableRanges("1000-3000 r-xp 0\n", r).ok());
  EXPECT_FALSE(ParseReleasableRanges("1000-3000 r-xp 0 fe:00 7 /bin/x\nRss: lots kB\n", r).ok());
  EXPECT_FALSE(
      ParseReleasableRanges("1000-3000 r-xp 0 fe:00 7 /bin/x\nRss: 99999999999999999999 kB\n", r)
          .ok());
  // Unknown fields, blank lines and a missing trailing newline are fine.
  EXPECT_TRUE(ParseReleasableRanges("\n1000-3000 r-xp 0 fe:00 7 /bin/x\nNewField: 3 kB\n"
                                    "Rss: 4 kB\nAnonymous: 0 kB",
                                    r)
                  .ok());
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(ParseReleasableRanges("", r).ok());
  EXPECT_TRUE(r.empty());
}

uint64_t StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key)));
  }
  return 0;
}

// On this process: its file pages leave RSS, code still runs, and a private file mapping whose
// pages were written and then made read-only (what the loader does to RELRO) keeps what was
// written.
TEST(CodePages, ReleasesThisProcesssCodeAndKeepsWrittenPages) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/data";
  {
    std::ofstream out(file);
    out << std::string(8192, 'f');
  }
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(m, MAP_FAILED);
  std::memset(m, 'w', 4096);  // the first page becomes this process's own copy
  ASSERT_EQ(::mprotect(m, 8192, PROT_READ), 0);
  // A clean read-only mapping of the same file, read so that it is resident.
  const int fd2 = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd2, 0);
  void* clean = ::mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE, fd2, 0);
  ::close(fd2);
  ASSERT_NE(clean, MAP_FAILED);
  volatile char sink = static_cast<const char*>(clean)[0];
  (void)sink;

  const uint64_t file_before = StatusKb("RssFile:");
  CodeReleaseResult r;
  ASSERT_TRUE(ReleaseCodePages(r).ok());
  const uint64_t file_after = StatusKb("RssFile:");
  EXPECT_GT(r.mappings, 3u);  // this binary's and its libraries' text and read-only data
  EXPECT_GT(r.resident_bytes, 512u << 10);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_LT(file_after, file_before);
  // Written then read-only: skipped (Anonymous > 0), so the written bytes are still there.
  EXPECT_EQ(static_cast<const char*>(m)[0], 'w');
  EXPECT_EQ(static_cast<const char*>(m)[4096], 'f');
  EXPECT_EQ(static_cast<const char*>(clean)[0], 'f');
  // And code keeps running (the gtest machinery after this line faults its pages back).
  std::vector<CodeRange> again;
  EXPECT_TRUE(ParseReleasableRanges(kSleep, again).ok());
  ::munmap(m, 8192);
  ::munmap(clean, 8192);
}

TEST(CodePages, AnUnreadableSmapsIsAnError) {
  CodeReleaseResult r;
  EXPECT_FALSE(ReleaseCodePages(r, "/nonexistent/smaps").ok());
  EXPECT_EQ(r.mappings, 0u);
}

}  // namespace
}  // namespace fw
