#include "tp/checkpoint.h"

#include <exception>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/safetensors.h"
#include "sim/error.h"

namespace ranksim::tp {

using runtime::Tensor;

namespace {

// Every check depends only on what every member holds alike (names, shapes, whether data and
// gradients exist), so every member throws the same Error before any collective starts.
void validate(const char* who, const NamedParameters& params, const runtime::ProcessGroup& tp,
              const ConsolidateOptions& o) {
  if (o.writer < 0 || o.writer >= tp.size()) {
    throw Error(std::string(who) + ": writer " + std::to_string(o.writer) + " is not a rank of the group of " +
                std::to_string(tp.size()));
  }
  std::set<std::string> names;
  for (const auto& [name, param] : params) {
    if (name.empty() || name == "__metadata__") {
      throw Error(std::string(who) + ": '" + name + "' cannot name a tensor");
    }
    if (!names.insert(name).second) {
      throw Error(std::string(who) + ": the name '" + name + "' is given twice");
    }
    if (param == nullptr) throw Error(std::string(who) + ": parameter '" + name + "' is null");
    const Tensor& t = o.gradients ? param->grad : param->value;
    if (!t.defined()) {
      throw Error(std::string(who) + ": parameter '" + name + "' has no " +
                  (o.gradients ? "gradient (run a backward first)" : "value"));
    }
    if (!t.has_data()) {
      throw Error(std::string(who) + ": parameter '" + name + "' " + t.str() +
                  " is shape-only; a checkpoint needs data");
    }
  }
}

}  // namespace

NamedParameters with_prefix(const std::string& prefix, const NamedParameters& params) {
  NamedParameters out;
  out.reserve(params.size());
  for (const auto& [name, param] : params) out.emplace_back(prefix + name, param);
  return out;
}

std::vector<std::pair<std::string, Tensor>> consolidate(const NamedParameters& params, const runtime::ProcessGroup& tp,
                                                        const ConsolidateOptions& options) {
  validate("consolidate", params, tp, options);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(params.size());
  for (const auto& [name, param] : params) {
    out.emplace_back(name, options.gradients ? param->full_grad(tp) : param->full_value(tp));
  }
  return out;
}

void save_consolidated(const std::string& path, const NamedParameters& params, const runtime::ProcessGroup& tp,
                       const ConsolidateOptions& options) {
  validate("save_consolidated", params, tp, options);
  const std::vector<std::pair<std::string, Tensor>> full = consolidate(params, tp, options);
  std::exception_ptr failure;
  if (tp.rank() == options.writer) {
    try {
      runtime::save_safetensors(path, full, options.metadata);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (tp.size() > 1) {
    // The writer's outcome, so that every member returns only after the file is in place, or
    // throws with the writer.
    Tensor status = Tensor::full({1}, failure ? 1.0 : 0.0, runtime::DType::i32);
    runtime::BroadcastOptions b;
    b.group = tp;
    b.src = tp.global_rank(options.writer);
    runtime::broadcast(status, b);
    if (!failure && status.item() != 0.0) {
      throw Error("save_consolidated: the writer (group rank " + std::to_string(options.writer) +
                  ") could not write '" + path + "'");
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ranksim::tp
