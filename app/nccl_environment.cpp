#include "app/nccl_environment.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "sim/error.h"
#include "sim/nccl_env.h"
#include "sim/text.h"

namespace ranksim::app {

namespace {

// NCCL_ALGO's single names (any case) in ranksim's spelling; "" for a name NCCL has not.
std::string ranksim_algorithm(std::string_view nccl) {
  const std::string s = sim::ascii_lower(nccl);
  if (s == "ring" || s == "tree" || s == "nvls" || s == "pat") return s;
  if (s == "nvlstree" || s == "nvls_tree") return "nvls_tree";
  if (s == "collnet" || s == "collnetdirect" || s == "collnetchain") return "collnet";
  return "";
}

// A whole number of bytes, as NCCL reads its size variables.
std::string byte_count(const char* variable, const std::string& value) {
  const bool digits =
      !value.empty() && value.size() <= 12 && value.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::strtoull(value.c_str(), nullptr, 10) == 0)
    throw Error(std::string(variable) + "='" + value +
                "' in the environment: NCCL reads a whole number of bytes above 0 (e.g. 4194304); set it so or "
                "unset it");
  return value + "B";
}

// A channel count, as NCCL reads NCCL_MIN_CTAS and NCCL_MAX_CTAS (1 to 64).
int channel_count(const char* variable, const std::string& value) {
  const bool digits = !value.empty() && value.size() <= 2 && value.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::atoi(value.c_str()) : 0;
  if (n < 1 || n > 64)
    throw Error(std::string(variable) + "='" + value +
                "' in the environment: a channel count from 1 to 64 (e.g. 24); set it so or unset it");
  return n;
}

struct Refused {
  const char* variable;
  const char* instead;
};

constexpr Refused kRefused[] = {
    {"NCCL_PAT_ENABLE", "--algo with NCCL's list syntax, e.g. --algo '^pat' for NCCL_PAT_ENABLE=0"},
    {"NCCL_COLLNET_ENABLE",
     "--algo with NCCL's list syntax, e.g. --algo '^collnetdirect,collnetchain' (or "
     "--set network.sharp=false)"},
    {"NCCL_TUNER_PLUGIN", "--set collectives.tuner=FILE (a tuner config, docs/collective-timing.md)"},
    {"NCCL_TUNER_CONFIG_FILE", "--set collectives.tuner=FILE (a tuner config, docs/collective-timing.md)"},
    {"NCCL_NCHANNELS_PER_NET_PEER",
     "the model's own count, NCCL's rule from the NICs' speed (docs/collective-timing.md)"},
    {"NCCL_NTHREADS", "the topology's constants (collectives: in the topology file)"},
    {"NCCL_LL128_NTHREADS", "the topology's constants (collectives: in the topology file)"},
    {"NCCL_THREAD_THRESHOLDS", "the topology's constants (collectives: in the topology file)"},
    {"NCCL_NET_OVERHEAD", "--set collectives.net_overhead=T (the model's own wait per network step)"},
};

}  // namespace

std::string NcclEnvironment::describe() const {
  std::string s;
  for (const std::string& g : given) s += (s.empty() ? "" : " ") + g;
  return s;
}

NcclEnvironment read_nccl_environment(const std::function<const char*(const char*)>& lookup) {
  NcclEnvironment env;
  // An empty value is no value, as NCCL's parameters take it (src/misc/param.cc).
  auto set = [&](const char* variable) -> const char* {
    const char* v = lookup(variable);
    return v && *v ? v : nullptr;
  };
  auto value = [&](const char* variable) -> const char* {
    const char* v = set(variable);
    if (v) env.given.push_back(std::string(variable) + "=" + v);
    return v;
  };
  for (const Refused& r : kRefused) {
    if (const char* v = set(r.variable))
      throw Error(std::string(r.variable) + "=" + v +
                  " is set in the environment, which ranksim's timing model does not read as NCCL does: unset it "
                  "and use " +
                  r.instead);
  }
  if (const char* v = value("NCCL_ALGO")) {
    const std::string text = v;
    with_error_prefix("NCCL_ALGO in the environment", [&] { sim::NcclAllowed().set_algorithms(text); });
    env.algorithm = sim::is_nccl_list(text) ? text : ranksim_algorithm(text);
    env.algorithm_as_set = text;
  }
  if (const char* v = value("NCCL_PROTO")) {
    const std::string text = v;
    with_error_prefix("NCCL_PROTO in the environment", [&] { sim::NcclAllowed().set_protocols(text); });
    env.protocol = text;
  }
  if (const char* v = value("NCCL_NVLS_ENABLE")) {
    const std::string text = v;
    if (text == "0")
      env.collectives.emplace_back("nvls", "false");
    else if (text != "1")
      throw Error("NCCL_NVLS_ENABLE='" + text +
                  "' in the environment: NCCL takes 0 (NVLS off) or 1; set it so or unset it");
  }
  const std::pair<const char*, const char*> sizes[] = {{"NCCL_BUFFSIZE", "buffer_size"},
                                                       {"NCCL_P2P_NET_CHUNKSIZE", "p2p_chunk_size"},
                                                       {"NCCL_NVLS_CHUNKSIZE", "nvls_chunk_size"},
                                                       {"NCCL_NVLSTREE_MAX_CHUNKSIZE", "nvls_tree_max_chunk_size"}};
  for (const auto& [variable, key] : sizes)
    if (const char* v = value(variable)) env.collectives.emplace_back(key, byte_count(variable, v));
  // NCCL_MIN_CTAS / NCCL_MAX_CTAS and the names NCCL read before them (2.17), which it still reads
  // beside them: the larger minimum and the smaller maximum count (src/graph/connect.cc).
  const char* min_ctas = value("NCCL_MIN_CTAS");
  const char* min_nch = value("NCCL_MIN_NCHANNELS");
  const char* max_ctas = value("NCCL_MAX_CTAS");
  const char* max_nch = value("NCCL_MAX_NCHANNELS");
  int lo = 0, hi = 0;
  if (min_ctas) lo = channel_count("NCCL_MIN_CTAS", min_ctas);
  if (min_nch) lo = std::max(lo, channel_count("NCCL_MIN_NCHANNELS", min_nch));
  if (max_ctas) hi = channel_count("NCCL_MAX_CTAS", max_ctas);
  if (max_nch)
    hi = hi > 0 ? std::min(hi, channel_count("NCCL_MAX_NCHANNELS", max_nch))
                : channel_count("NCCL_MAX_NCHANNELS", max_nch);
  if (lo > 0) env.collectives.emplace_back("min_channels", std::to_string(lo));
  if (hi > 0) env.collectives.emplace_back("max_channels", std::to_string(hi));
  return env;
}

NcclEnvironment read_nccl_environment() {
  return read_nccl_environment([](const char* variable) { return std::getenv(variable); });
}

void apply_nccl_environment(const NcclEnvironment& env, std::string& algorithm, const std::string& algo_option,
                            std::string& protocol, const std::string& proto_option, std::vector<std::string>& sets,
                            const std::string& prefix) {
  apply_nccl_choice(env, algorithm, algo_option, protocol, proto_option);
  apply_nccl_sets(env, sets, prefix);
}

void apply_nccl_choice(const NcclEnvironment& env, std::string& algorithm, const std::string& algo_option,
                       std::string& protocol, const std::string& proto_option) {
  auto take = [](std::string& option_value, const std::string& option, const char* variable,
                 const std::string& from_env, const std::string& raw) {
    if (from_env.empty()) return;
    if (option_value.empty() || option_value == "auto") {
      option_value = from_env;
      return;
    }
    if (sim::ascii_lower(option_value) != sim::ascii_lower(from_env))
      throw Error(std::string(variable) + " is set in the environment to '" + raw + "', but " + option + " is '" +
                  option_value + "': unset one of them");
  };
  take(algorithm, algo_option, "NCCL_ALGO", env.algorithm, env.algorithm_as_set);
  take(protocol, proto_option, "NCCL_PROTO", env.protocol, env.protocol);
}

void apply_nccl_sets(const NcclEnvironment& env, std::vector<std::string>& sets, const std::string& prefix) {
  std::vector<std::string> from_env;
  for (const auto& [key, v] : env.collectives) {
    const std::string dotted = prefix + key;
    for (const std::string& s : sets)
      if (s.rfind(dotted + "=", 0) == 0)
        throw Error("--set " + s + " and the environment's NCCL variable for " + dotted + " (" + env.describe() +
                    ") both set it: unset one of them");
    from_env.push_back(dotted + "=" + v);
  }
  sets.insert(sets.begin(), from_env.begin(), from_env.end());
}

}  // namespace ranksim::app
