#include "runtime/distributed/nccl_names.h"

namespace ranksim::runtime {

sim::CollOp nccl_op(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::barrier:
      return sim::CollOp::all_reduce;
    case CollectiveKind::broadcast:
      return sim::CollOp::broadcast;
    case CollectiveKind::reduce:
      return sim::CollOp::reduce;
    case CollectiveKind::all_gather:
      return sim::CollOp::all_gather;
    case CollectiveKind::reduce_scatter:
      return sim::CollOp::reduce_scatter;
    case CollectiveKind::all_to_all:
      return sim::CollOp::all_to_all;
    case CollectiveKind::gather:
      return sim::CollOp::gather;
    case CollectiveKind::scatter:
      return sim::CollOp::scatter;
  }
  return sim::CollOp::all_reduce;
}

bool nccl_point_to_point(CollectiveKind kind) {
  return kind == CollectiveKind::all_to_all || kind == CollectiveKind::gather || kind == CollectiveKind::scatter;
}

std::optional<sim::CollAlgo> nccl_algorithm(Algorithm a) {
  switch (a) {
    case Algorithm::ring:
      return sim::CollAlgo::ring;
    case Algorithm::tree:
      return sim::CollAlgo::tree;
    case Algorithm::nvls:
      return sim::CollAlgo::nvls;
    case Algorithm::nvls_tree:
      return sim::CollAlgo::nvls_tree;
    case Algorithm::collnet:
      return sim::CollAlgo::collnet;
    case Algorithm::pat:
      return sim::CollAlgo::pat;
    case Algorithm::automatic:
    case Algorithm::direct:
    case Algorithm::hierarchical:
      break;
  }
  return std::nullopt;
}

Algorithm from_nccl_algorithm(sim::CollAlgo a) {
  switch (a) {
    case sim::CollAlgo::ring:
      return Algorithm::ring;
    case sim::CollAlgo::tree:
      return Algorithm::tree;
    case sim::CollAlgo::nvls:
      return Algorithm::nvls;
    case sim::CollAlgo::nvls_tree:
      return Algorithm::nvls_tree;
    case sim::CollAlgo::collnet:
      return Algorithm::collnet;
    case sim::CollAlgo::pat:
      return Algorithm::pat;
    case sim::CollAlgo::direct:
      break;
  }
  return Algorithm::direct;
}

}  // namespace ranksim::runtime
