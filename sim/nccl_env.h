// NcclAllowed: the algorithms and protocols that NCCL_ALGO and NCCL_PROTO leave NCCL's choice, per
// collective, in NCCL's own syntax (NCCL 2.24 and later: docs/userguide/source/env.rst, parsed by
// parseList in src/graph/tuning.cc).
//
// A value is a list of names (any case), comma separated; a leading `^` inverts it (everything
// but the names). Since NCCL 2.24 it may be a semicolon-separated list of such lists, each after
// the first naming its function: `ring,tree;allreduce:nvls,nvlstree;broadcast:ring`. An entry
// without a function sets every function; an entry with one sets that function anew. So
// NCCL_ALGO="allreduce:^tree" leaves every function everything except all_reduce's tree, and
// NCCL_PROTO="^LL128;allreduce:LL128" every function everything but LL128, except all_reduce,
// LL128 only.
//
// Names. Functions: broadcast, reduce, allgather, reducescatter, allreduce (ranksim's all_gather,
// reduce_scatter and all_reduce too). Algorithms: ring, tree, nvls, nvlstree (or nvls_tree), pat,
// collnetdirect and collnetchain (and NCCL 2.13's collnet), the last three being ranksim's one
// CollNet. Protocols: LL, LL128, Simple. A name, a function or an empty list that is none of
// these is an Error naming the value and the part, as NCCL refuses it.
//
// Point-to-point collectives (all_to_all, gather, scatter) are no NCCL function: NCCL_ALGO does
// not govern them (they run NCCL's direct pattern), and ranksim applies the first entry's
// protocols to them when that entry names no function.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sim/collective_shape.h"

namespace ranksim::sim {

// Whether an --algo / --proto value is a list in this syntax (a comma, `^`, `;` or `:`) rather
// than one name.
bool is_nccl_list(std::string_view value);

class NcclAllowed {
 public:
  NcclAllowed();  // every algorithm and protocol (neither variable set)

  // Apply an NCCL_ALGO / NCCL_PROTO value (as NCCL does: on top of what is already set).
  void set_algorithms(std::string_view value);
  void set_protocols(std::string_view value);
  // Narrow every function to this algorithm (protocol), of what is allowed: a single forced
  // name (with nothing else set, that name alone).
  void only(CollAlgo a);
  void only(Protocol p);

  bool allows(CollOp op, CollAlgo a, Protocol p) const;
  // The one algorithm allowed for `op`, when exactly one is (none for point-to-point ops).
  std::optional<CollAlgo> single_algorithm(CollOp op) const;
  // Whether anything is restricted.
  bool restricted() const { return !algo_text_.empty() || !proto_text_.empty(); }
  // "NCCL_ALGO=... NCCL_PROTO=..." as given (empty when nothing is restricted).
  std::string describe() const;

 private:
  static constexpr std::size_t kFunctions = 5;  // NCCL's order: broadcast, reduce, allgather, reducescatter, allreduce
  std::array<uint8_t, kFunctions> algos_{};     // bit a: CollAlgo a allowed
  std::array<uint8_t, kFunctions> protos_{};    // bit p: Protocol p allowed
  uint8_t p2p_protos_ = 0;                      // point-to-point collectives' protocols
  std::string algo_text_, proto_text_;
};

// What to give NCCL itself for a value set_algorithms / set_protocols accepts (validated there
// first: an Error for a malformed one): the same lists in NCCL's spellings (ranksim's nvls_tree
// as nvlstree, collnet as collnetdirect,collnetchain, all_gather as allgather, ...), entries
// and `^` as written. For runs on real GPUs, which read NCCL_ALGO / NCCL_PROTO at init.
std::string nccl_algo_value(std::string_view value);
std::string nccl_proto_value(std::string_view value);

}  // namespace ranksim::sim
