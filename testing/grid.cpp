#include "testing/grid.h"

#include "sim/error.h"

namespace ranksim::testing {

std::string GridShape::name() const {
  return "tp" + std::to_string(tp) + "_cp" + std::to_string(cp) + "_dp" + std::to_string(dp) + "_pp" +
         std::to_string(pp);
}

void PrintTo(const GridShape& grid, std::ostream* os) { *os << grid.name(); }

GridCoords coords_of(const GridShape& grid, int rank) {
  if (rank < 0 || rank >= grid.world()) {
    throw Error("coords_of: rank " + std::to_string(rank) + " is outside " + grid.name());
  }
  GridCoords c;
  c.tp = rank % grid.tp;
  rank /= grid.tp;
  c.cp = rank % grid.cp;
  rank /= grid.cp;
  c.dp = rank % grid.dp;
  c.pp = rank / grid.dp;
  return c;
}

std::function<int(int rank)> tp_part(const GridShape& grid) {
  return [grid](int rank) { return coords_of(grid, rank).tp; };
}

std::vector<GridShape> grids_of(int world) {
  if (world < 1) throw Error("grids_of: world must be at least 1, got " + std::to_string(world));
  std::vector<GridShape> out;
  for (int pp = 1; pp <= world; ++pp)
    for (int dp = 1; dp <= world; ++dp)
      for (int cp = 1; cp <= world; ++cp)
        for (int tp = 1; tp <= world; ++tp)
          if (tp * cp * dp * pp == world) out.emplace_back(tp, cp, dp, pp);
  return out;
}

RankRun run_grid(const GridShape& grid, const GridRankFn& fn, const RunOptions& opts) {
  if (grid.tp < 1 || grid.cp < 1 || grid.dp < 1 || grid.pp < 1) {
    throw Error("run_grid: every dimension must be at least 1, got " + grid.name());
  }
  return run_ranks(
      grid.world(), [&](int) { return fn(tp::initialize_model_parallel(grid.tp, grid.pp, grid.cp)); }, opts);
}

}  // namespace ranksim::testing
