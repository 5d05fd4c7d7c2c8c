// The mpi backend against the sim backend, bit for bit: one program of collectives (every kind,
// several groups, uneven all_to_all splits, async, shape-only) and point-to-point operations runs
// once on fibers (the reference, in this process) and once as this MPI job (one process per
// rank); every output tensor of this process's rank must have the same bytes. Inputs are random
// normals, so a different reduction order would show. Run under mpirun (ctest label `mpi`).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "mpi/compare.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "sim/topology.h"

namespace ranksim::runtime {
namespace {

using mpitest::Bytes;
using mpitest::bytes_of;

int nranks() { return mpi::world_size(); }

// Two devices per node, so hierarchical has two levels from 4 ranks on.
sim::Topology topology() {
  const int n = nranks();
  return sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/h100-cluster.yaml",
                                  {"nodes=" + std::to_string((n + 1) / 2), "node.devices=2"});
}

bool offers(CollectiveKind k, Algorithm a) {
  if (k == CollectiveKind::gather || k == CollectiveKind::scatter)
    return a == Algorithm::direct || a == Algorithm::tree || a == Algorithm::automatic;
  if (k == CollectiveKind::all_to_all)
    return a == Algorithm::direct || a == Algorithm::ring || a == Algorithm::automatic;
  return true;
}

// The collectives of one group; `seed` keeps every input distinct.
void collectives_on(const ProcessGroup& g, Algorithm algo, DType dt, uint64_t seed, std::vector<Bytes>& out) {
  const int n = g.size(), me = g.rank(), rank = get_rank();
  auto rnd = [&](Shape s, uint64_t k) {
    return Tensor::randn(s, seed * 1000 + k * 37 + static_cast<uint64_t>(rank), 0.0, 1.0, dt);
  };
  auto algo_for = [&](CollectiveKind k) { return offers(k, algo) ? algo : Algorithm::automatic; };
  for (int64_t c : {int64_t{1000}, int64_t{7}}) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX}) {
      Tensor t = rnd({c}, static_cast<uint64_t>(c) + static_cast<uint64_t>(op));
      AllreduceOptions o;
      o.group = g;
      o.op = op;
      o.algorithm = algo_for(CollectiveKind::all_reduce);
      all_reduce(t, o);
      out.push_back(bytes_of(t));
    }
  }
  {
    Tensor in = rnd({37}, 1), outt = Tensor::zeros({37 * n}, dt);
    AllgatherOptions o;
    o.group = g;
    o.algorithm = algo_for(CollectiveKind::all_gather);
    all_gather_into_tensor(outt, in, o);
    out.push_back(bytes_of(outt));
  }
  {
    Tensor in = rnd({37 * n}, 2), outt = Tensor::zeros({37}, dt);
    ReduceScatterOptions o;
    o.group = g;
    o.algorithm = algo_for(CollectiveKind::reduce_scatter);
    reduce_scatter_tensor(outt, in, o);
    out.push_back(bytes_of(outt));
    out.push_back(bytes_of(in));  // untouched
  }
  {
    Tensor t = rnd({301}, 3);
    BroadcastOptions o;
    o.group = g;
    o.src = g.global_rank(n - 1);
    o.algorithm = algo_for(CollectiveKind::broadcast);
    broadcast(t, o);
    out.push_back(bytes_of(t));
  }
  {
    Tensor t = rnd({301}, 4);
    ReduceOptions o;
    o.group = g;
    o.dst = g.global_rank(0);
    o.algorithm = algo_for(CollectiveKind::reduce);
    reduce(t, o);
    out.push_back(bytes_of(t));
  }
  {
    Tensor t = rnd({11}, 5);
    std::vector<Tensor> list;
    const int root = n - 1;
    if (me == root)
      for (int j = 0; j < n; ++j) list.push_back(Tensor::zeros({11}, dt));
    GatherOptions o;
    o.group = g;
    o.dst = g.global_rank(root);
    o.algorithm = algo_for(CollectiveKind::gather);
    gather(t, list, o);
    for (const Tensor& x : list) out.push_back(bytes_of(x));
  }
  {
    Tensor t = Tensor::zeros({13}, dt);
    std::vector<Tensor> list;
    if (me == 0)
      for (int j = 0; j < n; ++j) list.push_back(rnd({13}, 10 + static_cast<uint64_t>(j)));
    ScatterOptions o;
    o.group = g;
    o.src = g.global_rank(0);
    o.algorithm = algo_for(CollectiveKind::scatter);
    scatter(t, list, o);
    out.push_back(bytes_of(t));
  }
  {
    // Uneven rows: rank i sends (i + j) % 3 + (j == 0 ? 0 : 1) rows of 3 to rank j (some zero).
    auto rows = [](int i, int j) { return static_cast<int64_t>((i + j) % 3 + (j == 0 ? 0 : 1)); };
    AllToAllOptions o;
    o.group = g;
    o.algorithm = algo_for(CollectiveKind::all_to_all);
    int64_t in_rows = 0, out_rows = 0;
    for (int j = 0; j < n; ++j) {
      o.input_split_sizes.push_back(rows(me, j));
      o.output_split_sizes.push_back(rows(j, me));
      in_rows += rows(me, j);
      out_rows += rows(j, me);
    }
    Tensor in = rnd({in_rows, 3}, 6), outt = Tensor::zeros({out_rows, 3}, dt);
    all_to_all_single(outt, in, o);
    out.push_back(bytes_of(outt));
  }
  {
    BarrierOptions o;
    o.group = g;
    o.algorithm = algo;
    barrier(o);
    Tensor t = rnd({64}, 7);
    AllreduceOptions a;
    a.group = g;
    a.async_op = true;
    a.algorithm = algo_for(CollectiveKind::all_reduce);
    Work w = all_reduce(t, a);
    out.push_back(bytes_of(t));  // the read waits for the collective
    w.wait();
    EXPECT_TRUE(w.is_completed());
    // Shape-only tensors move no data but must still match up.
    AllreduceOptions s;
    s.group = g;
    all_reduce(Tensor::shape_only({1 << 20}, dt), s);
  }
}

void program(int rank, Algorithm algo, DType dt, std::vector<Bytes>& out) {
  const int n = get_world_size();
  collectives_on(ProcessGroup{}, algo, dt, 1, out);
  // Pairs {0,1}, {2,3}: every rank calls new_group for every pair, as torch requires.
  ProcessGroup mine;
  for (int a = 0; a + 1 < n; a += 2) {
    ProcessGroup p = new_group({a, a + 1});
    if (p.is_member()) mine = p;
  }
  if (mine.is_member()) collectives_on(mine, algo, dt, 2, out);
  // Evens and odds, and the same rank set created twice (two different groups).
  std::vector<int> evens, odds;
  for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
  const ProcessGroup parity = new_subgroups_by_enumeration({evens, odds}).first;
  collectives_on(parity, algo, dt, 3, out);
  ProcessGroup again = new_group(rank % 2 ? odds : evens);
  collectives_on(again, algo, dt, 4, out);
  // All ranks again: a second group over the world's ranks.
  std::vector<int> everyone;
  for (int r = 0; r < n; ++r) everyone.push_back(r);
  ProcessGroup world2 = new_group(everyone);
  collectives_on(world2, algo, dt, 5, out);
  // An outsider's handle says so.
  ProcessGroup first = new_group({0});
  EXPECT_EQ(first.is_member(), rank == 0);

  // Point-to-point: a ring of batch_isend_irecv with two tags, then send/recv pairs.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  Tensor s1 = Tensor::randn({129}, 900 + static_cast<uint64_t>(rank), 0.0, 1.0, dt);
  Tensor s2 = Tensor::randn({5}, 950 + static_cast<uint64_t>(rank), 0.0, 1.0, dt);
  Tensor r1 = Tensor::zeros({129}, dt), r2 = Tensor::zeros({5}, dt);
  auto works = batch_isend_irecv({{P2POp::Kind::isend, s2, next, {}, 2},
                                  {P2POp::Kind::isend, s1, next, {}, 1},
                                  {P2POp::Kind::irecv, r1, prev, {}, 1},
                                  {P2POp::Kind::irecv, r2, prev, {}, 2}});
  for (Work& w : works) w.wait();
  out.push_back(bytes_of(r1));
  out.push_back(bytes_of(r2));
  if (rank % 2 == 0 && rank + 1 < n) {
    send(s1, rank + 1, {{}, 7});
    Tensor back = Tensor::zeros({129}, dt);
    recv(back, rank + 1, {{}, 8});
    out.push_back(bytes_of(back));
  } else if (rank % 2 == 1) {
    Tensor got = Tensor::zeros({129}, dt);
    Work w = irecv(got, rank - 1, {{}, 7});
    out.push_back(bytes_of(got));  // the read waits for the irecv
    isend(got, rank - 1, {{}, 8}).wait();
    (void)w;
  }
}

using Param = std::tuple<Algorithm, DType>;
class MpiMatchesSim : public ::testing::TestWithParam<Param> {};

TEST_P(MpiMatchesSim, EveryOutputBitForBit) {
  const auto [algo, dt] = GetParam();
  const sim::Topology topo = topology();
  SpawnOptions so;
  so.topology = &topo;
  const size_t compared = mpitest::expect_mpi_matches_sim(
      [&, algo = algo, dt = dt](int rank, std::vector<Bytes>& out) { program(rank, algo, dt, out); }, so);
  EXPECT_GT(compared, 40u);
}

INSTANTIATE_TEST_SUITE_P(All, MpiMatchesSim,
                         ::testing::Combine(::testing::Values(Algorithm::automatic, Algorithm::ring, Algorithm::tree,
                                                              Algorithm::direct, Algorithm::hierarchical),
                                            ::testing::Values(DType::bf16, DType::f32, DType::f64)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(to_string(std::get<0>(p.param))) + "_" + dtype_name(std::get<1>(p.param));
                         });

// Exact-sum inputs against the closed form: the mpi backend on its own, independent of sim.
TEST(MpiBackend, AllReduceOfRankPlusOneIsTheTriangularNumber) {
  const int n = nranks();
  std::vector<float> got;
  SpawnOptions so;
  so.backend = BackendKind::mpi;
  const RunReport rep = spawn(
      [&](int rank) {
        Tensor t = Tensor::full({3}, rank + 1);
        all_reduce(t);
        got = t.to_vector<float>();
        EXPECT_EQ(get_rank(), rank);
        EXPECT_EQ(get_world_size(), n);
        init_process_group("mpi");
        EXPECT_TRUE(is_initialized());
      },
      n, so);
  EXPECT_EQ(got, std::vector<float>(3, static_cast<float>(n * (n + 1) / 2)));
  // Wall-clock report, gathered from every rank.
  ASSERT_EQ(rep.clocks.size(), static_cast<size_t>(n));
  EXPECT_GT(rep.makespan.picoseconds(), 0);
  if (mpi::world_rank() == 0) {
    // one record per collective, gathered on rank 0 (the world group's first member made it)
    ASSERT_EQ(rep.collectives.size(), 1u);
    EXPECT_EQ(rep.collectives[0].kind, CollectiveKind::all_reduce);
    EXPECT_EQ(rep.collectives[0].group_size, n);
    int comm_spans = 0;
    for (const auto& s : rep.trace.spans()) comm_spans += s.kind == sim::SpanKind::comm ? 1 : 0;
    EXPECT_EQ(comm_spans, n);  // one all_reduce span per rank, gathered on rank 0
  } else {
    EXPECT_TRUE(rep.collectives.empty());  // records of groups this rank is first in: none
  }
}

// The nccl backend without its GPU library installed: a clear error on every rank, no hang.
TEST(MpiBackend, NcclWithoutTheGpuLibraryIsAClearError) {
  SpawnOptions so;
  so.backend = BackendKind::nccl;
  std::string message;
  try {
    spawn([](int) {}, mpi::world_size(), so);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("the nccl backend is not available"), std::string::npos) << message;
}

}  // namespace
}  // namespace ranksim::runtime
