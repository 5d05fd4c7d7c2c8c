#include "sim/io.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/error.h"

namespace ranksim::sim {

namespace {

namespace fs = std::filesystem;

// Temporary files in flight, for the signal handler: fixed slots of fixed size, so the handler
// touches only plain memory and calls only unlink (async-signal-safe).
constexpr int kSlots = 16;
constexpr std::size_t kPathMax = 4096;
std::array<std::atomic<bool>, kSlots> g_used{};
std::array<std::array<char, kPathMax>, kSlots> g_paths{};
std::atomic<bool> g_handlers_installed{false};

void remove_temporaries_and_reraise(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_used[static_cast<std::size_t>(i)].load()) ::unlink(g_paths[static_cast<std::size_t>(i)].data());
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Installs the handler for SIGINT, SIGTERM and SIGHUP where the program left the default action
// (a program with its own handler keeps it).
void install_handlers() {
  if (g_handlers_installed.exchange(true)) return;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_reraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

int register_temporary(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  install_handlers();
  for (int i = 0; i < kSlots; ++i) {
    auto& used = g_used[static_cast<std::size_t>(i)];
    bool expected = false;
    if (!used.load() && used.compare_exchange_strong(expected, true)) {
      // The slot is marked used before its path is complete: a signal in between unlinks a
      // stale or empty name, which is harmless. Write the path, then publish it again.
      used.store(false);
      std::memcpy(g_paths[static_cast<std::size_t>(i)].data(), path.c_str(), path.size() + 1);
      used.store(true);
      return i;
    }
  }
  return -1;  // more outputs in flight than slots: still written whole, only not cleaned on a signal
}

void unregister_temporary(int slot) {
  if (slot >= 0) g_used[static_cast<std::size_t>(slot)].store(false);
}

std::string errno_text() { return std::strerror(errno); }

thread_local OutputGroup* t_group = nullptr;

}  // namespace

OutputGroup::OutputGroup() : outer_(t_group) { t_group = this; }

OutputGroup::~OutputGroup() {
  for (const Kept& k : kept_) {
    ::unlink(k.temp.c_str());
    unregister_temporary(k.slot);
  }
  t_group = outer_;
}

void OutputGroup::commit_all() {
  sigset_t hold, old;
  sigemptyset(&hold);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&hold, sig);
  ::pthread_sigmask(SIG_BLOCK, &hold, &old);
  std::string failed;
  for (const Kept& k : kept_) {
    if (::rename(k.temp.c_str(), k.target.c_str()) != 0) {
      if (failed.empty()) failed = "cannot write '" + k.path + "': rename failed: " + errno_text();
      ::unlink(k.temp.c_str());
    }
    unregister_temporary(k.slot);
  }
  kept_.clear();
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);  // a signal held back is delivered now
  if (!failed.empty()) throw Error(failed);
}

AtomicOutput::AtomicOutput(const std::string& path) : path_(path), target_(path) {
  if (path.empty()) throw Error("an output file needs a path");
  std::error_code ec;
  // Follow symbolic links: the link stays, its target is replaced.
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    const fs::path resolved = fs::weakly_canonical(path, ec);
    if (ec) throw Error("cannot write '" + path + "': cannot follow the symbolic link (" + ec.message() + ")");
    target_ = resolved.string();
  }
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error("cannot write '" + path + "': it is a folder; name a file");
    if (!S_ISREG(st.st_mode)) {
      // A device, FIFO or socket cannot be replaced by a file: write to it.
      direct_ = true;
      write_path_ = target_;
      return;
    }
  }
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string tmp = target_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      write_path_ = tmp;
      slot_ = register_temporary(tmp);
      return;
    }
    if (errno != EEXIST) break;
  }
  throw Error("cannot write '" + path + "': " + errno_text() + " (does the folder exist and is it writable?)");
}

AtomicOutput::~AtomicOutput() {
  if (!direct_ && !committed_ && !write_path_.empty()) ::unlink(write_path_.c_str());
  unregister_temporary(slot_);
}

void AtomicOutput::commit() {
  if (direct_ || committed_) {
    committed_ = true;
    return;
  }
  if (t_group != nullptr) {  // renamed with the rest of its group (OutputGroup::commit_all)
    t_group->kept_.push_back(OutputGroup::Kept{path_, target_, write_path_, slot_});
    slot_ = -1;
    committed_ = true;
    return;
  }
  if (::rename(write_path_.c_str(), target_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(write_path_.c_str());
    unregister_temporary(slot_);
    slot_ = -1;
    committed_ = true;  // nothing left to remove
    throw Error("cannot write '" + path_ + "': rename failed: " + why);
  }
  committed_ = true;
  unregister_temporary(slot_);
  slot_ = -1;
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  AtomicOutput file(path);
  {
    std::ofstream out(file.write_path(), std::ios::binary | std::ios::trunc);
    if (!out) {
      throw Error("cannot write '" + path + "': " + errno_text() + " (does the folder exist and is it writable?)");
    }
    write(out);  // an exception leaves the temporary to ~AtomicOutput
    out.flush();
    if (!out) throw Error("cannot write '" + path + "': write failed (disk full?)");
  }
  file.commit();
}

std::string read_text_file(const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(what + " '" + path + "' is a folder; name a " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot read " + what + " '" + path + "': " + std::strerror(errno) + (hint.empty() ? "" : "; " + hint));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + what + " '" + path + "': a read failed");
  return text.str();
}

void check_output_paths(const std::vector<NamedPath>& outs, const std::vector<NamedPath>& ins) {
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
    return ea || eb ? a == b : ca == cb;
  };
  for (std::size_t i = 0; i < outs.size(); ++i) {
    for (std::size_t j = i + 1; j < outs.size(); ++j) {
      if (same(outs[i].path, outs[j].path)) {
        throw Error(outs[i].what + " and " + outs[j].what + " both name '" + outs[i].path +
                    "': one output would replace the other; give each its own file");
      }
    }
    for (const NamedPath& in : ins) {
      if (!in.path.empty() && same(outs[i].path, in.path)) {
        throw Error(outs[i].what + " '" + outs[i].path + "' is " + in.what +
                    ", which the run reads: writing it would destroy the input; choose another file");
      }
    }
    std::error_code ec;
    const fs::path parent = fs::absolute(outs[i].path, ec).parent_path();
    if (!ec && !fs::is_directory(parent, ec)) {
      throw Error(outs[i].what + " '" + outs[i].path + "': the folder '" + parent.string() +
                  "' does not exist; create it first");
    }
  }
}

}  // namespace ranksim::sim
