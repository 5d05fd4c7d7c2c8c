// torch.distributed semantics on the sim backend: groups, p2p, async work and pending writes,
// misuse errors, spawn failure reports, determinism, random data against float64, timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/engine.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using sim::Time;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string error_of(const std::function<void(int)>& fn, int n) {
  try {
    spawn(fn, n);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Distributed, RankAndWorldSizeAndGroups) {
  std::vector<std::string> seen(4);
  spawn(
      [&](int rank) {
        init_process_group("sim");
        EXPECT_TRUE(is_initialized());
        EXPECT_EQ(get_rank(), rank);
        EXPECT_EQ(get_world_size(), 4);
        ProcessGroup odd = new_group({3, 1});
        EXPECT_EQ(odd.ranks(), (std::vector<int>{1, 3}));
        EXPECT_EQ(odd.rank(), rank % 2 == 1 ? rank / 2 : -1);
        auto [mine, all] = new_subgroups_by_enumeration({{0, 2}, {1, 3}});
        EXPECT_EQ(all.size(), 2u);
        EXPECT_EQ(mine.size(), 2);
        EXPECT_EQ(mine.global_rank(0), rank % 2);
        seen[static_cast<size_t>(rank)] = mine.name();
      },
      4);
  EXPECT_EQ(seen[0], "group[0, 2]");
  EXPECT_EQ(seen[3], "group[1, 3]");
}

TEST(Distributed, SubgroupEnumerationMustCoverEveryRankOnce) {
  EXPECT_THAT(error_of(
                  [](int) {
                    new_subgroups_by_enumeration({{0, 1}, {1, 2}});
                  },
                  3),
              HasSubstr("rank 1 is in subgroups 0 and 1"));
  EXPECT_THAT(error_of([](int) { new_subgroups_by_enumeration({{0, 1}}); }, 3), HasSubstr("rank 2 is in no subgroup"));
  EXPECT_THAT(error_of([](int) { new_group({0, 0}); }, 2), HasSubstr("listed twice"));
}

TEST(Distributed, MismatchedCollectivesNameBothRanksAndTheDifference) {
  const std::string msg = error_of(
      [](int rank) {
        Tensor t = Tensor::ones({rank == 2 ? 8 : 4});
        all_reduce(t);
      },
      3);
  EXPECT_THAT(msg, HasSubstr("collective mismatch on world at call #0"));
  EXPECT_THAT(msg, HasSubstr("rank 0 called all_reduce(f32[4], op=SUM) but rank 2 called "
                             "all_reduce(f32[8], op=SUM) (different element counts (4 vs 8))"));
  EXPECT_THAT(error_of(
                  [](int rank) {
                    Tensor t = Tensor::ones({4});
                    if (rank == 0)
                      all_reduce(t);
                    else
                      broadcast(t);
                  },
                  2),
              HasSubstr("different collectives"));
  EXPECT_THAT(error_of(
                  [](int rank) {
                    Tensor t = Tensor::ones({4}, rank == 0 ? DType::f32 : DType::bf16);
                    all_reduce(t);
                  },
                  2),
              HasSubstr("different dtypes"));
}

TEST(Distributed, ANonMemberCallingAGroupCollectiveIsAnError) {
  EXPECT_THAT(error_of(
                  [](int) {
                    ProcessGroup g = new_group({0, 1});
                    Tensor t = Tensor::ones({2});
                    AllreduceOptions o;
                    o.group = g;
                    all_reduce(t, o);
                  },
                  3),
              HasSubstr("rank 2 called all_reduce(f32[2], op=SUM) on group[0, 1], which it is "
                        "not a member of"));
}

TEST(Distributed, AMissingParticipantIsReportedAsADeadlockNotAHang) {
  try {
    spawn(
        [](int rank) {
          Tensor t = Tensor::ones({16});
          if (rank != 1) all_reduce(t);
        },
        3);
    FAIL() << "expected a deadlock";
  } catch (const sim::DeadlockError& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 of 3 ranks are blocked"));
    EXPECT_THAT(e.what(), HasSubstr("all_reduce(f32[16], op=SUM) on world, call #0: waiting for "
                                    "rank 1 to join"));
  }
}

TEST(Distributed, RecvWithoutSendIsADeadlockReport) {
  try {
    spawn(
        [](int rank) {
          Tensor t = Tensor::zeros({4, 4});
          if (rank == 1) recv(t, 0, {ProcessGroup{}, 7});
        },
        2);
    FAIL() << "expected a deadlock";
  } catch (const sim::DeadlockError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 (clock 0 s): recv(src=0, tag=7, world, f32[4, 4]): "
                                    "no matching send posted by rank 0"));
  }
}

TEST(Distributed, SendRecvSizeMismatchIsAnError) {
  EXPECT_THAT(error_of(
                  [](int rank) {
                    if (rank == 0)
                      send(Tensor::ones({4}), 1);
                    else
                      recv(Tensor::zeros({8}), 0);
                  },
                  2),
              HasSubstr("send/recv mismatch: rank 0 sends f32[4] to rank 1 (tag 0) but rank 1 "
                        "receives into f32[8]"));
}

TEST(Distributed, SendRecvMovesDataInOrderPerTag) {
  std::vector<double> got;
  spawn(
      [&](int rank) {
        if (rank == 0) {
          // A blocking send waits for its recv (rendezvous, as with NCCL), so the tag-5 message,
          // received second, is sent asynchronously.
          Work w = isend(Tensor::full({2}, 1.0), 1, {ProcessGroup{}, 5});
          send(Tensor::full({2}, 2.0), 1);
          send(Tensor::full({2}, 3.0), 1);
          w.wait();
        } else {
          Tensor a = Tensor::zeros({2}), b = Tensor::zeros({2}), c = Tensor::zeros({2});
          recv(b, 0);                       // tag 0: the first tag-0 send
          recv(a, 0, {ProcessGroup{}, 5});  // tag 5
          recv(c, 0);
          for (const Tensor& t : {a, b, c}) got.push_back(t.at({1}));
        }
      },
      2);
  EXPECT_EQ(got, (std::vector<double>{1, 2, 3}));
}

TEST(Distributed, RingExchangeWithBatchIsendIrecv) {
  // Each rank passes its value around the ring 3 times: the context-parallel KV ring pattern.
  const int n = 4;
  std::vector<std::vector<double>> seen(n);
  spawn(
      [&](int rank) {
        Tensor cur = Tensor::full({3}, rank);
        for (int step = 0; step < n - 1; ++step) {
          Tensor next = Tensor::zeros({3});
          auto works = batch_isend_irecv(
              {{P2POp::Kind::isend, cur, (rank + 1) % n}, {P2POp::Kind::irecv, next, (rank + n - 1) % n}});
          for (auto& w : works) w.wait();
          cur = next;
          seen[static_cast<size_t>(rank)].push_back(cur.at({0}));
        }
      },
      n);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(seen[static_cast<size_t>(r)],
              (std::vector<double>{double((r + 3) % 4), double((r + 2) % 4), double((r + 1) % 4)}));
}

TEST(Distributed, AsyncWorkCompletesLaterAndReadingTheOutputWaits) {
  spawn(
      [&](int rank) {
        Tensor t = Tensor::full({1024}, rank + 1);
        AllreduceOptions o;
        o.async_op = true;
        const Time posted = sim::this_rank::now();
        Work w = all_reduce(t, o);
        EXPECT_EQ(sim::this_rank::now(), posted);  // returned at once
        // Reading the output waits for the collective first.
        EXPECT_EQ(t.at({0}), 3.0);
        EXPECT_TRUE(w.is_completed());
        EXPECT_GT(sim::this_rank::now(), posted);
        EXPECT_EQ(sim::this_rank::now(), w.completion_time());
        w.wait();  // a second wait is a no-op
      },
      2);
}

TEST(Distributed, AWaitedAsyncOutputIsAPlainTensorAfterSpawn) {
  // The pending write an async collective leaves on its output must not outlive the wait: read
  // outside the run (no rank, no backend), the tensor is plain data.
  std::vector<Tensor> results(3), untouched(3);
  spawn(
      [&](int rank) {
        Tensor t = Tensor::full({8}, rank + 1);
        AllreduceOptions o;
        o.async_op = true;
        Work w = all_reduce(t, o);
        w.wait();
        results[static_cast<size_t>(rank)] = t;
        // Completed through is_completed() alone, never read inside the rank.
        Tensor u = Tensor::full({4}, 10 * (rank + 1));
        Work v = all_reduce(u, o);
        while (!v.is_completed()) {
        }
        untouched[static_cast<size_t>(rank)] = u;
      },
      3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[static_cast<size_t>(r)].to_vector<double>(), std::vector<double>(8, 6.0));
    EXPECT_EQ(untouched[static_cast<size_t>(r)].at({3}), 60.0);
  }
  // A view made outside the run, of a storage whose write was waited, reads without waiting too.
  EXPECT_EQ(results[0].narrow(0, 2, 3).clone().to_vector<double>(), std::vector<double>(3, 6.0));
}

TEST(Distributed, AnUnwaitedAsyncOutputReadsAfterSpawnOnlyWhenItsCollectiveMatched) {
  Tensor matched, lonely;
  spawn(
      [&](int rank) {
        AllreduceOptions o;
        o.async_op = true;
        Tensor t = Tensor::full({2}, rank + 1);
        all_reduce(t, o);  // never waited
        if (rank == 0) matched = t;
        // Only rank 1 posts on the pair group: its call never matches.
        const ProcessGroup pair = new_group({0, 1});
        if (rank == 1) {
          lonely = Tensor::zeros({2});
          o.group = pair;
          all_reduce(lonely, o);
        }
      },
      2);
  EXPECT_EQ(matched.at({1}), 3.0);
  try {
    (void)lonely.at({0});
    FAIL() << "read a tensor whose collective never completed";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("read outside spawn()"));
    EXPECT_THAT(e.what(), HasSubstr("asynchronous all_reduce(f32[2], op=SUM) that writes it never completed"));
  }
}

TEST(Distributed, SpawnReportsEveryFailingRank) {
  try {
    spawn(
        [](int rank) {
          if (rank == 1 || rank == 3) throw std::runtime_error("bad shard " + std::to_string(rank));
          Tensor t = Tensor::ones({4});
          all_reduce(t);
        },
        4);
    FAIL();
  } catch (const sim::RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_THAT(e.what(), HasSubstr("rank 1: bad shard 1"));
    EXPECT_THAT(e.what(), HasSubstr("rank 3: bad shard 3"));
  }
}

TEST(Distributed, CallsOutsideSpawnAreClearErrors) {
  EXPECT_THROW(get_rank(), Error);
  EXPECT_FALSE(is_initialized());
  EXPECT_THROW(spawn([](int) {}, 0), Error);
  EXPECT_THAT(error_of([](int) { init_process_group("nccl"); }, 1), HasSubstr("backend 'nccl'"));
  EXPECT_THAT(error_of([](int) { init_process_group("mpi"); }, 1),
              HasSubstr("backend 'mpi' requested inside a run of the 'sim' backend"));
  EXPECT_THAT([] { init_process_group("gloo"); },
              ThrowsMessage<Error>(HasSubstr("unknown backend 'gloo'; use sim, mpi or nccl")));
  EXPECT_EQ(parse_backend("nccl"), BackendKind::nccl);
  EXPECT_STREQ(to_string(BackendKind::nccl), "nccl");
  EXPECT_EQ(SpawnOptions{}.backend, BackendKind::sim);
  // A run's backend is chosen by the run: outside one, only the default can be named.
  EXPECT_NO_THROW(init_process_group("sim"));
  EXPECT_THAT([] { init_process_group("mpi"); },
              ThrowsMessage<Error>(HasSubstr("requested outside a run; a run's backend is chosen by the run")));
}

TEST(Distributed, AGroupOfAnotherRunIsAnError) {
  ProcessGroup kept;
  spawn(
      [&](int rank) {
        ProcessGroup g = new_group({0, 1});
        if (rank == 0) kept = g;
      },
      2);
  EXPECT_THAT(error_of([&](int) { all_reduce(Tensor::ones({2}), {{kept}}); }, 2),
              HasSubstr("process group world#1 was created by another run"));
}

TEST(Distributed, ShapeAndSplitErrors) {
  EXPECT_THAT(error_of([](int) { all_gather_into_tensor(Tensor::zeros({5}), Tensor::zeros({2})); }, 2),
              HasSubstr("must hold group size (2) x input"));
  EXPECT_THAT(error_of(
                  [](int) {
                    Tensor big = Tensor::zeros({4, 4});
                    all_reduce(big.transpose(0, 1));
                  },
                  2),
              HasSubstr("not contiguous"));
  EXPECT_THAT(error_of(
                  [](int rank) {
                    AllToAllOptions o;
                    o.input_split_sizes = {1, 1};
                    o.output_split_sizes = rank == 0 ? std::vector<int64_t>{2, 0} : std::vector<int64_t>{1, 1};
                    all_to_all_single(Tensor::zeros({2}), Tensor::zeros({2}), o);
                  },
                  2),
              HasSubstr("input_split_sizes and output_split_sizes must agree pairwise"));
  EXPECT_THAT(error_of(
                  [](int) {
                    all_reduce(Tensor::zeros({4}), AllreduceOptions{});
                    broadcast(Tensor::zeros({4}), {ProcessGroup{}, false, Algorithm::automatic, 9});
                  },
                  2),
              HasSubstr("src rank 9 is not in world"));
}

// Random f32 inputs: every rank gets the same bits, within a float64 reference's error bound.
TEST(Distributed, RandomInputsMatchAFloat64ReferenceAndAgreeBitwise) {
  const int n = 7;
  const int64_t c = 1000;
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree, Algorithm::direct}) {
    std::vector<std::vector<float>> results(n);
    spawn(
        [&](int rank) {
          Tensor t = Tensor::randn({c}, 1000 + static_cast<uint64_t>(rank));
          AllreduceOptions o;
          o.algorithm = algo;
          all_reduce(t, o);
          results[static_cast<size_t>(rank)] = t.to_vector<float>();
        },
        n);
    for (int64_t e = 0; e < c; ++e) {
      double ref = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        const double x =
            Tensor::randn({c}, 1000 + static_cast<uint64_t>(r)).to_vector<double>()[static_cast<size_t>(e)];
        ref += x;
        mag += std::fabs(x);
      }
      // n-1 additions, each with relative error at most 2^-24 of a partial sum <= sum |x|.
      const double bound = (n - 1) * std::ldexp(1.0, -24) * mag;
      ASSERT_NEAR(results[0][static_cast<size_t>(e)], ref, bound) << to_string(algo) << " e=" << e;
      for (int r = 1; r < n; ++r)
        ASSERT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(e)], results[0][static_cast<size_t>(e)]);
    }
  }
}

std::string run_program_and_trace() {
  RunReport rep = spawn(
      [](int rank) {
        Tensor t = Tensor::randn({333}, static_cast<uint64_t>(rank));
        all_reduce(t);
        Tensor out = Tensor::zeros({4 * 333});
        all_gather_into_tensor(out, t);
        if (rank % 2 == 0)
          send(t, rank + 1);
        else
          recv(t, rank - 1);
        std::ostringstream os;
        for (float v : out.to_vector<float>()) os << v << ',';
        sim::this_rank::engine().trace().add(
            {rank, sim::SpanKind::other, sim::this_rank::now(), sim::this_rank::now(), os.str(), {}});
      },
      4);
  std::ostringstream os;
  rep.trace.write_chrome_json(os);
  return os.str();
}

TEST(Distributed, TwoRunsGiveTheSameBitsAndTheSameTrace) {
  EXPECT_EQ(run_program_and_trace(), run_program_and_trace());
}

TEST(Distributed, ShapeOnlyTensorsCostTimeButMoveNoData) {
  const RunReport shaped = spawn(
      [](int) {
        Tensor t = Tensor::shape_only({1 << 20});
        all_reduce(t);
      },
      4);
  const RunReport real = spawn(
      [](int) {
        Tensor t = Tensor::zeros({1 << 20});
        all_reduce(t);
      },
      4);
  EXPECT_GT(shaped.makespan, Time::us(10));
  EXPECT_EQ(shaped.makespan, real.makespan);
  ASSERT_EQ(shaped.collectives.size(), 1u);
  EXPECT_EQ(shaped.collectives[0].bytes, 4 << 20);
}

TEST(Distributed, AlgorithmIsChosenPerCallThenPerGroupThenPerRun) {
  SpawnOptions so;
  so.algorithm = Algorithm::direct;
  const RunReport rep = spawn(
      [](int) {
        Tensor t = Tensor::ones({1 << 16});
        all_reduce(t);  // the run's default: direct
        ProcessGroup g = new_group({0, 1, 2, 3});
        g.set_algorithm(Algorithm::tree);
        AllreduceOptions o;
        o.group = g;
        all_reduce(t, o);  // the group's: tree
        o.algorithm = Algorithm::ring;
        all_reduce(t, o);  // the call's: ring
      },
      4, so);
  ASSERT_EQ(rep.collectives.size(), 3u);
  EXPECT_EQ(rep.collectives[0].algorithm, Algorithm::direct);
  EXPECT_EQ(rep.collectives[1].algorithm, Algorithm::tree);
  EXPECT_EQ(rep.collectives[2].algorithm, Algorithm::ring);
}

// On the ideal topology (100 GB/s per device each way, 1 us latency through the switch), a ring
// all-reduce of B bytes on n ranks takes 2(n-1) steps of (1 us + B/n / 100 GB/s).
TEST(Distributed, RingAllReduceTimeMatchesTheClosedForm) {
  const int n = 4;
  const int64_t count = 1 << 20;  // 4 MiB of f32
  const RunReport rep = spawn(
      [&](int) {
        Tensor t = Tensor::shape_only({count});
        AllreduceOptions o;
        o.algorithm = Algorithm::ring;
        all_reduce(t, o);
      },
      n);
  const double step_s = 1e-6 + (4.0 * count / n) / 100e9;
  const double expect = 2 * (n - 1) * step_s;
  EXPECT_NEAR(rep.makespan.seconds(), expect, 1e-9);
}

}  // namespace
}  // namespace ranksim::runtime
