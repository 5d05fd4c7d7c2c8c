// Every collective x dtype x group size 1..9 x algorithm, on the world and on a subgroup, with
// exact-sum inputs (small integers: any reduction order gives the same bits) checked against
// closed forms; random inputs against a float64 reference; bitwise determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <functional>
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "sim/topology.h"

namespace ranksim::runtime {
namespace {

using ::testing::HasSubstr;

// Small-integer input of rank r (group index), element e: exact in every dtype.
double val(int r, int64_t e) { return (r + 1) + static_cast<double>(e % 5); }
// For PROD: 1 or 2, so products are powers of two up to 2^9 (exact in bf16).
double pval(int r, int64_t e) { return ((r + e) % 3 == 0) ? 2.0 : 1.0; }

Tensor filled(DType dt, int64_t count, int r, double (*f)(int, int64_t), int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) v[static_cast<size_t>(e)] = f(r, e + offset);
  return Tensor::from_vector(v, {count}, dt);
}

// The AVG result as ranksim computes it: exact sum in the dtype, then the division in the
// dtype's compute type (fp32 for 16-bit types), rounded to the dtype; integers truncate.
double avg_of(double sum, int n, DType dt) {
  switch (dt) {
    case DType::f64:
      return sum / n;
    case DType::f32:
      return static_cast<double>(static_cast<float>(sum) / static_cast<float>(n));
    case DType::bf16:
      return bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(sum) / static_cast<float>(n)));
    case DType::f16:
      return f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(sum) / static_cast<float>(n)));
    default:
      return std::trunc(sum / n);
  }
}

using Param = std::tuple<CollectiveKind, Algorithm, int, DType, bool>;

class Collectives : public ::testing::TestWithParam<Param> {};

bool supported(CollectiveKind k, Algorithm a) {
  if (k == CollectiveKind::gather || k == CollectiveKind::scatter)
    return a == Algorithm::direct || a == Algorithm::tree || a == Algorithm::automatic;
  if (k == CollectiveKind::all_to_all)
    return a == Algorithm::direct || a == Algorithm::ring || a == Algorithm::automatic;
  return true;
}

TEST_P(Collectives, ExactSumInputsGiveTheClosedForm) {
  const auto [kind, algo, n, dt, sub] = GetParam();
  if (!supported(kind, algo)) GTEST_SKIP() << "algorithm not offered for this collective";
  // On a subgroup: the world has two more ranks (0 and the last) that stay out.
  const int world = sub ? n + 2 : n;
  std::vector<int> members;
  for (int r = sub ? 1 : 0; r < (sub ? n + 1 : n); ++r) members.push_back(r);
  // ideal_topology is one node; hierarchical needs several, so run it on 3x3 "nodes" only where
  // it divides, else on the single node (which makes it a plain intra-node algorithm).
  const int64_t c = 6;  // per-rank count; not a multiple of most n, to exercise uneven chunks
  int failures = 0;
  spawn(
      [&](int rank) {
        ProcessGroup g = sub ? new_group(members) : ProcessGroup{};
        if (!g.is_member()) {
          barrier();  // a world collective everyone takes part in, members or not
          return;
        }
        const int i = g.rank();
        const int root_global = members[static_cast<size_t>(n > 1 ? n - 1 : 0)];
        const int root = g.group_rank(root_global);
        auto expect_eq = [&](double got, double want, const std::string& what) {
          if (got != want) {
            ++failures;
            ADD_FAILURE() << what << " on rank " << rank << ": got " << got << ", want " << want;
          }
        };
        auto sum_at = [&](int64_t e) {
          double s = 0;
          for (int q = 0; q < n; ++q) s += val(q, e);
          return s;
        };
        CollectiveOptions base;
        base.group = g;
        base.algorithm = algo;
        switch (kind) {
          case CollectiveKind::all_reduce:
            for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN, ReduceOp::PROD}) {
              const bool prod = op == ReduceOp::PROD;
              Tensor t = filled(dt, c, i, prod ? pval : val);
              AllreduceOptions o;
              static_cast<CollectiveOptions&>(o) = base;
              o.op = op;
              all_reduce(t, o);
              const auto got = t.to_vector<double>();
              for (int64_t e = 0; e < c; ++e) {
                double want = 0;
                switch (op) {
                  case ReduceOp::SUM:
                    want = sum_at(e);
                    break;
                  case ReduceOp::AVG:
                    want = avg_of(sum_at(e), n, dt);
                    break;
                  case ReduceOp::MAX:
                    want = val(n - 1, e);
                    break;
                  case ReduceOp::MIN:
                    want = val(0, e);
                    break;
                  case ReduceOp::PROD:
                    want = 1;
                    for (int q = 0; q < n; ++q) want *= pval(q, e);
                    break;
                }
                expect_eq(got[static_cast<size_t>(e)], want, std::string("all_reduce ") + to_string(op));
              }
            }
            break;
          case CollectiveKind::reduce_scatter:
            for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX}) {
              Tensor in = filled(dt, c * n, i, val);
              Tensor out = Tensor::zeros({c}, dt);
              ReduceScatterOptions o;
              static_cast<CollectiveOptions&>(o) = base;
              o.op = op;
              reduce_scatter_tensor(out, in, o);
              const auto got = out.to_vector<double>();
              for (int64_t e = 0; e < c; ++e) {
                const int64_t ge = i * c + e;
                const double want = op == ReduceOp::SUM   ? sum_at(ge)
                                    : op == ReduceOp::AVG ? avg_of(sum_at(ge), n, dt)
                                                          : val(n - 1, ge);
                expect_eq(got[static_cast<size_t>(e)], want, "reduce_scatter");
              }
              // The input is left untouched.
              const auto in_after = in.to_vector<double>();
              for (int64_t e = 0; e < c * n; ++e) expect_eq(in_after[static_cast<size_t>(e)], val(i, e), "input kept");
            }
            break;
          case CollectiveKind::reduce: {
            Tensor t = filled(dt, c, i, val);
            ReduceOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            o.dst = root_global;
            reduce(t, o);
            const auto got = t.to_vector<double>();
            for (int64_t e = 0; e < c; ++e)
              expect_eq(got[static_cast<size_t>(e)], i == root ? sum_at(e) : val(i, e), "reduce");
            break;
          }
          case CollectiveKind::broadcast: {
            Tensor t = i == root ? filled(dt, c, i, val) : Tensor::full({c}, -1, dt);
            BroadcastOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            o.src = root_global;
            broadcast(t, o);
            const auto got = t.to_vector<double>();
            for (int64_t e = 0; e < c; ++e) expect_eq(got[static_cast<size_t>(e)], val(root, e), "broadcast");
            break;
          }
          case CollectiveKind::all_gather: {
            Tensor in = filled(dt, c, i, val, i * c);
            Tensor out = Tensor::zeros({n * c}, dt);
            AllgatherOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            all_gather_into_tensor(out, in, o);
            const auto got = out.to_vector<double>();
            for (int64_t e = 0; e < n * c; ++e)
              expect_eq(got[static_cast<size_t>(e)], val(static_cast<int>(e / c), e), "all_gather");
            break;
          }
          case CollectiveKind::gather: {
            Tensor t = filled(dt, c, i, val);
            std::vector<Tensor> list;
            if (i == root)
              for (int q = 0; q < n; ++q) list.push_back(Tensor::zeros({c}, dt));
            GatherOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            o.dst = root_global;
            gather(t, list, o);
            for (int q = 0; q < static_cast<int>(list.size()); ++q) {
              const auto got = list[static_cast<size_t>(q)].to_vector<double>();
              for (int64_t e = 0; e < c; ++e) expect_eq(got[static_cast<size_t>(e)], val(q, e), "gather");
            }
            break;
          }
          case CollectiveKind::scatter: {
            Tensor t = Tensor::zeros({c}, dt);
            std::vector<Tensor> list;
            if (i == root)
              for (int q = 0; q < n; ++q) list.push_back(filled(dt, c, q, val));
            ScatterOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            o.src = root_global;
            scatter(t, list, o);
            const auto got = t.to_vector<double>();
            for (int64_t e = 0; e < c; ++e) expect_eq(got[static_cast<size_t>(e)], val(i, e), "scatter");
            break;
          }
          case CollectiveKind::all_to_all: {
            // Uneven: rank i sends (i + j) % 3 rows of 2 elements to rank j.
            const int64_t row = 2;
            AllToAllOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            int64_t in_rows = 0, out_rows = 0;
            for (int j = 0; j < n; ++j) {
              o.input_split_sizes.push_back((i + j) % 3);
              o.output_split_sizes.push_back((j + i) % 3);
              in_rows += (i + j) % 3;
              out_rows += (j + i) % 3;
            }
            std::vector<double> v;
            for (int64_t k = 0; k < in_rows * row; ++k) v.push_back(i * 16 + static_cast<double>(k % 16));
            Tensor in = Tensor::from_vector(v, {in_rows, row}, dt);
            Tensor out = Tensor::zeros({out_rows, row}, dt);
            all_to_all_single(out, in, o);
            const auto got = out.to_vector<double>();
            size_t at = 0;
            for (int src = 0; src < n; ++src) {
              int64_t before = 0;  // rows src sends to ranks before i
              for (int q = 0; q < i; ++q) before += (src + q) % 3;
              for (int64_t k = 0; k < ((src + i) % 3) * row; ++k)
                expect_eq(got[at++], src * 16 + static_cast<double>((before * row + k) % 16), "all_to_all");
            }
            break;
          }
          case CollectiveKind::barrier: {
            BarrierOptions o;
            static_cast<CollectiveOptions&>(o) = base;
            barrier(o);
            break;
          }
        }
        if (sub) barrier();
      },
      world);
  EXPECT_EQ(failures, 0);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [kind, algo, n, dt, sub] = info.param;
  return std::string(to_string(kind)) + "_" + to_string(algo) + "_n" + std::to_string(n) + "_" + dtype_name(dt) +
         (sub ? "_subgroup" : "_world");
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, Collectives,
    ::testing::Combine(::testing::Values(CollectiveKind::all_reduce, CollectiveKind::broadcast, CollectiveKind::reduce,
                                         CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                                         CollectiveKind::gather, CollectiveKind::scatter, CollectiveKind::all_to_all,
                                         CollectiveKind::barrier),
                       ::testing::Values(Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::direct,
                                         Algorithm::hierarchical),
                       ::testing::Range(1, 10),
                       ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32),
                       ::testing::Bool()),
    param_name);

}  // namespace
}  // namespace ranksim::runtime

namespace ranksim::runtime {
namespace {

// Hierarchical algorithms on several nodes: 2 nodes x 4 devices and 3 nodes x 3 devices, on the
// world and on a group spanning the nodes with equal ranks per node.
sim::Topology nodes_topology(int nodes, int per_node) {
  const std::string yaml =
      "name: test-cluster\n"
      "nodes: " +
      std::to_string(nodes) +
      "\n"
      "device_kinds:\n"
      "  gpu:\n"
      "    peak_flops: {f32: 10 TFLOP/s}\n"
      "    memory_bandwidth: 1 TB/s\n"
      "    memory: 16 GiB\n"
      "node:\n"
      "  devices: " +
      std::to_string(per_node) +
      "\n"
      "  kind: gpu\n"
      "  fabric: {type: switch, bandwidth: 100 GB/s, latency: 1 us}\n"
      "network:\n"
      "  nic_bandwidth: 100 Gb/s\n"
      "  nic_latency: 2 us\n"
      "  levels:\n"
      "    - {name: leaf, children: 8, latency: 500 ns}\n";
  return sim::Topology::parse(yaml, "<test-cluster>");
}

class Hierarchical : public ::testing::TestWithParam<std::tuple<int, int, DType>> {};

TEST_P(Hierarchical, MatchesTheClosedFormAcrossNodes) {
  const auto [nodes, per_node, dt] = GetParam();
  const sim::Topology topo = nodes_topology(nodes, per_node);
  const int n = nodes * per_node;
  const int64_t c = 10;
  SpawnOptions so;
  so.topology = &topo;
  so.algorithm = Algorithm::hierarchical;
  int wrong = 0;
  RunReport rep = spawn(
      [&](int rank) {
        auto check = [&](const Tensor& t, const std::function<double(int64_t)>& want) {
          const auto got = t.to_vector<double>();
          for (size_t e = 0; e < got.size(); ++e)
            if (got[e] != want(static_cast<int64_t>(e))) ++wrong;
        };
        auto sum_at = [&](int64_t e) {
          double s = 0;
          for (int q = 0; q < n; ++q) s += val(q, e);
          return s;
        };
        Tensor t = filled(dt, c, rank, val);
        all_reduce(t);
        check(t, sum_at);
        Tensor out = Tensor::zeros({n * c}, dt);
        all_gather_into_tensor(out, filled(dt, c, rank, val, rank * c));
        check(out, [&](int64_t e) { return val(static_cast<int>(e / c), e); });
        Tensor rs = Tensor::zeros({c}, dt);
        reduce_scatter_tensor(rs, filled(dt, n * c, rank, val));
        check(rs, [&](int64_t e) { return sum_at(rank * c + e); });
        Tensor b = rank == n - 1 ? filled(dt, c, rank, val) : Tensor::zeros({c}, dt);
        broadcast(b, {ProcessGroup{}, false, Algorithm::automatic, n - 1});
        check(b, [&](int64_t e) { return val(n - 1, e); });
        Tensor r = filled(dt, c, rank, val);
        ReduceOptions ro;
        ro.dst = 1;
        reduce(r, ro);
        if (rank == 1) check(r, sum_at);
      },
      n, so);
  EXPECT_EQ(wrong, 0);
  for (const auto& rec : rep.collectives) EXPECT_EQ(rec.algorithm, Algorithm::hierarchical);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(3, 4),
                                            ::testing::Values(DType::f32, DType::bf16, DType::i32)));

TEST(Hierarchical, UnequalRanksPerNodeIsAClearError) {
  const sim::Topology topo = nodes_topology(2, 4);
  SpawnOptions so;
  so.topology = &topo;
  try {
    spawn(
        [](int) {
          ProcessGroup g = new_group({0, 1, 2, 4});  // 3 ranks on node 0, 1 on node 1
          if (!g.is_member()) return;
          AllreduceOptions o;
          o.group = g;
          o.algorithm = Algorithm::hierarchical;
          Tensor t = Tensor::ones({8});
          all_reduce(t, o);
        },
        8, so);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("same number of group ranks on every node (found 3 and 1)"));
  }
}

}  // namespace
}  // namespace ranksim::runtime
