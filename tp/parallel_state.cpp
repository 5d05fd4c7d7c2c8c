#include "tp/parallel_state.h"

#include <array>
#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::tp {
namespace {

std::vector<std::string> split_order(const std::string& order) {
  std::vector<std::string> names;
  std::string cur;
  for (char ch : order) {
    if (ch == '-') {
      names.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  names.push_back(cur);
  return names;
}

ParallelGroup make_group(RankGrid& grid, const std::vector<std::string>& names, int me) {
  ParallelGroup g;
  g.group = grid.create_group(names);
  g.rank = g.group.rank();
  g.size = g.group.size();
  g.ranks = grid.group_of(names, me);
  return g;
}

}  // namespace

RankGrid model_parallel_grid(int world_size, int tp, int pp, int cp, const ModelParallelOptions& opts) {
  const std::string what = "initialize_model_parallel(tp=" + std::to_string(tp) + ", pp=" + std::to_string(pp) +
                           ", cp=" + std::to_string(cp) + ")";
  if (tp < 1 || pp < 1 || cp < 1) throw Error(what + ": every size must be at least 1");
  const long long model = static_cast<long long>(tp) * pp * cp;
  if (world_size < 1 || world_size % model != 0) {
    throw Error(what + ": world size " + std::to_string(world_size) +
                " is not divisible by tp x pp x cp = " + std::to_string(model));
  }
  const int dp = static_cast<int>(world_size / model);
  const std::array<GridDim, 5> known = {GridDim{"tp", tp}, GridDim{"cp", cp}, GridDim{"ep", 1}, GridDim{"dp", dp},
                                        GridDim{"pp", pp}};
  std::vector<GridDim> dims;
  for (const std::string& name : split_order(opts.order)) {
    const GridDim* d = nullptr;
    for (const GridDim& k : known) {
      if (k.name == name) d = &k;
    }
    if (d == nullptr) {
      throw Error(what + ": order '" + opts.order + "' names '" + name +
                  "'; use '-'-separated names from tp, cp, ep, dp, pp");
    }
    for (const GridDim& seen : dims) {
      if (seen.name == name) {
        throw Error(what + ": order '" + opts.order + "' names '" + name + "' twice");
      }
    }
    dims.push_back(*d);
  }
  for (const GridDim& k : known) {
    bool listed = false;
    for (const GridDim& d : dims) listed = listed || d.name == k.name;
    if (listed) continue;
    if (k.size != 1) {
      throw Error(what + ": " + k.name + " has size " + std::to_string(k.size) + " but order '" + opts.order +
                  "' does not place it");
    }
    dims.push_back(k);
  }
  return RankGrid(dims, world_size);
}

ParallelState initialize_model_parallel(int tp, int pp, int cp, const ModelParallelOptions& opts) {
  ParallelState s(model_parallel_grid(runtime::get_world_size(), tp, pp, cp, opts));
  const int me = runtime::get_rank();
  s.global_rank_ = me;
  // The creation order is fixed, so every rank creates the same groups in the same order.
  s.tp_ = make_group(s.grid_, {"tp"}, me);
  s.cp_ = make_group(s.grid_, {"cp"}, me);
  s.dp_ = make_group(s.grid_, {"dp"}, me);
  s.dp_cp_ = make_group(s.grid_, {"cp", "dp"}, me);
  s.tp_cp_ = make_group(s.grid_, {"tp", "cp"}, me);
  s.pp_ = make_group(s.grid_, {"pp"}, me);
  s.mp_ = make_group(s.grid_, {"tp", "pp"}, me);
  return s;
}

}  // namespace ranksim::tp
