// NcclAllowed against NCCL_ALGO / NCCL_PROTO as NCCL documents them (docs/userguide/source/env.rst
// of NVIDIA/nccl, NCCL 2.24 and later): its own examples, spelled out as the set each function
// allows, and every malformed value refused with the part that is wrong.
#include "sim/nccl_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

const std::vector<CollOp> kFunctions = {CollOp::broadcast, CollOp::reduce, CollOp::all_gather, CollOp::reduce_scatter,
                                        CollOp::all_reduce};
const std::vector<CollAlgo> kAlgos = {CollAlgo::ring,      CollAlgo::tree,    CollAlgo::nvls,
                                      CollAlgo::nvls_tree, CollAlgo::collnet, CollAlgo::pat};
const std::vector<Protocol> kProtos = {Protocol::ll, Protocol::ll128, Protocol::simple};

// The algorithms `a` allows `op` (with Simple).
std::vector<CollAlgo> algos(const NcclAllowed& a, CollOp op) {
  std::vector<CollAlgo> out;
  for (CollAlgo x : kAlgos)
    if (a.allows(op, x, Protocol::simple)) out.push_back(x);
  return out;
}
// The protocols `a` allows `op` (with the ring).
std::vector<Protocol> protos(const NcclAllowed& a, CollOp op) {
  std::vector<Protocol> out;
  for (Protocol p : kProtos)
    if (a.allows(op, CollAlgo::ring, p)) out.push_back(p);
  return out;
}

TEST(NcclAllowed, UnsetAllowsEverything) {
  const NcclAllowed a;
  EXPECT_FALSE(a.restricted());
  EXPECT_EQ(a.describe(), "");
  for (CollOp op : kFunctions) {
    EXPECT_EQ(algos(a, op), kAlgos);
    EXPECT_EQ(protos(a, op), kProtos);
  }
}

TEST(NcclAllowed, AListAllowsItsNamesForEveryFunctionInAnyCase) {
  NcclAllowed a;
  a.set_algorithms("Ring,TREE");
  for (CollOp op : kFunctions) EXPECT_EQ(algos(a, op), (std::vector<CollAlgo>{CollAlgo::ring, CollAlgo::tree}));
  EXPECT_TRUE(a.restricted());
  EXPECT_EQ(a.describe(), "NCCL_ALGO=Ring,TREE");
}

TEST(NcclAllowed, ACaretExcludesTheNames) {
  NcclAllowed a;
  a.set_algorithms("^nvls,NVLSTree");
  for (CollOp op : kFunctions)
    EXPECT_EQ(algos(a, op), (std::vector<CollAlgo>{CollAlgo::ring, CollAlgo::tree, CollAlgo::collnet, CollAlgo::pat}));
  NcclAllowed p;
  p.set_protocols("^LL128");
  for (CollOp op : kFunctions) EXPECT_EQ(protos(p, op), (std::vector<Protocol>{Protocol::ll, Protocol::simple}));
}

// NCCL's example: "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring".
TEST(NcclAllowed, LaterEntriesSetTheirFunctionAnew) {
  NcclAllowed a;
  a.set_algorithms("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring");
  EXPECT_EQ(algos(a, CollOp::all_reduce), (std::vector<CollAlgo>{CollAlgo::tree, CollAlgo::collnet}));
  EXPECT_EQ(algos(a, CollOp::broadcast), (std::vector<CollAlgo>{CollAlgo::ring}));
  for (CollOp op : {CollOp::reduce, CollOp::all_gather, CollOp::reduce_scatter})
    EXPECT_EQ(algos(a, op), (std::vector<CollAlgo>{CollAlgo::ring, CollAlgo::collnet}));
}

// NCCL's example: "allreduce:^tree" leaves the others everything.
TEST(NcclAllowed, AFirstEntryWithAFunctionLeavesTheOthersAsTheyWere) {
  NcclAllowed a;
  a.set_algorithms("allreduce:^tree");
  EXPECT_EQ(algos(a, CollOp::all_reduce), (std::vector<CollAlgo>{CollAlgo::ring, CollAlgo::nvls, CollAlgo::nvls_tree,
                                                                 CollAlgo::collnet, CollAlgo::pat}));
  for (CollOp op : {CollOp::broadcast, CollOp::reduce, CollOp::all_gather, CollOp::reduce_scatter})
    EXPECT_EQ(algos(a, op), kAlgos);
}

// NCCL's examples for NCCL_PROTO.
TEST(NcclAllowed, ProtocolListsPerFunction) {
  NcclAllowed a;
  a.set_protocols("LL,Simple;allreduce:^LL");
  EXPECT_EQ(protos(a, CollOp::all_reduce), (std::vector<Protocol>{Protocol::ll128, Protocol::simple}));
  EXPECT_EQ(protos(a, CollOp::all_gather), (std::vector<Protocol>{Protocol::ll, Protocol::simple}));
  NcclAllowed b;
  b.set_protocols("^LL128;allreduce:LL128");
  EXPECT_EQ(protos(b, CollOp::all_reduce), (std::vector<Protocol>{Protocol::ll128}));
  EXPECT_EQ(protos(b, CollOp::broadcast), (std::vector<Protocol>{Protocol::ll, Protocol::simple}));
}

// Point-to-point collectives are no NCCL function: no algorithm list governs them, and the first
// entry's protocols (without a function) apply.
TEST(NcclAllowed, PointToPointTakesOnlyTheFirstEntrysProtocols) {
  NcclAllowed a;
  a.set_algorithms("ring");
  a.set_protocols("Simple;allreduce:LL");
  EXPECT_TRUE(a.allows(CollOp::all_to_all, CollAlgo::direct, Protocol::simple));
  EXPECT_FALSE(a.allows(CollOp::all_to_all, CollAlgo::direct, Protocol::ll));
  NcclAllowed b;
  b.set_protocols("allreduce:LL");
  EXPECT_TRUE(b.allows(CollOp::all_to_all, CollAlgo::direct, Protocol::ll));
  EXPECT_TRUE(b.allows(CollOp::gather, CollAlgo::direct, Protocol::simple));
}

TEST(NcclAllowed, SpellingsOfTheSameAlgorithm) {
  for (const char* s : {"collnetdirect", "CollNetChain", "collnet"}) {
    NcclAllowed a;
    a.set_algorithms(s);
    EXPECT_EQ(algos(a, CollOp::all_reduce), (std::vector<CollAlgo>{CollAlgo::collnet})) << s;
  }
  for (const char* s : {"nvlstree", "NVLS_tree"}) {
    NcclAllowed a;
    a.set_algorithms(s);
    EXPECT_EQ(algos(a, CollOp::all_reduce), (std::vector<CollAlgo>{CollAlgo::nvls_tree})) << s;
  }
  NcclAllowed a;  // ranksim's names for the functions too, and spaces around the parts
  a.set_algorithms("ring ; all_gather : pat , ring");
  EXPECT_EQ(algos(a, CollOp::all_gather), (std::vector<CollAlgo>{CollAlgo::ring, CollAlgo::pat}));
}

TEST(NcclAllowed, OnlyNarrowsWhatIsAllowed) {
  NcclAllowed a;
  a.set_algorithms("ring,tree");
  a.only(CollAlgo::tree);
  EXPECT_EQ(algos(a, CollOp::all_reduce), (std::vector<CollAlgo>{CollAlgo::tree}));
  EXPECT_EQ(a.single_algorithm(CollOp::all_reduce), CollAlgo::tree);
  a.only(CollAlgo::ring);  // nothing left
  EXPECT_TRUE(algos(a, CollOp::all_reduce).empty());
  EXPECT_EQ(a.single_algorithm(CollOp::all_reduce), std::nullopt);
  NcclAllowed p;
  p.only(Protocol::ll128);
  EXPECT_EQ(protos(p, CollOp::reduce), (std::vector<Protocol>{Protocol::ll128}));
  EXPECT_FALSE(p.allows(CollOp::all_to_all, CollAlgo::direct, Protocol::simple));
  EXPECT_EQ(p.describe(), "NCCL_PROTO=LL128");
}

TEST(NcclAllowed, SingleAlgorithmOnlyWhenExactlyOne) {
  NcclAllowed a;
  EXPECT_EQ(a.single_algorithm(CollOp::all_reduce), std::nullopt);
  a.set_algorithms("ring;allreduce:ring,tree");
  EXPECT_EQ(a.single_algorithm(CollOp::all_gather), CollAlgo::ring);
  EXPECT_EQ(a.single_algorithm(CollOp::all_reduce), std::nullopt);
  EXPECT_EQ(a.single_algorithm(CollOp::all_to_all), std::nullopt);
}

// What a run on real GPUs hands NCCL: the same lists in NCCL's spellings.
TEST(NcclAllowed, ValuesForNcclItselfUseItsSpellings) {
  EXPECT_EQ(nccl_algo_value("ring"), "ring");
  EXPECT_EQ(nccl_algo_value("NVLS_tree"), "nvlstree");
  EXPECT_EQ(nccl_algo_value("^collnet, nvls"), "^collnetdirect,collnetchain,nvls");
  EXPECT_EQ(nccl_algo_value("ring,tree; all_reduce : nvls_tree;allgather:^pat"),
            "ring,tree;allreduce:nvlstree;allgather:^pat");
  EXPECT_EQ(nccl_proto_value("^LL128;reduce_scatter:LL,Simple"), "^LL128;reducescatter:LL,Simple");
  // Each value parses back to the same sets.
  for (const std::string v : {"^collnet,nvls", "ring,tree;all_reduce:nvls_tree"}) {
    NcclAllowed a, b;
    a.set_algorithms(v);
    b.set_algorithms(nccl_algo_value(v));
    for (CollOp op : kFunctions) EXPECT_EQ(algos(a, op), algos(b, op)) << v;
  }
  EXPECT_THROW((void)nccl_algo_value("ring;tree"), Error);
  EXPECT_THROW((void)nccl_proto_value("LL256"), Error);
}

void expect_refused(const std::string& algo, const std::string& proto, const std::string& what) {
  NcclAllowed a;
  try {
    if (!algo.empty()) a.set_algorithms(algo);
    if (!proto.empty()) a.set_protocols(proto);
    FAIL() << "accepted '" << algo << "' '" << proto << "'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(what)) << e.what();
  }
}

TEST(NcclAllowed, MalformedValuesAreRefusedNamingThePart) {
  expect_refused("ring,tre", "", "NCCL_ALGO=\"ring,tre\": unknown name 'tre'");
  expect_refused("ring;tree", "", "entry 'tree' names no function; every entry after the first must");
  expect_refused("allreduc:ring", "", "unknown function 'allreduc'");
  expect_refused("alltoall:ring", "", "unknown function 'alltoall'");
  expect_refused("allreduce:", "", "an empty list for allreduce");
  expect_refused("^", "", "an empty list");
  expect_refused("ring,,tree", "", "unknown name ''");
  expect_refused("", "LL,LL256", "NCCL_PROTO=\"LL,LL256\": unknown name 'LL256': expected LL, LL128, Simple");
  expect_refused("", "ring", "unknown name 'ring'");
}

}  // namespace
}  // namespace ranksim::sim
