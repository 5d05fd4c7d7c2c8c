#include "app/model_workload.h"

#include <string>
#include <utility>

#include "runtime/tensor/safetensors.h"
#include "sim/error.h"

namespace ranksim::app {

using runtime::DType;
using runtime::Tensor;

namespace {

std::vector<std::int64_t> int_list(const runtime::SafetensorsFile& f, const std::string& name) {
  const Tensor& t = f.at(name);
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64) {
    throw Error(f.path + ": '" + name + "' is " + t.str() + "; it must be int32 or int64");
  }
  if (t.dim() != 1) throw Error(f.path + ": '" + name + "' is " + t.str() + "; it must be 1-d");
  return t.to(DType::i64).to_vector<std::int64_t>();
}

// The multimodal inputs: weights (seeded, shape-only, or a file with every parameter of the
// pair) and the batch (a file with input_ids, labels and features, or a synthetic one).
ModelInputs load_multimodal_inputs(const ModelWorkload& m) {
  const models::EncoderConfig& enc = m.encoder->config;
  ModelInputs in;
  if (m.shape_only) {
    for (const auto& [name, shape] : models::multimodal_parameter_shapes(m.config, enc))
      in.weights[name] = Tensor::shape_only(shape, DType::f32);
  } else if (!m.weights.empty()) {
    const runtime::SafetensorsFile f = runtime::load_safetensors(m.weights);
    for (const auto& [name, shape] : models::multimodal_parameter_shapes(m.config, enc)) {
      if (!f.contains(name)) throw Error(f.path + ": no '" + name + "' tensor (the encoder and transformer need it)");
      const Tensor& t = f.at(name);
      if (t.shape() != shape) {
        throw Error(f.path + ": '" + name + "' is " + t.str() + ", expected shape " + runtime::shape_str(shape));
      }
      if (!runtime::is_floating(t.dtype()))
        throw Error(f.path + ": '" + name + "' is " + t.str() + "; it must be floating");
      in.weights[name] = t.to(DType::f32);
    }
  } else {
    in.weights = models::seeded_multimodal_weights(m.config, enc, m.seed);
  }
  if (!m.batch.empty()) {
    const runtime::SafetensorsFile f = runtime::load_safetensors(m.batch);
    for (const char* name : {"input_ids", "labels", "features"}) {
      if (!f.contains(name)) {
        throw Error(f.path + ": no '" + name +
                    "' tensor (a multimodal batch holds input_ids and labels [B, S] and "
                    "features [B, S, features])");
      }
    }
    in.batch.format = cp::Format::bshd;
    in.batch.input_ids = f.at("input_ids");
    in.batch.labels = f.at("labels");
    if (!runtime::is_floating(f.at("features").dtype())) {
      throw Error(f.path + ": 'features' is " + f.at("features").str() + "; it must be floating");
    }
    in.features = f.at("features").to(DType::f32);
  } else {
    // the scenario loader fills lengths with the default rows (lcm of the DP sizes) x 32
    if (m.lengths.empty()) throw Error("multimodal batch: no rows and seq_len given");
    const auto rows = static_cast<std::int64_t>(m.lengths.size());
    const std::int64_t seq = m.lengths[0];
    models::MultimodalBatch b = models::synthetic_multimodal_batch(m.config, enc, rows, seq, m.seed + 1);
    in.batch = std::move(b.tokens);
    in.features = m.shape_only ? Tensor::shape_only(b.features.shape(), DType::f32) : std::move(b.features);
  }
  return in;
}

}  // namespace

models::MultimodalSpec multimodal_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp) {
  models::MultimodalSpec s;
  s.config = m.config;
  s.encoder = m.encoder->config;
  s.attention = m.attention;
  s.src_tp = m.encoder->tp;
  s.src_dp = m.encoder->dp;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.order = m.order;
  s.weights = in.weights;
  s.batch.tokens = in.batch;
  s.batch.features = in.features;
  if (m.train) {
    s.steps = m.train->steps;
    s.optimizer = m.train->optimizer;
  }
  return s;
}

ModelInputs load_model_inputs(const ModelWorkload& m) {
  if (m.encoder) return load_multimodal_inputs(m);
  ModelInputs in;
  if (m.shape_only) {
    in.weights = models::shape_only_weights(m.config);
  } else if (!m.weights.empty()) {
    auto [w, state] = models::load_checkpoint(m.weights, m.config);
    in.weights = std::move(w);
    if (m.train) in.optimizer_state = std::move(state);  // resume a training checkpoint
  } else {
    in.weights = models::seeded_weights(m.config, m.seed);
  }
  const cp::Format format = m.attention.format;
  if (!m.batch.empty()) {
    const runtime::SafetensorsFile f = runtime::load_safetensors(m.batch);
    for (const char* name : {"input_ids", "labels"}) {
      if (!f.contains(name)) {
        throw Error(f.path + ": no '" + name + "' tensor (a batch holds input_ids and labels" +
                    (format == cp::Format::thd ? ", and cu_seqlens for format thd)" : ")"));
      }
    }
    in.batch.format = format;
    in.batch.input_ids = f.at("input_ids");
    in.batch.labels = f.at("labels");
    if (format == cp::Format::thd) {
      if (!f.contains("cu_seqlens")) {
        throw Error(f.path + ": format thd needs a 'cu_seqlens' tensor (int32, cumulative real lengths from 0)");
      }
      in.batch.cu_seqlens = int_list(f, "cu_seqlens");
    } else if (f.contains("cu_seqlens")) {
      throw Error(f.path + ": 'cu_seqlens' is for format thd, but the model's format is bshd");
    }
  } else {
    // token ids below the tokenizer's vocabulary, not the padded one
    const std::int64_t vocab = m.tokenizer_vocab > 0 ? m.tokenizer_vocab : m.config.vocab;
    in.batch = m.lengths.empty() ? models::dummy_batch(format, vocab, m.seed + 1)
                                 : models::synthetic_batch(format, vocab, m.lengths, m.seed + 1);
  }
  return in;
}

models::TransformerRunSpec model_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp) {
  models::TransformerRunSpec s;
  s.config = m.config;
  s.attention = m.attention;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.weights = in.weights;
  s.batch = in.batch;
  return s;
}

models::TrainSpec train_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp, int pp) {
  models::TrainSpec s;
  s.config = m.config;
  s.attention = m.attention;
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.weights = in.weights;
  s.optimizer_state = in.optimizer_state;
  s.batch = in.batch;
  if (m.train) {
    s.steps = m.train->steps;
    s.micro_batches = m.train->micro_batches;
    s.virtual_stages = m.train->virtual_stages;
    s.first_stage_layers = m.train->first_stage_layers;
    s.last_stage_layers = m.train->last_stage_layers;
    s.optimizer = m.train->optimizer;
    s.clip_grad_norm = m.train->clip_grad_norm;
    s.zero = m.train->zero;
    s.bucket_size = m.train->bucket_size;
  }
  return s;
}

std::string baseline_name(const ModelWorkload& m) {
  return "tp=" + std::to_string(m.baseline_tp) + " cp=" + std::to_string(m.baseline_cp);
}

models::ValidationReport validate_against_baseline(const ModelWorkload& m, const ModelInputs& in,
                                                   const models::TransformerDump& run, int dp) {
  models::TransformerRunSpec spec = model_spec(m, in, m.baseline_tp, m.baseline_cp, dp);
  if (spec.attention.comm == cp::CommType::a2a_p2p &&
      m.baseline_cp != spec.attention.a2a_size * spec.attention.p2p_size) {
    spec.attention.a2a_size = spec.attention.p2p_size = 0;  // the default split of the baseline's cp
  }
  if (m.baseline_cp == 1) spec.attention.comm = cp::CommType::p2p;  // unused at cp = 1
  const models::TransformerDump base = models::run_transformer(spec);
  return models::compare_dumps(base, run, m.thresholds);
}

}  // namespace ranksim::app
