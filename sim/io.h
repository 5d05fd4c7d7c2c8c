// Whole-or-nothing output files: content is written to a temporary file beside the destination
// and renamed over it only when complete, so a failure (an exception in the writer, a full disk,
// SIGINT or SIGTERM) leaves either the old file or none, never a partial one, and no temporary.
//
// The destination is what the user named, followed through symbolic links: a link is written
// through (its target replaced, the link kept). A destination that exists and is not a regular
// file (a device such as /dev/null or /dev/stdout, a FIFO) is written directly, since it cannot be
// replaced; a folder is an Error.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace ranksim::sim {

// One output being written. Not copyable; one thread.
class AtomicOutput {
 public:
  // Resolves the destination and creates the temporary file (Error naming path when it cannot).
  explicit AtomicOutput(const std::string& path);
  // Removes the temporary file unless commit() ran.
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  // Where to write: the temporary file, or the destination itself when it is not a regular file.
  const std::string& write_path() const { return write_path_; }
  // True when the destination is written directly (not a regular file: nothing to rename).
  bool direct() const { return direct_; }
  // Renames the temporary file over the destination (nothing for a direct write). Error naming
  // the path on failure, with the temporary removed.
  void commit();

 private:
  std::string path_;        // as the user named it, for messages
  std::string target_;      // the file the temporary replaces
  std::string write_path_;  // temporary, or target_ when direct
  bool direct_ = false;
  bool committed_ = false;
  int slot_ = -1;  // the signal handler's registration of the temporary
};

// Outputs that appear together. While an OutputGroup lives on this thread, AtomicOutput::commit()
// keeps its finished temporary instead of renaming it; commit_all() then renames them all with
// SIGINT, SIGTERM and SIGHUP held back, so a signal leaves every output of the group or none (a
// summary without its trace cannot happen). A group destroyed without commit_all() (an error in a
// later output, say) removes them; a signal before it removes them too. Direct writes (devices)
// cannot wait and are written at once. Groups nest: the innermost one takes the outputs.
class OutputGroup {
 public:
  OutputGroup();
  ~OutputGroup();
  OutputGroup(const OutputGroup&) = delete;
  OutputGroup& operator=(const OutputGroup&) = delete;
  // Renames every kept temporary over its destination. Error naming the first that failed (the
  // rest are still renamed or removed).
  void commit_all();

 private:
  friend class AtomicOutput;
  struct Kept {
    std::string path, target, temp;
    int slot;
  };
  std::vector<Kept> kept_;
  OutputGroup* outer_;
};

// An output file and what names it ("--json"), or an input and what it is ("the scenario").
struct NamedPath {
  std::string what, path;
};
// Refuses, before anything runs, outputs that could not all be written or would destroy
// something: two outputs on one path, an output on one of the inputs, an output in a folder that
// does not exist. Error naming the flag and the path. (Empty input paths are skipped.)
void check_output_paths(const std::vector<NamedPath>& outs, const std::vector<NamedPath>& ins);

// Calls write(stream) and commits the file. Throws ranksim::Error naming the path on any failure
// (and removes the temporary file); rethrows the writer's own exception after cleaning up.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// The whole of an input file, read as bytes. `what` names it in errors ("topology YAML file"):
// "<what> 'P' is a folder; name a <what>", "cannot read <what> 'P': <reason>" (+ hint, when given:
// what to check). Throws ranksim::Error.
std::string read_text_file(const std::string& path, const std::string& what, const std::string& hint = "");

}  // namespace ranksim::sim
