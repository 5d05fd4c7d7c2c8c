// Whole-or-nothing output files: content is written to a temporary file in the destination's
// directory and renamed over the destination only when complete, so a failure (an exception in
// the writer, a full disk) leaves either the old file or none, never a partial one.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace ranksim::sim {

// Calls write(stream) and commits the file. Throws ranksim::Error naming the path on any failure
// (and removes the temporary file); rethrows the writer's own exception after cleaning up.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace ranksim::sim
