// The tuner config (NCCL's example tuner plugin CSV): every field read, the rules ranksim's calls
// can and cannot match, every malformed line refused at its line and column, and the shipped
// AWS p5 file read from a topology.
#include "sim/tuner_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/error.h"
#include "sim/topology.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

std::string shipped(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

CollectiveShape call(CollOp op, double bytes, int nranks, int nodes) {
  return CollectiveShape{op, bytes, nranks, nodes, nranks / nodes};
}

TEST(TunerConfig, ReadsEveryFieldOfEachLayout) {
  const TunerConfig c = parse_tuner_config(
      "# comment\n"
      "\n"
      "allreduce,0,65536,tree,simple,2,1,-1,-1,1\n"
      "  AllGather , 65537 , 1048576 , Ring , LL128 , -1 , 4 , 32 \r\n"
      "reducescatter,1,2,collnet_direct,simple,-1,-1,-1,1\n"
      "broadcast,0,32768,nvls_tree,ll,64,2,16,-1,0\n"
      "reduce,3,3,collnet_chain,simple,-1,-1,8\n"
      "allreduce,0,9007199254740992,pat,simple,-1,-1,-1,2\n"
      "allreduce,0,1,nvls,simple,-1,-1,-1",
      "t.conf");
  EXPECT_EQ(c.source, "t.conf");
  ASSERT_EQ(c.rules.size(), 7u);
  const TunerRule& a = c.rules[0];
  EXPECT_EQ(a.line, 3);
  EXPECT_EQ(a.op, CollOp::all_reduce);
  EXPECT_EQ(a.min_bytes, 0);
  EXPECT_EQ(a.max_bytes, 65536);
  EXPECT_EQ(a.algorithm, CollAlgo::tree);
  EXPECT_EQ(a.protocol, Protocol::simple);
  EXPECT_EQ(a.channels, 2);
  EXPECT_EQ(a.nodes, 1);
  EXPECT_EQ(a.ranks, -1);
  EXPECT_FALSE(a.ranksim_can_match);  // registered buffers only
  const TunerRule& b = c.rules[1];
  EXPECT_EQ(b.line, 4);
  EXPECT_EQ(b.op, CollOp::all_gather);
  EXPECT_EQ(b.min_bytes, 65537);
  EXPECT_EQ(b.max_bytes, 1048576);
  EXPECT_EQ(b.algorithm, CollAlgo::ring);
  EXPECT_EQ(b.protocol, Protocol::ll128);
  EXPECT_EQ(b.channels, -1);
  EXPECT_EQ(b.nodes, 4);
  EXPECT_EQ(b.ranks, 32);
  EXPECT_TRUE(b.ranksim_can_match);
  EXPECT_EQ(c.rules[2].op, CollOp::reduce_scatter);
  EXPECT_EQ(c.rules[2].algorithm, CollAlgo::collnet);
  EXPECT_TRUE(c.rules[2].ranksim_can_match);  // one pipelined op: ranksim's
  EXPECT_EQ(c.rules[3].op, CollOp::broadcast);
  EXPECT_EQ(c.rules[3].algorithm, CollAlgo::nvls_tree);
  EXPECT_EQ(c.rules[3].protocol, Protocol::ll);
  EXPECT_EQ(c.rules[3].channels, 64);
  EXPECT_TRUE(c.rules[3].ranksim_can_match);  // unregistered buffers: ranksim's
  EXPECT_EQ(c.rules[4].op, CollOp::reduce);
  EXPECT_EQ(c.rules[4].algorithm, CollAlgo::collnet);
  EXPECT_EQ(c.rules[4].ranks, 8);
  EXPECT_EQ(c.rules[5].algorithm, CollAlgo::pat);
  EXPECT_EQ(c.rules[5].max_bytes, 9007199254740992.0);
  EXPECT_FALSE(c.rules[5].ranksim_can_match);  // two ops in one launch: never ranksim's
  EXPECT_EQ(c.rules[6].algorithm, CollAlgo::nvls);
}

TEST(TunerConfig, ARuleAppliesToItsCollectiveSizesAndGroupOnly) {
  const TunerRule r = parse_tuner_config("allreduce,1024,4096,ring,simple,-1,2,16", "t.conf").rules.at(0);
  EXPECT_TRUE(r.applies_to(call(CollOp::all_reduce, 1024, 16, 2)));  // both ends inclusive
  EXPECT_TRUE(r.applies_to(call(CollOp::all_reduce, 4096, 16, 2)));
  EXPECT_FALSE(r.applies_to(call(CollOp::all_reduce, 1023, 16, 2)));
  EXPECT_FALSE(r.applies_to(call(CollOp::all_reduce, 4097, 16, 2)));
  EXPECT_FALSE(r.applies_to(call(CollOp::all_gather, 2048, 16, 2)));
  EXPECT_FALSE(r.applies_to(call(CollOp::all_reduce, 2048, 8, 1)));
  EXPECT_FALSE(r.applies_to(call(CollOp::all_reduce, 2048, 32, 2)));
  const TunerRule any = parse_tuner_config("allgather,0,10,ring,simple,-1,-1,-1", "t.conf").rules.at(0);
  EXPECT_TRUE(any.applies_to(call(CollOp::all_gather, 10, 4, 1)));
  EXPECT_TRUE(any.applies_to(call(CollOp::all_gather, 0, 1024, 128)));
  const TunerRule never = parse_tuner_config("allgather,0,10,ring,simple,-1,-1,-1,4", "t.conf").rules.at(0);
  EXPECT_FALSE(never.applies_to(call(CollOp::all_gather, 10, 4, 1)));
}

struct Malformed {
  const char* line;
  const char* where;  // file:line:column
  std::vector<const char*> says;
};

TEST(TunerConfig, EveryMalformedLineIsRefusedAtItsField) {
  const std::vector<Malformed> cases = {
      {"allreduce,0,1,ring,simple,-1,1", "t.conf:2:1", {"8 to 10 comma-separated fields", "got 7"}},
      {"allreduce,0,1,ring,simple,-1,1,8,1,0,9", "t.conf:2:1", {"got 11"}},
      {"alltoall,0,1,ring,simple,-1,1,8", "t.conf:2:1", {"collective_type 'alltoall'", "allreduce, allgather"}},
      {"allreduce,1k,2,ring,simple,-1,1,8", "t.conf:2:11", {"min_bytes '1k' is not a whole number"}},
      {"allreduce,-1,2,ring,simple,-1,1,8", "t.conf:2:11", {"min_bytes -1 is out of range"}},
      {"allreduce,9,2,ring,simple,-1,1,8", "t.conf:2:13", {"max_bytes 2 is below min_bytes 9"}},
      {"allreduce,0,,ring,simple,-1,1,8", "t.conf:2:13", {"max_bytes '' is not a whole number"}},
      {"allreduce,0,1,nvlstree,simple,-1,1,8", "t.conf:2:15", {"algorithm 'nvlstree'", "nvls_tree"}},
      {"allreduce,0,1,ring,ll64,-1,1,8", "t.conf:2:20", {"protocol 'll64'", "ll, ll128, simple"}},
      {"allreduce,0,1,ring,simple,0,1,8", "t.conf:2:27", {"channels 0 runs nothing"}},
      {"allreduce,0,1,ring,simple,65,1,8", "t.conf:2:27", {"channels 65 is out of range", "1 to 64"}},
      {"allreduce,0,1,ring,simple,-1,0,8", "t.conf:2:30", {"nNodes 0 matches nothing"}},
      {"allreduce,0,1,ring,simple,-1,1,x", "t.conf:2:32", {"nRanks 'x' is not a whole number"}},
      {"allreduce,0,1,ring,simple,-1,1,8,-2", "t.conf:2:34", {"numPipeOps -2 is out of range"}},
      {"allreduce,0,1,ring,simple,-1,1,8,1,2", "t.conf:2:36", {"regBuff 2 is out of range", "-1 (either), 0 or 1"}},
  };
  for (const Malformed& m : cases) {
    try {
      (void)parse_tuner_config(std::string("# a good line first\n") + m.line + "\n", "t.conf");
      ADD_FAILURE() << m.line << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(m.where)) << m.line;
      for (const char* s : m.says) EXPECT_THAT(e.what(), HasSubstr(s)) << m.line;
    }
  }
}

TEST(TunerConfig, AMissingFileIsNamed) {
  try {
    (void)load_tuner_config("/nonexistent/tuner.conf");
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/tuner.conf"));
    EXPECT_THAT(e.what(), HasSubstr("tuner config"));
  }
}

TEST(TunerConfig, ATopologyNamesItsTunerRelativeToItsFolder) {
  const Topology plain = Topology::load_file(shipped("aws-p5.yaml"));
  EXPECT_EQ(plain.collectives().tuner, nullptr);
  const Topology tuned = Topology::load_file(shipped("aws-p5.yaml"), {"collectives.tuner=tuners/aws-p5.conf"});
  ASSERT_NE(tuned.collectives().tuner, nullptr);
  const TunerConfig& t = *tuned.collectives().tuner;
  EXPECT_THAT(t.source, HasSubstr("topologies/tuners/aws-p5.conf"));
  // Every rule is all_reduce for 8 ranks a node on 2 to 128 nodes.
  ASSERT_FALSE(t.rules.empty());
  for (const TunerRule& r : t.rules) {
    EXPECT_EQ(r.op, CollOp::all_reduce);
    EXPECT_EQ(r.ranks, 8 * r.nodes);
    EXPECT_GE(r.nodes, 2);
    EXPECT_LE(r.nodes, 128);
  }
  const Topology none = Topology::load_file(shipped("aws-p5.yaml"), {"collectives.tuner=none"});
  EXPECT_EQ(none.collectives().tuner, nullptr);
  try {
    (void)Topology::load_file(shipped("aws-p5.yaml"), {"collectives.tuner=tuners/missing.conf"});
    ADD_FAILURE() << "a missing tuner config was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("names the tuner config"));
    EXPECT_THAT(e.what(), HasSubstr("tuners/missing.conf"));
    EXPECT_THAT(e.what(), HasSubstr("which is not a file"));
  }
}

}  // namespace
}  // namespace ranksim::sim
