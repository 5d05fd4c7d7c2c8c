#include "app/data_dir.h"

#include <filesystem>
#include <system_error>

namespace ranksim::app {

std::string shipped_data_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path().parent_path() / "share" / "ranksim";
    if (fs::is_directory(dir / "topologies", ec)) return dir.string();
  }
  return ".";
}

}  // namespace ranksim::app
