// Fuzz target: the safetensors reader (runtime/tensor/safetensors.h). The reader takes a path
// (it checks the file's size and type, then reads the header and each tensor's bytes where they
// lie), so each input is written to one temporary file of this process first, removed at exit.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_input.h"
#include "runtime/tensor/safetensors.h"

namespace {

class TempFile {
 public:
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/ranksim-fuzz-XXXXXX.safetensors";
    const int fd = ::mkstemps(path_.data(), 12);
    if (fd < 0) throw std::runtime_error("safetensors_fuzz: cannot create a temporary file " + path_);
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's content with data.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("safetensors_fuzz: cannot open " + path_);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t put = ::write(fd, data + done, size - done);
      if (put <= 0) {
        ::close(fd);
        throw std::runtime_error("safetensors_fuzz: cannot write " + path_);
      }
      done += static_cast<std::size_t>(put);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static TempFile file;
  const std::string& path = file.write(data, size);
  ranksim::fuzz::refuse_cleanly([&] { ranksim::runtime::load_safetensors(path); });
  return 0;
}
