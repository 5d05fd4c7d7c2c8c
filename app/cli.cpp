#include "app/cli.h"

#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "app/bench.h"
#include "app/demo.h"
#include "app/topo.h"
#include "sim/engine.h"
#include "sim/error.h"
#include "sim/topology.h"

namespace ranksim::app {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App cli{"ranksim: simulate multi-rank parallel programs on a modelled fabric"};
  cli.require_subcommand(1);
  cli.set_version_flag("--version", std::string("ranksim ") + RANKSIM_VERSION);

  DemoOptions demo_opts;
  auto* demo_cmd = cli.add_subcommand("demo", "Run ranks through one training step on a topology and show what happened");
  demo_cmd->add_option("--topology,-t", demo_opts.topology, "Topology YAML file")->required();
  demo_cmd->add_option("--set", demo_opts.sets, "Override a topology key: --set nodes=4");
  demo_cmd->add_option("--ranks,-n", demo_opts.ranks, "Ranks (default: every device)");
  demo_cmd->add_option("--trace", demo_opts.trace, "Write a Chrome trace JSON (Perfetto)");

  std::string topo_file;
  std::vector<std::string> topo_sets;
  auto* topo_cmd = cli.add_subcommand("topo", "Print what a topology file holds: devices, links, the slowest route");
  topo_cmd->add_option("file", topo_file, "Topology YAML file")->required();
  topo_cmd->add_option("--set", topo_sets, "Override a key: --set nodes=128");

  BenchOptions bench_opts;
  auto* bench_cmd = cli.add_subcommand("bench", "Benchmarks on the simulated fabric");
  bench_cmd->require_subcommand(1);
  auto* coll_cmd = bench_cmd->add_subcommand("collectives", "nccl-tests-style sweep of one collective");
  coll_cmd->add_option("--topology,-t", bench_opts.topology, "Topology YAML file")->required();
  coll_cmd->add_option("--set", bench_opts.sets, "Override a topology key: --set nodes=128");
  coll_cmd->add_option("--op", bench_opts.op, "all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|sendrecv")
      ->capture_default_str();
  coll_cmd->add_option("--ranks,-n", bench_opts.ranks, "Ranks: the first N devices (default: all)");
  coll_cmd->add_option("--sizes", bench_opts.sizes, "MIN:MAX bytes, doubling (e.g. 8B:8GiB)")->capture_default_str();
  coll_cmd->add_option("--algo", bench_opts.algorithm, "auto|ring|tree|direct|hierarchical")->capture_default_str();
  coll_cmd->add_option("--dtype", bench_opts.dtype, "f32|f64|bf16|f16|i64|i32")->capture_default_str();
  coll_cmd->add_flag("--check,-c", bench_opts.check, "Move real numbers and verify every rank's result");

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
    if (*coll_cmd) return bench_collectives(bench_opts, out);
  } catch (const sim::RankFailure& e) {
    err << "ranksim: the run failed: " << e.what() << "\n";
    return 1;
  } catch (const sim::DeadlockError& e) {
    err << "ranksim: " << e.what() << "\n";
    return 1;
  } catch (const Error& e) {
    err << "ranksim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "ranksim: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}

int main(int argc, char** argv) { return run_cli(argc, argv, std::cout, std::cerr); }

}  // namespace ranksim::app
