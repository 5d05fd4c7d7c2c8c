// safetensors: reading and writing the Hugging Face tensor file format.
//
// Layout: an 8-byte little-endian header length n, n bytes of JSON, then the data. The JSON maps
// each tensor name to {"dtype": "F32"|"F64"|"BF16"|"F16"|"I64"|"I32", "shape": [...],
// "data_offsets": [begin, end]} (byte offsets into the data section), plus an optional
// "__metadata__" map of strings to strings. Names, dtypes and metadata are kept as written.
//
// Writing: tensors are stored in the order given, each contiguous and little-endian, the header
// padded with spaces so the data starts 8-byte aligned (as the reference writer does). The file is
// written whole or not at all: a temporary file in the same directory, flushed, then renamed over
// path; on failure the temporary is removed and any previous file at path is left untouched.
//
// Reading validates the whole header before trusting it. A file that is truncated, not JSON, uses
// another dtype, has offsets out of range, overlapping, leaving gaps or not covering the data, a
// shape whose size disagrees with its byte range, or a name twice, is a ranksim::Error whose
// message starts with "safetensors file '<path>': " and names the problem -- never a crash.
// REQUIRES: a little-endian host (checked at compile time).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ranksim::runtime {

struct SafetensorsFile {
  std::string path;
  // In the order of their data in the file (for files ranksim writes: the order they were given).
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // REQUIRES: contains(name); else an Error naming the file and the tensor.
  const Tensor& at(const std::string& name) const;
};

// REQUIRES: every tensor has data; names are distinct and not "__metadata__".
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

SafetensorsFile load_safetensors(const std::string& path);

}  // namespace ranksim::runtime
