#include "app/cli.h"

#include <exception>
#include <filesystem>
#include <iostream>
#include <new>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include "app/bench.h"
#include "app/bench_ops.h"
#include "app/calibrate.h"
#include "app/compare.h"
#include "app/data_dir.h"
#include "app/demo.h"
#include "app/layout_sweep.h"
#include "app/megatron_args.h"
#include "app/nccl_environment.h"
#include "app/scenario.h"
#include "app/topo.h"
#include "app/workloads.h"
#include "models/train.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#if RANKSIM_HAVE_NCCL_BACKEND
#include "runtime/distributed/backends/nccl/nccl_collectives.h"
#endif
#include "sim/engine.h"
#include "sim/error.h"
#include "sim/topology.h"
#include "sim/yaml_input.h"

namespace ranksim::app {

namespace {

// What a rank other than 0 of an mpi run does besides its share of the run: nothing. Its outputs
// and the validation baseline are rank 0's business (rank 0 holds the step's dump); training
// shards, which every rank writes, stay.
Scenario quiet_rank(Scenario sc, RunFlags& flags) {
  flags.trace.clear();
  flags.json.clear();
  flags.report.clear();
  flags.quiet = true;
  sc.out_trace.clear();
  sc.out_json.clear();
  sc.out_report.clear();
  if (sc.model) {
    sc.model->dump.clear();
    sc.model->validate = false;
    if (sc.model->train) sc.model->train->checkpoint.clear();
  }
  return sc;
}

const char* const kOutOfMemory =
    "the input asks for more memory than this machine has (real data at this size, or this many ranks or "
    "devices); time it shape-only (data: shape_only), or use fewer ranks, a smaller batch or smaller sizes";

std::ostream& null_out() {
  static std::ostream sink(nullptr);
  return sink;
}

// --set and --fit take one value each time they are given: the words after them are the
// command's positionals (a scenario, the tables), not more of their values. (--grid takes a
// list of axes on purpose.)
void one_value_each(CLI::App& app) {
  for (CLI::Option* opt : app.get_options())
    if (opt->check_lname("set") || opt->check_lname("fit")) opt->allow_extra_args(false);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) one_value_each(*sub);
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App cli{"ranksim: simulate multi-rank parallel programs on a modelled fabric"};
  cli.require_subcommand(1);
  cli.set_version_flag("--version", std::string("ranksim ") + RANKSIM_VERSION);

  DemoOptions demo_opts;
  auto* demo_cmd =
      cli.add_subcommand("demo", "Run ranks through one training step on a topology and show what happened");
  // An input file that is a folder is refused by name (reading one fails obscurely); a missing
  // one is reported by the reader, with its own context.
  const CLI::Validator not_a_folder(
      [](std::string& s) {
        std::error_code ec;
        return std::filesystem::is_directory(s, ec) ? "'" + s + "' is a folder; name a file" : std::string();
      },
      "FILE");
  const CLI::Validator at_least_one(
      [](std::string& s) {
        try {
          std::size_t used = 0;
          if (std::stol(s, &used) >= 1 && used == s.size()) return std::string();
        } catch (const std::exception&) {
        }
        return "must be a whole number, 1 or more; got '" + s + "'";
      },
      "N>=1");
  demo_cmd->add_option("--topology,-t", demo_opts.topology, "Topology YAML file")->required()->check(not_a_folder);
  demo_cmd->add_option("--set", demo_opts.sets, "Override a topology key: --set nodes=4");
  demo_cmd->add_option("--ranks,-n", demo_opts.ranks, "Ranks (default: every device)")->check(at_least_one);
  demo_cmd->add_option("--trace", demo_opts.trace, "Write a Chrome trace JSON (Perfetto)");

  std::string topo_file;
  std::vector<std::string> topo_sets;
  auto* topo_cmd = cli.add_subcommand("topo", "Print what a topology file holds: devices, links, the slowest route");
  topo_cmd->add_option("file", topo_file, "Topology YAML file")->required()->check(not_a_folder);
  topo_cmd->add_option("--set", topo_sets, "Override a key: --set nodes=128");

  BenchOptions bench_opts;
  auto* bench_cmd = cli.add_subcommand("bench", "Benchmarks on the simulated fabric");
  bench_cmd->require_subcommand(1);
  auto* coll_cmd = bench_cmd->add_subcommand("collectives", "nccl-tests-style sweep of one collective");
  coll_cmd->add_option("--topology,-t", bench_opts.topology, "Topology YAML file")->required()->check(not_a_folder);
  coll_cmd->add_option("--set", bench_opts.sets, "Override a topology key: --set nodes=128");
  coll_cmd
      ->add_option("--op", bench_opts.op,
                   "all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|reduce|gather|scatter|sendrecv")
      ->capture_default_str();
  coll_cmd->add_option("--ranks", bench_opts.ranks, "Ranks: the first N devices (default: all)")->check(at_least_one);
  // nccl-tests' -n and -w (its iterations and warm-up calls), so that its command line pastes
  // as it is; -n is not ranks, as it was before.
  coll_cmd->add_option("--iters,-n", bench_opts.iters, "As nccl-tests -n (iterations); ranksim times one call a size")
      ->check(at_least_one);
  coll_cmd->add_option("--warmup_iters,-w", bench_opts.warmup_iters, "As nccl-tests -w (warm-up calls), as -n")
      ->check(CLI::NonNegativeNumber);
  coll_cmd->add_option("--sizes", bench_opts.sizes, "MIN:MAX bytes, doubling (e.g. 8B:8GiB; default 8B:128MiB)");
  coll_cmd->add_option("--minbytes,-b", bench_opts.min_bytes, "As nccl-tests -b: the smallest size (8, 128K, 1M, 8G)");
  coll_cmd->add_option("--maxbytes,-e", bench_opts.max_bytes, "As nccl-tests -e: the largest size");
  coll_cmd->add_option("--stepfactor,-f", bench_opts.step_factor, "As nccl-tests -f: each size times this");
  coll_cmd->add_option("--stepbytes,-i", bench_opts.step_bytes, "As nccl-tests -i: each size plus this (without -f)");
  coll_cmd->add_option("--output_file,-J", bench_opts.output_file,
                       "Also write the table as nccl-tests -J writes its JSON (FILE.json)");
  coll_cmd
      ->add_option("--algo", bench_opts.algorithm,
                   "auto|ring|tree|direct|hierarchical, and with the nccl timing model nvls|nvls_tree|collnet|pat, "
                   "or a list as NCCL_ALGO takes it (^nvls; ring,tree;allreduce:nvls,nvlstree)")
      ->capture_default_str();
  coll_cmd
      ->add_option("--proto", bench_opts.protocol,
                   "auto|LL|LL128|Simple, or a list as NCCL_PROTO takes it (^LL128; allreduce:LL,Simple); nccl "
                   "timing model")
      ->capture_default_str();
  coll_cmd->add_option("--dtype,-d", bench_opts.dtype, "f32|f64|bf16|f16|i64|i32, or nccl-tests' float|double|...")
      ->capture_default_str();
  coll_cmd->add_flag("--check,-c", bench_opts.check, "Move real numbers and verify every rank's result");
  coll_cmd
      ->add_option("--gpus-per-thread,-g", bench_opts.gpus_per_thread,
                   "Time the calls as nccl-tests -g G prints them (one thread drives G GPUs)")
      ->capture_default_str()
      ->check(at_least_one);
  BenchOpsOptions ops_opts;
  auto* ops_cmd =
      bench_cmd->add_subcommand("ops", "Measure a kernel profile (GEMMs, attention, memory-bound) on a device");
  ops_cmd->add_option("--device", ops_opts.device, "gpu|emulated (emulated: the sweep on the CPU, for testing)")
      ->capture_default_str();
  ops_cmd->add_option("--topology,-t", ops_opts.topology, "Topology YAML (its first device kind's memory bandwidth)")
      ->required()
      ->check(not_a_folder);
  ops_cmd->add_option("--set", ops_opts.sets, "Override a topology key");
  ops_cmd->add_option("--output,-o", ops_opts.output, "The kernel profile YAML to write")
      ->required()
      ->check(not_a_folder);
  ops_cmd->add_option("--name", ops_opts.name, "The profile's name (default: DEVICE-bf16)");
  ops_cmd->add_option("--m", ops_opts.m, "GEMM M values, ascending (default: 256..8192 on a GPU)")->delimiter(',');
  ops_cmd->add_option("--n", ops_opts.n, "GEMM N values, ascending")->delimiter(',');
  ops_cmd->add_option("--k", ops_opts.k, "GEMM K values, ascending")->delimiter(',');
  ops_cmd->add_option("--seq", ops_opts.seq, "Attention key lengths, ascending (default: 512..16384)")->delimiter(',');
  ops_cmd->add_option("--head-dims", ops_opts.head_dims, "Attention head dimensions (default: 64,128)")->delimiter(',');
  ops_cmd->add_option("--sms", ops_opts.sms, "SM count to write (default: the device's)");
  ops_cmd->add_option("--reps", ops_opts.reps, "Timed runs per shape (default: 10 on a GPU)");

  std::string scenario_file;
  std::vector<std::string> scenario_sets;
  RunFlags run_flags;
#if RANKSIM_HAVE_NCCL_BACKEND
  run_flags.device_collectives = runtime::gpu::nccl_collectives;  // --backend nccl
#endif
  std::string megatron_args, megatron_topology;
  auto* run_cmd = cli.add_subcommand("run", "Run a scenario file (topology, layout, workload, checks)");
  run_cmd->add_option("scenario", scenario_file, "Scenario YAML file")->check(not_a_folder);
  const auto add_megatron = [&](CLI::App* cmd) {
    auto* args = cmd->add_option("--megatron-args", megatron_args,
                                 "Megatron-LM's pretrain_gpt.py arguments (or @FILE) instead of a scenario file");
    auto* topo = cmd->add_option("--topology,-t", megatron_topology, "Topology YAML file, with --megatron-args")
                     ->check(not_a_folder);
    args->excludes(cmd->get_option("scenario"));
    topo->needs(args);
    args->needs(topo);
  };
  add_megatron(run_cmd);
  run_cmd->add_option("--set", scenario_sets,
                      "Override a key by its dotted path: --set parallel.tp=2, --set topology.nodes=4");
  run_cmd->add_option("--trace", run_flags.trace, "Write a Chrome trace JSON (Perfetto)");
  run_cmd->add_option("--json", run_flags.json, "Write the summary as JSON");
  run_cmd->add_option("--report", run_flags.report,
                      "Write a self-contained HTML report (summary, SVG timeline, busbw plot)");
  run_cmd
      ->add_option("--backend", run_flags.backend,
                   "sim (default); mpi: one process per rank, started by mpirun -np <ranks>; nccl: as mpi, "
                   "with the collectives on each process's GPU through NCCL")
      ->check(CLI::IsMember({"sim", "mpi", "nccl"}));
  run_cmd
      ->add_option("--device", run_flags.device,
                   "Where ops compute: cpu (default; gpu with --backend nccl), gpu (CUDA: the process's GPU), "
                   "emulated (the GPU kernels run on the CPU, for checking the device path)")
      ->check(CLI::IsMember({"cpu", "gpu", "emulated"}));
  auto* validate_cmd = cli.add_subcommand("validate", "Check a scenario file without running it");
  validate_cmd->add_option("scenario", scenario_file, "Scenario YAML file")->check(not_a_folder);
  validate_cmd->add_option("--set", scenario_sets, "Override a key by its dotted path");
  add_megatron(validate_cmd);
  SweepOptions sweep_opts;
  auto* sweep_cmd = cli.add_subcommand(
      "sweep", "Time a training scenario over a grid of layouts (shape-only) and rank them, best first");
  sweep_cmd->add_option("scenario", sweep_opts.scenario, "Scenario YAML file (a training scenario)")
      ->check(not_a_folder);
  {
    auto* args = sweep_cmd->add_option("--megatron-args", sweep_opts.megatron_args,
                                       "Megatron-LM's pretrain_gpt.py arguments (or @FILE) instead of a scenario file");
    auto* topo = sweep_cmd->add_option("--topology,-t", sweep_opts.topology, "Topology YAML file, with --megatron-args")
                     ->check(not_a_folder);
    args->excludes(sweep_cmd->get_option("scenario"));
    topo->needs(args);
    args->needs(topo);
  }
  sweep_cmd->add_option("--grid", sweep_opts.grid, "KEY=V1,V2,... (scenario keys): the layouts are their product")
      ->required();
  sweep_cmd->add_option("--set", sweep_opts.sets, "Override a key in every layout");
  sweep_cmd->add_option("--csv", sweep_opts.csv, "Write the layouts as CSV, best first");
  sweep_cmd->add_option("--json", sweep_opts.json, "Write the layouts as JSON, best first");
  sweep_cmd->add_option("--report", sweep_opts.report,
                        "Write an HTML page: iteration time, TFLOP/s per GPU and peak memory per layout");
  std::string shard_dir, consolidated;
  auto* consolidate_cmd = cli.add_subcommand(
      "consolidate", "Join a training run's per-rank shard files (train.shards) into one checkpoint");
  consolidate_cmd->add_option("scenario", scenario_file, "The scenario that wrote them (its model sizes)")
      ->required()
      ->check(not_a_folder);
  consolidate_cmd->add_option("shards", shard_dir, "The folder of shard-tp<t>-pp<p>.safetensors files")->required();
  consolidate_cmd->add_option("output", consolidated, "The checkpoint to write (loadable as model.weights)")
      ->required();
  consolidate_cmd->add_option("--set", scenario_sets, "Override a key by its dotted path");
  std::string list_root = shipped_data_dir();
  std::string predicted_json, measured_json;
  auto* compare_cmd = cli.add_subcommand(
      "compare", "Put a predicted run and a measured run of one scenario side by side (their --json summaries)");
  compare_cmd->add_option("predicted", predicted_json, "The sim backend's summary (ranksim run --json)")
      ->required()
      ->check(not_a_folder);
  compare_cmd->add_option("measured", measured_json, "A real run's summary of the same scenario")
      ->required()
      ->check(not_a_folder);
  CalibrateOptions cal_opts;
  auto* cal_cmd = cli.add_subcommand(
      "calibrate", "Fit a topology's collective timing to nccl-tests outputs and write the calibrated topology");
  cal_cmd->add_option("--topology,-t", cal_opts.topology, "Topology YAML file to start from")
      ->required()
      ->check(not_a_folder);
  cal_cmd->add_option("--set", cal_opts.sets, "Override a topology key: --set nodes=2 (one per --set)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cal_cmd->add_option("--ranks,-n", cal_opts.ranks, "Ranks of the measured runs (when the files do not say)")
      ->check(at_least_one);
  cal_cmd->add_option("--op", cal_opts.op,
                      "The collective, when a file does not name it (all_reduce, ...); of a log of several "
                      "tests, take that collective's");
  cal_cmd->add_option("--algo", cal_opts.algorithm,
                      "NCCL_ALGO of the measured runs: auto|ring|tree|nvls|nvls_tree|collnet|pat, or NCCL_ALGO's list "
                      "(default: as the files say, else auto)");
  cal_cmd
      ->add_option("--proto", cal_opts.protocol,
                   "NCCL_PROTO of the measured runs: auto|LL|LL128|Simple, or NCCL_PROTO's list")
      ->capture_default_str();
  cal_cmd->add_option("--output,-o", cal_opts.output, "The calibrated topology YAML to write")->check(not_a_folder);
  cal_cmd
      ->add_option("--fit", cal_opts.fit,
                   "Fit only these constants (default: all the tables inform; simple_latency, "
                   "channel_network_bandwidth, nvls_tree_network_efficiency, peer_latency, message_latency, "
                   "ll_net_overhead, ring_loop_gap and p2p_channel_network_bandwidth only when named): " +
                       sim::join(fit_constant_names()))
      ->delimiter(',');
  cal_cmd->add_flag("--check", cal_opts.check_only, "Only compare the topology with the measurements; write nothing");
  cal_cmd->add_flag("--leave-one-out", cal_opts.leave_one_out,
                    "After the fit, refit without each table in turn and print how well that predicts it");
  cal_cmd->add_flag("--nccl-choice", cal_opts.nccl_choice,
                    "Time each row with the algorithm and protocol NCCL ran it with, as the log's NCCL tuning "
                    "messages say (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING), not with the model's choice");
  cal_cmd->add_option("--sizes", cal_opts.sizes,
                      "Only the rows of sizes MIN:MAX (bytes, or with units: 1MiB:8GiB; 1MiB: for 1 MiB and up)");
  cal_cmd
      ->add_option("files", cal_opts.files,
                   "nccl-tests outputs (the *_perf text table, a log of several, CSV, or the JSON of -J)")
      ->required()
      ->check(CLI::ExistingFile);
  auto* list_cmd = cli.add_subcommand("list", "List the shipped topologies and scenarios");
  list_cmd->add_option("--root", list_root, "Where topologies/ and scenarios/ live")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);

  one_value_each(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = cli.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  try {
    if (*demo_cmd) return demo(demo_opts, out);
    if (*topo_cmd) {
      print_topology(sim::Topology::load_file(topo_file, topo_sets), out);
      return 0;
    }
    if (*coll_cmd) {
      bench_opts.progress = &err == &std::cerr && ::isatty(2) != 0;  // a line on a terminal only
      return bench_collectives(bench_opts, out);
    }
    if (*ops_cmd) return bench_ops(ops_opts, out);
    // The scenario: a file, or one built from Megatron-LM's arguments (app/megatron_args.h).
    MegatronScenario built;
    const auto scenario_under = [&](const CLI::App* cmd, const std::vector<std::string>& sets) {
      if (!megatron_args.empty()) {
        Scenario sc = load_megatron_scenario(megatron_args, megatron_topology, sets, &built);
        if (!built.ignored.empty())
          err << "megatron-args: ignored (no effect on timing or memory): " << sim::join(built.ignored) << "\n";
        for (const std::string& a : built.approximated) err << "megatron-args: approximated: " << a << "\n";
        return sc;
      }
      if (scenario_file.empty())
        throw Error("ranksim " + cmd->get_name() + ": name a scenario file, or give --megatron-args and --topology");
      return load_scenario(scenario_file, sets);
    };
    // Simulated timing reads NCCL's tuning variables as NCCL would (app/nccl_environment.h); real
    // NCCL (--backend nccl) reads them itself.
    const auto scenario = [&](const CLI::App* cmd) {
      const NcclEnvironment env = run_flags.backend == "nccl" ? NcclEnvironment{} : read_nccl_environment();
      std::vector<std::string> sets = scenario_sets;
      apply_nccl_sets(env, sets, "topology.collectives.");
      Scenario sc = scenario_under(cmd, sets);
      apply_nccl_choice(env, sc.algorithm, "the scenario's algorithm", sc.protocol, "the scenario's protocol");
      sc.nccl_environment = env.given;
      return sc;
    };
    if (*run_cmd) {
      Scenario sc = scenario(run_cmd);
      if (run_flags.backend != "sim") {
        // Refused before MPI starts (spawn refuses them too, for library users).
        runtime::check_fault_backend(fault_plan(sc), runtime::parse_backend(run_flags.backend));
        runtime::mpi::init();
        // Every process runs the scenario as its rank; rank 0 prints and writes the outputs
        // (its report holds every rank's times and trace).
        if (runtime::mpi::world_rank() != 0)
          return run_scenario(quiet_rank(std::move(sc), run_flags), run_flags, null_out());
      }
      return run_scenario(sc, run_flags, out);
    }
    if (*validate_cmd) {
      const Scenario sc = scenario(validate_cmd);
      if (!megatron_args.empty()) out << built.yaml;
      out << (megatron_args.empty() ? scenario_file : "--megatron-args") << ": valid — " << sc.name << ", " << sc.ranks
          << " ranks (tp=" << sc.tp << " cp=" << sc.cp << " dp=" << sc.dp << " pp=" << sc.pp << "), "
          << (sc.model
                  ? std::string("reference transformer") + (sc.model->validate ? " with a validation baseline" : "")
              : sc.sweep_op ? *sc.sweep_op + " sweep"
                            : std::to_string(sc.steps.size()) + " steps x " + std::to_string(sc.repeat))
          << "\n";
      return 0;
    }
    if (*consolidate_cmd) {
      const Scenario sc = load_scenario(scenario_file, scenario_sets);
      if (!sc.model) throw Error(scenario_file + ": consolidate needs a scenario with a model: section");
      auto [weights, state] = models::consolidate_shards(shard_dir, sc.model->config);
      models::TrainResult r;
      for (const auto& [name, shape] : models::parameter_shapes(sc.model->config))
        r.params.emplace_back(name, weights.at(name));
      r.optimizer_state = std::move(state);
      models::save_checkpoint(consolidated, r);
      out << "consolidated " << r.params.size() << " parameters and their optimizer state from " << shard_dir
          << " into " << consolidated << "\n";
      return 0;
    }
    if (*compare_cmd) return compare_summaries(predicted_json, measured_json, out);
    if (*sweep_cmd) {
      if (sweep_opts.scenario.empty() && sweep_opts.megatron_args.empty())
        throw Error("ranksim sweep: name a scenario file, or give --megatron-args and --topology");
      // a bar redrawn in place on a terminal, a line per layout elsewhere
      sweep_opts.progress_bar = &err == &std::cerr && ::isatty(2) != 0;
      return sweep_layouts(sweep_opts, out, err);
    }
    if (*cal_cmd) return calibrate(cal_opts, out);
    if (*list_cmd) {
      list_shipped(list_root, out);
      return 0;
    }
  } catch (const sim::RankFailure& e) {
    // A rank that ran out of host memory is the machine's limit, not the program's failure.
    for (const sim::RankError& re : e.errors()) {
      try {
        if (re.exception) std::rethrow_exception(re.exception);
      } catch (const std::bad_alloc&) {
        err << "ranksim: out of host memory in rank " << re.rank << ": " << kOutOfMemory << "\n";
        return 2;
      } catch (...) {
      }
    }
    err << "ranksim: the run failed: " << e.what() << "\n";
    return 1;
  } catch (const sim::DeadlockError& e) {
    err << "ranksim: " << e.what() << "\n";
    return 1;
  } catch (const Error& e) {
    err << "ranksim: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    err << "ranksim: out of host memory: " << kOutOfMemory << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "ranksim: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}

int main(int argc, char** argv) { return run_cli(argc, argv, std::cout, std::cerr); }

}  // namespace ranksim::app
