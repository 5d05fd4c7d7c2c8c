#include "tp/rank_grid.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "sim/error.h"

namespace ranksim::tp {
namespace {

std::string layout_str(const std::vector<GridDim>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += " x ";
    s += dims[i].name + "=" + std::to_string(dims[i].size);
  }
  return s;
}

std::string names_str(const std::vector<GridDim>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i].name;
  return s;
}

// Validates the dims and returns the product of their sizes.
std::int64_t checked_product(const std::vector<GridDim>& dims) {
  if (dims.empty()) throw Error("rank grid: needs at least one dimension");
  std::int64_t product = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const GridDim& d = dims[i];
    if (d.name.empty()) throw Error("rank grid: dimension " + std::to_string(i) + " has no name");
    for (std::size_t j = 0; j < i; ++j) {
      if (dims[j].name == d.name) {
        throw Error("rank grid " + layout_str(dims) + ": dimension name '" + d.name + "' is used twice");
      }
    }
    if (d.size < 1) {
      throw Error("rank grid " + layout_str(dims) + ": dimension '" + d.name + "' has size " + std::to_string(d.size) +
                  "; sizes must be at least 1");
    }
    product *= d.size;
    if (product > (std::int64_t{1} << 30)) {
      throw Error("rank grid " + layout_str(dims) + ": more than 2^30 ranks");
    }
  }
  return product;
}

}  // namespace

RankGrid::RankGrid(std::vector<GridDim> dims, int world_size) : dims_(std::move(dims)), world_size_(world_size) {
  const std::int64_t product = checked_product(dims_);
  if (product != world_size) {
    throw Error("rank grid " + layout_str(dims_) + " has " + std::to_string(product) + " ranks but the world has " +
                std::to_string(world_size) + "; the dimension sizes must multiply to the world size");
  }
  size_ = static_cast<int>(product);
}

RankGrid::RankGrid(std::vector<GridDim> dims, int world_size, int rank_offset)
    : dims_(std::move(dims)), world_size_(world_size), rank_offset_(rank_offset) {
  const std::int64_t product = checked_product(dims_);
  if (rank_offset < 0 || rank_offset + product > world_size) {
    throw Error("rank grid " + layout_str(dims_) + " at rank offset " + std::to_string(rank_offset) +
                " covers ranks [" + std::to_string(rank_offset) + ", " + std::to_string(rank_offset + product) +
                "), outside the world of " + std::to_string(world_size) + " ranks");
  }
  size_ = static_cast<int>(product);
}

bool RankGrid::has_dim(const std::string& name) const {
  return std::any_of(dims_.begin(), dims_.end(), [&](const GridDim& d) { return d.name == name; });
}

int RankGrid::dim_size(const std::string& name) const { return dims_[resolve({name})[0]].size; }

std::string RankGrid::str() const { return layout_str(dims_); }

bool RankGrid::contains(int global_rank) const {
  return global_rank >= rank_offset_ && global_rank < rank_offset_ + size_;
}

std::vector<int> RankGrid::coords(int global_rank) const {
  if (!contains(global_rank)) {
    throw Error("rank grid " + str() + ": rank " + std::to_string(global_rank) + " is outside its ranks [" +
                std::to_string(rank_offset_) + ", " + std::to_string(rank_offset_ + size_) + ")");
  }
  std::vector<int> c(dims_.size());
  int rest = global_rank - rank_offset_;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    c[i] = rest % dims_[i].size;
    rest /= dims_[i].size;
  }
  return c;
}

int RankGrid::coord(int global_rank, const std::string& name) const { return coords(global_rank)[resolve({name})[0]]; }

int RankGrid::rank_at(const std::vector<int>& c) const {
  if (c.size() != dims_.size()) {
    throw Error("rank grid " + str() + ": " + std::to_string(c.size()) + " coordinates given for " +
                std::to_string(dims_.size()) + " dimensions");
  }
  int rank = 0;
  for (std::size_t i = dims_.size(); i-- > 0;) {
    if (c[i] < 0 || c[i] >= dims_[i].size) {
      throw Error("rank grid " + str() + ": coordinate " + std::to_string(c[i]) + " is outside dimension '" +
                  dims_[i].name + "'");
    }
    rank = rank * dims_[i].size + c[i];
  }
  return rank_offset_ + rank;
}

std::vector<std::size_t> RankGrid::resolve(const std::vector<std::string>& names) const {
  std::vector<std::size_t> idx;
  for (const std::string& n : names) {
    auto it = std::find_if(dims_.begin(), dims_.end(), [&](const GridDim& d) { return d.name == n; });
    if (it == dims_.end()) {
      throw Error("rank grid " + str() + ": no dimension named '" + n + "' (it has " + names_str(dims_) + ")");
    }
    const auto i = static_cast<std::size_t>(it - dims_.begin());
    if (std::find(idx.begin(), idx.end(), i) != idx.end()) {
      throw Error("rank grid " + str() + ": dimension '" + n + "' is named twice in a group");
    }
    idx.push_back(i);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<std::vector<int>> RankGrid::group_ranks(const std::vector<std::string>& names) const {
  const std::vector<std::size_t> chosen = resolve(names);
  std::vector<bool> is_chosen(dims_.size(), false);
  for (std::size_t i : chosen) is_chosen[i] = true;
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (!is_chosen[i]) others.push_back(i);
  }
  int group_size = 1, groups = 1;
  for (std::size_t i : chosen) group_size *= dims_[i].size;
  for (std::size_t i : others) groups *= dims_[i].size;

  // Mixed-radix counters over the other and the chosen dims, first listed fastest.
  auto fill = [&](const std::vector<std::size_t>& which, int counter, std::vector<int>& c) {
    for (std::size_t i : which) {
      c[i] = counter % dims_[i].size;
      counter /= dims_[i].size;
    }
  };
  std::vector<std::vector<int>> result(static_cast<std::size_t>(groups));
  std::vector<int> c(dims_.size(), 0);
  for (int g = 0; g < groups; ++g) {
    fill(others, g, c);
    auto& members = result[static_cast<std::size_t>(g)];
    members.reserve(static_cast<std::size_t>(group_size));
    for (int m = 0; m < group_size; ++m) {
      fill(chosen, m, c);
      members.push_back(rank_at(c));
    }
  }
  return result;
}

std::vector<int> RankGrid::group_of(const std::vector<std::string>& names, int global_rank) const {
  const std::vector<std::size_t> chosen = resolve(names);
  std::vector<int> c = coords(global_rank);
  int group_size = 1;
  for (std::size_t i : chosen) group_size *= dims_[i].size;
  std::vector<int> members;
  members.reserve(static_cast<std::size_t>(group_size));
  for (int m = 0; m < group_size; ++m) {
    int counter = m;
    for (std::size_t i : chosen) {
      c[i] = counter % dims_[i].size;
      counter /= dims_[i].size;
    }
    members.push_back(rank_at(c));
  }
  return members;
}

runtime::ProcessGroup RankGrid::create_group(const std::vector<std::string>& names) {
  const std::vector<std::size_t> key = resolve(names);
  auto it = groups_.find(key);
  if (it != groups_.end()) return it->second;
  const int me = runtime::get_rank();
  // Named by its dimensions in the grid's order ("tp", "cp-dp"): traces and the run's
  // communication by group say which parallelism a collective served.
  std::string desc;
  for (std::size_t i : key) desc += (desc.empty() ? "" : "-") + dims_[i].name;
  // A rank outside the grid gets a handle on the first group (the one holding the grid's first
  // rank), which reports is_member() == false.
  const std::vector<int> members =
      group_of(names, contains(me) ? me : rank_offset_);  // the first group holds the first rank
  runtime::ProcessGroup mine = runtime::new_group(members, desc);
  groups_.emplace(key, mine);
  return mine;
}

}  // namespace ranksim::tp
