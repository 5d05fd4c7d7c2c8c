#include "runtime/distributed/backends/request.h"

#include <sstream>
#include <utility>

namespace ranksim::runtime::detail {

SplitSizes SplitSizes::even(int n, int64_t each) {
  SplitSizes s;
  s.n_ = n;
  s.each_ = each;
  return s;
}

SplitSizes::SplitSizes(std::vector<int64_t> sizes) : n_(static_cast<int>(sizes.size())), sizes_(std::move(sizes)) {}

int64_t SplitSizes::total() const {
  if (sizes_.empty()) return each_ * n_;
  int64_t sum = 0;
  for (const int64_t x : sizes_) sum += x;
  return sum;
}

std::vector<int64_t> SplitSizes::to_vector() const {
  return sizes_.empty() ? std::vector<int64_t>(static_cast<std::size_t>(n_), each_) : sizes_;
}

std::string Signature::describe() const {
  std::ostringstream os;
  os << to_string(kind) << '(' << dtype_name(dtype) << shape;
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::reduce_scatter:
      os << ", op=" << to_string(op);
      break;
    case CollectiveKind::reduce:
      os << ", op=" << to_string(op) << ", root=" << root;
      break;
    case CollectiveKind::broadcast:
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      os << ", root=" << root;
      break;
    default:
      break;
  }
  if (algorithm != Algorithm::automatic) os << ", algorithm=" << to_string(algorithm);
  os << ')';
  return os.str();
}

std::string Signature::difference(const Signature& o) const {
  if (kind != o.kind) return "different collectives";
  if (dtype != o.dtype) return "different dtypes";
  if (count != o.count)
    return "different element counts (" + std::to_string(count) + " vs " + std::to_string(o.count) + ")";
  if (op != o.op) return "different reduce ops";
  if (root != o.root) return "different roots";
  if (algorithm != o.algorithm) return "different algorithms";
  return {};
}

namespace {
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // C++17's guide: clang 14 does not deduce aggregates

}  // namespace

CollectiveKind kind_of(const CollectiveTensors& tensors) {
  return std::visit(Overloaded{[](const AllReduceTensors&) { return CollectiveKind::all_reduce; },
                               [](const BroadcastTensors&) { return CollectiveKind::broadcast; },
                               [](const ReduceTensors&) { return CollectiveKind::reduce; },
                               [](const AllGatherTensors&) { return CollectiveKind::all_gather; },
                               [](const ReduceScatterTensors&) { return CollectiveKind::reduce_scatter; },
                               [](const GatherTensors&) { return CollectiveKind::gather; },
                               [](const ScatterTensors&) { return CollectiveKind::scatter; },
                               [](const AllToAllTensors&) { return CollectiveKind::all_to_all; },
                               [](const BarrierTensors&) { return CollectiveKind::barrier; }},
                    tensors);
}

bool has_data(const CollectiveTensors& tensors) {
  return std::visit(
      Overloaded{[](const AllGatherTensors& t) { return t.output.has_data(); },
                 [](const ReduceScatterTensors& t) { return t.output.has_data(); },
                 [](const AllToAllTensors& t) { return t.output.has_data(); },
                 [](const BarrierTensors&) { return false; }, [](const auto& t) { return t.tensor.has_data(); }},
      tensors);
}

}  // namespace ranksim::runtime::detail
