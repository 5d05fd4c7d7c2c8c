#include "models/train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cp/context_parallel.h"
#include "models/grad_buckets.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "sim/engine.h"
#include "sim/error.h"
#include "tp/parallel_state.h"
#include "tp/sharding.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using i64 = std::int64_t;

namespace {

std::string str(i64 v) { return std::to_string(v); }

std::string shard_file(const std::string& dir, i64 tp_rank, i64 pp_rank) {
  return dir + "/shard-tp" + str(tp_rank) + "-pp" + str(pp_rank) + ".safetensors";
}

// Model chunk `chunk` of pipeline rank `rank`: global chunk chunk * pp + rank of pp * v.
Stage pipeline_stage(const TrainSpec& s, int rank, int chunk) {
  return Stage{chunk * s.pp + rank, s.pp * s.virtual_stages, s.first_stage_layers, s.last_stage_layers};
}

// The layout's checks that need no run.
void check_spec(const TrainSpec& s) {
  if (s.tp < 1 || s.cp < 1 || s.dp < 1 || s.pp < 1) throw Error("training: every parallel size must be >= 1");
  if (s.steps < 0) throw Error("training: steps must be >= 0, got " + str(s.steps));
  if (s.micro_batches < 1) throw Error("training: micro_batches must be >= 1, got " + str(s.micro_batches));
  if (s.zero != 0 && s.zero != 1 && s.zero != 3) {
    throw Error("training: zero must be 0, 1 (the distributed optimizer) or 3 (FSDP), got " + str(s.zero));
  }
  const bool uneven = s.first_stage_layers != -1 || s.last_stage_layers != -1;
  if (s.virtual_stages < 1) throw Error("training: virtual_stages must be >= 1, got " + str(s.virtual_stages));
  if (uneven) {
    stage_layers(s.config.layers, pipeline_stage(s, 0, 0), "training");  // the first and last model chunks
  } else if (s.config.layers % s.pp != 0) {
    throw Error("training: " + str(s.config.layers) + " layers cannot be split evenly over pp=" + str(s.pp) +
                " stages; use a pp that divides model.layers");
  }
  if (s.virtual_stages > 1) {
    if (s.pp < 2) throw Error("training: virtual_stages (the interleaved schedule) needs pp >= 2");
    if (!uneven && s.config.layers % (s.pp * s.virtual_stages) != 0) {
      throw Error("training: " + str(s.config.layers) + " layers cannot be split into pp=" + str(s.pp) + " x " +
                  str(s.virtual_stages) + " virtual stages; use a layer count that is a multiple of " +
                  str(s.pp * s.virtual_stages));
    }
    if (s.micro_batches % s.pp != 0) {
      throw Error("training: the interleaved schedule runs micro-batches in groups of pp: micro_batches " +
                  str(s.micro_batches) + " is not a multiple of pp=" + str(s.pp));
    }
  }
  if (s.clip_grad_norm && !(*s.clip_grad_norm > 0)) throw Error("training: clip_grad_norm must be > 0");
  if (s.bucket_size < 0) throw Error("training: bucket_size must be >= 0, got " + str(s.bucket_size));
  if (!s.batch_checked) check_batch(s.batch, s.config, s.cp, "batch");
  // The splits' errors depend on the counts alone (every DP part and micro-batch has the same
  // share), so the first of each says what any would; every rank checks, none slices them all.
  (void)batch_slice(batch_slice(s.batch, s.dp, 0, "dp"), s.micro_batches, 0, "micro_batches");
}

// One rank's pipeline stage and what it needs for a training step.
struct Runner {
  const TrainSpec& spec;
  tp::ParallelState ps;
  // This rank's model chunks: one, or virtual_stages with the interleaved schedule (chunk j of
  // pipeline rank r is global chunk j * pp + r of pp * virtual_stages).
  std::vector<Transformer> chunks;
  Batch dp_part;  // this DP rank's part of the global batch
  // This rank's share of each micro-batch, made when its first forward needs it and dropped
  // after its last backward: a step holds only the micro-batches in flight (a pipeline's
  // warm-up), not all of them (a shape-only step of thousands of ranks would otherwise hold
  // every rank's index vectors of every micro-batch).
  std::vector<std::optional<LocalBatch>> micro;
  std::vector<int> backwards_done;                     // per micro-batch, of the step in progress
  std::shared_ptr<const cp::TokenInfo> shared_tokens;  // the last micro-batch's tokens
  double total_tokens = 0;                             // labelled tokens of the whole global batch
  runtime::ProcessGroup pp, dp_cp;
  double pipeline_wait = 0;  // virtual seconds blocked in pipeline receives
  bool data = true;          // real numbers (not shape-only weights)

  Runner(const TrainSpec& s, tp::ParallelState state, const TransformerGroups& groups)
      : spec(s), ps(std::move(state)), pp(ps.pp().group), dp_cp(ps.dp_cp().group) {
    const int v = s.virtual_stages;
    for (int j = 0; j < v; ++j) {
      chunks.emplace_back(s.config, s.weights, groups, s.attention, pipeline_stage(s, ps.pp().rank, j));
    }
    const auto params = named_parameters();  // (before FSDP releases any value)
    data = params.empty() || params.front().second->value.has_data();
    dp_part = batch_slice(s.batch, s.dp, ps.dp().rank, "dp");
    if (!data && dp_part.format == cp::Format::bshd) {
      // A shape-only step reads no token id or label (the embedding and the loss take their
      // shapes): each micro-batch's ids and labels hold no host bytes, and are charged and counted
      // as before (a clone of a shape-only tensor costs what its data would).
      dp_part.input_ids = Tensor::shape_only(dp_part.input_ids.shape(), dp_part.input_ids.dtype());
      dp_part.labels = Tensor::shape_only(dp_part.labels.shape(), dp_part.labels.dtype());
    }
    micro.resize(static_cast<std::size_t>(s.micro_batches));
    backwards_done.assign(static_cast<std::size_t>(s.micro_batches), 0);
    total_tokens = static_cast<double>(s.labelled_tokens >= 0 ? s.labelled_tokens : labelled_tokens(s.batch));
  }

  int peer(int stage) const { return pp.global_rank(stage); }
  const LocalBatch& micro_batch(int m) {
    std::optional<LocalBatch>& b = micro[static_cast<std::size_t>(m)];
    if (!b) {
      b = shard_batch(batch_slice(dp_part, spec.micro_batches, m, "micro_batches"), spec.cp, ps.cp().rank);
      // they order a dump's logits (gather_logits); the training loop reads neither
      std::vector<i64>().swap(b->global_rows);
      std::vector<i64>().swap(b->real_rows);
      // micro-batches of equal rows have the same tokens (BSHD): one copy for all of them
      if (shared_tokens && shared_tokens->position == b->tokens().position &&
          shared_tokens->segment == b->tokens().segment) {
        b->token_info = shared_tokens;
      } else {
        shared_tokens = b->token_info;
      }
    }
    return *b;
  }
  Tensor activation(const LocalBatch& b) const {
    const Shape shape = chunks.front().hidden_shape(b);
    return data ? Tensor::zeros(shape, spec.config.dtype) : Tensor::shape_only(shape, spec.config.dtype);
  }
  // Every chunk's parameters, chunk by chunk (increasing layer order).
  std::vector<std::pair<std::string, tp::Parameter*>> named_parameters() {
    std::vector<std::pair<std::string, tp::Parameter*>> out;
    for (Transformer& c : chunks) {
      for (auto& p : c.named_parameters()) out.push_back(p);
    }
    return out;
  }
  std::vector<std::pair<std::string, tp::Parameter*>> block_parameters(i64 layer) {
    for (Transformer& c : chunks) {
      if (layer >= c.first_layer() && layer < c.first_layer() + c.num_layers()) return c.block_parameters(layer);
    }
    throw Error("training: layer " + str(layer) + " is not on pipeline stage " + str(ps.pp().rank));
  }
  const TransformerGroups& groups() const { return chunks.front().groups(); }

  // One pass of the schedule: a forward or a backward of micro-batch `micro` through model chunk
  // `chunk`.
  struct Pass {
    bool forward;
    int chunk, micro;
  };
  // Megatron's 1F1B: warm-up forwards, then one forward and one backward, then cool-down backwards.
  // Non-interleaved (one chunk): pp - 1 - rank warm-up forwards. Interleaved (v chunks, Megatron's
  // forward_backward_pipelining_with_interleaving): virtual micro-batch k runs chunk (k mod pp*v) / pp
  // (reversed for backward) on micro-batch (k / (pp*v)) * pp + k mod pp, after
  // 2 (pp - 1 - rank) + (v - 1) pp warm-up forwards (all of them when micro_batches == pp).
  std::vector<Pass> schedule() const {
    const int p = ps.pp().size, r = ps.pp().rank, v = spec.virtual_stages, m = spec.micro_batches;
    const int total = m * v;
    int warmup = 0;
    if (v == 1) {
      warmup = std::min(p - r - 1, m);
    } else {
      warmup = m == p ? total : std::min(2 * (p - r - 1) + (v - 1) * p, total);
    }
    auto pass = [&](bool forward, int k) {
      const int in_group = k % (p * v), chunk = in_group / p;
      return Pass{forward, forward ? chunk : v - 1 - chunk, (k / (p * v)) * p + k % p};
    };
    std::vector<Pass> out;
    int f = 0, b = 0;
    while (f < warmup) out.push_back(pass(true, f++));
    while (f < total) {
      out.push_back(pass(true, f++));
      out.push_back(pass(false, b++));
    }
    while (b < total) out.push_back(pass(false, b++));
    return out;
  }

  // One step's forward and backward over every micro-batch, in schedule() order, across the
  // pipeline stages. Sends are non-blocking, receives block, so the stages wait on each other
  // exactly where the schedule's bubble is; each (chunk, direction) has its own tag. Gradient
  // buckets (one per block, then the embedding and head parameters) are all-reduced over DP x CP
  // as soon as the last micro-batch's backward completes them, unless ZeRO-1 reduce-scatters them
  // later. Returns this stage's sum of the loss over its tokens (last stage; 0 elsewhere).
  double forward_backward() {
    const int p = ps.pp().size, r = ps.pp().rank, v = spec.virtual_stages;
    const int m_count = spec.micro_batches, chunks_total = p * v;
    std::vector<std::vector<TransformerContext>> ctx(
        static_cast<std::size_t>(v), std::vector<TransformerContext>(static_cast<std::size_t>(m_count)));
    std::vector<Tensor> dlogits(static_cast<std::size_t>(m_count));
    std::vector<runtime::Work> sends;
    double loss_sum = 0;
    // DP x CP reduction in buckets as the last micro-batch completes the gradients: all-reduced,
    // or reduce-scattered into the optimizer's slices (ZeRO-1, FSDP)
    const bool reduce = spec.zero != 0 || dp_cp.size() > 1;
    GradBuckets buckets(dp_cp, spec.zero == 0 ? GradBuckets::Mode::all_reduce : GradBuckets::Mode::reduce_scatter,
                        spec.bucket_size);
    // activations to global chunk g carry tag 2g, their gradients back from it 2g + 1
    auto p2p = [&](int tag) {
      runtime::P2POptions o;
      o.group = pp;
      o.tag = tag;
      return o;
    };
    auto receive = [&](Tensor& t, int stage, int tag) {
      const sim::Time t0 = sim::this_rank::now();
      runtime::recv(t, peer(stage), p2p(tag));
      pipeline_wait += (sim::this_rank::now() - t0).seconds();
    };
    const int prev = (r + p - 1) % p, next = (r + 1) % p;
    for (const Pass& pass : schedule()) {
      const int g = pass.chunk * p + r;  // global chunk
      const bool first = g == 0, last = g == chunks_total - 1;
      const LocalBatch& b = micro_batch(pass.micro);
      Transformer& model = chunks[static_cast<std::size_t>(pass.chunk)];
      TransformerContext& c = ctx[static_cast<std::size_t>(pass.chunk)][static_cast<std::size_t>(pass.micro)];
      if (pass.forward) {
        Tensor input;
        if (!first) {
          input = activation(b);
          receive(input, prev, 2 * g);
        }
        const Tensor out = model.stage_forward(b, input, c);
        if (last) {
          const runtime::MemoryPhase phase("loss");
          LossSum ls = cross_entropy_sum(out, b.labels, total_tokens, model.vocab_group());
          loss_sum += ls.sum;
          dlogits[static_cast<std::size_t>(pass.micro)] = std::move(ls.dlogits);
        } else {
          sends.push_back(runtime::isend(out, peer(next), p2p(2 * (g + 1))));
        }
        continue;
      }
      Tensor dout;
      if (last) {
        dout = std::move(dlogits[static_cast<std::size_t>(pass.micro)]);
      } else {
        dout = activation(b);
        receive(dout, next, 2 * g + 1);
      }
      std::function<void(i64)> hook;
      if (pass.micro == m_count - 1 && reduce) {
        hook = [&](i64 layer) {
          const auto block = model.block_parameters(layer);
          model.reduce_tp_partial_gradients(block);
          buckets.add(block);
        };
      }
      const Tensor dx = model.stage_backward(std::move(dout), b, c, hook);
      c = TransformerContext{};  // activations freed as in 1F1B
      if (!first) sends.push_back(runtime::isend(dx, peer(prev), p2p(2 * (g - 1) + 1)));
      // the micro-batch's last backward on this rank (one per model chunk): its tokens go too
      if (++backwards_done[static_cast<std::size_t>(pass.micro)] == v) {
        backwards_done[static_cast<std::size_t>(pass.micro)] = 0;
        micro[static_cast<std::size_t>(pass.micro)].reset();
      }
    }
    const runtime::MemoryPhase phase("gradient reduction");
    if (!reduce) {
      chunks.front().reduce_tp_partial_gradients(named_parameters());
    } else {
      // the embedding and head parameters: one last bucket
      std::vector<std::pair<std::string, tp::Parameter*>> rest;
      for (auto& [name, prm] : named_parameters()) {
        if (name == "embedding.weight" || name == "position_embedding.weight" || name.rfind("final_ln.", 0) == 0 ||
            name.rfind("output.", 0) == 0) {
          rest.emplace_back(name, prm);
        }
      }
      chunks.front().reduce_tp_partial_gradients(rest);
      buckets.add(rest);
      buckets.finish();
    }
    for (auto& w : sends) w.wait();
    return loss_sum;
  }

  // The step's loss on every rank: the last stage's sums over DP x CP, sent to every stage.
  double global_loss(double local_sum) {
    Tensor t = Tensor::from_vector(std::vector<double>{local_sum}, {1}, DType::f64);
    if (dp_cp.size() > 1) {
      runtime::AllreduceOptions o;
      o.group = dp_cp;
      runtime::all_reduce(t, o).wait();
    }
    if (pp.size() > 1) {
      runtime::BroadcastOptions o;
      o.group = pp;
      o.src = peer(pp.size() - 1);
      runtime::broadcast(t, o).wait();
    }
    return data ? t.to_vector<double>()[0] / total_tokens : std::numeric_limits<double>::quiet_NaN();
  }

  // Full-shape tensors of every parameter on every rank, from each stage's TP-full tensors
  // (mine: key = prefix + name): broadcast over PP from the stage that owns the parameter.
  std::vector<std::pair<std::string, Tensor>> consolidate(const std::map<std::string, Tensor>& mine,
                                                          const std::string& prefix) const {
    std::vector<std::pair<std::string, Tensor>> out;
    // the pipeline rank of each layer
    std::vector<int> layer_owner(static_cast<std::size_t>(spec.config.layers), 0);
    for (int j = 0; j < spec.virtual_stages; ++j) {
      for (int q = 0; q < spec.pp; ++q) {
        const StageLayers sl = stage_layers(spec.config.layers, pipeline_stage(spec, q, j), "training");
        for (i64 l = sl.first; l < sl.first + sl.count; ++l) layer_owner[static_cast<std::size_t>(l)] = q;
      }
    }
    for (const auto& [name, shape] : parameter_shapes(spec.config)) {
      int owner = 0;
      if (name.rfind("final_ln.", 0) == 0 || name.rfind("output.", 0) == 0) {
        owner = spec.pp - 1;
      } else if (name != "embedding.weight" && name != "position_embedding.weight") {
        for (i64 l = 0; l < spec.config.layers; ++l)
          if (name.rfind(block_parameter_name(spec.config, l, ""), 0) == 0)
            owner = layer_owner[static_cast<std::size_t>(l)];
      }
      const auto it = mine.find(prefix + name);
      Tensor t = it != mine.end() ? it->second.to(DType::f32).contiguous() : Tensor::zeros(shape, DType::f32);
      if (spec.pp > 1) {
        runtime::BroadcastOptions o;
        o.group = pp;
        o.src = pp.global_rank(owner);
        runtime::broadcast(t, o).wait();
      }
      out.emplace_back(prefix + name, t);
    }
    return out;
  }
};

}  // namespace

std::int64_t labelled_tokens(const Batch& batch) {
  i64 n = 0;
  for (i64 l : batch.labels.to(DType::i64).to_vector<i64>()) n += l != kIgnoreIndex ? 1 : 0;
  return n;
}

TrainResult train(const TrainSpec& spec) {
  const int world = runtime::get_world_size();
  const int layout = spec.tp * spec.cp * spec.dp * spec.pp;
  if (layout != world) {
    throw Error("training: tp=" + str(spec.tp) + " x cp=" + str(spec.cp) + " x dp=" + str(spec.dp) +
                " x pp=" + str(spec.pp) + " = " + str(layout) + " ranks, but the run has " + str(world));
  }
  check_spec(spec);
  tp::ParallelState ps = tp::initialize_model_parallel(spec.tp, spec.pp, spec.cp);
  TransformerGroups groups;
  groups.tp = ps.tp().group;
  groups.cp = transformer_cp_groups(ps.cp().group, spec.attention);
  groups.loss = ps.dp_cp().group;
  if (spec.zero == 3) groups.fsdp = ps.dp_cp().group;
  Runner r(spec, std::move(ps), groups);
  const bool data = r.data;
  std::vector<std::pair<std::string, tp::Parameter*>> params = r.named_parameters();
  AdamW opt(params, AdamW::Groups{r.groups().tp, r.pp, r.dp_cp}, spec.optimizer, spec.zero == 1, spec.optimizer_state,
            spec.zero == 3, /*sliced_grads=*/spec.zero != 0);
  TrainResult result;
  for (int step = 0; step < spec.steps; ++step) {
    for (Transformer& c : r.chunks) c.zero_grad();
    const double local = r.forward_backward();
    result.losses.push_back(r.global_loss(local));
    const runtime::MemoryPhase phase("optimizer step");
    result.grad_norms.push_back(opt.step(spec.clip_grad_norm));
  }
  result.pipeline_wait_seconds = r.pipeline_wait;
  if (!data) return result;
  for (Transformer& c : r.chunks) c.gather_parameters();  // FSDP: the values, whole again
  const runtime::ProcessGroup& tpg = r.groups().tp;
  std::map<std::string, Tensor> mine;
  for (const auto& [name, p] : params) mine[name] = p->full_value(tpg);
  result.params = r.consolidate(mine, "");
  // the optimizer state, the same way: ZeRO slices gathered, TP shards joined, stages broadcast
  std::map<std::string, Tensor> state;
  const std::map<std::string, Tensor> shard = opt.shard_state();
  for (const auto& [name, p] : params) {
    for (const char* k : {"exp_avg.", "exp_avg_sq."}) {
      const Tensor& t = shard.at(k + name);
      state[k + name] = p->partition_dim < 0 ? t : tp::gather_full(t, p->partition_dim, tpg, p->partition_stride);
    }
  }
  for (const char* k : {"exp_avg.", "exp_avg_sq."})
    for (auto& [key, t] : r.consolidate(state, k)) result.optimizer_state[key] = t;
  result.optimizer_state["step"] = Tensor::full({}, static_cast<double>(opt.steps()), DType::f32);
  if (!spec.shard_dir.empty() && r.ps.dp().rank == 0 && r.ps.cp().rank == 0) {
    // this (tp, pp) rank's shard: parameters and optimizer state at the TP-shard shape
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta{{"tp", str(spec.tp)},
                                            {"pp", str(spec.pp)},
                                            {"tp_rank", str(tpg.rank())},
                                            {"pp_rank", str(r.ps.pp().rank)},
                                            {"step", str(opt.steps())}};
    for (const auto& [name, p] : params) {
      tensors.emplace_back(name, p->value.to(DType::f32));
      for (const char* k : {"exp_avg.", "exp_avg_sq."})
        tensors.emplace_back(std::string("optimizer.") + k + name, shard.at(k + name));
      meta["partition." + name] = str(p->partition_dim) + "," + str(p->partition_stride);
    }
    runtime::save_safetensors(shard_file(spec.shard_dir, tpg.rank(), r.ps.pp().rank), tensors, meta);
  }
  return result;
}

TrainResult run_training(const TrainSpec& spec, const runtime::SpawnOptions& options, runtime::RunReport* report) {
  check_spec(spec);
  TrainResult result;
  runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        TrainResult t = train(spec);
        if (rank == 0) result = std::move(t);
      },
      spec.tp * spec.cp * spec.dp * spec.pp, options);
  if (report) *report = std::move(rep);
  return result;
}

}  // namespace ranksim::models

namespace ranksim::models {

namespace {
std::string number_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

void save_checkpoint(const std::string& path, const TrainResult& r) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : r.params) tensors.emplace_back(name, t.to(DType::f32));
  for (const auto& [key, t] : r.optimizer_state) tensors.emplace_back("optimizer." + key, t.to(DType::f32));
  runtime::save_safetensors(path, tensors, {{"format", "ranksim reference transformer checkpoint"}});
}

std::pair<Weights, CheckpointState> load_checkpoint(const std::string& path, const TransformerConfig& config) {
  const runtime::SafetensorsFile f = runtime::load_safetensors(path);
  Weights w = checked_weights(f, config);
  CheckpointState st;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind("optimizer.", 0) == 0) st[name.substr(10)] = t.to(DType::f32);
  }
  if (!st.empty()) {
    if (!st.count("step")) throw Error(path + ": optimizer state without 'optimizer.step'");
    // The step count is a whole number of steps already taken; the second moments are squares.
    const Tensor& step = st.at("step");
    const double n = step.numel() == 1 ? step.to_vector<double>()[0] : -1;
    if (step.numel() != 1 || !(n >= 0) || n > double(1 << 24) || n != std::floor(n)) {
      throw Error(path + ": 'optimizer.step' must hold one whole number of steps, 0 to 2^24, got " +
                  (step.numel() == 1 ? number_str(n) : step.str()));
    }
    for (const auto& [key, t] : st) {
      if (key == "step") continue;
      const bool square = key.rfind("exp_avg_sq.", 0) == 0;
      const std::vector<float> v = t.to_vector<float>();
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i]) || (square && v[i] < 0)) {
          throw Error(path + ": 'optimizer." + key + "' holds " + number_str(v[i]) + " at element " +
                      std::to_string(i) + (square ? "; second moments must be finite and >= 0" : "; must be finite"));
        }
      }
    }
    for (const auto& [name, shape] : parameter_shapes(config)) {
      for (const char* k : {"exp_avg.", "exp_avg_sq."}) {
        const auto it = st.find(k + name);
        if (it == st.end()) throw Error(path + ": missing 'optimizer." + k + name + "'");
        if (it->second.shape() != shape) {
          throw Error(path + ": 'optimizer." + k + name + "' is " + it->second.str() + ", expected " +
                      runtime::shape_str(shape));
        }
      }
    }
  }
  return {std::move(w), std::move(st)};
}

void write_train_dump(const std::string& path, const TrainResult& r) {
  std::vector<float> losses(r.losses.begin(), r.losses.end());
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("losses", Tensor::from_vector(losses, {static_cast<i64>(losses.size())}));
  for (const auto& [name, t] : r.params) tensors.emplace_back("param/" + name, t.to(DType::f32));
  for (const auto& [name, t] : r.grads) tensors.emplace_back("grad/" + name, t.to(DType::f32));
  runtime::save_safetensors(path, tensors, {{"format", "ranksim reference transformer training dump"}});
}

}  // namespace ranksim::models

namespace ranksim::models {

std::pair<Weights, CheckpointState> consolidate_shards(const std::string& dir, const TransformerConfig& config) {
  const runtime::SafetensorsFile first = runtime::load_safetensors(shard_file(dir, 0, 0));
  auto meta = [](const runtime::SafetensorsFile& f, const std::string& key) {
    const auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw Error(f.path + ": not a ranksim shard file (no '" + key + "' in its metadata)");
    return it->second;
  };
  const i64 tp = std::stoll(meta(first, "tp")), pp = std::stoll(meta(first, "pp"));
  const std::string step = meta(first, "step");
  std::vector<std::vector<runtime::SafetensorsFile>> files(static_cast<std::size_t>(pp));
  for (i64 p = 0; p < pp; ++p) {
    for (i64 t = 0; t < tp; ++t) {
      runtime::SafetensorsFile f = runtime::load_safetensors(shard_file(dir, t, p));
      if (meta(f, "tp") != str(tp) || meta(f, "pp") != str(pp) || meta(f, "tp_rank") != str(t) ||
          meta(f, "pp_rank") != str(p) || meta(f, "step") != step) {
        throw Error(f.path + ": its layout (tp " + meta(f, "tp") + ", pp " + meta(f, "pp") + ", step " +
                    meta(f, "step") + ") disagrees with " + first.path + " (tp " + str(tp) + ", pp " + str(pp) +
                    ", step " + step + ")");
      }
      files[static_cast<std::size_t>(p)].push_back(std::move(f));
    }
  }
  // Joins the TP shards of one tensor: shard r holds pieces r, r + tp, ... of tp * stride pieces
  // along dim (tp/sharding.h), so piece j of every shard, in rank order, then piece j + 1, ...
  auto join = [&](const std::vector<runtime::SafetensorsFile>& stage, const std::string& key, const std::string& name) {
    const std::string part = meta(stage[0], "partition." + name);
    const i64 dim = std::stoll(part.substr(0, part.find(','))), stride = std::stoll(part.substr(part.find(',') + 1));
    if (dim < 0) return stage[0].at(key).to(DType::f32);
    std::vector<Tensor> pieces;
    for (i64 j = 0; j < stride; ++j) {
      for (i64 t = 0; t < tp; ++t) {
        const Tensor& s = stage[static_cast<std::size_t>(t)].at(key);
        const i64 len = s.size(dim) / stride;
        pieces.push_back(s.narrow(dim, j * len, len));
      }
    }
    return runtime::cat(pieces, dim).to(DType::f32);
  };
  runtime::SafetensorsFile joined;
  joined.path = dir;
  for (const auto& stage : files) {
    for (const auto& [key, t] : stage[0].tensors) {
      if (key.rfind("optimizer.", 0) == 0) continue;
      joined.tensors.emplace_back(key, join(stage, key, key));
      for (const char* k : {"exp_avg.", "exp_avg_sq."}) {
        joined.tensors.emplace_back(std::string("optimizer.") + k + key,
                                    join(stage, std::string("optimizer.") + k + key, key));
      }
    }
  }
  Weights w = checked_weights(joined, config);
  CheckpointState st;
  for (const auto& [key, t] : joined.tensors) {
    if (key.rfind("optimizer.", 0) == 0) st[key.substr(10)] = t;
  }
  st["step"] = Tensor::full({}, std::stod(step), DType::f32);
  return {std::move(w), std::move(st)};
}

}  // namespace ranksim::models
