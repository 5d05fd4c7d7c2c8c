// Reading one JSON document strictly, for the commands that take JSON files: `compare` (ranksim's
// run summaries) and `calibrate` (nccl-tests' -J output). nlohmann's parser alone would keep the
// last of a key given twice in one object, and report a number beyond a double without saying
// where it is; both are errors here, naming the file, the line and column, and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ranksim::app {

// Parses `text`, read from `path`. Every message starts with `prefix` ("compare: ", or "" for a
// command whose messages start with the path) and says what the file was expected to be (`what`,
// such as "a run summary"). Throws ranksim::Error.
nlohmann::json parse_json_strictly(const std::string& text, const std::string& path, const std::string& prefix,
                                   const std::string& what);

// A value as a message shows it: as written when it is a scalar or a short flat list or object,
// else by its kind and size (dump() recurses once per level: a list nested 100,000 deep would
// overflow the stack).
std::string shown_json(const nlohmann::json& v);

}  // namespace ranksim::app
