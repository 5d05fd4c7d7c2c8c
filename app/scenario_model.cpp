#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "app/scenario_reader.h"
#include "cp/context_parallel.h"
#include "models/run.h"
#include "models/validation.h"
#include "sim/error.h"

namespace ranksim::app {

namespace {

namespace fs = std::filesystem;

double fraction(const ScenarioReader& r, const YAML::Node& n, const std::string& what) {
  const double v = r.number(n, what);
  if (v > 1) r.fail(n, what + " is a share between 0 and 1, got " + n.Scalar());
  return v;
}

std::int64_t non_negative_int(const ScenarioReader& r, const YAML::Node& n, const std::string& what) {
  const std::string v = r.str(n, what);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  r.fail(n, what + " must be a non-negative integer, got '" + v + "'");
}

// `encoder:` beside `model:`: the two-model workload (models/multimodal.h). The encoder's grid must
// cover the same ranks; what the multimodal loop does not do is an error at its key.
void read_encoder(const YAML::Node& root, const YAML::Node& e, const ScenarioReader& r, const Scenario& sc,
                  ModelWorkload& m) {
  r.known_keys(e, section_keys("encoder"), "encoder");
  EncoderSettings enc;
  if (auto v = entry(e, "tp"); v.IsDefined()) enc.tp = r.positive_int(v, "encoder.tp");
  if (auto v = entry(e, "dp"); v.IsDefined()) enc.dp = r.positive_int(v, "encoder.dp");
  if (auto v = entry(e, "features"); v.IsDefined()) enc.config.features = r.positive_int(v, "encoder.features");
  if (auto v = entry(e, "ffn"); v.IsDefined()) enc.config.ffn = r.positive_int(v, "encoder.ffn");
  if (enc.tp * enc.dp != sc.ranks)
    r.fail(e, "encoder tp=" + std::to_string(enc.tp) + " x dp=" + std::to_string(enc.dp) + " = " +
                  std::to_string(enc.tp * enc.dp) + " ranks, but the transformer's layout tp=" + std::to_string(sc.tp) +
                  " x cp=" + std::to_string(sc.cp) + " x dp=" + std::to_string(sc.dp) + " has " +
                  std::to_string(sc.ranks) + "; both grids cover the same ranks");
  if (enc.config.ffn % enc.tp != 0)
    r.fail(e, "encoder.ffn " + std::to_string(enc.config.ffn) +
                  " is not divisible by encoder.tp=" + std::to_string(enc.tp));
  if (m.attention.format != cp::Format::bshd)
    r.fail(entry(root, "model"),
           "with an encoder the model's format must be bshd: the bridge moves [batch, seq, hidden]");
  if (sc.pp != 1)
    r.fail(entry(root, "parallel"), "with an encoder, pp must be 1 (the multimodal loop has no pipeline)");
  if (m.train) {
    const YAML::Node t = entry(root, "train");
    const TrainSettings& ts = *m.train;
    if (ts.micro_batches != 1 || ts.zero != 0 || ts.clip_grad_norm || !ts.checkpoint.empty() || !ts.shards.empty())
      r.fail(t,
             "with an encoder, train takes steps and optimizer only (micro_batches, zero, clip_grad_norm, "
             "checkpoint and shards belong to the transformer's own training)");
  } else {
    m.train = TrainSettings{};  // one step
  }
  const YAML::Node par = entry(root, "parallel");
  if (const YAML::Node o = par.IsDefined() ? entry(par, "order") : YAML::Node(YAML::NodeType::Undefined);
      o.IsDefined()) {
    if (!o.IsSequence() || o.size() != 3)
      r.fail(o, "parallel.order must list tp, cp and dp, fastest first, e.g. [tp, cp, dp]");
    m.order.clear();
    for (const YAML::Node& x : o) m.order.push_back(r.one_of(x, "parallel.order", {"tp", "cp", "dp"}));
  }
  m.encoder = enc;
}

}  // namespace

// Megatron's batch sizes, in sequences: the global batch is every sequence of the batch, and the
// micro-batch size sets the micro-batch count per DP rank.
void resolve_batch_sizes(const YAML::Node& root, const ScenarioReader& r, const Scenario& sc,
                         const models::Batch& batch, TrainSettings& ts) {
  const YAML::Node t = entry(root, "train");
  const std::int64_t n = batch.format == cp::Format::thd ? static_cast<std::int64_t>(batch.cu_seqlens.size()) - 1
                                                         : batch.input_ids.size(0);
  const std::string seqs = std::to_string(n) + (batch.format == cp::Format::thd ? " sequences" : " rows");
  if (ts.global_batch_size && ts.global_batch_size != n)
    r.fail(entry(t, "global_batch_size"), "train.global_batch_size " + std::to_string(ts.global_batch_size) +
                                              " but the batch has " + seqs +
                                              "; the global batch is every sequence of a step");
  if (!ts.micro_batch_size) return;
  const std::int64_t per = static_cast<std::int64_t>(sc.dp) * ts.micro_batch_size;
  if (n % per != 0)
    r.fail(entry(t, "micro_batch_size"), "the batch's " + seqs + " do not split into dp=" + std::to_string(sc.dp) +
                                             " x micro_batch_size=" + std::to_string(ts.micro_batch_size) +
                                             " micro-batches");
  ts.micro_batches = static_cast<int>(n / per);
  if (ts.virtual_stages > 1 && ts.micro_batches % sc.pp != 0)
    r.fail(entry(t, "micro_batch_size"),
           "the interleaved schedule runs micro-batches in groups of pp: " + std::to_string(ts.micro_batches) +
               " micro-batches per DP rank (" + seqs +
               " / (dp x micro_batch_size)) is not a multiple of pp=" + std::to_string(sc.pp));
}

// The `model:` workload and its companions `batch`, `dump` and `validate`, checked against the
// layout: everything that can be known before running is an error here, at the key it concerns.
ModelWorkload read_model(const YAML::Node& root, const YAML::Node& n, const ScenarioReader& r, const Scenario& sc,
                         bool data_given, const fs::path& folder) {
  ModelWorkload m;
  r.known_keys(n, section_keys("model"), "model");
  if (auto v = entry(n, "kind"); v.IsDefined()) r.one_of(v, "model.kind", {"transformer"});
  // The family sets the architecture's defaults; the keys after it override them one by one.
  if (auto v = entry(n, "family"); v.IsDefined()) {
    const std::string f = r.one_of(v, "model.family", {"gpt", "llama"});
    models::TransformerConfig& c = m.config;
    const bool llama = f == "llama";
    c.norm = llama ? models::Norm::rmsnorm : models::Norm::layernorm;
    c.activation = llama ? models::Activation::swiglu : models::Activation::gelu;
    c.bias = !llama;
    c.positions = llama ? models::Positions::rope : models::Positions::learned;
  }
  if (auto v = entry(n, "norm"); v.IsDefined())
    m.config.norm = r.one_of(v, "model.norm", {"layernorm", "rmsnorm"}) == "rmsnorm" ? models::Norm::rmsnorm
                                                                                     : models::Norm::layernorm;
  if (auto v = entry(n, "activation"); v.IsDefined())
    m.config.activation = r.one_of(v, "model.activation", {"gelu", "swiglu"}) == "swiglu" ? models::Activation::swiglu
                                                                                          : models::Activation::gelu;
  if (auto v = entry(n, "bias"); v.IsDefined()) m.config.bias = r.one_of(v, "model.bias", {"true", "false"}) == "true";
  if (auto v = entry(n, "rope_base"); v.IsDefined()) {
    m.config.rope_base = r.number(v, "model.rope_base");
    if (!(m.config.rope_base > 1)) r.fail(v, "model.rope_base must be > 1 (Llama 2: 10000, Llama 3: 500000)");
  }
  if (auto v = entry(n, "recompute"); v.IsDefined()) {
    const std::string g = r.one_of(v, "model.recompute", {"none", "selective", "full"});
    m.config.recompute = g == "full"        ? models::Recompute::full
                         : g == "selective" ? models::Recompute::selective
                                            : models::Recompute::none;
  }
  for (const char* key : {"recompute_method", "recompute_num_layers"}) {
    if (auto v = entry(n, key); v.IsDefined() && m.config.recompute != models::Recompute::full)
      r.fail(v, std::string("model.") + key + " applies to model.recompute: full");
  }
  if (auto v = entry(n, "recompute_method"); v.IsDefined())
    m.config.recompute_method = r.one_of(v, "model.recompute_method", {"uniform", "block"}) == "block"
                                    ? models::RecomputeMethod::block
                                    : models::RecomputeMethod::uniform;
  if (auto v = entry(n, "recompute_num_layers"); v.IsDefined())
    m.config.recompute_num_layers = r.positive_int(v, "model.recompute_num_layers");
  if (auto v = entry(n, "positions"); v.IsDefined())
    m.config.positions = r.one_of(v, "model.positions", {"rope", "learned"}) == "learned" ? models::Positions::learned
                                                                                          : models::Positions::rope;
  if (auto v = entry(n, "dtype"); v.IsDefined()) {
    const std::string d = r.one_of(v, "model.dtype", {"fp32", "bf16", "fp16", "f32", "f16"});
    m.config.dtype = d == "bf16"                   ? runtime::DType::bf16
                     : (d == "fp16" || d == "f16") ? runtime::DType::f16
                                                   : runtime::DType::f32;
  }
  if (auto v = entry(n, "fp8"); v.IsDefined()) {
    // Megatron-LM's --fp8-format: both recipes run the GEMMs at the same FP8 tensor-core rate.
    const std::string f = r.one_of(v, "model.fp8", {"none", "hybrid", "e4m3"});
    m.config.fp8 = f != "none";
    if (m.config.fp8 && m.config.dtype == runtime::DType::f32)
      r.fail(v, "model.fp8 needs model.dtype bf16 or fp16 (FP8 GEMMs take and give 16-bit activations)");
  }
  if (auto v = entry(n, "format"); v.IsDefined())
    m.attention.format = r.one_of(v, "model.format", {"bshd", "thd"}) == "thd" ? cp::Format::thd : cp::Format::bshd;
  if (auto v = entry(n, "mask"); v.IsDefined())
    m.attention.mask = models::parse_mask(r.one_of(v, "model.mask", {"causal", "padding", "no_mask"}));
  if (auto v = entry(n, "window"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2)
      r.fail(v, "model.window must be [left, right] (-1 = unbounded), e.g. [128, 0]");
    std::int64_t w[2];
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string t = r.str(v[i], "model.window");
      try {
        size_t used = 0;
        w[i] = std::stoll(t, &used);
        if (used != t.size() || w[i] < -1) throw std::invalid_argument(t);
      } catch (const std::exception&) {
        r.fail(v[i], "model.window: each side is an integer >= 0, or -1 for unbounded; got '" + t + "'");
      }
    }
    m.attention.window_left = w[0];
    m.attention.window_right = w[1];
  }
  if (auto v = entry(n, "weights"); v.IsDefined() && !v.IsNull() && !r.str(v, "model.weights").empty()) {
    const fs::path w = r.str(v, "model.weights");
    m.weights = w.is_absolute() ? w.string() : (folder / w).lexically_normal().string();
  }
  if (auto v = entry(n, "seed"); v.IsDefined())
    m.seed = static_cast<std::uint64_t>(non_negative_int(r, v, "model.seed"));
  for (auto [key, field] : {std::pair<const char*, std::int64_t*>{"vocab", &m.config.vocab},
                            {"hidden", &m.config.hidden},
                            {"heads", &m.config.heads},
                            {"head_dim", &m.config.head_dim},
                            {"kv_heads", &m.config.kv_heads},
                            {"ffn", &m.config.ffn},
                            {"layers", &m.config.layers},
                            {"max_positions", &m.config.max_positions}})
    if (auto v = entry(n, key); v.IsDefined()) *field = r.positive_int(v, std::string("model.") + key);
  if (auto v = entry(n, "make_vocab_size_divisible_by"); v.IsDefined())
    m.vocab_divisible_by = r.positive_int(v, "model.make_vocab_size_divisible_by");
  // head_dim defaults to hidden / heads (Megatron's kv_channels)
  if (!entry(n, "head_dim").IsDefined() && (entry(n, "hidden").IsDefined() || entry(n, "heads").IsDefined())) {
    if (m.config.hidden % m.config.heads != 0)
      r.fail(entry(n, "hidden").IsDefined() ? entry(n, "hidden") : entry(n, "heads"),
             "model.hidden " + std::to_string(m.config.hidden) + " is not divisible by model.heads " +
                 std::to_string(m.config.heads) + "; set model.head_dim");
    m.config.head_dim = m.config.hidden / m.config.heads;
  }
  if (m.config.positions == models::Positions::learned && m.config.max_positions == 0) {
    const YAML::Node at = entry(n, "positions").IsDefined() ? entry(n, "positions") : entry(n, "family");
    r.fail(at.IsDefined() ? at : n,
           "learned positions need model.max_positions (the rows of the position table, Megatron's "
           "--max-position-embeddings: usually the sequence length), or set model.positions: rope");
  }
  if (m.config.positions == models::Positions::rope && m.config.max_positions != 0)
    r.fail(entry(n, "max_positions"), "model.max_positions is for learned positions; RoPE has no position table");
  m.attention.comm = cp::parse_comm_type(sc.cp_comm);
  if (sc.hierarchical_cp.size() == 2) {
    m.attention.a2a_size = sc.hierarchical_cp[0];
    m.attention.p2p_size = sc.hierarchical_cp[1];
  }
  try {
    models::check_config(m.config);
    models::check_attention(m.attention);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    r.fail(n, std::string("model: ") + e.what());
  }
  m.shape_only = data_given && !sc.real_data;
  const YAML::Node par = entry(root, "parallel");
  const YAML::Node at = par.IsDefined() ? par : n;
  if (const YAML::Node v = par.IsDefined() ? entry(par, "sequence_parallel") : YAML::Node(YAML::NodeType::Undefined);
      v.IsDefined()) {
    m.config.sequence_parallel = r.one_of(v, "parallel.sequence_parallel", {"true", "false"}) == "true";
    if (m.config.sequence_parallel && sc.tp == 1)
      r.fail(v, "parallel.sequence_parallel splits the tokens over TP: it needs tp > 1");
  }
  if (const YAML::Node v = par.IsDefined() ? entry(par, "tp_comm_overlap") : YAML::Node(YAML::NodeType::Undefined);
      v.IsDefined()) {
    m.config.tp_comm_overlap = r.one_of(v, "parallel.tp_comm_overlap", {"true", "false"}) == "true";
    if (m.config.tp_comm_overlap && !m.config.sequence_parallel)
      r.fail(v,
             "parallel.tp_comm_overlap pipelines sequence parallelism's all-gathers and reduce-scatters with the "
             "GEMMs (Megatron's --tp-comm-overlap): it needs parallel.sequence_parallel: true");
  }
  auto layout_error = [&](const std::string& what) { r.fail(at, what); };
  // Megatron's vocabulary padding: to a multiple of make_vocab_size_divisible_by x tp, so that the
  // embedding and output layer split evenly over TP (models/transformer.h: vocab-parallel)
  m.tokenizer_vocab = m.config.vocab;
  if (entry(n, "make_vocab_size_divisible_by").IsDefined()) {  // not given: no padding
    const std::int64_t multiple = m.vocab_divisible_by * sc.tp;
    m.config.vocab = (m.config.vocab + multiple - 1) / multiple * multiple;
  }
  const std::int64_t heads = m.config.heads;
  if (heads % sc.tp != 0)
    layout_error(std::to_string(heads) + " attention heads are not divisible by tp=" + std::to_string(sc.tp) +
                 " (each TP rank holds whole heads)");
  if (m.config.ffn % sc.tp != 0)
    layout_error("model.ffn " + std::to_string(m.config.ffn) + " is not divisible by tp=" + std::to_string(sc.tp));
  const std::int64_t kv = m.config.query_groups();
  if (kv % sc.tp != 0 && sc.tp % kv != 0)
    layout_error("model.kv_heads " + std::to_string(kv) + " and tp=" + std::to_string(sc.tp) +
                 " do not divide one another: each TP rank holds whole key/value heads, or tp/kv_heads ranks share "
                 "one; use a tp that divides kv_heads or a multiple of it");
  if (auto t = entry(root, "train"); t.IsDefined()) {
    r.known_keys(t, section_keys("train"), "train");
    TrainSettings ts;
    if (auto v = entry(t, "steps"); v.IsDefined()) ts.steps = r.positive_int(v, "train.steps");
    if (auto v = entry(t, "micro_batches"); v.IsDefined()) ts.micro_batches = r.positive_int(v, "train.micro_batches");
    if (auto v = entry(t, "micro_batch_size"); v.IsDefined()) {
      ts.micro_batch_size = r.positive_int(v, "train.micro_batch_size");
      if (entry(t, "micro_batches").IsDefined())
        r.fail(v, "give train.micro_batches or train.micro_batch_size (with global_batch_size), not both");
    }
    if (auto v = entry(t, "global_batch_size"); v.IsDefined())
      ts.global_batch_size = r.positive_int(v, "train.global_batch_size");
    if (auto v = entry(t, "zero"); v.IsDefined()) ts.zero = std::stoi(r.one_of(v, "train.zero", {"0", "1", "3"}));
    // Megatron-Core's DDP buckets: bucket_size defaults to max(40M, 1M x the DP x CP size)
    // elements; without --overlap-grad-reduce the gradients are reduced in one bucket after backward
    ts.bucket_size = std::max<std::int64_t>(40'000'000, 1'000'000LL * sc.dp * sc.cp);
    if (auto v = entry(t, "ddp_bucket_size"); v.IsDefined())
      ts.bucket_size = r.positive_int(v, "train.ddp_bucket_size");
    if (auto v = entry(t, "overlap_grad_reduce"); v.IsDefined()) {
      if (r.one_of(v, "train.overlap_grad_reduce", {"true", "false"}) == "false") {
        if (entry(t, "ddp_bucket_size").IsDefined())
          r.fail(v,
                 "train.overlap_grad_reduce: false reduces the gradients in one bucket after backward; remove "
                 "train.ddp_bucket_size or set overlap_grad_reduce: true");
        ts.bucket_size = std::numeric_limits<std::int64_t>::max();
      }
    }
    if (auto v = entry(t, "clip_grad_norm"); v.IsDefined() && !v.IsNull()) {
      ts.clip_grad_norm = r.number(v, "train.clip_grad_norm");
      if (!(*ts.clip_grad_norm > 0)) r.fail(v, "train.clip_grad_norm must be > 0");
    }
    if (auto v = entry(t, "checkpoint"); v.IsDefined() && !v.IsNull()) ts.checkpoint = r.str(v, "train.checkpoint");
    if (auto v = entry(t, "shards"); v.IsDefined() && !v.IsNull()) {
      ts.shards = r.str(v, "train.shards");
      if (m.shape_only) r.fail(v, "train.shards needs real data: remove data: shape_only");
    }
    if (auto o = entry(t, "optimizer"); o.IsDefined()) {
      r.known_keys(o, section_keys("train.optimizer"), "train.optimizer");
      if (auto v = entry(o, "kind"); v.IsDefined()) r.one_of(v, "train.optimizer.kind", {"adamw"});
      if (auto v = entry(o, "lr"); v.IsDefined()) ts.optimizer.lr = r.number(v, "train.optimizer.lr");
      if (auto v = entry(o, "eps"); v.IsDefined()) ts.optimizer.eps = r.number(v, "train.optimizer.eps");
      if (auto v = entry(o, "weight_decay"); v.IsDefined())
        ts.optimizer.weight_decay = r.number(v, "train.optimizer.weight_decay");
      if (auto v = entry(o, "betas"); v.IsDefined()) {
        if (!v.IsSequence() || v.size() != 2)
          r.fail(v, "train.optimizer.betas must be [beta1, beta2], e.g. [0.9, 0.999]");
        ts.optimizer.beta1 = r.number(v[0], "train.optimizer.betas");
        ts.optimizer.beta2 = r.number(v[1], "train.optimizer.betas");
      }
      try {
        models::check_adamw(ts.optimizer);
      } catch (const Error& e) {
        r.fail(o, std::string("train.optimizer: ") + e.what());
      }
    }
    if (m.shape_only && !ts.checkpoint.empty()) r.fail(t, "train.checkpoint needs real data: remove data: shape_only");
    const YAML::Node vs = par.IsDefined() ? entry(par, "virtual_stages") : YAML::Node(YAML::NodeType::Undefined);
    if (vs.IsDefined()) {
      ts.virtual_stages = r.positive_int(vs, "parallel.virtual_stages");
      if (ts.virtual_stages > 1 && sc.pp < 2)
        r.fail(vs, "parallel.virtual_stages interleaves the pipeline schedule: it needs pp >= 2");
      if (ts.virtual_stages > 1 && !ts.micro_batch_size && ts.micro_batches % sc.pp != 0)
        r.fail(vs, "the interleaved schedule runs micro-batches in groups of pp: train.micro_batches " +
                       std::to_string(ts.micro_batches) + " is not a multiple of pp=" + std::to_string(sc.pp));
    }
    YAML::Node split_at;    // the last of the two keys given: a bad split is reported there
    std::string split_key;  // empty: neither given
    for (auto [key, field] :
         {std::pair<const char*, std::int64_t*>{"decoder_first_pipeline_num_layers", &ts.first_stage_layers},
          {"decoder_last_pipeline_num_layers", &ts.last_stage_layers}}) {
      const YAML::Node v = par.IsDefined() ? entry(par, key) : YAML::Node(YAML::NodeType::Undefined);
      if (!v.IsDefined()) continue;
      *field = non_negative_int(r, v, std::string("parallel.") + key);
      if (sc.pp < 2) r.fail(v, std::string("parallel.") + key + " sets a pipeline stage's layers: it needs pp >= 2");
      split_at = v;
      split_key = key;
    }
    if (!split_key.empty()) {
      try {
        // With virtual stages the counts are the first and last of the pp x v model chunks.
        models::stage_layers(
            m.config.layers, models::Stage{0, sc.pp * ts.virtual_stages, ts.first_stage_layers, ts.last_stage_layers},
            ts.virtual_stages > 1 ? "the pipeline's " + std::to_string(sc.pp) + " x " +
                                        std::to_string(ts.virtual_stages) + " model chunks (pp x virtual_stages)"
                                  : std::string("the pipeline"));
      } catch (const Error& e) {
        r.fail(split_at, "parallel." + split_key + ": " + e.what());
      }
    }
    // Even chunks (no first/last counts) must divide the layers; uneven ones were checked above.
    if (vs.IsDefined() && split_key.empty() && m.config.layers % (sc.pp * ts.virtual_stages) != 0)
      r.fail(vs, "model.layers " + std::to_string(m.config.layers) + " cannot be split into pp=" +
                     std::to_string(sc.pp) + " x virtual_stages=" + std::to_string(ts.virtual_stages) +
                     " chunks; use a layer count that is a multiple of " + std::to_string(sc.pp * ts.virtual_stages));
    if (ts.first_stage_layers < 0 && ts.last_stage_layers < 0 && m.config.layers % sc.pp != 0)
      layout_error(std::to_string(m.config.layers) + " layers cannot be split evenly over pp=" + std::to_string(sc.pp) +
                   " stages; set model.layers to a multiple of pp, or parallel.decoder_first_pipeline_num_layers / "
                   "decoder_last_pipeline_num_layers");
    m.train = ts;
  } else if (par.IsDefined() && entry(par, "virtual_stages").IsDefined()) {
    r.fail(entry(par, "virtual_stages"), "parallel.virtual_stages needs a train: section (a pipeline schedule)");
  } else if (par.IsDefined() && entry(par, "decoder_first_pipeline_num_layers").IsDefined()) {
    r.fail(entry(par, "decoder_first_pipeline_num_layers"),
           "parallel.decoder_first_pipeline_num_layers needs a train: section (a pipeline schedule)");
  } else if (par.IsDefined() && entry(par, "decoder_last_pipeline_num_layers").IsDefined()) {
    r.fail(entry(par, "decoder_last_pipeline_num_layers"),
           "parallel.decoder_last_pipeline_num_layers needs a train: section (a pipeline schedule)");
  } else if (sc.pp != 1) {
    layout_error("pp=" + std::to_string(sc.pp) +
                 ": pipeline stages need a train: section (one forward and backward "
                 "without it runs with pp=1)");
  }
  if (auto e = entry(root, "encoder"); e.IsDefined()) read_encoder(root, e, r, sc, m);
  const std::int64_t local_heads = heads / sc.tp;
  if (m.attention.comm == cp::CommType::a2a && local_heads % sc.cp != 0)
    layout_error("cp_comm a2a: " + std::to_string(heads) + " heads / tp=" + std::to_string(sc.tp) + " = " +
                 std::to_string(local_heads) + " heads per rank, not divisible by cp=" + std::to_string(sc.cp) +
                 " (Ulysses splits the heads over CP); use p2p or all_gather, or another cp");
  const std::int64_t local_kv = kv >= sc.tp ? kv / sc.tp : 1;
  if (m.attention.comm == cp::CommType::a2a && local_kv % sc.cp != 0)
    layout_error("cp_comm a2a: " + std::to_string(local_kv) + " key/value heads per TP rank are not divisible by cp=" +
                 std::to_string(sc.cp) + " (Ulysses splits the key/value heads over CP too); use p2p or all_gather");
  if (m.attention.comm == cp::CommType::a2a_p2p) {
    const int a = m.attention.a2a_size ? m.attention.a2a_size : 2;
    if (!m.attention.a2a_size && sc.cp % 2 != 0)
      layout_error("cp_comm a2a+p2p: the default hierarchical_cp [2, cp/2] needs an even cp, got cp=" +
                   std::to_string(sc.cp) + "; set parallel.hierarchical_cp");
    if (local_kv % a != 0)
      layout_error("cp_comm a2a+p2p: " + std::to_string(local_kv) +
                   " key/value heads per TP rank are not divisible by the a2a size " + std::to_string(a));
    if (local_heads % a != 0)
      layout_error("cp_comm a2a+p2p: " + std::to_string(local_heads) +
                   " heads per TP rank are not divisible by the a2a size " + std::to_string(a));
  }
  // batch: a safetensors file, or the shape of a synthetic batch
  const YAML::Node b = entry(root, "batch");
  if (b.IsDefined() && !b.IsNull()) {
    if (b.IsScalar()) {
      const fs::path f = b.Scalar();
      m.batch = f.is_absolute() ? f.string() : (folder / f).lexically_normal().string();
    } else {
      r.known_keys(b, {"lengths", "rows", "seq_len"}, "batch");
      if (auto l = entry(b, "lengths"); l.IsDefined()) {
        if (!l.IsSequence() || l.size() == 0) r.fail(l, "batch.lengths must be a non-empty list of sequence lengths");
        for (const YAML::Node& x : l) m.lengths.push_back(r.positive_int(x, "batch.lengths"));
        if (m.attention.format == cp::Format::bshd)
          r.fail(l, "batch.lengths is for format thd; a bshd batch has rows and seq_len");
      } else {
        const YAML::Node rows = entry(b, "rows"), len = entry(b, "seq_len");
        if (!rows.IsDefined() || !len.IsDefined())
          r.fail(b, "batch needs lengths: [...] (thd) or rows and seq_len (bshd)");
        if (m.attention.format == cp::Format::thd)
          r.fail(b, "batch rows/seq_len are for format bshd; a thd batch has lengths: [...]");
        m.lengths.assign(static_cast<std::size_t>(r.positive_int(rows, "batch.rows")),
                         r.positive_int(len, "batch.seq_len"));
      }
    }
  }
  if (m.encoder) {
    if (!m.batch.empty() && m.shape_only) r.fail(b, "a batch file needs real data: remove data: shape_only");
    // the default multimodal batch: the fewest rows both DP sizes divide, 32 tokens each
    if (m.batch.empty() && m.lengths.empty())
      m.lengths.assign(static_cast<std::size_t>(std::lcm(m.encoder->dp, sc.dp)), 32);
  }
  m.shape_only = data_given && !sc.real_data;
  if (auto d = entry(root, "dump"); d.IsDefined() && !d.IsNull()) {
    m.dump = r.str(d, "dump");
    if (m.shape_only) r.fail(d, "dump needs real data: remove data: shape_only (or the dump)");
  }
  if (auto v = entry(root, "validate"); v.IsDefined()) {
    r.known_keys(v, section_keys("validate"), "validate");
    if (m.shape_only) r.fail(v, "validate needs real data: remove data: shape_only (or validate)");
    if (m.encoder) r.fail(v, "validate runs the transformer alone; with an encoder, compare the dumps of two layouts");
    if (m.train)
      r.fail(v, "validate compares one forward and backward step; with train:, compare the dumps of two runs");
    m.validate = true;
    m.thresholds = models::ValidationThresholds::for_dtype(m.config.dtype);
    if (auto bl = entry(v, "baseline"); bl.IsDefined()) {
      r.known_keys(bl, {"tp", "cp"}, "validate.baseline");
      if (auto t = entry(bl, "tp"); t.IsDefined()) m.baseline_tp = r.positive_int(t, "validate.baseline.tp");
      if (auto c = entry(bl, "cp"); c.IsDefined()) m.baseline_cp = r.positive_int(c, "validate.baseline.cp");
      if (heads % m.baseline_tp != 0 || m.config.ffn % m.baseline_tp != 0)
        r.fail(bl, "validate.baseline.tp=" + std::to_string(m.baseline_tp) + " does not divide heads " +
                       std::to_string(heads) + " and ffn " + std::to_string(m.config.ffn));
    }
    if (auto x = entry(v, "logits_atol"); x.IsDefined()) m.thresholds.logits_atol = r.number(x, "validate.logits_atol");
    if (auto x = entry(v, "logits_share"); x.IsDefined())
      m.thresholds.logits_share = fraction(r, x, "validate.logits_share");
    if (auto x = entry(v, "loss_rel"); x.IsDefined()) m.thresholds.loss_rel = r.number(x, "validate.loss_rel");
    if (auto x = entry(v, "grad_norm_diff"); x.IsDefined())
      m.thresholds.grad_norm_diff = r.number(x, "validate.grad_norm_diff");
    if (auto x = entry(v, "acceptable_share"); x.IsDefined())
      m.thresholds.acceptable_share = fraction(r, x, "validate.acceptable_share");
  }
  // The inputs themselves: files readable and well formed, the batch fitting the layout.
  if (m.encoder) {
    try {
      const ModelInputs in = load_model_inputs(m);
      models::check_multimodal(multimodal_spec(m, in, sc.tp, sc.cp, sc.dp), sc.ranks);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool weights_error = !m.weights.empty() && what.find(m.weights) != std::string::npos;
      const bool batch_error = what.find("batch") != std::string::npos ||
                               what.find("features are") != std::string::npos || what.find("rows") != std::string::npos;
      r.fail(weights_error ? entry(n, "weights") : batch_error && b.IsDefined() ? b : entry(root, "encoder"), what);
    }
    return m;
  }
  try {
    const ModelInputs in = load_model_inputs(m);
    models::check_batch(in.batch, m.config, sc.cp, m.batch.empty() ? "batch" : m.batch);
    if (m.train) resolve_batch_sizes(root, r, sc, in.batch, *m.train);
    for (int d = 0; d < sc.dp; ++d) {
      const models::Batch mine = models::dp_slice(in.batch, sc.dp, d);
      if (m.train)
        for (int k = 0; k < m.train->micro_batches; ++k)
          models::batch_slice(mine, m.train->micro_batches, k, "train.micro_batches");
    }
    if (m.validate) models::check_batch(in.batch, m.config, m.baseline_cp, m.batch.empty() ? "batch" : m.batch);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    const YAML::Node w = entry(n, "weights");
    const bool weights_error = !m.weights.empty() && std::string(e.what()).find(m.weights) != std::string::npos;
    r.fail(weights_error ? w : (b.IsDefined() ? b : n), e.what());
  }
  return m;
}

}  // namespace ranksim::app
