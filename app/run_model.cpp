#include <filesystem>
#include <optional>
#include <ostream>

#include "app/workloads.h"
#include "models/run.h"

namespace ranksim::app {

ModelInputs run_model_workload(const Scenario& sc, const RunFlags& flags, bool trace, RunSummary& s) {
  const ModelWorkload& m = *sc.model;
  ModelInputs in = load_model_inputs(m);
  std::optional<models::TransformerRunSpec> model_run;
  std::optional<models::TrainSpec> train_run;
  std::optional<models::MultimodalSpec> multimodal_run;
  if (m.encoder) {
    multimodal_run = multimodal_spec(m, in, sc.tp, sc.cp, sc.dp);
  } else if (m.train) {
    train_run = train_spec(m, in, sc.tp, sc.cp, sc.dp, sc.pp);
    // once here rather than on every rank
    models::check_batch(train_run->batch, train_run->config, train_run->cp, "batch");
    train_run->batch_checked = true;
    train_run->labelled_tokens = models::labelled_tokens(train_run->batch);
    if (!m.train->shards.empty()) {
      std::filesystem::create_directories(m.train->shards);
      train_run->shard_dir = m.train->shards;
    }
  } else {
    model_run = model_spec(m, in, sc.tp, sc.cp, sc.dp);
  }
  s.pipeline_wait.assign(static_cast<size_t>(sc.ranks), 0.0);
  s.report = spawn_scenario(sc, flags, trace, [&](int rank) {
    if (multimodal_run) {
      models::TrainResult t = models::train_multimodal(*multimodal_run);
      if (rank == 0) s.train_result = std::move(t);
      return;
    }
    if (train_run) {
      models::TrainResult t = models::train(*train_run);
      s.pipeline_wait[static_cast<size_t>(rank)] = t.pipeline_wait_seconds;
      if (rank == 0) s.train_result = std::move(t);
      return;
    }
    models::TransformerDump d = models::transformer_step(*model_run);
    if (rank == 0) s.model_dump = std::move(d);
  });
  return in;
}

void write_model_outputs(const Scenario& sc, const RunSummary& s, std::ostream& out) {
  const ModelWorkload& m = *sc.model;
  if (!m.dump.empty()) {
    if (m.train) {
      models::write_train_dump(m.dump, s.train_result);
    } else {
      models::write_dump(m.dump, s.model_dump);
    }
    out << "dump: " << m.dump << "\n";
  }
  if (m.train && !m.train->checkpoint.empty()) {
    models::save_checkpoint(m.train->checkpoint, s.train_result);
    out << "checkpoint: " << m.train->checkpoint << "\n";
  }
  if (m.train && !m.train->shards.empty())
    out << "shards: " << m.train->shards << " (one file per tp x pp rank; ranksim consolidate joins them)\n";
}

}  // namespace ranksim::app
