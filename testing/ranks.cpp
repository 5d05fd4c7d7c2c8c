#include "testing/ranks.h"

#include <exception>
#include <utility>

#include "runtime/distributed/spawn.h"
#include "sim/error.h"

namespace ranksim::testing {

RankRun run_ranks(int nranks, const RankFn& fn, const RunOptions& opts) {
  if (nranks < 1) throw Error("run_ranks: nranks must be at least 1, got " + std::to_string(nranks));
  RankRun run;
  run.outputs.resize(static_cast<std::size_t>(nranks));
  // Ranks are fibers of one thread: each writes only its own slot.
  run.report =
      runtime::spawn([&](int rank) { run.outputs[static_cast<std::size_t>(rank)] = fn(rank); }, nranks, opts.spawn);
  return run;
}

ExpectedOf whole() {
  return [](int, const std::string& name, const Outputs& reference) {
    const auto it = reference.find(name);
    if (it == reference.end()) throw Error("the single-rank reference has no output \"" + name + "\"");
    return it->second;
  };
}

ExpectedOf chunk(std::int64_t dim, int parts, std::function<int(int rank)> part_of) {
  return [dim, parts, part_of = std::move(part_of)](int rank, const std::string& name, const Outputs& reference) {
    const runtime::Tensor full = whole()(rank, name, reference);
    const std::int64_t size = full.size(dim);
    if (parts < 1 || size % parts != 0) {
      throw Error("chunk: output \"" + name + "\" has size " + std::to_string(size) + " along dim " +
                  std::to_string(dim) + ", not divisible into " + std::to_string(parts) + " parts");
    }
    const int part = part_of ? part_of(rank) : rank % parts;
    const std::int64_t len = size / parts;
    return full.narrow(dim, part * len, len).contiguous();
  };
}

ExpectedOf by_name(std::map<std::string, ExpectedOf> rules) {
  return [rules = std::move(rules)](int rank, const std::string& name, const Outputs& reference) {
    const auto it = rules.find(name);
    if (it == rules.end()) throw Error("by_name: no rule for output \"" + name + "\"");
    return it->second(rank, name, reference);
  };
}

::testing::AssertionResult outputs_match(const std::vector<Outputs>& parallel, const Outputs& reference,
                                         const ExpectedOf& expected, const Tolerance& tol) {
  for (std::size_t r = 0; r < parallel.size(); ++r) {
    const int rank = static_cast<int>(r);
    if (parallel[r].empty()) return ::testing::AssertionFailure() << "rank " << rank << " returned no outputs";
    for (const auto& [name, actual] : parallel[r]) {
      runtime::Tensor want;
      try {
        want = expected(rank, name, reference);
      } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "rank " << rank << ", tensor \"" << name << "\": " << e.what();
      }
      if (auto m = first_mismatch(want, actual, tol, rank, name))
        return ::testing::AssertionFailure() << m->describe(tol);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult matches_single_rank(int nranks, const RankFn& parallel, const RankFn& reference,
                                               const ExpectedOf& expected, const Tolerance& tol,
                                               const RunOptions& opts) {
  const RankRun one = run_ranks(1, reference, opts);
  const RankRun many = run_ranks(nranks, parallel, opts);
  return outputs_match(many.outputs, one.outputs[0], expected, tol);
}

}  // namespace ranksim::testing
