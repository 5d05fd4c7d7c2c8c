#include "models/bridge.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "runtime/tensor/ops.h"
#include "sim/error.h"

namespace ranksim::models {
namespace {

using runtime::Tensor;

std::string both(const tp::RankGrid& src, const tp::RankGrid& dst) {
  return "bridge from source grid (" + src.str() + ") to destination grid (" + dst.str() + ")";
}

// Sizes of tp, dp and cp (cp 1 when absent); Error for missing tp/dp or another dim of size > 1.
void check_dims(const tp::RankGrid& g, const char* role, const std::string& where) {
  for (const char* need : {"tp", "dp"}) {
    if (!g.has_dim(need)) {
      throw Error(where + ": the " + role + " grid has no '" + need + "' dimension");
    }
  }
  for (const tp::GridDim& d : g.dims()) {
    if (d.name != "tp" && d.name != "dp" && d.name != "cp" && d.size != 1) {
      throw Error(where + ": the " + role + " grid's dimension '" + d.name + "' has size " + std::to_string(d.size) +
                  "; the bridge handles only tp, cp and dp (others 1)");
    }
  }
}

int cp_size(const tp::RankGrid& g) { return g.has_dim("cp") ? g.dim_size("cp") : 1; }

std::size_t dim_index(const tp::RankGrid& g, const std::string& name) {
  const auto& dims = g.dims();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].name == name) return i;
  }
  return dims.size();
}

// The rank of g at the named coordinates (dimensions not named are 0).
int rank_at(const tp::RankGrid& g, const std::map<std::string, int>& named) {
  std::vector<int> c(g.dims().size(), 0);
  for (const auto& [name, value] : named) {
    const std::size_t i = dim_index(g, name);
    if (i < c.size()) c[i] = value;
  }
  return g.rank_at(c);
}

}  // namespace

// --- GridSet -------------------------------------------------------------------------------------

GridSet::GridSet(int world_size) : world_size_(world_size) {}

tp::RankGrid& GridSet::add(const std::string& name, tp::RankGrid grid) {
  for (const auto& [n, g] : grids_) {
    if (n == name) throw Error("grid set: a grid named '" + name + "' exists already");
  }
  if (grid.world_size() != world_size_) {
    throw Error("grid set: grid '" + name + "' (" + grid.str() + ") is for a world of " +
                std::to_string(grid.world_size()) + " ranks, the set's world has " + std::to_string(world_size_));
  }
  grids_.emplace_back(name, std::make_unique<tp::RankGrid>(std::move(grid)));
  return *grids_.back().second;
}

tp::RankGrid& GridSet::grid(const std::string& name) {
  return const_cast<tp::RankGrid&>(std::as_const(*this).grid(name));
}

const tp::RankGrid& GridSet::grid(const std::string& name) const {
  for (const auto& [n, g] : grids_) {
    if (n == name) return *g;
  }
  std::string have;
  for (const auto& [n, g] : grids_) have += (have.empty() ? "" : ", ") + n;
  throw Error("grid set: no grid named '" + name + "' (it has: " + have + ")");
}

std::vector<std::string> GridSet::names() const {
  std::vector<std::string> out;
  for (const auto& [n, g] : grids_) out.push_back(n);
  return out;
}

std::map<std::string, int> GridSet::coords(const std::string& name, int global_rank) const {
  const tp::RankGrid& g = grid(name);
  std::map<std::string, int> out;
  if (!g.contains(global_rank)) return out;
  const std::vector<int> c = g.coords(global_rank);
  for (std::size_t i = 0; i < c.size(); ++i) out[g.dims()[i].name] = c[i];
  return out;
}

// --- ColocatedBridge -----------------------------------------------------------------------------

const char* bridge_mode_name(BridgeMode mode) {
  switch (mode) {
    case BridgeMode::identity:
      return "identity";
    case BridgeMode::fan_in:
      return "fan_in";
    case BridgeMode::fan_out:
      return "fan_out";
  }
  return "?";
}

ColocatedBridge::ColocatedBridge(tp::RankGrid& src, tp::RankGrid& dst) : src_(&src), dst_(&dst) {
  const std::string where = both(src, dst);
  if (src.world_size() != dst.world_size()) {
    throw Error(where + ": the source grid is for a world of " + std::to_string(src.world_size()) +
                " ranks but the destination grid for one of " + std::to_string(dst.world_size()) +
                "; colocated grids must share one world");
  }
  if (src.rank_offset() != dst.rank_offset() || src.size() != dst.size()) {
    throw Error(where + ": the source covers ranks [" + std::to_string(src.rank_offset()) + ", " +
                std::to_string(src.rank_offset() + src.size()) + ") and the destination [" +
                std::to_string(dst.rank_offset()) + ", " + std::to_string(dst.rank_offset() + dst.size()) +
                "); colocated grids must cover the same ranks");
  }
  check_dims(src, "source", where);
  check_dims(dst, "destination", where);
  if (cp_size(src) != 1) {
    throw Error(where + ": the source grid has cp=" + std::to_string(cp_size(src)) +
                "; the source must not be context-parallel (cp=1), its activations must hold "
                "the whole sequence");
  }
  if (dst.has_dim("cp") && dim_index(dst, "cp") > dim_index(dst, "dp")) {
    throw Error(where +
                ": the destination grid orders dp before cp; cp must vary faster than dp "
                "(e.g. tp-cp-dp) so that each destination DP replica is one block of consecutive "
                "ranks holding all its CP ranks, colocated with the source DP replicas that feed "
                "it");
  }
  src_dp_ = src.dim_size("dp");
  src_tp_ = src.dim_size("tp");
  dst_dp_ = dst.dim_size("dp");
  dst_tp_ = dst.dim_size("tp");
  dst_cp_ = cp_size(dst);
  const int hi = std::max(src_dp_, dst_dp_), lo = std::min(src_dp_, dst_dp_);
  if (hi % lo != 0) {
    throw Error(where + ": source dp=" + std::to_string(src_dp_) + " and destination dp=" + std::to_string(dst_dp_) +
                " are not multiples of each other");
  }
  ratio_ = hi / lo;
  mode_ = src_dp_ == dst_dp_ ? BridgeMode::identity : src_dp_ > dst_dp_ ? BridgeMode::fan_in : BridgeMode::fan_out;

  for (int r = src.rank_offset(); r < src.rank_offset() + src.size(); ++r) {
    const DestCoords c{dst.coord(r, "dp"), dst.coord(r, "tp"), dst.has_dim("cp") ? dst.coord(r, "cp") : 0};
    dest_coords_[r] = c;
    const int s = src.coord(r, "dp");
    const bool ok = mode_ == BridgeMode::fan_in    ? s / ratio_ == c.dp
                    : mode_ == BridgeMode::fan_out ? c.dp / ratio_ == s
                                                   : c.dp == s;
    if (!ok) {
      throw Error(where + ": rank " + std::to_string(r) + " is in source DP replica " + std::to_string(s) +
                  " but destination DP replica " + std::to_string(c.dp) +
                  ", which that replica does not feed; make dp the outermost dimension of both "
                  "grids (e.g. tp-dp and tp-cp-dp)");
    }
  }
}

DestCoords ColocatedBridge::dest_coords(int global_rank) const {
  auto it = dest_coords_.find(global_rank);
  if (it == dest_coords_.end()) {
    throw Error("bridge: rank " + std::to_string(global_rank) + " is outside the grids (" + dst_->str() + ")");
  }
  return it->second;
}

int ColocatedBridge::src_dp_index(int global_rank) const { return src_->coord(global_rank, "dp"); }
int ColocatedBridge::src_tp_index(int global_rank) const { return src_->coord(global_rank, "tp"); }

std::vector<int> ColocatedBridge::feeding_src_dp(int dst_dp_index) const {
  if (mode_ == BridgeMode::fan_in) {
    std::vector<int> out;
    for (int j = 0; j < ratio_; ++j) out.push_back(dst_dp_index * ratio_ + j);
    return out;
  }
  if (mode_ == BridgeMode::fan_out) return {dst_dp_index / ratio_};
  return {dst_dp_index};
}

int ColocatedBridge::slice_index(int global_rank) const {
  if (mode_ == BridgeMode::fan_in) return src_dp_index(global_rank) % ratio_;
  if (mode_ == BridgeMode::fan_out) return dest_coords(global_rank).dp % ratio_;
  return 0;
}

std::vector<std::vector<int>> ColocatedBridge::fan_in_groups() const {
  std::vector<std::vector<int>> groups;
  if (mode_ != BridgeMode::fan_in) return groups;
  for (int d = 0; d < dst_dp_; ++d) {
    for (int t = 0; t < src_tp_; ++t) {
      std::vector<int> g;
      for (int s : feeding_src_dp(d)) g.push_back(rank_at(*src_, {{"tp", t}, {"dp", s}}));
      std::sort(g.begin(), g.end());
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

std::vector<std::vector<int>> ColocatedBridge::fan_out_groups() const {
  std::vector<std::vector<int>> groups;
  if (mode_ != BridgeMode::fan_out) return groups;
  for (int s = 0; s < src_dp_; ++s) {
    for (int t = 0; t < dst_tp_; ++t) {
      for (int c = 0; c < dst_cp_; ++c) {
        std::vector<int> g;
        for (int j = 0; j < ratio_; ++j) {
          g.push_back(rank_at(*dst_, {{"tp", t}, {"cp", c}, {"dp", s * ratio_ + j}}));
        }
        std::sort(g.begin(), g.end());
        groups.push_back(std::move(g));
      }
    }
  }
  return groups;
}

std::vector<std::vector<int>> ColocatedBridge::cp_groups() const {
  if (!dst_->has_dim("cp")) {
    std::vector<std::vector<int>> singles;
    for (const auto& [r, c] : dest_coords_) singles.push_back({r});
    return singles;
  }
  return dst_->group_ranks({"cp"});
}

void ColocatedBridge::create_groups() {
  if (groups_created_) return;
  // Its own CP groups (the same ranks as the destination's), so that traces tell the bridge's CP
  // sum from the language model's attention traffic.
  if (dst_cp_ > 1) cp_group_ = runtime::new_subgroups_by_enumeration(cp_groups(), "bridge.cp_sum").first;
  if (mode_ == BridgeMode::fan_in) {
    fan_group_ = runtime::new_subgroups_by_enumeration(fan_in_groups(), "bridge.fan_in").first;
  } else if (mode_ == BridgeMode::fan_out) {
    fan_group_ = runtime::new_subgroups_by_enumeration(fan_out_groups(), "bridge.fan_out").first;
  }
  groups_created_ = true;
}

Tensor ColocatedBridge::gather_by_slice(const Tensor& x, const runtime::ProcessGroup& group) {
  const Tensor in = x.contiguous();
  runtime::Shape shape = in.shape();
  const std::int64_t b = shape[0];
  shape[0] = b * group.size();
  const Tensor out = in.has_data() ? Tensor::zeros(shape, in.dtype()) : Tensor::shape_only(shape, in.dtype());
  runtime::AllgatherOptions opts;
  opts.group = group;
  runtime::all_gather_into_tensor(out, in, opts);
  // Group rank i holds slice slice_index(member i); put the pieces in slice order.
  std::vector<Tensor> pieces(static_cast<std::size_t>(group.size()));
  bool in_order = true;
  for (int i = 0; i < group.size(); ++i) {
    const int k = slice_index(group.global_rank(i));
    in_order = in_order && k == i;
    pieces[static_cast<std::size_t>(k)] = out.narrow(0, i * b, b);
  }
  return in_order ? out : runtime::cat(pieces, 0);
}

Tensor ColocatedBridge::forward(const Tensor& activation) {
  create_groups();
  if (activation.dim() < 1) throw Error("bridge forward: the activation needs a batch dimension");
  const int rank = runtime::get_rank();
  if (mode_ == BridgeMode::fan_in) return gather_by_slice(activation, fan_group_);
  if (mode_ == BridgeMode::fan_out) {
    const std::int64_t batch = activation.size(0);
    if (batch % ratio_ != 0) {
      throw Error("bridge forward (fan-out, source dp=" + std::to_string(src_dp_) +
                  ", destination dp=" + std::to_string(dst_dp_) + "): batch " + std::to_string(batch) + " of " +
                  activation.str() + " is not divisible by " + std::to_string(ratio_));
    }
    const std::int64_t b = batch / ratio_;
    return activation.narrow(0, slice_index(rank) * b, b).clone();
  }
  return activation.clone();
}

Tensor ColocatedBridge::backward(const Tensor& grad) {
  create_groups();
  if (grad.dim() < 1) throw Error("bridge backward: the gradient needs a batch dimension");
  const int rank = runtime::get_rank();
  Tensor g = grad.clone();
  if (dst_cp_ > 1) {
    runtime::AllreduceOptions opts;
    opts.group = cp_group_;
    runtime::all_reduce(g, opts);
  }
  if (mode_ == BridgeMode::fan_in) {
    const std::int64_t batch = g.size(0);
    if (batch % ratio_ != 0) {
      throw Error("bridge backward (fan-in): batch " + std::to_string(batch) + " of " + grad.str() +
                  " is not divisible by " + std::to_string(ratio_));
    }
    const std::int64_t b = batch / ratio_;
    return g.narrow(0, slice_index(rank) * b, b).clone();
  }
  if (mode_ == BridgeMode::fan_out) return gather_by_slice(g, fan_group_);
  return g;
}

}  // namespace ranksim::models
