#include "app/megatron_args.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "app/scenario_reader.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/suggest.h"
#include "sim/topology.h"
#include "sim/yaml_input.h"

namespace ranksim::app {

namespace {

// The name errors use for the built document (load_scenario_text's `path`).
const char* const kSource = "(--megatron-args)";

enum class Kind {
  flag,         // takes no value
  value,        // takes exactly one
  values,       // takes one or more (argparse nargs='+')
  ignored,      // no effect on timing or memory; takes what follows up to the next --argument
  approximated  // accepted; the note says what ranksim does instead
};

struct Spec {
  const char* name;
  Kind kind;
  const char* note = "";  // approximated: what ranksim does instead
};

// The arguments ranksim maps onto scenario keys (names and meanings: Megatron-LM's
// megatron/training/arguments.py and the config dataclasses it builds its parser from).
const std::vector<Spec>& mapped() {
  static const std::vector<Spec> s = {
      {"--num-layers", Kind::value},
      {"--hidden-size", Kind::value},
      {"--ffn-hidden-size", Kind::value},
      {"--num-attention-heads", Kind::value},
      {"--group-query-attention", Kind::flag},
      {"--num-query-groups", Kind::value},
      {"--kv-channels", Kind::value},
      {"--seq-length", Kind::value},
      {"--max-position-embeddings", Kind::value},
      {"--vocab-size", Kind::value},
      {"--make-vocab-size-divisible-by", Kind::value},
      {"--position-embedding-type", Kind::value},
      {"--use-rotary-position-embeddings", Kind::flag},
      {"--rotary-base", Kind::value},
      {"--normalization", Kind::value},
      {"--swiglu", Kind::flag},
      {"--openai-gelu", Kind::flag},
      {"--disable-bias-linear", Kind::flag},
      {"--add-bias-linear", Kind::flag},
      {"--untie-embeddings-and-output-weights", Kind::flag},
      {"--micro-batch-size", Kind::value},
      {"--global-batch-size", Kind::value},
      {"--tensor-model-parallel-size", Kind::value},
      {"--pipeline-model-parallel-size", Kind::value},
      {"--context-parallel-size", Kind::value},
      {"--expert-model-parallel-size", Kind::value},
      {"--num-layers-per-virtual-pipeline-stage", Kind::value},
      {"--num-virtual-stages-per-pipeline-rank", Kind::value},
      {"--decoder-first-pipeline-num-layers", Kind::value},
      {"--decoder-last-pipeline-num-layers", Kind::value},
      {"--num-layers-in-first-pipeline-stage", Kind::value},
      {"--num-layers-in-last-pipeline-stage", Kind::value},
      {"--account-for-embedding-in-pipeline-split", Kind::flag},
      {"--account-for-loss-in-pipeline-split", Kind::flag},
      {"--sequence-parallel", Kind::flag},
      {"--tp-comm-overlap", Kind::flag},
      {"--cp-comm-type", Kind::values},
      {"--hierarchical-context-parallel-sizes", Kind::values},
      {"--use-distributed-optimizer", Kind::flag},
      {"--use-torch-fsdp2", Kind::flag},
      {"--use-megatron-fsdp", Kind::flag},
      {"--data-parallel-sharding-strategy", Kind::value},
      {"--overlap-grad-reduce", Kind::flag},
      {"--ddp-bucket-size", Kind::value},
      {"--recompute-activations", Kind::flag},
      {"--recompute-granularity", Kind::value},
      {"--recompute-method", Kind::value},
      {"--recompute-num-layers", Kind::value},
      {"--recompute-modules", Kind::values},
      {"--bf16", Kind::flag},
      {"--fp16", Kind::flag},
      {"--fp8-format", Kind::value},
      {"--optimizer", Kind::value},
      {"--lr", Kind::value},
      {"--weight-decay", Kind::value},
      {"--adam-beta1", Kind::value},
      {"--adam-beta2", Kind::value},
      {"--adam-eps", Kind::value},
      {"--clip-grad", Kind::value},
      {"--hidden-dropout", Kind::value},
      {"--attention-dropout", Kind::value},
      // accepted with a note: Megatron does it, ranksim times something close
      {"--overlap-param-gather", Kind::approximated,
       "ranksim all-gathers the distributed optimizer's parameters after the optimizer step, not overlapped with "
       "the next forward"},
      {"--overlap-param-gather-with-optimizer-step", Kind::approximated,
       "ranksim all-gathers the distributed optimizer's parameters after the optimizer step, not overlapped"},
      {"--fp8-recipe", Kind::approximated,
       "ranksim times every FP8 recipe as tensorwise current scaling: one FP8 GEMM rate, and a per-tensor cast of each "
       "GEMM input"},
      {"--fp8-param-gather", Kind::approximated, "ranksim gathers parameters in the model's 16-bit dtype"},
      {"--no-overlap-p2p-communication", Kind::approximated,
       "ranksim's pipeline sends and receives are the same whether or not Megatron overlaps them"},
      {"--transformer-impl", Kind::approximated, "ranksim times TransformerEngine's fused kernels either way"},
      {"--attention-backend", Kind::approximated, "ranksim times fused (flash) attention whatever the backend"},
      {"--use-flash-attn", Kind::approximated, "ranksim times fused (flash) attention whatever the backend"},
      {"--defer-embedding-wgrad-compute", Kind::approximated,
       "ranksim computes the output layer's weight gradient with the rest of its backward"},
  };
  return s;
}

// Features ranksim does not model: refused by name, with what they are.
const std::vector<std::pair<const char*, const char*>>& refused() {
  static const std::vector<std::pair<const char*, const char*>> s = {
      {"--num-experts", "Mixture-of-Experts layers are not modelled"},
      {"--moe-", "Mixture-of-Experts layers are not modelled"},
      {"--expert-tensor-parallel-size", "Mixture-of-Experts layers are not modelled"},
      {"--multi-latent-attention", "multi-latent attention (MLA) is not modelled"},
      {"--q-lora-rank", "multi-latent attention (MLA) is not modelled"},
      {"--kv-lora-rank", "multi-latent attention (MLA) is not modelled"},
      {"--mtp-num-layers", "multi-token prediction layers are not modelled"},
      {"--hybrid-override-pattern", "hybrid (Mamba) layer patterns are not modelled"},
      {"--hybrid-layer-pattern", "hybrid (Mamba) layer patterns are not modelled"},
      {"--spec", "custom layer specs are not modelled"},
      {"--yaml-cfg", "read the YAML's arguments into --megatron-args instead"},
      {"--pipeline-model-parallel-layout", "use --decoder-first/last-pipeline-num-layers for uneven stages"},
      {"--window-size", "sliding windows: use the scenario key model.window"},
      {"--window-attn-skip-freq", "layers with different attention windows are not modelled"},
      {"--no-rope-freq", "layers without RoPE among RoPE layers are not modelled"},
      {"--qk-layernorm", "query/key normalisation is not modelled"},
      {"--add-qkv-bias", "a bias on the QKV projection alone is not modelled (biases are on every linear or none)"},
      {"--squared-relu", "the squared-ReLU MLP is not modelled (gelu or --swiglu)"},
      {"--quick-geglu", "the GeGLU MLP is not modelled (gelu or --swiglu)"},
      {"--encoder-num-layers", "encoder-decoder models are not modelled"},
      {"--cpu-offloading", "activation and weight offloading to the host is not modelled"},
      {"--fine-grained-activation-offloading", "activation offloading to the host is not modelled"},
      {"--heterogeneous-layers-config-path", "heterogeneous layers are not modelled"},
      {"--rampup-batch-size", "a batch-size ramp is not modelled: time one global batch size"},
      {"--fp4", "FP4 GEMMs are not modelled"},
      {"--no-position-embedding", "a model without position embeddings is not modelled (rope or learned_absolute)"},
      {"--use-tp-pp-dp-mapping",
       "ranksim orders ranks tp-cp-dp-pp (Megatron-LM's default), which decides which ranks share a node"},
  };
  return s;
}

// Arguments with no effect on timing or memory (logging, data, checkpointing, the learning-rate
// schedule, tokenizer files, fault tolerance), by name or, ending in '-', by prefix.
const std::vector<const char*>& ignored_patterns() {
  static const std::vector<const char*> s = {
      "--log-",
      "--tensorboard-",
      "--wandb-",
      "--timing-log-",
      "--save",
      "--save-",
      "--load",
      "--load-",
      "--ckpt-",
      "--dist-ckpt-",
      "--use-dist-ckpt",
      "--async-save",
      "--auto-detect-ckpt-format",
      "--finetune",
      "--pretrained-checkpoint",
      "--no-save-",
      "--no-load-",
      "--non-persistent-",
      "--use-checkpoint-",
      "--exit-",
      "--eval-",
      "--skip-train",
      "--full-validation",
      "--lr-",
      "--min-lr",
      "--warmup",
      "--decoupled-",
      "--start-weight-decay",
      "--end-weight-decay",
      "--weight-decay-incr-style",
      "--override-opt-param-scheduler",
      "--train-iters",
      "--train-samples",
      "--data-path",
      "--train-data-path",
      "--valid-data-path",
      "--test-data-path",
      "--data-cache-path",
      "--data-args-path",
      "--per-split-data-args-path",
      "--mock-data",
      "--split",
      "--num-workers",
      "--dataloader-",
      "--num-dataset-builder-threads",
      "--no-mmap-bin-files",
      "--eod-mask-loss",
      "--reset-position-ids",
      "--reset-attention-mask",
      "--no-create-attention-mask-in-dataloader",
      "--tokenizer-",
      "--vocab-file",
      "--merge-file",
      "--vocab-extra-ids",
      "--null-tokenizer-",
      "--seed",
      "--init-method-std",
      "--init-method-xavier-uniform",
      "--distributed-backend",
      "--distributed-timeout-",
      "--local-rank",
      "--use-gloo-process-groups",
      "--no-gloo-process-groups",
      "--nccl-communicator-config-path",
      "--use-mcore-models",
      "--use-legacy-models",
      "--no-masked-softmax-fusion",
      "--no-bias-gelu-fusion",
      "--no-bias-swiglu-fusion",
      "--no-bias-dropout-fusion",
      "--no-rope-fusion",
      "--no-persist-layer-norm",
      "--no-gradient-accumulation-fusion",
      "--cross-entropy-loss-fusion",
      "--cross-entropy-fusion-impl",
      "--apply-rope-fusion",
      "--masked-softmax-fusion",
      "--bias-swiglu-fusion",
      "--attention-softmax-in-fp32",
      "--accumulate-allreduce-grads-in-fp32",
      "--loss-scale",
      "--initial-loss-scale",
      "--min-loss-scale",
      "--loss-scale-window",
      "--hysteresis",
      "--fp8-amax-history-len",
      "--fp8-amax-compute-algo",
      "--fp8-margin",
      "--fp8-interval",
      "--layernorm-epsilon",
      "--norm-epsilon",
      "--apply-layernorm-1p",
      "--rotary-percent",
      "--use-rope-scaling",
      "--rope-scaling-factor",
      "--rotary-seq-len-interpolation-factor",
      "--no-check-for-nan-in-loss-and-grad",
      "--check-for-",
      "--deterministic-mode",
      "--profile",
      "--use-pytorch-profiler",
      "--use-nsys-profiler",
      "--pytorch-profiler-",
      "--record-memory-history",
      "--memory-snapshot-path",
      "--nvtx-ranges",
      "--manual-gc",
      "--inprocess-",
      "--one-logger-",
      "--no-one-logger",
      "--app-tag-",
      "--enable-ft-package",
      "--calc-ft-timeouts",
      "--ft-num-warmup-iters",
      "--straggler-",
      "--rerun-mode",
      "--error-injection-",
      "--adlr-autoresume",
      "--enable-msc",
      "--disable-msc",
      "--flight-recorder-",
      "--otel-",
      "--tp-comm-overlap-cfg",
      "--tp-comm-bootstrap-backend",
      "--ddp-average-in-collective",
      "--no-align-grad-reduce",
      "--no-align-param-gather",
      "--distributed-timeout-minutes",
      "--empty-unused-memory-level",
      "--calculate-per-token-loss",
      "--check-weight-hash-",
      "--te-rng-tracker",
      "--data-parallel-random-init",
      "--train-sync-interval",
      "--sft",
      "--use-cpu-initialization",
      "--no-initialization",
      "--perform-initialization",
      "--async-tensor-model-parallel-allreduce",
      "--no-async-tensor-model-parallel-allreduce",
      "--wgrad-deferral-limit",
      "--ddp-pad-buckets-for-high-nccl-busbw",
  };
  return s;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// A pattern ending in '-' is a prefix; any other matches the whole name.
bool matches(const std::string& name, const char* pattern) {
  const std::string p = pattern;
  return p.back() == '-' ? starts_with(name, pattern) : name == p;
}

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

// One argument as given: its name, its values, and the text for messages.
struct Given {
  std::string name;
  std::vector<std::string> values;
  std::string text() const {
    std::string t = name;
    for (const std::string& v : values) t += " " + v;
    return t;
  }
};

// Builds the document line by line, each key with the arguments it came from.
class Doc {
 public:
  // `from`: the arguments the line came from ("--num-layers 32"), or a note saying where its
  // value came from instead (a default); only arguments are kept in line_args.
  void line(const std::string& text, const std::string& from = "") {
    if (from.empty()) {
      lines_.push_back(text);
    } else {
      std::string padded = text;
      if (padded.size() < 40) padded.resize(40, ' ');
      lines_.push_back(padded + "  # " + from);
    }
    from_.push_back(starts_with(from, "--") ? from : std::string());
  }
  // Errors reported at the last line name `args` instead of its comment's.
  void blame_last(const std::string& args) { from_.back() = args; }
  MegatronScenario finish() && {
    MegatronScenario m;
    for (const std::string& l : lines_) m.yaml += l + "\n";
    m.line_args = std::move(from_);
    return m;
  }

 private:
  std::vector<std::string> lines_, from_;
};

class Args {
 public:
  explicit Args(const std::vector<std::string>& tokens) {
    for (std::size_t i = 0; i < tokens.size();) {
      const std::string& tok = tokens[i];
      if (!starts_with(tok, "--") || tok.size() < 3)
        throw Error("--megatron-args: '" + tok + "' is not an argument (" +
                    (i == 0 ? std::string("Megatron-LM's arguments start with --")
                            : "it follows " + tokens[i - 1] + ", which takes no more values") +
                    ")");
      Given g;
      const std::size_t eq = tok.find('=');
      g.name = tok.substr(0, eq);
      const bool inline_value = eq != std::string::npos;
      if (inline_value) g.values.push_back(tok.substr(eq + 1));
      ++i;
      const Spec* spec = find(g.name);
      // A value may be negative ("-1"); only a token starting with "--" starts the next argument.
      const auto take_rest = [&] {
        while (i < tokens.size() && !starts_with(tokens[i], "--")) g.values.push_back(tokens[i++]);
      };
      if (spec == nullptr) {
        for (const auto& [pattern, why] : refused())
          if (matches(g.name, pattern))
            throw Error("--megatron-args: " + g.name + " is not supported: " + why +
                        "; ranksim cannot time this run as Megatron-LM would run it");
        if (!std::any_of(ignored_patterns().begin(), ignored_patterns().end(),
                         [&](const char* p) { return matches(g.name, p); }))
          throw Error("--megatron-args: unknown argument " + g.name + sim::did_you_mean(g.name, known_names()) +
                      " (ranksim takes Megatron-LM's pretrain_gpt.py arguments that shape the model, the layout "
                      "and the batch, and ignores those without effect on timing or memory (docs/scenarios.md, "
                      "\"Megatron-LM arguments\"))");
        if (!inline_value) take_rest();
        ignored_.push_back(g.text());
        continue;
      }
      switch (spec->kind) {
        case Kind::flag:
          if (inline_value) throw Error("--megatron-args: " + g.name + " takes no value, got '" + tok + "'");
          break;
        case Kind::value:
          if (!inline_value) {
            if (i == tokens.size() || starts_with(tokens[i], "--"))
              throw Error("--megatron-args: " + g.name + " needs a value");
            g.values.push_back(tokens[i++]);
          }
          break;
        case Kind::values:
        case Kind::ignored:
        case Kind::approximated:
          if (!inline_value) take_rest();
          if (spec->kind == Kind::values && g.values.empty())
            throw Error("--megatron-args: " + g.name + " needs one or more values");
          break;
      }
      if (spec->kind == Kind::approximated) {
        approximated_.push_back(g.text() + ": " + spec->note);
        continue;
      }
      // argparse keeps the last of a repeated argument; so does ranksim.
      given_[g.name] = g;
    }
  }

  bool has(const std::string& name) const { return given_.count(name) != 0; }
  std::string text(const std::string& name) const { return given_.at(name).text(); }
  const std::vector<std::string>& values(const std::string& name) const { return given_.at(name).values; }
  std::string value(const std::string& name) const { return given_.at(name).values.at(0); }

  std::int64_t integer(const std::string& name, std::int64_t min = 1) const {
    const std::string v = value(name);
    try {
      std::size_t used = 0;
      const long long x = std::stoll(v, &used);
      if (used == v.size() && x >= min) return x;
    } catch (const std::exception&) {
    }
    throw Error("--megatron-args: " + name + " takes a whole number of at least " + std::to_string(min) + ", got '" +
                v + "'");
  }
  std::optional<std::int64_t> integer_if(const std::string& name, std::int64_t min = 1) const {
    return has(name) ? std::optional(integer(name, min)) : std::nullopt;
  }
  double number(const std::string& name) const {
    const std::string v = value(name);
    try {
      std::size_t used = 0;
      const double x = std::stod(v, &used);
      if (used == v.size() && x >= 0) return x;
    } catch (const std::exception&) {
    }
    throw Error("--megatron-args: " + name + " takes a non-negative number, got '" + v + "'");
  }
  std::string one_of(const std::string& name, const std::vector<std::string>& allowed) const {
    const std::string v = value(name);
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      throw Error("--megatron-args: " + name + " is '" + v + "'; ranksim models " + sim::join(allowed) +
                  sim::did_you_mean(v, allowed));
    return v;
  }
  std::int64_t need(const std::string& name, const std::string& why) const {
    if (!has(name)) throw Error("--megatron-args: " + name + " is required: " + why);
    return integer(name);
  }

  std::vector<std::string>& ignored() { return ignored_; }
  std::vector<std::string>& approximated() { return approximated_; }

 private:
  static const Spec* find(const std::string& name) {
    for (const Spec& s : mapped())
      if (name == s.name) return &s;
    return nullptr;
  }
  static std::vector<std::string> known_names() {
    std::vector<std::string> n;
    for (const Spec& s : mapped()) n.emplace_back(s.name);
    return n;
  }

  std::map<std::string, Given> given_;
  std::vector<std::string> ignored_, approximated_;
};

std::string yes_no(bool b) { return b ? "true" : "false"; }

}  // namespace

std::vector<std::string> split_megatron_args(const std::string& text) {
  std::vector<std::string> tokens;
  std::string cur;
  bool in_token = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\'' || c == '"') {
      const std::size_t end = text.find(c, i + 1);
      if (end == std::string::npos)
        throw Error(std::string("--megatron-args: a ") + c + " quote is not closed: " + text.substr(i, 40));
      cur += text.substr(i + 1, end - i - 1);
      in_token = true;
      i = end;
    } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      ++i;  // a continued line
    } else if (c == '#' && !in_token) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_token) tokens.push_back(cur);
      cur.clear();
      in_token = false;
    } else {
      cur += c;
      in_token = true;
    }
  }
  if (in_token) tokens.push_back(cur);
  return tokens;
}

std::string megatron_args_text(const std::string& value) {
  if (value.empty() || value[0] != '@') return value;
  return sim::read_text_file(value.substr(1), "--megatron-args file");
}

MegatronScenario megatron_scenario(const std::string& args, const std::string& topology, int world_size) {
  Args a(split_megatron_args(args));
  if (a.has("--expert-model-parallel-size") && a.integer("--expert-model-parallel-size") != 1)
    throw Error("--megatron-args: --expert-model-parallel-size " + a.value("--expert-model-parallel-size") +
                " is not supported: Mixture-of-Experts layers are not modelled");
  const std::int64_t layers = a.need("--num-layers", "the number of transformer layers");
  const std::int64_t hidden = a.need("--hidden-size", "the model's hidden size");
  const std::int64_t heads = a.need("--num-attention-heads", "the number of attention heads");
  const std::int64_t seq = a.need("--seq-length", "the sequence length of a sample");
  const std::int64_t vocab = a.need("--vocab-size",
                                    "the vocabulary comes from the tokenizer, which ranksim does not read; give the "
                                    "tokenizer's size, e.g. --vocab-size 128256 for Llama 3 or 50257 for GPT-2");
  const std::int64_t tp = a.integer_if("--tensor-model-parallel-size").value_or(1);
  const std::int64_t pp = a.integer_if("--pipeline-model-parallel-size").value_or(1);
  const std::int64_t cp = a.integer_if("--context-parallel-size").value_or(1);
  const std::int64_t mbs = a.integer_if("--micro-batch-size").value_or(1);
  const std::int64_t model_ranks = tp * pp * cp;
  const auto sizes = [&](std::initializer_list<const char*> names) {
    std::string t;
    for (const char* n : names) t += (t.empty() ? "" : " x ") + (a.has(n) ? a.text(n) : std::string(n) + " 1");
    return t;
  };
  if (world_size % model_ranks != 0)
    throw Error("--megatron-args: " +
                sizes({"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"}) +
                " = " + std::to_string(model_ranks) + " GPUs per model replica do not divide the world of " +
                std::to_string(world_size) +
                " GPUs (every device of the topology); change the sizes or the topology (--set nodes=N)");
  const std::int64_t dp = world_size / model_ranks;
  const std::int64_t gbs = a.integer_if("--global-batch-size").value_or(mbs * dp);
  // Megatron-LM's own checks, named by its arguments
  if (gbs % (mbs * dp) != 0)
    throw Error(
        "--megatron-args: " + (a.has("--global-batch-size") ? a.text("--global-batch-size") : "the global batch") +
        " is not a multiple of " + sizes({"--micro-batch-size"}) + " x data-parallel size " + std::to_string(dp) +
        " (the GPUs left by tensor, pipeline and context parallelism)");
  const std::int64_t micro_batches = gbs / (mbs * dp);
  if ((a.has("--num-layers-per-virtual-pipeline-stage") || a.has("--num-virtual-stages-per-pipeline-rank")) &&
      micro_batches % pp != 0)
    throw Error("--megatron-args: the interleaved schedule runs micro-batches in groups of " +
                sizes({"--pipeline-model-parallel-size"}) + ", but " + sizes({"--global-batch-size"}) + " / (" +
                sizes({"--micro-batch-size"}) + " x dp " + std::to_string(dp) + ") = " + std::to_string(micro_batches) +
                " micro-batches; use a global batch of a multiple of " + std::to_string(mbs * dp * pp));

  Doc d;
  const auto from = [&](std::initializer_list<const char*> names) {
    std::string t;
    for (const char* n : names)
      if (a.has(n)) t += (t.empty() ? "" : ", ") + a.text(n);
    return t;
  };
  d.line("# A scenario built by ranksim from Megatron-LM arguments (--megatron-args); each key names the");
  d.line("# arguments it came from, and keys without one hold Megatron-LM's defaults.");
  d.line("name: megatron-args");
  d.line("description: " +
         quoted("Megatron-LM pretrain_gpt.py, " + std::to_string(layers) + " layers, hidden " + std::to_string(hidden) +
                ", TP" + std::to_string(tp) + " PP" + std::to_string(pp) + " CP" + std::to_string(cp) + " DP" +
                std::to_string(dp) + " on " + std::to_string(world_size) + " GPUs; one iteration, shape-only"));
  d.line("topology: " + quoted(topology));
  d.line("ranks: " + std::to_string(world_size), "every device of the topology");
  d.line("data: shape_only");

  d.line("parallel:");
  d.line("  tp: " + std::to_string(tp), from({"--tensor-model-parallel-size"}));
  // The loader reports errors about the whole layout (layers over pp, heads over tp, the world)
  // at the section's first key: they name every size of it.
  d.blame_last(sizes({"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"}));
  d.line("  pp: " + std::to_string(pp), from({"--pipeline-model-parallel-size"}));
  d.line("  cp: " + std::to_string(cp), from({"--context-parallel-size"}));
  d.line("  dp: auto", "the rest of the world: " + std::to_string(dp));
  if (a.has("--sequence-parallel") && tp == 1)
    a.approximated().push_back(
        "--sequence-parallel with tensor parallelism 1: Megatron-LM turns it off, and so "
        "does ranksim");
  else if (a.has("--sequence-parallel"))
    d.line("  sequence_parallel: true", "--sequence-parallel");
  if (a.has("--tp-comm-overlap")) d.line("  tp_comm_overlap: true", "--tp-comm-overlap");
  if (a.has("--cp-comm-type")) {
    const std::vector<std::string>& v = a.values("--cp-comm-type");
    if (std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x != v[0]; }))
      throw Error("--megatron-args: " + a.text("--cp-comm-type") +
                  ": a communication type per layer is not modelled; give one type for every layer");
    const std::string t = a.one_of("--cp-comm-type", {"p2p", "a2a", "allgather", "a2a+p2p"});
    d.line("  cp_comm: " + (t == "allgather" ? std::string("all_gather") : t), from({"--cp-comm-type"}));
  }
  if (a.has("--hierarchical-context-parallel-sizes")) {
    const std::vector<std::string>& v = a.values("--hierarchical-context-parallel-sizes");
    if (v.size() != 2)
      throw Error("--megatron-args: " + a.text("--hierarchical-context-parallel-sizes") +
                  ": ranksim models two levels, [a2a size, p2p size]");
    d.line("  hierarchical_cp: [" + v[0] + ", " + v[1] + "]", from({"--hierarchical-context-parallel-sizes"}));
  }
  if (a.has("--num-layers-per-virtual-pipeline-stage") && a.has("--num-virtual-stages-per-pipeline-rank"))
    throw Error(
        "--megatron-args: give --num-layers-per-virtual-pipeline-stage or "
        "--num-virtual-stages-per-pipeline-rank, not both");
  // Megatron-LM's TransformerConfig: the embedding (the loss) counts as one more layer of the
  // first (last) pipeline stage, or model chunk with virtual stages, when the layers are split
  // over the pipeline; that stage or chunk then holds one decoder layer fewer (Llama 3 405B: 126
  // layers + 2 over 16 stages, 7 on the first and last).
  const bool emb = a.has("--account-for-embedding-in-pipeline-split"),
             loss = a.has("--account-for-loss-in-pipeline-split");
  const std::int64_t split_layers = layers + (emb ? 1 : 0) + (loss ? 1 : 0);
  std::int64_t virtual_stages = 1;
  if (a.has("--num-layers-per-virtual-pipeline-stage")) {
    const std::int64_t per = a.integer("--num-layers-per-virtual-pipeline-stage");
    if (split_layers % (pp * per) != 0)
      throw Error("--megatron-args: " + a.text("--num-layers-per-virtual-pipeline-stage") + ": " +
                  std::to_string(layers) + " layers" +
                  (split_layers != layers ? " and " + std::to_string(split_layers - layers) + " more" : std::string()) +
                  " do not split into pp=" + std::to_string(pp) + " stages of chunks of " + std::to_string(per) +
                  " layers");
    virtual_stages = split_layers / (pp * per);
    d.line("  virtual_stages: " + std::to_string(virtual_stages), from({"--num-layers-per-virtual-pipeline-stage"}));
  }
  if (a.has("--num-virtual-stages-per-pipeline-rank")) {
    virtual_stages = a.integer("--num-virtual-stages-per-pipeline-rank");
    d.line("  virtual_stages: " + std::to_string(virtual_stages), from({"--num-virtual-stages-per-pipeline-rank"}));
  }
  for (const auto& [key, names] : {std::pair<const char*, std::pair<const char*, const char*>>{
                                       "decoder_first_pipeline_num_layers",
                                       {"--decoder-first-pipeline-num-layers", "--num-layers-in-first-pipeline-stage"}},
                                   {"decoder_last_pipeline_num_layers",
                                    {"--decoder-last-pipeline-num-layers", "--num-layers-in-last-pipeline-stage"}}}) {
    const char* given = a.has(names.first) ? names.first : a.has(names.second) ? names.second : nullptr;
    if (given != nullptr)
      d.line(std::string("  ") + key + ": " + std::to_string(a.integer(given)), from({names.first, names.second}));
  }
  if (emb || loss) {
    const std::string split_args =
        from({"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"});
    if (pp < 2) throw Error("--megatron-args: " + split_args + " splits the layers over a pipeline; it needs pp > 1");
    for (const char* n : {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                          "--num-layers-in-first-pipeline-stage", "--num-layers-in-last-pipeline-stage"})
      if (a.has(n)) throw Error("--megatron-args: give " + split_args + " or " + n + ", not both");
    // With virtual stages: over the pp x v model chunks, the first and the last of which hold
    // the embedding and the loss.
    const std::int64_t chunks = pp * virtual_stages;
    if (split_layers % chunks != 0)
      throw Error("--megatron-args: " + split_args + ": " + std::to_string(layers) + " layers and " +
                  std::to_string(split_layers - layers) + " more do not split evenly over pp=" + std::to_string(pp) +
                  (virtual_stages > 1 ? " x " + std::to_string(virtual_stages) + " virtual stages" : " stages"));
    if (emb) d.line("  decoder_first_pipeline_num_layers: " + std::to_string(split_layers / chunks - 1), split_args);
    if (loss) d.line("  decoder_last_pipeline_num_layers: " + std::to_string(split_layers / chunks - 1), split_args);
  }

  d.line("model:");
  d.line("  kind: transformer");
  const bool swiglu = a.has("--swiglu");
  std::string positions = "learned";
  if (a.has("--use-rotary-position-embeddings")) positions = "rope";
  if (a.has("--position-embedding-type")) {
    const std::string p = a.one_of("--position-embedding-type", {"learned_absolute", "rope"});
    positions = p == "rope" ? "rope" : "learned";
  }
  const std::string norm =
      a.has("--normalization") ? a.one_of("--normalization", {"LayerNorm", "RMSNorm"}) : std::string("LayerNorm");
  d.line("  norm: " + std::string(norm == "RMSNorm" ? "rmsnorm" : "layernorm"), from({"--normalization"}));
  d.line("  activation: " + std::string(swiglu ? "swiglu" : "gelu"), from({"--swiglu", "--openai-gelu"}));
  d.line("  bias: " + yes_no(!a.has("--disable-bias-linear")), from({"--disable-bias-linear", "--add-bias-linear"}));
  d.line("  positions: " + positions, from({"--position-embedding-type", "--use-rotary-position-embeddings"}));
  if (positions == "rope") {
    if (a.has("--rotary-base"))
      d.line("  rope_base: " + std::to_string(a.integer("--rotary-base", 2)), a.text("--rotary-base"));
  } else {
    // Megatron requires --max-position-embeddings; learned positions need at least seq_length rows
    const std::int64_t maxpos = a.integer_if("--max-position-embeddings").value_or(seq);
    if (maxpos < seq)
      throw Error("--megatron-args: " + a.text("--max-position-embeddings") + " is shorter than " +
                  a.text("--seq-length") + ": learned positions need a row per position of a sequence");
    d.line("  max_positions: " + std::to_string(maxpos), from({"--max-position-embeddings"}));
  }
  const char* dtype = a.has("--bf16") ? "bf16" : a.has("--fp16") ? "fp16" : "fp32";
  d.line(std::string("  dtype: ") + dtype, from({"--bf16", "--fp16"}));
  if (a.has("--fp8-format")) d.line("  fp8: " + a.one_of("--fp8-format", {"hybrid", "e4m3"}), a.text("--fp8-format"));
  d.line("  format: bshd");
  d.line("  mask: causal");
  d.line("  vocab: " + std::to_string(vocab), from({"--vocab-size"}));
  d.line(
      "  make_vocab_size_divisible_by: " + std::to_string(a.integer_if("--make-vocab-size-divisible-by").value_or(128)),
      from({"--make-vocab-size-divisible-by"}));
  d.line("  hidden: " + std::to_string(hidden), from({"--hidden-size"}));
  d.line("  heads: " + std::to_string(heads), from({"--num-attention-heads"}));
  if (a.has("--num-query-groups") && !a.has("--group-query-attention"))
    a.approximated().push_back(a.text("--num-query-groups") +
                               ": Megatron-LM uses it only with --group-query-attention; ignored as Megatron does");
  if (a.has("--group-query-attention")) {
    const std::int64_t groups = a.has("--num-query-groups") ? a.integer("--num-query-groups") : 1;
    d.line("  kv_heads: " + std::to_string(groups), from({"--group-query-attention", "--num-query-groups"}));
  }
  if (a.has("--kv-channels"))
    d.line("  head_dim: " + std::to_string(a.integer("--kv-channels")), a.text("--kv-channels"));
  // Megatron-LM's default: 4h, or with SwiGLU 2/3 of it rounded down to a multiple of 64
  const std::int64_t ffn = a.has("--ffn-hidden-size") ? a.integer("--ffn-hidden-size")
                           : swiglu                   ? (4 * hidden * 2 / 3) / 64 * 64
                                                      : 4 * hidden;
  d.line("  ffn: " + std::to_string(ffn), a.has("--ffn-hidden-size") ? a.text("--ffn-hidden-size")
                                          : swiglu ? "Megatron's SwiGLU default, 8h/3 down to a multiple of 64"
                                                   : "Megatron's default, 4h");
  d.line("  layers: " + std::to_string(layers), from({"--num-layers"}));
  std::string recompute = "none";
  if (a.has("--recompute-activations")) recompute = "selective";
  if (a.has("--recompute-granularity")) recompute = a.one_of("--recompute-granularity", {"full", "selective"});
  if (a.has("--recompute-modules")) {
    for (const std::string& m : a.values("--recompute-modules"))
      if (m != "core_attn")
        throw Error("--megatron-args: " + a.text("--recompute-modules") + ": ranksim's selective recomputation " +
                    "recomputes core_attn only; '" + m + "' is not modelled");
  }
  d.line("  recompute: " + recompute, from({"--recompute-granularity", "--recompute-activations"}));
  if (recompute == "full") {
    if (a.has("--recompute-method"))
      d.line("  recompute_method: " + a.one_of("--recompute-method", {"uniform", "block"}),
             a.text("--recompute-method"));
    if (a.has("--recompute-num-layers"))
      d.line("  recompute_num_layers: " + std::to_string(a.integer("--recompute-num-layers")),
             a.text("--recompute-num-layers"));
  } else if (a.has("--recompute-method") || a.has("--recompute-num-layers")) {
    throw Error("--megatron-args: --recompute-method and --recompute-num-layers need --recompute-granularity full");
  }
  if (!a.has("--untie-embeddings-and-output-weights"))
    a.approximated().push_back(
        "tied embeddings (Megatron-LM's default without --untie-embeddings-and-output-weights): ranksim keeps "
        "separate input and output embedding tables, one more vocab x hidden table in memory and in the optimizer");
  for (const char* drop : {"--hidden-dropout", "--attention-dropout"})
    if (!a.has(drop) || a.number(drop) > 0)
      a.approximated().push_back(std::string(drop) + (a.has(drop) ? " " + a.value(drop) : " (default 0.1)") +
                                 ": ranksim runs no dropout kernels");

  d.line("batch:");
  d.line("  rows: " + std::to_string(gbs), a.has("--global-batch-size")
                                               ? a.text("--global-batch-size")
                                               : "Megatron's default global batch, micro-batch size x dp");
  d.line("  seq_len: " + std::to_string(seq), from({"--seq-length"}));

  d.line("train:");
  d.line("  steps: 1", "one iteration");
  d.line("  micro_batch_size: " + std::to_string(mbs), from({"--micro-batch-size"}));
  d.line("  global_batch_size: " + std::to_string(gbs), from({"--global-batch-size"}));
  int zero = a.has("--use-distributed-optimizer") ? 1 : 0;
  std::string zero_from = from({"--use-distributed-optimizer"});
  if (a.has("--use-torch-fsdp2") || a.has("--use-megatron-fsdp")) {
    const std::string s =
        a.has("--data-parallel-sharding-strategy")
            ? a.one_of("--data-parallel-sharding-strategy", {"no_shard", "optim", "optim_grads", "optim_grads_params"})
            : std::string("optim_grads_params");
    if (a.has("--use-torch-fsdp2") && s != "optim_grads_params")
      throw Error(
          "--megatron-args: --use-torch-fsdp2 shards parameters, gradients and optimizer state; "
          "--data-parallel-sharding-strategy applies to --use-megatron-fsdp");
    zero = s == "optim_grads_params" ? 3 : s == "no_shard" ? 0 : 1;
    if (s == "optim_grads")
      a.approximated().push_back(
          "--data-parallel-sharding-strategy optim_grads: ranksim shards the optimizer state (ZeRO-1) and "
          "reduce-scatters the gradients, but keeps every gradient buffer whole in memory");
    zero_from = from({"--use-torch-fsdp2", "--use-megatron-fsdp", "--data-parallel-sharding-strategy"});
  }
  d.line("  zero: " + std::to_string(zero), zero_from);
  if (a.has("--overlap-grad-reduce")) {
    d.line("  overlap_grad_reduce: true", a.text("--overlap-grad-reduce"));
    if (a.has("--ddp-bucket-size"))
      d.line("  ddp_bucket_size: " + std::to_string(a.integer("--ddp-bucket-size")), a.text("--ddp-bucket-size"));
  } else {
    d.line("  overlap_grad_reduce: false", "Megatron's default: one gradient reduction after backward");
    if (a.has("--ddp-bucket-size"))
      a.approximated().push_back(a.text("--ddp-bucket-size") +
                                 ": without --overlap-grad-reduce Megatron-LM reduces in one bucket; ignored as it is");
  }
  if (a.has("--clip-grad")) {
    const double c = a.number("--clip-grad");
    if (c > 0) d.line("  clip_grad_norm: " + a.value("--clip-grad"), a.text("--clip-grad"));
  } else {
    d.line("  clip_grad_norm: 1.0", "Megatron's default --clip-grad 1.0");
  }
  if (a.has("--optimizer")) a.one_of("--optimizer", {"adam"});
  d.line("  optimizer:");
  d.line("    kind: adamw", from({"--optimizer"}));
  if (a.has("--lr")) d.line("    lr: " + a.value("--lr"), a.text("--lr"));
  if (a.has("--weight-decay")) d.line("    weight_decay: " + a.value("--weight-decay"), a.text("--weight-decay"));
  if (a.has("--adam-eps")) d.line("    eps: " + a.value("--adam-eps"), a.text("--adam-eps"));
  if (a.has("--adam-beta1") || a.has("--adam-beta2")) {
    const std::string b1 = a.has("--adam-beta1") ? a.value("--adam-beta1") : "0.9";
    const std::string b2 = a.has("--adam-beta2") ? a.value("--adam-beta2") : "0.999";
    d.line("    betas: [" + b1 + ", " + b2 + "]", from({"--adam-beta1", "--adam-beta2"}));
  }

  MegatronScenario m = std::move(d).finish();
  m.ignored = std::move(a.ignored());
  m.approximated = std::move(a.approximated());
  return m;
}

Scenario load_megatron_scenario(const std::string& args, const std::string& topology,
                                const std::vector<std::string>& sets, MegatronScenario* built) {
  // A --set whose first key is not one of the scenario's is the topology's: --set nodes=8.
  std::vector<std::string> scenario_sets, topology_sets;
  const std::vector<std::string> root_keys = section_keys("");
  for (const std::string& s : sets) {
    const std::string key = s.substr(0, std::min(s.find('='), s.find('.')));
    if (key == "topology" || std::find(root_keys.begin(), root_keys.end(), key) != root_keys.end()) {
      scenario_sets.push_back(s);
      if (starts_with(s, "topology.")) topology_sets.push_back(s);
    } else {
      scenario_sets.push_back("topology." + s);
      topology_sets.push_back(s);
    }
  }
  int world = 0;
  try {
    world = sim::Topology::load_file(topology, topology_sets).num_devices();
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw Error(std::string("--topology: ") + e.what());
  }
  // --set ranks=N sizes the world (a part of the topology)
  for (const std::string& s : sets)
    if (starts_with(s, "ranks=")) {
      try {
        world = std::stoi(s.substr(6));
      } catch (const std::exception&) {
        throw Error("--set " + s + ": ranks must be a whole number");
      }
      if (world < 1) throw Error("--set " + s + ": ranks must be 1 or more");
    }
  MegatronScenario m = megatron_scenario(megatron_args_text(args), topology, world);
  try {
    Scenario sc = load_scenario_text(m.yaml, kSource, scenario_sets);
    if (built) *built = std::move(m);
    return sc;
  } catch (const ConfigError& e) {
    if (e.file() != kSource || e.line() < 1 || e.line() > static_cast<int>(m.line_args.size())) throw;
    std::string what = e.what();
    what = what.substr(what.find(": ") + 2);
    const std::string& from = m.line_args[static_cast<std::size_t>(e.line() - 1)];
    std::string at;  // the line's text, without its comment
    {
      std::istringstream lines(m.yaml);
      for (int i = 0; i < e.line(); ++i) std::getline(lines, at);
      at = at.substr(0, at.find("  #"));
      at = at.substr(at.find_first_not_of(' '));
    }
    throw Error("--megatron-args" + (from.empty() ? " (`" + at + "`, a default)" : " (" + from + ")") + ": " + what +
                " [the built scenario's line " + std::to_string(e.line()) +
                "; `ranksim validate --megatron-args=... -t TOPOLOGY` prints it]");
  }
}

}  // namespace ranksim::app
