// NCCL's own environment variables, read for the simulated runs as NCCL reads them at init.
//
// An nccl-tests user forces an algorithm with `NCCL_ALGO=Ring all_reduce_perf ...`; the same line
// with `ranksim bench collectives` (or `ranksim run`, `sweep`, `demo`) must time what NCCL would
// run, not ignore the variable. The variables that steer NCCL's choice or its chunking, and that
// the nccl timing model has a key for, are applied as that key; those that steer it in ways the
// model has no key for are refused with what to do instead, never silently skipped.
//
//   NCCL_ALGO, NCCL_PROTO          the run's algorithm and protocol (one name, or NCCL's list syntax:
//                                  sim/nccl_env.h), where --algo / --proto (a scenario's algorithm /
//                                  protocol) leave them auto; a different value given there is an error
//   NCCL_NVLS_ENABLE               0: collectives.nvls false; 1: as the topology (NCCL uses NVLS where
//                                  the hardware has it)
//   NCCL_BUFFSIZE                  collectives.buffer_size (bytes)
//   NCCL_P2P_NET_CHUNKSIZE         collectives.p2p_chunk_size
//   NCCL_NVLS_CHUNKSIZE            collectives.nvls_chunk_size
//   NCCL_NVLSTREE_MAX_CHUNKSIZE    collectives.nvls_tree_max_chunk_size
//   NCCL_MIN_CTAS, NCCL_MAX_CTAS   collectives.min_channels, max_channels; NCCL_MIN_NCHANNELS and
//                                  NCCL_MAX_NCHANNELS (their names before NCCL 2.17) too, the larger
//                                  minimum and the smaller maximum where both names are set, as NCCL
//
// Refused (the model has no key that means the same): NCCL_PAT_ENABLE and
// NCCL_COLLNET_ENABLE (use --algo with NCCL's list: '^pat', '^collnetdirect,collnetchain'),
// NCCL_TUNER_PLUGIN and NCCL_TUNER_CONFIG_FILE (use --set collectives.tuner=FILE),
// NCCL_NCHANNELS_PER_NET_PEER, NCCL_NTHREADS,
// NCCL_LL128_NTHREADS, NCCL_THREAD_THRESHOLDS and NCCL_NET_OVERHEAD. Other NCCL_* variables
// (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) do not change the model's timing and are
// left alone.
//
// An empty value counts as unset. NCCL also reads variables from NCCL_CONF_FILE, ~/.nccl.conf and
// /etc/nccl.conf; ranksim reads the process's environment only. A run on real GPUs
// (--backend nccl) leaves them to NCCL itself.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ranksim::app {

struct NcclEnvironment {
  std::string algorithm;         // NCCL_ALGO as ranksim takes it (a single name in ranksim's spelling); "" unset
  std::string algorithm_as_set;  // NCCL_ALGO as the environment spells it ("NVLSTree"), for messages
  std::string protocol;          // NCCL_PROTO; "" unset
  // Topology keys under `collectives.` and their values, in the order above.
  std::vector<std::pair<std::string, std::string>> collectives;
  std::vector<std::string> given;  // "NCCL_ALGO=Ring", ... as set, for headers and notes
  bool empty() const { return given.empty(); }
  // "NCCL_ALGO=Ring NCCL_BUFFSIZE=8388608" ("" when empty).
  std::string describe() const;
};

// The variables as `lookup` (getenv in the program, a map in tests) gives them. Throws
// ranksim::Error naming the variable for a malformed value or a refused variable (above).
NcclEnvironment read_nccl_environment(const std::function<const char*(const char*)>& lookup);
// The process's own environment.
NcclEnvironment read_nccl_environment();

// Apply `env` to a run's choice and topology overrides: `algorithm` ("auto" or "" when not given)
// takes NCCL_ALGO, `protocol` NCCL_PROTO; a different value already there is an Error naming the
// variable and the option (`algo_option`, `proto_option`: "--algo", "algorithm", ...). The
// collectives keys go before `sets` with `prefix` ("collectives." for a topology file,
// "topology.collectives." for a scenario), a --set of the same key being an Error naming both.
void apply_nccl_environment(const NcclEnvironment& env, std::string& algorithm, const std::string& algo_option,
                            std::string& protocol, const std::string& proto_option, std::vector<std::string>& sets,
                            const std::string& prefix);
// Its two halves, for a caller that loads the topology between them (a scenario).
void apply_nccl_choice(const NcclEnvironment& env, std::string& algorithm, const std::string& algo_option,
                       std::string& protocol, const std::string& proto_option);
void apply_nccl_sets(const NcclEnvironment& env, std::vector<std::string>& sets, const std::string& prefix);

}  // namespace ranksim::app
