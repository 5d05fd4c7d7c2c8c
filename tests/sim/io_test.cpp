// Whole-or-nothing output files (sim/io.h): the destination is replaced only when complete; a
// failing writer, and SIGTERM or SIGINT in the middle, leave the old file (or none) and no
// temporary; symbolic links are written through; devices are written directly; a folder is
// refused.
#include "sim/io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "sim/error.h"

namespace ranksim::sim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class AtomicOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ranksim_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int files() const { return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }

  fs::path dir_;
};

TEST_F(AtomicOutputTest, WritesTheWholeFileAndLeavesNoTemporary) {
  const fs::path p = dir_ / "out.json";
  write_file_atomically(p.string(), [](std::ostream& o) { o << "{\"a\": 1}"; });
  EXPECT_EQ(slurp(p), "{\"a\": 1}");
  EXPECT_EQ(files(), 1);
}

TEST_F(AtomicOutputTest, AFailingWriterKeepsTheOldFile) {
  const fs::path p = dir_ / "out.json";
  write_file_atomically(p.string(), [](std::ostream& o) { o << "old"; });
  EXPECT_THROW(write_file_atomically(p.string(),
                                     [](std::ostream& o) {
                                       o << "half of the new";
                                       throw std::runtime_error("the writer failed");
                                     }),
               std::runtime_error);
  EXPECT_EQ(slurp(p), "old");
  EXPECT_EQ(files(), 1);
}

TEST_F(AtomicOutputTest, ASymbolicLinkIsWrittenThrough) {
  const fs::path target = dir_ / "real.json", link = dir_ / "link.json";
  write_file_atomically(target.string(), [](std::ostream& o) { o << "old"; });
  fs::create_symlink(target, link);
  write_file_atomically(link.string(), [](std::ostream& o) { o << "new"; });
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link))) << "the link was replaced by a file";
  EXPECT_EQ(slurp(target), "new");
  EXPECT_EQ(files(), 2);
}

TEST_F(AtomicOutputTest, ADeviceIsWrittenDirectly) {
  if (!fs::is_character_file("/dev/null")) GTEST_SKIP() << "no /dev/null here";
  write_file_atomically("/dev/null", [](std::ostream& o) { o << "discarded"; });
  EXPECT_TRUE(fs::is_character_file("/dev/null")) << "/dev/null was replaced by a regular file";
  const AtomicOutput out("/dev/null");
  EXPECT_TRUE(out.direct());
}

TEST_F(AtomicOutputTest, AFolderIsRefused) {
  EXPECT_THAT([&] { write_file_atomically(dir_.string(), [](std::ostream& o) { o << "x"; }); },
              ::testing::ThrowsMessage<Error>(HasSubstr("it is a folder")));
  EXPECT_THAT([&] { write_file_atomically((dir_ / "missing" / "x.json").string(), [](std::ostream&) {}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("does the folder exist")));
}

// read_text_file: the bytes as they are (NUL, CR and a missing final newline kept), and errors
// naming the input, the reason and the caller's hint.
TEST_F(AtomicOutputTest, ReadTextFileReadsEveryByteOrNamesTheInput) {
  const std::string bytes = std::string("a: 1\r\nb: \0x", 11) + "\xff";
  { std::ofstream(dir_ / "in.yaml", std::ios::binary) << bytes; }
  EXPECT_EQ(read_text_file((dir_ / "in.yaml").string(), "topology YAML file"), bytes);
  EXPECT_EQ(read_text_file((dir_ / "in.yaml").string(), "topology YAML file").size(), 12u);
  EXPECT_THAT([&] { (void)read_text_file(dir_.string(), "scenario YAML file"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("' is a folder; name a scenario YAML file")));
  EXPECT_THAT(
      [&] { (void)read_text_file((dir_ / "missing.yaml").string(), "kernel profile", "check the path"); },
      ::testing::ThrowsMessage<Error>(HasSubstr("cannot read kernel profile '" + (dir_ / "missing.yaml").string() +
                                                "': No such file or directory; check the path")));
}

// A process killed by SIGTERM or SIGINT while it writes leaves the old file and no temporary.
TEST_F(AtomicOutputTest, ASignalInTheMiddleLeavesNoTemporary) {
  for (const int sig : {SIGTERM, SIGINT}) {
    const fs::path p = dir_ / "out.json";
    write_file_atomically(p.string(), [](std::ostream& o) { o << "old"; });
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      write_file_atomically(p.string(), [&](std::ostream& o) {
        o << "half of the new";
        o.flush();
        ::raise(sig);
      });
      ::_exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(slurp(p), "old") << "signal " << sig;
    EXPECT_EQ(files(), 1) << "a temporary file was left behind after signal " << sig;
  }
}

// A group of outputs (a summary and its trace): a signal after the first is finished but before
// the group is committed leaves none of them and no temporary; a signal held back during
// commit_all() arrives after every output is in place.
TEST_F(AtomicOutputTest, AGroupAppearsWholeOrNotAtAllOnASignal) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    for (const bool commit_first : {false, true}) {
      fs::remove_all(dir_);
      fs::create_directories(dir_);
      const fs::path a = dir_ / "summary.json", b = dir_ / "trace.json";
      const pid_t child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        OutputGroup group;
        write_file_atomically(a.string(), [](std::ostream& o) { o << "summary"; });
        write_file_atomically(b.string(), [&](std::ostream& o) {
          o << "trace";
          if (!commit_first) {
            o.flush();
            ::raise(sig);  // with the summary finished but not yet in place
          }
        });
        sigset_t hold;
        sigemptyset(&hold);
        sigaddset(&hold, sig);
        if (commit_first) {
          ::pthread_sigmask(SIG_BLOCK, &hold, nullptr);
          ::raise(sig);  // pending through commit_all, as one arriving during the renames would be
        }
        group.commit_all();
        ::pthread_sigmask(SIG_UNBLOCK, &hold, nullptr);  // delivered here, with the group in place
        ::_exit(3);                                      // not reached
      }
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      if (commit_first) {
        ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig;
        EXPECT_EQ(slurp(a), "summary") << "signal " << sig;
        EXPECT_EQ(slurp(b), "trace") << "signal " << sig;
        EXPECT_EQ(files(), 2) << "signal " << sig;
      } else {
        ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig;
        EXPECT_EQ(WTERMSIG(status), sig);
        EXPECT_EQ(files(), 0) << "an output or a temporary was left behind after signal " << sig;
      }
    }
  }
}

TEST_F(AtomicOutputTest, AGroupCommitsTogetherAndAnErrorRemovesWhatItKept) {
  const fs::path a = dir_ / "a.json", b = dir_ / "b.json";
  {
    OutputGroup group;
    write_file_atomically(a.string(), [](std::ostream& o) { o << "A"; });
    write_file_atomically(b.string(), [](std::ostream& o) { o << "B"; });
    EXPECT_FALSE(fs::exists(a));  // kept until the group commits
    EXPECT_EQ(files(), 2);        // the two temporaries
    group.commit_all();
  }
  EXPECT_EQ(slurp(a), "A");
  EXPECT_EQ(slurp(b), "B");
  EXPECT_EQ(files(), 2);
  try {
    OutputGroup group;
    write_file_atomically(a.string(), [](std::ostream& o) { o << "new A"; });
    write_file_atomically(b.string(), [](std::ostream& o) {
      o << "half of B";
      throw std::runtime_error("the trace failed");
    });
    group.commit_all();
    FAIL() << "expected the writer's error";
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(a), "A");  // the finished first output did not appear alone
  EXPECT_EQ(slurp(b), "B");
  EXPECT_EQ(files(), 2) << "a temporary was left behind";
}

}  // namespace
}  // namespace ranksim::sim
