#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "app/workloads.h"
#include "cp/context_parallel.h"
#include "cp/partition.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/cost.h"
#include "sim/engine.h"
#include "tp/mlp.h"
#include "tp/rank_grid.h"

namespace ranksim::app {

namespace {

// A cp_attention step's groups: the cp group, and for a2a+p2p its a2a and p2p subgroups (created
// by every member of the cp group, in step order).
cp::CpGroups cp_attention_groups(const ScenarioStep& st, const runtime::ProcessGroup& cp_group) {
  if (st.cp_comm != "a2a+p2p") return cp::CpGroups(cp_group);
  return cp::hierarchical_cp_groups(cp_group, st.a2a_size, st.p2p_size);
}

// One cp_attention step on this rank: its local q, k, v in the DualChunkSwap layout (heads / tp of
// them), the forward, and unless backward is false the backward from a dout of out's shape.
// Inputs are shape-only, or with real data uniform in [-1, 1) seeded by rank, iteration and tensor.
void run_cp_attention(const ScenarioStep& st, const cp::CpGroups& groups, int tp, bool real_data, int rank,
                      int iteration) {
  const int64_t cp = groups.cp.size();
  const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
  cp::SequenceLayout layout;
  runtime::Shape lead;  // the local tensors' dims before [heads, head_dim]
  if (st.format == "thd") {
    std::vector<int64_t> cu{0};
    for (int64_t len : st.seq_lens) cu.push_back(cu.back() + len);
    std::vector<int64_t> padded = cp::thd_padded_cu_seqlens(cu, cp);
    lead = {padded.back() / cp};
    layout = cp::SequenceLayout::thd(std::move(cu), std::move(padded));
  } else {
    lead = {st.batch, st.seq_lens[0] / cp};
    layout = cp::SequenceLayout::bshd(st.batch, st.seq_lens[0]);
  }
  auto input = [&](int64_t heads, uint64_t which) {
    runtime::Shape shape = lead;
    shape.push_back(heads);
    shape.push_back(st.head_dim);
    const uint64_t seed = (static_cast<uint64_t>(iteration) * 4 + which) * 1000003 + static_cast<uint64_t>(rank);
    return real_data ? runtime::Tensor::uniform(shape, seed, -1.0, 1.0, dt) : runtime::Tensor::shape_only(shape, dt);
  };
  cp::CpOptions opts;
  opts.comm_type = cp::parse_comm_type(st.cp_comm);
  opts.attention.causal = st.mask == "causal";
  opts.attention.window_left = st.window_left;
  opts.attention.window_right = st.window_right;
  const int64_t hq = st.heads / tp, hkv = st.kv_heads / tp;
  const cp::CpForwardResult f =
      cp::attention_with_cp_forward(input(hq, 0), input(hkv, 1), input(hkv, 2), layout, groups, opts);
  if (st.backward) cp::attention_with_cp_backward(input(hq, 3), f.ctx);
}

// A rank_fails or rank_stops fault at a step, on this rank: it fails (throws, as a crashed process
// would) or stops for good. On the sim backend a stopped rank blocks, and the run ends in a
// deadlock report naming it and the ranks left waiting for it; on a process backend it stops
// answering, and its peers give up after RANKSIM_COLLECTIVE_TIMEOUT, as NCCL's watchdog does.
void inject_step_fault(const ScenarioFault& f, const ScenarioStep& st, const RunFlags& flags) {
  const std::string what = f.label + " before step " + std::to_string(f.step) + " (" + st.name + ") of repetition " +
                           std::to_string(f.iteration) +
                           (flags.backend == "sim" ? ", at virtual time " + sim::this_rank::now().str() : "");
  if (f.kind == ScenarioFault::Kind::rank_fails) throw sim::InjectedFault(what + ": failed");
  if (flags.backend == "sim") {
    sim::Engine& engine = sim::this_rank::engine();
    for (;;) engine.block(what + ": stopped");
  }
  std::fprintf(stderr, "rank %d: %s: stopped (its peers wait for it until their timeout)\n", f.rank, what.c_str());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

runtime::RunReport run_steps_workload(const Scenario& sc, const RunFlags& flags, bool trace) {
  return spawn_scenario(sc, flags, trace, [&](int rank) {
    tp::RankGrid grid({{"tp", sc.tp}, {"cp", sc.cp}, {"dp", sc.dp}, {"pp", sc.pp}}, sc.ranks);
    std::map<std::string, runtime::ProcessGroup> groups;
    groups["world"] = runtime::ProcessGroup{};
    groups["tp"] = grid.create_group({"tp"});
    groups["cp"] = grid.create_group({"cp"});
    groups["dp"] = grid.create_group({"dp"});
    groups["pp"] = grid.create_group({"pp"});
    groups["dp_cp"] = grid.create_group({"cp", "dp"});
    groups["tp_cp"] = grid.create_group({"tp", "cp"});
    std::vector<runtime::Work> pending;
    // Layers are built once per rank (weights from full masters, split by TP rank).
    std::map<const ScenarioStep*, tp::ParallelMLP> mlps;
    for (const ScenarioStep& st : sc.steps) {
      if (st.kind != ScenarioStep::Kind::tp_mlp) continue;
      const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
      auto master = [&](int64_t rows, int64_t cols, uint64_t seed) {
        return sc.real_data ? runtime::Tensor::randn({rows, cols}, seed, 0.0, 0.02)
                            : runtime::Tensor::shape_only({rows, cols});
      };
      tp::ParallelMLPOptions mo;
      mo.sequence_parallel = st.sequence_parallel;
      mo.dtype = dt;
      mlps.emplace(
          &st, tp::ParallelMLP(master(st.ffn, st.hidden, 1234), master(st.hidden, st.ffn, 1235), groups.at("tp"), mo));
    }
    std::map<const ScenarioStep*, cp::CpGroups> cp_groups;
    for (const ScenarioStep& st : sc.steps)
      if (st.kind == ScenarioStep::Kind::cp_attention) cp_groups.emplace(&st, cp_attention_groups(st, groups.at("cp")));
    for (int it = 0; it < sc.repeat; ++it) {
      for (std::size_t step = 0; step < sc.steps.size(); ++step) {
        const ScenarioStep& st = sc.steps[step];
        for (const ScenarioFault& f : sc.faults)
          if (f.step == static_cast<int>(step) && f.iteration == it && f.rank == rank) inject_step_fault(f, st, flags);
        if (!st.ranks.empty() && !std::binary_search(st.ranks.begin(), st.ranks.end(), rank)) continue;
        const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
        if (st.kind == ScenarioStep::Kind::cp_attention) {
          run_cp_attention(st, cp_groups.at(&st), sc.tp, sc.real_data, rank, it);
          continue;
        }
        if (st.kind == ScenarioStep::Kind::tp_mlp) {
          tp::ParallelMLP& mlp = mlps.at(&st);
          const int64_t rows = st.sequence_parallel ? st.tokens / sc.tp : st.tokens;
          runtime::Tensor x =
              sc.real_data ? runtime::Tensor::randn({rows, st.hidden}, 77 + static_cast<uint64_t>(rank), 0.0, 1.0, dt)
                           : runtime::Tensor::shape_only({rows, st.hidden}, dt);
          tp::MLPContext ctx;
          runtime::Tensor y = mlp.forward(x, ctx);
          if (st.backward) {
            runtime::Tensor dy =
                sc.real_data ? runtime::Tensor::ones(y.shape(), dt) : runtime::Tensor::shape_only(y.shape(), dt);
            mlp.backward(dy, ctx);
          }
          continue;
        }
        if (st.kind == ScenarioStep::Kind::compute) {
          // A step given as FLOPs and bytes has no shape to look up: the roofline times it.
          runtime::charge({st.name.c_str(), st.flops, st.bytes, dt, sim::KernelShape{sim::KernelClass::other}});
          continue;
        }
        if (st.wait) {
          for (auto& w : pending) w.wait();
          pending.clear();
          continue;
        }
        const runtime::ProcessGroup& g = groups.at(st.group);
        const int n = g.size();
        const int64_t esize = static_cast<int64_t>(runtime::dtype_size(dt));
        auto make = [&](int64_t elems) {
          elems = std::max<int64_t>(elems, 1);
          return sc.real_data ? runtime::Tensor::zeros({elems}, dt) : runtime::Tensor::shape_only({elems}, dt);
        };
        const int64_t count = static_cast<int64_t>(st.bytes) / esize;
        runtime::CollectiveOptions base;
        base.group = g;
        base.async_op = st.async;
        base.algorithm = runtime::parse_algorithm(st.algorithm);
        runtime::Work w;
        if (st.kind == ScenarioStep::Kind::sendrecv) {
          const int me = g.rank();
          runtime::Tensor s = make(count), d = make(count);
          auto ws = runtime::batch_isend_irecv({{runtime::P2POp::Kind::isend, s, g.global_rank((me + 1) % n), g},
                                                {runtime::P2POp::Kind::irecv, d, g.global_rank((me + n - 1) % n), g}});
          for (auto& x : ws) (st.async ? pending.push_back(x) : x.wait());
          continue;
        }
        // read_step admits the collectives of kCollectiveOps only.
        switch (*runtime::parse_collective_kind(st.name)) {
          case runtime::CollectiveKind::all_reduce: {
            runtime::AllreduceOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            w = runtime::all_reduce(make(count), o);
            break;
          }
          case runtime::CollectiveKind::all_gather: {
            runtime::AllgatherOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            const int64_t per = std::max<int64_t>(count / n, 1);
            w = runtime::all_gather_into_tensor(make(per * n), make(per), o);
            break;
          }
          case runtime::CollectiveKind::reduce_scatter: {
            runtime::ReduceScatterOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            const int64_t per = std::max<int64_t>(count / n, 1);
            w = runtime::reduce_scatter_tensor(make(per), make(per * n), o);
            break;
          }
          case runtime::CollectiveKind::all_to_all: {
            runtime::AllToAllOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            const int64_t per = std::max<int64_t>(count / n, 1);
            w = runtime::all_to_all_single(make(per * n), make(per * n), o);
            break;
          }
          case runtime::CollectiveKind::broadcast: {
            runtime::BroadcastOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            o.src = g.global_rank(0);
            w = runtime::broadcast(make(count), o);
            break;
          }
          default: {
            runtime::BarrierOptions o;
            static_cast<runtime::CollectiveOptions&>(o) = base;
            w = runtime::barrier(o);
          }
        }
        if (st.async) pending.push_back(w);
      }
    }
    for (auto& w : pending) w.wait();
  });
}

}  // namespace ranksim::app
