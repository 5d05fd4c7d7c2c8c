#include "runtime/distributed/schedule_types.h"

#include <string>

#include "sim/error.h"

namespace ranksim::runtime {

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::reduce:
      return "reduce";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::gather:
      return "gather";
    case CollectiveKind::scatter:
      return "scatter";
    case CollectiveKind::all_to_all:
      return "all_to_all";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "?";
}

std::optional<CollectiveKind> parse_collective_kind(std::string_view name) {
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::broadcast, CollectiveKind::reduce,
                           CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::gather,
                           CollectiveKind::scatter, CollectiveKind::all_to_all, CollectiveKind::barrier})
    if (name == to_string(k)) return k;
  return std::nullopt;
}

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::ring:
      return "ring";
    case Algorithm::tree:
      return "tree";
    case Algorithm::direct:
      return "direct";
    case Algorithm::hierarchical:
      return "hierarchical";
    case Algorithm::nvls:
      return "nvls";
    case Algorithm::nvls_tree:
      return "nvls_tree";
    case Algorithm::collnet:
      return "collnet";
    case Algorithm::pat:
      return "pat";
  }
  return "?";
}

bool timing_only(Algorithm a) {
  return a == Algorithm::nvls || a == Algorithm::nvls_tree || a == Algorithm::collnet || a == Algorithm::pat;
}

Algorithm parse_algorithm(std::string_view name) {
  for (Algorithm a :
       {Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::direct, Algorithm::hierarchical,
        Algorithm::nvls, Algorithm::nvls_tree, Algorithm::collnet, Algorithm::pat}) {
    if (name == to_string(a)) return a;
  }
  throw Error("unknown collective algorithm '" + std::string(name) +
              "': expected one of auto, ring, tree, direct, hierarchical, nvls, nvls_tree, collnet, pat");
}

}  // namespace ranksim::runtime
