#include "sim/nccl_env.h"

#include <functional>
#include <vector>

#include "sim/error.h"
#include "sim/text.h"

namespace ranksim::sim {

namespace {

constexpr uint8_t kAllAlgos = 0x7f;   // every CollAlgo bit (direct's too: it is never an NCCL choice)
constexpr uint8_t kAllProtos = 0x07;  // LL, LL128, Simple

uint8_t bit(CollAlgo a) { return static_cast<uint8_t>(1u << static_cast<unsigned>(a)); }
uint8_t bit(Protocol p) { return static_cast<uint8_t>(1u << static_cast<unsigned>(p)); }

// NCCL's function index of a collective, or -1 for the point-to-point ones.
int function_of(CollOp op) {
  switch (op) {
    case CollOp::broadcast:
      return 0;
    case CollOp::reduce:
      return 1;
    case CollOp::all_gather:
      return 2;
    case CollOp::reduce_scatter:
      return 3;
    case CollOp::all_reduce:
      return 4;
    default:
      return -1;
  }
}

int function_named(const std::string& s) {
  if (s == "broadcast") return 0;
  if (s == "reduce") return 1;
  if (s == "allgather" || s == "all_gather") return 2;
  if (s == "reducescatter" || s == "reduce_scatter") return 3;
  if (s == "allreduce" || s == "all_reduce") return 4;
  return -1;
}

std::string trimmed(std::string_view s) { return std::string(trim(s)); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// NCCL's parseList: `value` onto per-function masks (and the point-to-point mask, set by an
// entry without a function). `element` maps a lower-case name to its bit, 0 if unknown.
void parse_list(std::string_view value, const char* variable, const char* names,
                const std::function<uint8_t(const std::string&)>& element, uint8_t all, std::array<uint8_t, 5>& masks,
                uint8_t* p2p) {
  const std::string text(value);
  auto fail = [&](const std::string& what) {
    throw Error(std::string(variable) + "=\"" + text + "\": " + what +
                " (NCCL's syntax: names separated by commas, `^` first to exclude them; since NCCL 2.24 also "
                "`;function:names` entries)");
  };
  const std::vector<std::string> entries = split(text, ';');
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& entry = entries[i];
    const size_t colon = entry.find(':');
    std::string function, list;
    if (colon == std::string::npos) {
      if (i > 0)
        fail("entry '" + trimmed(entry) + "' names no function; every entry after the first must (allreduce:...)");
      list = trimmed(entry);
    } else {
      function = ascii_lower(trimmed(entry.substr(0, colon)));
      list = trimmed(entry.substr(colon + 1));
    }
    int f = -1;
    if (colon != std::string::npos) {
      f = function_named(function);
      if (f < 0)
        fail("unknown function '" + function + "': expected broadcast, reduce, allgather, reducescatter or allreduce");
    }
    const bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list = trimmed(list.substr(1));
    if (list.empty()) fail("an empty list" + (function.empty() ? std::string() : " for " + function));
    uint8_t named = 0;
    for (const std::string& raw : split(list, ',')) {
      const std::string name = ascii_lower(trimmed(raw));
      const uint8_t b = element(name);
      if (b == 0) fail("unknown name '" + trimmed(raw) + "': expected " + names);
      named |= b;
    }
    const uint8_t mask = exclude ? static_cast<uint8_t>(all & ~named) : named;
    if (f >= 0) {
      masks[static_cast<size_t>(f)] = mask;
    } else {
      masks.fill(mask);
      if (p2p) *p2p = mask;
    }
  }
}

uint8_t algorithm_bits(const std::string& s) {
  if (s == "ring") return bit(CollAlgo::ring);
  if (s == "tree") return bit(CollAlgo::tree);
  if (s == "nvls") return bit(CollAlgo::nvls);
  if (s == "nvlstree" || s == "nvls_tree") return bit(CollAlgo::nvls_tree);
  if (s == "pat") return bit(CollAlgo::pat);
  if (s == "collnetdirect" || s == "collnetchain" || s == "collnet" || s == "collnet_direct" || s == "collnet_chain")
    return bit(CollAlgo::collnet);
  return 0;
}

uint8_t protocol_bits(const std::string& s) {
  if (s == "ll") return bit(Protocol::ll);
  if (s == "ll128") return bit(Protocol::ll128);
  if (s == "simple") return bit(Protocol::simple);
  return 0;
}

std::string joined(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + " " + b; }

}  // namespace

bool is_nccl_list(std::string_view value) { return value.find_first_of(",^;:") != std::string_view::npos; }

NcclAllowed::NcclAllowed() {
  algos_.fill(kAllAlgos);
  protos_.fill(kAllProtos);
  p2p_protos_ = kAllProtos;
}

void NcclAllowed::set_algorithms(std::string_view value) {
  parse_list(value, "NCCL_ALGO", "ring, tree, nvls, nvlstree, pat, collnetdirect, collnetchain", algorithm_bits,
             kAllAlgos, algos_, nullptr);
  algo_text_ = joined(algo_text_, "NCCL_ALGO=" + std::string(value));
}

void NcclAllowed::set_protocols(std::string_view value) {
  parse_list(value, "NCCL_PROTO", "LL, LL128, Simple", protocol_bits, kAllProtos, protos_, &p2p_protos_);
  proto_text_ = joined(proto_text_, "NCCL_PROTO=" + std::string(value));
}

void NcclAllowed::only(CollAlgo a) {
  for (uint8_t& m : algos_) m &= bit(a);
  algo_text_ = joined(algo_text_, std::string("NCCL_ALGO=") + to_string(a));
}

void NcclAllowed::only(Protocol p) {
  for (uint8_t& m : protos_) m &= bit(p);
  p2p_protos_ &= bit(p);
  proto_text_ = joined(proto_text_, std::string("NCCL_PROTO=") + to_string(p));
}

bool NcclAllowed::allows(CollOp op, CollAlgo a, Protocol p) const {
  const int f = function_of(op);
  if (f < 0) return (p2p_protos_ & bit(p)) != 0;  // NCCL_ALGO does not govern point-to-point
  return (algos_[static_cast<size_t>(f)] & bit(a)) != 0 && (protos_[static_cast<size_t>(f)] & bit(p)) != 0;
}

std::optional<CollAlgo> NcclAllowed::single_algorithm(CollOp op) const {
  const int f = function_of(op);
  if (f < 0) return std::nullopt;
  const uint8_t m = static_cast<uint8_t>(algos_[static_cast<size_t>(f)] & ~bit(CollAlgo::direct));
  if (m == 0 || (m & (m - 1)) != 0) return std::nullopt;
  for (int a = 0; a <= static_cast<int>(CollAlgo::direct); ++a)
    if (m == bit(static_cast<CollAlgo>(a))) return static_cast<CollAlgo>(a);
  return std::nullopt;
}

std::string NcclAllowed::describe() const { return joined(algo_text_, proto_text_); }

namespace {

// `value` rebuilt entry by entry with each function and name as `spell` writes it.
std::string respelled(std::string_view value, const std::function<std::string(const std::string&)>& spell) {
  std::string out;
  const std::vector<std::string> entries = split(std::string(value), ';');
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string list = entries[i];
    if (i > 0) out += ";";
    const size_t colon = list.find(':');
    if (colon != std::string::npos) {
      std::string function = ascii_lower(trimmed(list.substr(0, colon)));
      if (function == "all_gather") function = "allgather";
      if (function == "reduce_scatter") function = "reducescatter";
      if (function == "all_reduce") function = "allreduce";
      out += function + ":";
      list = list.substr(colon + 1);
    }
    list = trimmed(list);
    if (!list.empty() && list[0] == '^') {
      out += "^";
      list = trimmed(list.substr(1));
    }
    const std::vector<std::string> names = split(list, ',');
    for (size_t k = 0; k < names.size(); ++k) out += (k > 0 ? "," : "") + spell(trimmed(names[k]));
  }
  return out;
}

}  // namespace

std::string nccl_algo_value(std::string_view value) {
  NcclAllowed().set_algorithms(value);
  return respelled(value, [](const std::string& name) -> std::string {
    const std::string n = ascii_lower(name);
    if (n == "nvls_tree") return "nvlstree";
    if (n == "collnet") return "collnetdirect,collnetchain";
    if (n == "collnet_direct") return "collnetdirect";
    if (n == "collnet_chain") return "collnetchain";
    return n;
  });
}

std::string nccl_proto_value(std::string_view value) {
  NcclAllowed().set_protocols(value);
  return respelled(value, [](const std::string& name) { return name; });
}

}  // namespace ranksim::sim
