#include "app/nccl_tests_input.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "app/json_input.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/nccl_env.h"
#include "sim/text.h"

namespace ranksim::app {

namespace {

// A trimmed copy: the reader keeps its cells and header values as strings.
std::string trimmed(std::string_view s) { return std::string(sim::trim(s)); }

std::vector<std::string> split_ws(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) out.push_back(trimmed(cell));
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

bool is_integer(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The most ranks (and nodes) a table may state.
constexpr int kMaxRanks = 1 << 24;

// s as a whole number no larger than max, or nothing when s is not digits or is larger.
std::optional<int> bounded_integer(const std::string& s, int max) {
  int v = 0;
  if (!is_integer(s)) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

bool to_double(const std::string& s, double& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(v);
}

bool is_hostname_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// Where a message of NCCL's own (NCCL_DEBUG) starts in a line of a log, or npos: "HOST:PID:TID [DEV] ..."
// (src/debug.cc), with the "[date time] " NCCL may put first. NCCL writes to the stream nccl-tests
// prints its table to, and a message can start in the middle of a row: nccl-tests prints a row's
// size, count, type, redop and root before it runs the size, and NCCL may connect a new algorithm's
// peers (and say so) during that run. The message is then glued to the row's last column
// ("-1gcn151:1904979:1905073 [0] NCCL INFO ..."): the host is the longest known host (from the
// "Rank ... on HOST" lines) that ends the glued word, or else the word from its first letter.
size_t nccl_message_start(const std::string& s, const std::set<std::string>& hosts) {
  for (size_t colon = s.find(':'); colon != std::string::npos; colon = s.find(':', colon + 1)) {
    // ":PID:TID [" after a host name
    size_t i = colon + 1, digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
    if (digits == 0 || i >= s.size() || s[i] != ':') continue;
    size_t j = i + 1;
    digits = 0;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j, ++digits;
    if (digits == 0 || s.compare(j, 2, " [") != 0 || s.find("NCCL ", j) == std::string::npos) continue;
    size_t word = colon;
    while (word > 0 && is_hostname_char(s[word - 1])) --word;
    if (word == colon) continue;
    size_t start = word;
    if (word > 0) {  // after other text: the host may be glued to its last word
      const std::string glued = s.substr(word, colon - word);
      size_t skip = std::string::npos;
      for (const std::string& h : hosts)
        if (h.size() <= glued.size() && glued.compare(glued.size() - h.size(), h.size(), h) == 0)
          skip = std::min(skip, glued.size() - h.size());
      if (skip == std::string::npos) {
        skip = 0;
        while (skip < glued.size() && !std::isalpha(static_cast<unsigned char>(glued[skip]))) ++skip;
        if (skip == glued.size()) skip = 0;
      }
      start = word + skip;
    }
    // NCCL's timestamp, "[2025-01-31 12:00:00] ", or a launcher's rank tag ("[0] ") before the host
    if (start >= 2 && s[start - 1] == ' ' && s[start - 2] == ']') {
      const size_t open = s.rfind('[', start - 2);
      if (open != std::string::npos) start = open;
    }
    return start;
  }
  return std::string::npos;
}

// A line without the tag a launcher puts before each line of a rank's output, when it has one:
// Open MPI's --tag-output ("[1,0]<stdout>:"), MPICH's and Intel MPI's -prepend-rank ("[0] ") and
// Slurm's srun --label ("0: ").
std::string_view without_rank_tag(std::string_view s) {
  auto digits = [&](size_t from) {
    size_t i = from;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i;
  };
  if (!s.empty() && s[0] == '[') {
    size_t i = digits(1);
    if (i > 1 && i < s.size() && s[i] == ',') {  // [JOB,RANK]<stdout>:
      const size_t j = digits(i + 1);
      if (j > i + 1 && s.substr(j, 2) == "]<") {
        const size_t close = s.find(">:", j);
        if (close != std::string_view::npos) return sim::trim(s.substr(close + 2));
      }
    } else if (i > 1 && s.substr(i, 2) == "] ") {  // [RANK]
      return sim::trim(s.substr(i + 2));
    }
    return s;
  }
  const size_t i = digits(0);
  if (i > 0 && s.substr(i, 2) == ": ") return sim::trim(s.substr(i + 2));  // RANK:
  return s;
}

// NCCL's tuning message (NcclChoice in the header) in a message of NCCL's: the call's bytes, whether
// they are one rank's (2.24 on: "AllGather:" and "ReduceScatter:"), and what NCCL chose; nothing
// for another message, or for an algorithm or protocol ranksim does not know.
struct TuningMessage {
  double bytes = 0;
  bool per_rank = false;
  NcclChoice choice;
  bool operator==(const TuningMessage&) const = default;
};

std::optional<TuningMessage> tuning_message(const std::string& message) {
  const std::string arrow = " Bytes -> Algo ";
  const size_t at = message.find(arrow);
  if (at == std::string::npos) return std::nullopt;
  const std::vector<std::string> before = split_ws(message.substr(0, at)),
                                 after = split_ws(message.substr(at + arrow.size()));
  TuningMessage m;
  if (before.empty() || !is_integer(before.back()) || !to_double(before.back(), m.bytes)) return std::nullopt;
  if (after.size() < 3 || after[1] != "proto") return std::nullopt;
  // The form with the call's channels (2.24 on) counts an all_gather's and a reduce_scatter's
  // bytes for one rank; the earlier forms (with or without the function's name, 2.23 and 2.20-2.22)
  // the whole call's.
  const std::string channels = "channel{Lo..Hi}={";
  const bool with_channels =
      std::any_of(after.begin(), after.end(), [&](const std::string& w) { return w.rfind(channels, 0) == 0; });
  if (with_channels && before.size() >= 2)
    m.per_rank = before[before.size() - 2] == "AllGather:" || before[before.size() - 2] == "ReduceScatter:";
  // NCCL's numbers (src/include/nccl_common.h) and names, in any case and with or without '_'
  // (ncclAlgoToString's "NVLS_TREE", NCCL_ALGO's "NVLSTree")
  static const std::map<std::string, sim::CollAlgo> algorithms = {{"0", sim::CollAlgo::tree},
                                                                  {"1", sim::CollAlgo::ring},
                                                                  {"2", sim::CollAlgo::collnet},
                                                                  {"3", sim::CollAlgo::collnet},
                                                                  {"4", sim::CollAlgo::nvls},
                                                                  {"5", sim::CollAlgo::nvls_tree},
                                                                  {"6", sim::CollAlgo::pat},
                                                                  {"TREE", sim::CollAlgo::tree},
                                                                  {"RING", sim::CollAlgo::ring},
                                                                  {"COLLNETDIRECT", sim::CollAlgo::collnet},
                                                                  {"COLLNETCHAIN", sim::CollAlgo::collnet},
                                                                  {"NVLS", sim::CollAlgo::nvls},
                                                                  {"NVLSTREE", sim::CollAlgo::nvls_tree},
                                                                  {"PAT", sim::CollAlgo::pat}};
  static const std::map<std::string, sim::Protocol> protocols = {
      {"0", sim::Protocol::ll},  {"1", sim::Protocol::ll128},     {"2", sim::Protocol::simple},
      {"LL", sim::Protocol::ll}, {"LL128", sim::Protocol::ll128}, {"SIMPLE", sim::Protocol::simple}};
  auto key = [](const std::string& w) {
    std::string k;
    for (const char c : w)
      if (c != '_') k += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return k;
  };
  const auto a = algorithms.find(key(after[0]));
  const auto p = protocols.find(key(after[2]));
  if (a == algorithms.end() || p == protocols.end()) return std::nullopt;
  m.choice.algorithm = a->second;
  m.choice.protocol = p->second;
  // "channel{Lo..Hi}={0..7}": channels 0 to 7
  for (const std::string& w : after) {
    if (w.rfind(channels, 0) != 0 || w.back() != '}') continue;
    const std::string range = w.substr(channels.size(), w.size() - channels.size() - 1);  // "0..7"
    const size_t dots = range.find("..");
    if (dots == std::string::npos) continue;
    const std::optional<int> lo = bounded_integer(range.substr(0, dots), 1 << 16),
                             hi = bounded_integer(range.substr(dots + 2), 1 << 16);
    if (lo.has_value() && hi.has_value() && hi.value() >= lo.value()) m.choice.channels = hi.value() - lo.value() + 1;
  }
  return m;
}

// A word of the columns that follow a row's first ones: a number, or N/A (#wrong of a run without
// validation).
bool is_value(const std::string& w) {
  double v = 0;
  return w == "N/A" || to_double(w, v);
}

// nccl-tests' binary name (or ranksim's op name) to ranksim's op name; "" if unknown.
std::string op_name(std::string s) {
  s = sim::ascii_lower(trimmed(s));
  // all_reduce_perf, or with the suffix nccl-tests' Makefile adds (NAME_SUFFIX: all_reduce_perf_mpi).
  if (const auto perf = s.rfind("_perf"); perf != std::string::npos && perf > 0) s.resize(perf);
  if (s == "all_reduce" || s == "allreduce") return "all_reduce";
  if (s == "all_gather" || s == "allgather") return "all_gather";
  if (s == "reduce_scatter" || s == "reducescatter") return "reduce_scatter";
  if (s == "alltoall" || s == "all_to_all") return "all_to_all";
  if (s == "broadcast") return "broadcast";
  if (s == "reduce") return "reduce";
  return "";
}

// NCCL_ALGO's value (any case) to ranksim's algorithm name; "auto" for default.
std::string algo_name(const std::string& s) {
  const std::string v = sim::ascii_lower(trimmed(s));
  if (v == "default" || v == "auto" || v.empty()) return "auto";
  if (v == "nvlstree") return "nvls_tree";
  if (v == "collnetdirect" || v == "collnetchain") return "collnet";
  return v;
}

// What is wrong with a measured row (size in bytes, time in microseconds, and both as written),
// or "" when nothing is. Rows of size 0 are fine: the readers leave them out.
std::string row_problem(double bytes, double us, const std::string& size, const std::string& time) {
  if (bytes < 0) return "the size '" + size + "' is not a number of bytes";
  if (bytes != std::floor(bytes)) return "the size '" + size + "' is not a whole number of bytes";
  if (bytes > 0x1p50) return "the size '" + size + "' is more than 1 PiB per rank; nccl-tests sizes are bytes per rank";
  if (bytes == 0) return "";
  if (!(us > 0)) return "the time of size " + size + " is " + time + " us; a measured time must be positive";
  // A collective runs for more than a nanosecond and less than a quarter of an hour.
  if (us < 1e-3 || us > 1e9)
    return "the time of size " + size + " is " + time +
           " us; a measured time lies between 0.001 us and 1e9 us (is the column in microseconds?)";
  return "";
}

// NCCL_ALGO's or NCCL_PROTO's value as a table keeps it: a single algorithm in ranksim's name, a
// list as written. Throws ranksim::Error when NCCL would not take it.
std::string environment_setting(bool algorithm, const std::string& value) {
  if (algorithm) {
    sim::NcclAllowed().set_algorithms(value);
    return sim::is_nccl_list(value) ? value : algo_name(value);
  }
  sim::NcclAllowed().set_protocols(value);
  return value;
}

// Reads one file: the tests of a text log in order, or the one table of a CSV.
class Parser {
 public:
  explicit Parser(const std::string& path) : path_(path) { start(1); }

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw Error(path_ + ":" + std::to_string(line) + ": " + what);
  }

  // The tests read, the last one closed.
  std::vector<MeasuredTable> tests() {
    finish();
    return std::move(tests_);
  }

  void set_op(const std::string& op, int line) {
    if (!t_.op.empty() && t_.op != op)
      fail(line, "the file holds several collectives (" + t_.op + " and " + op + "); give one table per CSV file");
    t_.op = op;
  }

  // A row: its size and out-of-place time, and its in-place time when it has one ("" none; a
  // value that is not a positive number is left out, as only a comparison uses it).
  void add_row(int line, const std::string& size, const std::string& time, const std::string& in_place = "") {
    double bytes = 0, us = 0, in_us = 0;
    if (!to_double(size, bytes) || bytes < 0) fail(line, "the size '" + size + "' is not a number of bytes");
    if (!to_double(time, us)) fail(line, "the time '" + time + "' is not a number of microseconds");
    if (const std::string why = row_problem(bytes, us, size, time); !why.empty()) fail(line, why);
    if (!to_double(in_place, in_us) || in_us <= 0) in_us = 0;
    if (bytes > 0) t_.rows.push_back({bytes, us * 1e-6, in_us * 1e-6, {}});
  }

  // A `# key: value` given twice with different values: refused (which would be meant?).
  void once(const std::string& key, const std::string& value, int line) {
    const auto [it, fresh] = given_.emplace(key, std::make_pair(value, line));
    if (!fresh && it->second.first != value)
      fail(line, "'# " + key + ": " + value + "' contradicts '# " + key + ": " + it->second.first + "' on line " +
                     std::to_string(it->second.second) + "; give it once");
  }

  // "#  Rank  0 Group  0 Pid 4175036 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"
  void rank_line(const std::string& body, int line) {
    const std::vector<std::string> w = split_ws(body);
    if (w.size() < 2 || w[0] != "Rank" || !is_integer(w[1])) return;
    const std::optional<int> rank = bounded_integer(w[1], kMaxRanks - 1);
    if (!rank) {
      fail(line, "the rank number " + w[1] + " is out of range; nccl-tests numbers ranks from 0 (at most " +
                     std::to_string(kMaxRanks - 1) + " here)");
    }
    ranks_seen_.insert(*rank);
    for (size_t i = 2; i + 1 < w.size(); ++i)
      if (w[i] == "on") hosts_.insert(w[i + 1]);
    if (const auto bus = body.find(']'); bus != std::string::npos) {
      const std::string device = trimmed(body.substr(bus + 1));
      if (!device.empty()) devices_.insert(device);
    }
  }

  // A `#` line of a text log: where a test starts, what it names, its ranks.
  void header_text(const std::string& body, int line) {
    const std::string starting = "Collective test starting:", version = "nccl-tests version";
    if (const auto at = body.find(starting); at != std::string::npos) {
      // The header of a test: the one before it (rows, a name or its own header read) is done.
      if (begun()) next(line);
      if (t_.test.empty() && !saw_nthread_) t_.line = line;
      software_ = version_;
      t_.test = trimmed(body.substr(at + starting.size()));
      t_.op = op_name(t_.test);  // "" for a collective ranksim does not time: select_tests decides
      return;
    }
    const std::vector<std::string> w = split_ws(body);
    // The columns' names: how many follow the (first, out-of-place) time. Rows are read from
    // their end, since the columns before the time differ between versions and collectives (no
    // root column in older all_reduce tables, no redop in all_gather's, and an older all_to_all
    // header names a redop its rows leave out).
    if (!w.empty() && w[0] == "size") {
      if (const auto time = std::find(w.begin(), w.end(), "time"); time != w.end() && time - w.begin() >= 3)
        after_time_ = static_cast<size_t>(w.end() - time);
      return;
    }
    if (w.size() >= 4 && w[0] == "nThread" && w[2] == "nGpus") {
      // Every run prints this line once: a second one, or one after rows, starts the next test
      // (the older header has no "Collective test starting" line).
      if (saw_nthread_ || !t_.rows.empty()) next(line);
      const std::optional<int> g = bounded_integer(w[3], kMaxRanks);
      if (!g || *g < 1) fail(line, "'nGpus " + w[3] + "' must be a positive whole number");
      t_.gpus_per_thread = *g;
      if (t_.test.empty()) {
        t_.line = line;
        software_ = version_;
      }
      saw_nthread_ = true;
      return;
    }
    if (const auto at = body.find(version); at != std::string::npos) {
      version_ = trimmed(body.substr(at));  // printed before the test it belongs to
      return;
    }
    rank_line(body, line);
  }

  // NCCL's own report of NCCL_ALGO or NCCL_PROTO in a log run with NCCL_DEBUG=INFO: "host:pid:tid
  // [0] NCCL INFO NCCL_ALGO set by environment to Ring". Every rank prints it: they must agree.
  bool environment_line(const std::string& s, int line) {
    for (const char* variable : {"NCCL_ALGO", "NCCL_PROTO"}) {
      const std::string marker = std::string(variable) + " set by environment to ";
      const auto at = s.find(marker);
      if (at == std::string::npos || s.find("NCCL INFO") == std::string::npos) continue;
      std::string value = trimmed(s.substr(at + marker.size()));
      if (!value.empty() && value.back() == '.') value.pop_back();
      const bool algo = std::string(variable) == "NCCL_ALGO";
      std::string as;
      try {
        as = environment_setting(algo, value);
      } catch (const Error& e) {
        fail(line, std::string("the log's ") + variable + ": " + e.what());
      }
      std::string& field = algo ? t_.algorithm : t_.protocol;
      if (!field.empty() && field != as && field != "auto")
        fail(line,
             std::string("the log's ranks set ") + variable + " differently ('" + field + "' and '" + value + "')");
      field = as;
      return true;
    }
    return false;
  }

  // NCCL's version as it says it, in a message ("... NCCL INFO NCCL version 2.22.3+cuda12.6") or
  // on a line of its own (NCCL_DEBUG=VERSION: "NCCL version 2.16.2+cuda11.6"): the first of a test.
  void nccl_version_line(const std::string& s) {
    const std::string marker = "NCCL version ";
    const size_t at = s.find(marker);
    if (!nccl_.empty() || at == std::string::npos || (at > 0 && s.find("NCCL INFO ") == std::string::npos)) return;
    const std::vector<std::string> w = split_ws(s.substr(at + marker.size()));
    if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0][0]))) nccl_ = "NCCL " + w[0];
  }

  void parse_text(std::istream& in) {
    std::string line;
    int no = 0;
    // A row whose first columns came before a message of NCCL's (nccl_message_start): its words so
    // far and its line, until the rest of it comes.
    std::string cut;
    int cut_line = 0;
    auto unfinished = [&](const std::string& before) {
      fail(cut_line,
           "this row of the table stops where a message of NCCL's (NCCL_DEBUG) starts, and the rest of it "
           "(time, algbw, busbw, #wrong) does not follow before " +
               before + "; is the log complete?");
    };
    while (std::getline(in, line)) {
      ++no;
      std::string s(without_rank_tag(sim::trim(line)));
      if (s.empty()) continue;
      if (s[0] == '#') {
        if (!cut.empty()) unfinished("line " + std::to_string(no));
        header_text(s.substr(1), no);
        continue;
      }
      // NCCL's own messages: what they say of NCCL_ALGO and NCCL_PROTO is read, the rest skipped;
      // the text before one that starts mid-line is the start of a row.
      const size_t message = nccl_message_start(s, hosts_);
      if (message != std::string::npos) {
        const std::string said = s.substr(message);
        nccl_version_line(said);
        environment_line(said, no);
        // Every call has its message: each different one is kept once.
        if (const std::optional<TuningMessage> m = tuning_message(said);
            m && std::find(tuning_.begin(), tuning_.end(), *m) == tuning_.end())
          tuning_.push_back(*m);
        if (message == 0) continue;
        s = trimmed(s.substr(0, message));
      } else {
        nccl_version_line(s);  // the line of its own that NCCL_DEBUG=VERSION prints
        if (environment_line(s, no)) continue;
      }
      std::vector<std::string> w = split_ws(s);
      if (!cut.empty()) {
        // The rest of the row: the columns from its time on (or a part of them), numbers only.
        if (w.size() <= after_time_ && std::all_of(w.begin(), w.end(), is_value)) {
          s = cut + " " + s;
          w = split_ws(s);
          cut.clear();
        } else if (is_integer(w[0])) {
          unfinished("line " + std::to_string(no));  // a new row
        } else {
          continue;  // a log line of another kind
        }
      } else if (!is_integer(w[0])) {
        // A row of the table's shape with a negative size is an error, not a log line.
        if (w.size() >= 8 && w[0].size() > 1 && w[0][0] == '-' && is_integer(w[0].substr(1)))
          fail(no, "the size '" + w[0] + "' is not a number of bytes");
        continue;  // log lines between the table's rows
      } else {
        cut_line = no;
      }
      if (message != std::string::npos && w.size() < after_time_ + 3) {
        cut = s;  // the rest comes after NCCL's message
        continue;
      }
      if (w.size() < after_time_ + 3)
        fail(cut_line,
             "a row of the nccl-tests table needs size, count, type (redop, root), then time, algbw, busbw, #wrong "
             "out of place and in place; got " +
                 std::to_string(w.size()) + " columns");
      // The in-place time: the fifth column from the out-of-place one, in the layout whose header
      // names time, algbw, busbw and #wrong (or error) twice.
      add_row(cut_line, w[0], w[w.size() - after_time_], after_time_ == kAfterTime ? w[w.size() - 4] : "");
    }
    if (!cut.empty()) unfinished("the end of the file");
  }

  void parse_csv(std::istream& in) {
    std::string line;
    int no = 0;
    int size_col = -1, time_col = -1;
    size_t ncols = 0;
    while (std::getline(in, line)) {
      ++no;
      const std::string s = trimmed(line);
      if (s.empty()) continue;
      if (s[0] == '#') {
        const std::string body = trimmed(s.substr(1));
        const auto colon = body.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = sim::ascii_lower(trimmed(body.substr(0, colon))),
                          value = trimmed(body.substr(colon + 1));
        if (key == "op" || key == "collective test starting") {
          const std::string op = op_name(value);
          if (op.empty()) fail(no, "'# " + key + ": " + value + "' is not a collective ranksim times");
          set_op(op, no);
        } else if (key == "ranks" || key == "nodes" || key == "gpus_per_thread") {
          once(key, value, no);
          const std::optional<int> n = bounded_integer(value, kMaxRanks);
          if (!n || *n < 1) {
            fail(no, "'# " + key + ": " + value + "' must be a positive whole number (at most " +
                         std::to_string(kMaxRanks) + ")");
          }
          (key == "ranks" ? t_.ranks : key == "nodes" ? t_.nodes : t_.gpus_per_thread) = *n;
        } else if (key == "algo") {
          once(key, value, no);
          t_.algorithm = algo_name(value);
          static const std::set<std::string> known = {"auto", "ring", "tree", "nvls", "nvls_tree", "collnet", "pat"};
          if (sim::is_nccl_list(value)) {  // a list in NCCL_ALGO's syntax: kept as written
            t_.algorithm = trimmed(value);
            try {
              sim::NcclAllowed().set_algorithms(t_.algorithm);
            } catch (const Error& e) {
              fail(no, "'# algo: " + value + "': " + e.what());
            }
          } else if (known.count(t_.algorithm) == 0)
            fail(no, "'# algo: " + value + "': algorithm '" + value +
                         "' is not one of NCCL's: auto, ring, tree, nvls, nvls_tree, collnet, pat");
        } else if (key == "source" || key == "hardware") {
          t_.about.push_back(key + ": " + value);
        } else {
          rank_line(body, no);
        }
        continue;
      }
      const std::vector<std::string> cells = split_csv(s);
      if (size_col < 0) {
        for (size_t i = 0; i < cells.size(); ++i) {
          const std::string c = sim::ascii_lower(cells[i]);
          if (size_col < 0 && (c == "size_bytes" || c == "size" || c == "size(b)")) size_col = static_cast<int>(i);
          if (time_col < 0 && (c == "time_us" || c == "time" || c == "time(us)")) time_col = static_cast<int>(i);
        }
        if (size_col < 0 || time_col < 0)
          fail(no,
               "the CSV header must name a size column (size_bytes or size) and a time column in "
               "microseconds (time_us or time); got '" +
                   s + "'");
        ncols = cells.size();
        continue;
      }
      if (cells.size() < ncols)
        fail(no, "the row has " + std::to_string(cells.size()) + " cells; the header names " + std::to_string(ncols));
      add_row(no, cells[static_cast<size_t>(size_col)], cells[static_cast<size_t>(time_col)]);
    }
  }

 private:
  // Whether the test being read has anything of its own yet.
  bool begun() const { return !t_.rows.empty() || !t_.test.empty() || saw_nthread_; }

  void start(int line) {
    t_ = MeasuredTable{};
    t_.path = path_;
    t_.line = line;
    ranks_seen_.clear();
    tuning_.clear();
    hosts_.clear();
    devices_.clear();
    software_.clear();
    nccl_.clear();
    saw_nthread_ = false;
    after_time_ = kAfterTime;
  }

  // Closes the test being read: its ranks, nodes and what the log says of the machine.
  void finish() {
    if (t_.ranks == 0 && !ranks_seen_.empty()) t_.ranks = static_cast<int>(ranks_seen_.size());
    // NCCL's tuning messages to the rows of their size: per-rank bytes times the ranks.
    for (const TuningMessage& m : tuning_) {
      const double bytes = m.per_rank ? m.bytes * std::max(1, t_.ranks) : m.bytes;
      for (MeasuredRow& r : t_.rows)
        if (r.bytes == bytes && std::find(r.nccl.begin(), r.nccl.end(), m.choice) == r.nccl.end())
          r.nccl.push_back(m.choice);
    }
    if (t_.nodes == 0 && !hosts_.empty()) t_.nodes = static_cast<int>(hosts_.size());
    if (t_.about.empty() && !ranks_seen_.empty()) {
      std::string hw = "hardware: " + std::to_string(ranks_seen_.size()) + " ranks";
      if (!hosts_.empty()) hw += " on " + std::to_string(hosts_.size()) + " host(s)";
      for (const std::string& d : devices_) hw += ", " + d;
      t_.about.push_back(hw);
      std::string software = software_;
      if (!nccl_.empty()) software += (software.empty() ? "" : ", ") + nccl_;
      if (!software.empty()) t_.about.push_back("software: " + software);
    }
    tests_.push_back(std::move(t_));
  }

  void next(int line) {
    finish();
    start(line);
  }

  std::string path_;
  MeasuredTable t_;
  std::vector<MeasuredTable> tests_;
  std::set<int> ranks_seen_;
  std::vector<TuningMessage> tuning_;  // the different NCCL tuning messages of the test being read
  std::set<std::string> hosts_, devices_;
  std::string version_;   // the last "nccl-tests version ..." line read
  std::string software_;  // the one of the test being read
  std::string nccl_;      // "NCCL 2.22.3+cuda12.6", as NCCL said its version during the test; "" not said
  bool saw_nthread_ = false;
  // Columns from the out-of-place time to the row's end: time, algbw, busbw, #wrong, out of place
  // and in place, unless the table's header says otherwise.
  static constexpr size_t kAfterTime = 8;
  size_t after_time_ = kAfterTime;
  std::map<std::string, std::pair<std::string, int>> given_;  // `# key:` -> (value, line)
};

// NCCL's version code as it prints it: 22304 -> "2.23.4" (2.9 and later: major * 10000 + minor *
// 100 + patch; before: major * 1000 + minor * 100 + patch).
std::string nccl_version_name(long long code) {
  const long long major = code >= 10000 ? code / 10000 : code / 1000;
  const long long minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// The JSON file nccl-tests (2.17 and later) writes with -J FILE.json: one test. Its collective is
// the binary its "args" start with, its ranks the processes in "config.devices" (one entry each,
// for the first of its GPUs) times the GPUs each drives ("nthreads" x "ngpus"), its nodes their
// distinct hosts, NCCL_ALGO and NCCL_PROTO the values its "env" lists, and each row of "results" a
// size and its out-of-place time (the in-place one where a run has none).
MeasuredTable parse_json(const std::string& text, const std::string& path) {
  const std::string what = "nccl-tests' JSON output (all_reduce_perf -J FILE.json)";
  const nlohmann::json root = parse_json_strictly(text, path, "", what);
  if (!root.is_object() || !root.contains("results")) {
    throw Error(path + ": it is JSON, but not " + what + ": it has no \"results\" list");
  }
  const auto bad = [&](const std::string& where, const std::string& want, const nlohmann::json& got) {
    throw Error(path + ": " + where + " must be " + want + ", got " + shown_json(got) + "; is it " + what + "?");
  };
  const auto count = [&](const nlohmann::json& n, const char* key, const std::string& where) {
    const nlohmann::json& v = n.at(key);
    if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > kMaxRanks)
      bad(where + key, "a whole number from 1 to " + std::to_string(kMaxRanks), v);
    return static_cast<int>(v.get<long long>());
  };
  MeasuredTable t;
  t.path = path;
  t.line = 1;
  if (root.contains("args")) {  // the command line: the binary first
    const nlohmann::json& args = root["args"];
    if (!args.is_array() || args.empty() || !args[0].is_string())
      bad("args", "the command line, a list of strings", args);
    const std::string binary = args[0].get<std::string>();
    t.test = binary.substr(binary.find_last_of('/') == std::string::npos ? 0 : binary.find_last_of('/') + 1);
    t.op = op_name(t.test);  // "" for a collective ranksim does not time: select_tests decides
  }
  std::set<std::string> hosts, gpus;
  if (root.contains("config")) {
    const nlohmann::json& config = root["config"];
    if (!config.is_object()) bad("config", "an object", config);
    if (config.contains("ngpus")) t.gpus_per_thread = count(config, "ngpus", "config.");
    // Each factor is at most kMaxRanks: no overflow.
    const long long per_process = static_cast<long long>(t.gpus_per_thread) *
                                  (config.contains("nthreads") ? count(config, "nthreads", "config.") : 1);
    if (config.contains("devices")) {
      const nlohmann::json& devices = config["devices"];
      if (!devices.is_array() || devices.empty()) bad("config.devices", "a list of the processes' devices", devices);
      for (size_t i = 0; i < devices.size(); ++i) {
        const std::string where = "config.devices[" + std::to_string(i) + "].";
        const nlohmann::json& d = devices[i];
        if (!d.is_object()) bad(where.substr(0, where.size() - 1), "an object", d);
        for (const char* key : {"hostname", "device_info"}) {
          if (!d.contains(key)) continue;
          if (!d[key].is_string()) bad(where + key, "a string", d[key]);
          (std::string(key) == "hostname" ? hosts : gpus).insert(trimmed(d[key].get<std::string>()));
        }
      }
      if (per_process > kMaxRanks || static_cast<long long>(devices.size()) > kMaxRanks / per_process)
        throw Error(path + ": config.devices lists " + std::to_string(devices.size()) + " processes of " +
                    std::to_string(per_process) + " GPUs each, more than " + std::to_string(kMaxRanks) + " ranks");
      t.ranks = static_cast<int>(static_cast<long long>(devices.size()) * per_process);
      if (!hosts.empty()) t.nodes = static_cast<int>(hosts.size());
    }
  }
  if (root.contains("env")) {  // the environment of the process that wrote the file
    const nlohmann::json& env = root["env"];
    if (!env.is_array()) bad("env", "a list of NAME=VALUE strings", env);
    for (size_t i = 0; i < env.size(); ++i) {
      if (!env[i].is_string()) bad("env[" + std::to_string(i) + "]", "a NAME=VALUE string", env[i]);
      const std::string e = env[i].get<std::string>();
      for (const char* variable : {"NCCL_ALGO", "NCCL_PROTO"}) {
        const std::string prefix = std::string(variable) + "=";
        if (e.compare(0, prefix.size(), prefix) != 0) continue;
        const bool algo = std::string(variable) == "NCCL_ALGO";
        try {
          (algo ? t.algorithm : t.protocol) = environment_setting(algo, e.substr(prefix.size()));
        } catch (const Error& err) {
          throw Error(path + ": env[" + std::to_string(i) + "], " + e + ": " + err.what());
        }
      }
    }
  }
  std::string hardware = "hardware: ";
  hardware += t.ranks > 0 ? std::to_string(t.ranks) + " ranks" : "ranks not stated";
  if (!hosts.empty()) hardware += " on " + std::to_string(hosts.size()) + " host(s)";
  for (const std::string& g : gpus) hardware += ", " + g;
  t.about.push_back(hardware);
  std::string software = "software: nccl-tests JSON output";
  if (root.contains("nccl_version")) {
    const nlohmann::json& v = root["nccl_version"];
    if (!v.is_number_integer() || v.get<long long>() < 1000 || v.get<long long>() > 999999)
      bad("nccl_version", "NCCL's version code (22304 for 2.23.4)", v);
    software += ", NCCL " + nccl_version_name(v.get<long long>());
  }
  if (root.contains("start_time") && root["start_time"].is_string())
    software += ", run at " + root["start_time"].get<std::string>();
  t.about.push_back(software);

  const nlohmann::json& results = root["results"];
  if (!results.is_array()) bad("results", "a list of the measured sizes", results);
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string where = "results[" + std::to_string(i) + "]";
    const nlohmann::json& r = results[i];
    if (!r.is_object()) bad(where, "an object", r);
    if (!r.contains("size")) throw Error(path + ": " + where + " has no \"size\"; is it " + what + "?");
    const nlohmann::json& size = r["size"];
    if (!size.is_number_integer() || size.get<long long>() < 0) bad(where + ".size", "a number of bytes", size);
    // The out-of-place time, as the text table's first time column; runs that time only the
    // in-place call (nccl-tests' trace replay) write null there.
    const char* placement = r.contains("out_of_place") && !r["out_of_place"].is_null() ? "out_of_place" : "in_place";
    if (!r.contains(placement) || !r[placement].is_object()) {
      throw Error(path + ": " + where +
                  " has no out-of-place or in-place time (\"out_of_place\": {\"time\": ...}); is it " + what + "?");
    }
    const nlohmann::json& timed = r[placement];
    // -C 1 reports the host's time of a call as "cpu_time".
    const char* key = timed.contains("time") ? "time" : "cpu_time";
    const std::string at = where + "." + placement + "." + key;
    if (!timed.contains(key))
      throw Error(path + ": " + where + "." + placement + " has no \"time\"; is it " + what + "?");
    const nlohmann::json& time = timed[key];
    if (!time.is_number()) bad(at, "a number of microseconds", time);
    const double bytes = static_cast<double>(size.get<long long>()), us = time.get<double>();
    if (const std::string why = row_problem(bytes, us, size.dump(), time.dump()); !why.empty())
      throw Error(path + ": " + where + ": " + why);
    double in_us = 0;  // the in-place time beside an out-of-place one
    if (std::string(placement) == "out_of_place" && r.contains("in_place") && r["in_place"].is_object() &&
        r["in_place"].contains(key) && r["in_place"][key].is_number())
      in_us = std::max(0.0, r["in_place"][key].get<double>());
    if (bytes > 0) t.rows.push_back({bytes, us * 1e-6, in_us * 1e-6, {}});
  }
  return t;
}

// The tests as the caller's messages name them.
std::string list_tests(const std::vector<MeasuredTable>& tests) {
  std::string out;
  for (const MeasuredTable& t : tests) {
    if (!out.empty()) out += ", ";
    out += (!t.test.empty() ? t.test
            : !t.op.empty() ? t.op
                            : std::string("an unnamed test")) +
           " at line " + std::to_string(t.line);
  }
  return out;
}

}  // namespace

std::vector<MeasuredTable> parse_nccl_tests_log(const std::string& text, const std::string& path) {
  // CSV when a line that is not a comment, nor a line of NCCL's own log (NCCL_DEBUG=INFO prints
  // lists such as "NCCL_IB_HCA set by environment to mlx5_0:1,mlx5_1:1"), holds a comma (after a
  // launcher's tag, which may hold one: "[1,0]<stdout>:").
  if (const auto first = text.find_first_not_of(" \t\r\n"); first != std::string::npos && text[first] == '{')
    return {parse_json(text, path)};
  bool csv = false;
  {
    std::istringstream probe(text);
    for (std::string line; std::getline(probe, line);) {
      const std::string s(without_rank_tag(sim::trim(line)));
      if (s.empty() || s[0] == '#' || s.find("NCCL INFO") != std::string::npos ||
          s.find("NCCL WARN") != std::string::npos)
        continue;
      csv = s.find(',') != std::string::npos;
      if (csv || is_integer(split_ws(s)[0])) break;
    }
  }
  Parser parser(path);
  std::istringstream in(text);
  if (csv)
    parser.parse_csv(in);
  else
    parser.parse_text(in);
  std::vector<MeasuredTable> tests = parser.tests();
  if (tests.size() > 1)
    for (MeasuredTable& t : tests)
      t.path = path + ":" + std::to_string(t.line) + " (" + (t.test.empty() ? "unnamed test" : t.test) + ")";
  return tests;
}

std::vector<MeasuredTable> read_nccl_tests_log(const std::string& path) {
  return parse_nccl_tests_log(sim::read_text_file(path, "nccl-tests output"), path);
}

std::vector<MeasuredTable> select_tests(std::vector<MeasuredTable> tests, const std::string& op,
                                        const std::string& path, std::vector<std::string>* left_out) {
  const bool several = tests.size() > 1;
  const std::string pick = several ? "; give --op to take one collective's tests from the file" : "";
  const std::string all = list_tests(tests);
  std::vector<MeasuredTable> out;
  for (MeasuredTable& t : tests) {
    const std::string at = several ? t.path : path + ":" + std::to_string(t.line);
    if (several && t.test.empty())
      throw Error(at + ": the test's header does not name its collective (an older nccl-tests); give each test " +
                  "of such a log in a file of its own, with --op");
    const bool timed = !t.op.empty() || t.test.empty();
    if (!op.empty() && (!timed || (!t.op.empty() && t.op != op))) continue;  // not asked for
    if (!timed) {
      const std::string why = "collective test '" + t.test +
                              "' is not one ranksim times (all_reduce, all_gather, reduce_scatter, alltoall, "
                              "broadcast, reduce)";
      if (!left_out || !several) throw Error(at + ": " + why + pick);
      left_out->push_back(at + ": " + why);
      continue;
    }
    if (t.rows.empty()) {
      if (!several)
        throw Error(path +
                    ": no measurements found; expected the table that nccl-tests' *_perf binaries print "
                    "(size, count, type, redop, root, time, ...) or a CSV with size and time columns");
      throw Error(at + ": the test printed no measurements (did it fail?)" + pick);
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) {
    throw Error(path + ": " +
                (several ? "none of its tests is " + op + " (--op): it holds " + all
                         : "the table is " + all + ", not " + op + " (--op)"));
  }
  return out;
}

MeasuredTable parse_nccl_tests(const std::string& text, const std::string& path) {
  std::vector<MeasuredTable> tests = select_tests(parse_nccl_tests_log(text, path), "", path);
  if (tests.size() != 1)
    throw Error(path + ": the file holds " + std::to_string(tests.size()) + " tests (" + list_tests(tests) +
                "); one was expected");
  return std::move(tests.front());
}

MeasuredTable read_nccl_tests(const std::string& path) {
  return parse_nccl_tests(sim::read_text_file(path, "nccl-tests output"), path);
}

}  // namespace ranksim::app
