// A `bench collectives` sweep written as nccl-tests writes a run with -J FILE.json (nccl-tests
// 2.17 and later; version 3 of its layout, src/util.cu), so that a predicted table goes wherever a
// measured one goes: nccl-tests' own tools/analyze_perf_json.py, a user's plotting scripts, and
// `ranksim calibrate` (app/nccl_tests_input.h), which reads it back to the same table.
//
// What the file says, as nccl-tests would have run it: "args" the nccl-tests command of the same
// sweep (all_reduce_perf -b MIN -e MAX -f FACTOR -g G -d TYPE); "env" NCCL_ALGO and NCCL_PROTO in
// NCCL's spellings when the sweep forced or listed them; "config.devices" one entry a process (its
// first GPU: the node as its host name, the device kind as its description); and each "results"
// entry the size, the element count, the predicted time as both the out-of-place and the in-place
// time (the model does not tell them apart), algbw, busbw and the wrong elements (null without
// --check). What nccl-tests has no field for sits beside: "ranksim" (the topology, the timing
// model, the options) and each entry's "ranksim_choice" (ring/LL128/16ch). No time stamps: the
// same sweep writes the same bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/nccl_table.h"
#include "sim/topology.h"

namespace ranksim::app {

struct NcclTestsRun {
  std::string op = "all_reduce";  // ranksim's name (bench --op)
  std::string dtype = "f32";      // ranksim's name
  int ranks = 1;                  // the first `ranks` devices of the topology
  int gpus_per_thread = 1;        // nccl-tests -g
  int64_t min_bytes = 0, max_bytes = 0;
  int64_t step_factor = 2;  // > 1: sizes multiply by it; else they grow by step_bytes
  int64_t step_bytes = 0;
  std::string algorithm = "auto", protocol = "auto";  // as given: a name, a list, or auto
  bool check = false;
  std::string topology_file;  // as given on the command line
  int iters = 0;              // nccl-tests -n and -w as given (0 / -1: not given), kept among its args
  int warmup_iters = -1;
  // NCCL's variables read from the environment other than NCCL_ALGO / NCCL_PROTO ("NCCL_BUFFSIZE=..."),
  // kept in the JSON's env beside those.
  std::vector<std::string> environment;
};

// nccl-tests' name of one of ranksim's dtypes (-d: "float" for f32); Error for one it has not.
const char* nccl_tests_type(const std::string& dtype);
// The dtype that nccl-tests' type name stands for ("bfloat16": bf16); nullopt for another name.
std::optional<std::string> dtype_of_nccl_tests_type(const std::string& name);

// The JSON text of the sweep's rows (in order).
std::string nccl_tests_json(const sim::Topology& topology, const NcclTestsRun& run, const std::vector<TableRow>& rows);

}  // namespace ranksim::app
