#include "sim/tuner_config.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <string_view>

#include "sim/error.h"
#include "sim/io.h"
#include "sim/text.h"

namespace ranksim::sim {

namespace {

constexpr const char* kLayout =
    "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]";

struct Field {
  std::string_view text;
  int column = 1;  // 1-based, of the field's first character
};

class LineReader {
 public:
  LineReader(const std::string& source, int line) : source_(source), line_(line) {}

  [[noreturn]] void fail(const Field& f, const std::string& what) const {
    throw ConfigError(source_, line_, f.column, what);
  }

  template <size_t N>
  size_t one_of(const Field& f, const char* what, const std::array<const char*, N>& names) const {
    const std::string v = ascii_lower(f.text);
    for (size_t i = 0; i < N; ++i)
      if (v == names[i]) return i;
    std::string list;
    for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
    fail(f, std::string(what) + " '" + std::string(f.text) +
                "' is not one NCCL's tuner config names; expected one of " + list);
  }

  // A whole number in [least, most]; `extra` says what else it may be (for messages).
  int64_t integer(const Field& f, const char* what, int64_t least, int64_t most, const char* expected) const {
    int64_t v = 0;
    const char* b = f.text.data();
    const char* e = b + f.text.size();
    const auto [p, ec] = std::from_chars(b, e, v);
    if (f.text.empty() || ec != std::errc() || p != e)
      fail(f, std::string(what) + " '" + std::string(f.text) + "' is not a whole number; expected " + expected);
    if (v < least || v > most)
      fail(f, std::string(what) + " " + std::string(f.text) + " is out of range; expected " + expected);
    return v;
  }

  // -1 (any) or a count from 1.
  int count_or_any(const Field& f, const char* what) const {
    const int64_t v = integer(f, what, -1, 1 << 30, "-1 (any) or a count from 1");
    if (v == 0) fail(f, std::string(what) + " 0 matches nothing; expected -1 (any) or a count from 1");
    return static_cast<int>(v);
  }

 private:
  const std::string& source_;
  int line_;
};

}  // namespace

bool TunerRule::applies_to(const CollectiveShape& s) const {
  return ranksim_can_match && s.op == op && s.bytes >= min_bytes && s.bytes <= max_bytes &&
         (nodes < 0 || nodes == s.nodes) && (ranks < 0 || ranks == s.nranks);
}

TunerConfig parse_tuner_config(const std::string& text, const std::string& source) {
  TunerConfig config;
  config.source = source;
  int line_no = 0;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') continue;

    std::vector<Field> fields;
    size_t start = 0;
    while (true) {
      const size_t comma = line.find(',', start);
      const std::string_view raw =
          line.substr(start, comma == std::string_view::npos ? line.size() - start : comma - start);
      const std::string_view t = trim(raw);
      const size_t lead = static_cast<size_t>(t.empty() ? 0 : t.data() - raw.data());
      fields.push_back({t, static_cast<int>(start + lead) + 1});
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    const LineReader rd(config.source, line_no);
    if (fields.size() < 8 || fields.size() > 10)
      rd.fail(fields.front(), "a tuner rule has 8 to 10 comma-separated fields (" + std::string(kLayout) + "), got " +
                                  std::to_string(fields.size()));
    TunerRule r;
    r.line = line_no;
    static constexpr std::array<const char*, 5> kOps{"allreduce", "allgather", "reducescatter", "broadcast", "reduce"};
    static constexpr std::array<CollOp, 5> kOpValues{CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter,
                                                     CollOp::broadcast, CollOp::reduce};
    r.op = kOpValues[rd.one_of(fields[0], "collective_type", kOps)];
    constexpr int64_t kMost = int64_t{1} << 53;  // sizes are compared as doubles, exact to here
    const int64_t lo = rd.integer(fields[1], "min_bytes", 0, kMost, "a size in bytes from 0");
    const int64_t hi = rd.integer(fields[2], "max_bytes", 0, kMost, "a size in bytes from 0");
    if (hi < lo)
      rd.fail(fields[2], "max_bytes " + std::to_string(hi) + " is below min_bytes " + std::to_string(lo) +
                             "; the range is inclusive, min_bytes first");
    r.min_bytes = static_cast<double>(lo);
    r.max_bytes = static_cast<double>(hi);
    static constexpr std::array<const char*, 7> kAlgos{"tree",      "ring", "collnet_direct", "collnet_chain", "nvls",
                                                       "nvls_tree", "pat"};
    static constexpr std::array<CollAlgo, 7> kAlgoValues{CollAlgo::tree,    CollAlgo::ring, CollAlgo::collnet,
                                                         CollAlgo::collnet, CollAlgo::nvls, CollAlgo::nvls_tree,
                                                         CollAlgo::pat};
    r.algorithm = kAlgoValues[rd.one_of(fields[3], "algorithm", kAlgos)];
    static constexpr std::array<const char*, 3> kProtos{"ll", "ll128", "simple"};
    static constexpr std::array<Protocol, 3> kProtoValues{Protocol::ll, Protocol::ll128, Protocol::simple};
    r.protocol = kProtoValues[rd.one_of(fields[4], "protocol", kProtos)];
    const int64_t ch = rd.integer(fields[5], "channels", -1, 64, "-1 (the model's count) or 1 to 64");
    if (ch == 0) rd.fail(fields[5], "channels 0 runs nothing; expected -1 (the model's count) or 1 to 64");
    r.channels = static_cast<int>(ch);
    r.nodes = rd.count_or_any(fields[6], "nNodes");
    r.ranks = rd.count_or_any(fields[7], "nRanks");
    if (fields.size() > 8) {
      const int pipe = rd.count_or_any(fields[8], "numPipeOps");
      if (pipe > 1) r.ranksim_can_match = false;  // ranksim launches each collective alone
    }
    if (fields.size() > 9) {
      const int64_t reg = rd.integer(fields[9], "regBuff", -1, 1, "-1 (either), 0 or 1");
      if (reg == 1) r.ranksim_can_match = false;  // ranksim's buffers are not registered
    }
    config.rules.push_back(r);
  }
  return config;
}

TunerConfig load_tuner_config(const std::string& path) {
  return parse_tuner_config(
      read_text_file(path, "tuner config", "check the path (relative paths are from the topology file's folder)"),
      path);
}

}  // namespace ranksim::sim
