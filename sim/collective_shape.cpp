#include "sim/collective_shape.h"

namespace ranksim::sim {

const char* to_string(CollAlgo a) {
  switch (a) {
    case CollAlgo::ring:
      return "ring";
    case CollAlgo::tree:
      return "tree";
    case CollAlgo::nvls:
      return "nvls";
    case CollAlgo::nvls_tree:
      return "nvls_tree";
    case CollAlgo::collnet:
      return "collnet";
    case CollAlgo::pat:
      return "pat";
    case CollAlgo::direct:
      return "direct";
  }
  return "?";
}

const char* to_string(Protocol p) {
  switch (p) {
    case Protocol::ll:
      return "LL";
    case Protocol::ll128:
      return "LL128";
    case Protocol::simple:
      return "Simple";
  }
  return "?";
}

}  // namespace ranksim::sim
