// The hierarchical algorithms' test table over the MPI transport: the twin of tests/inproc/hierarchical_test.cc
// (which runs the same table, tests/support/hierarchical_cases.hpp, over the in-process transport). Started
// by `weftrun --num-instances P` (or mpirun), each process runs, in the same order, every case of the table
// for P processes through collectives::plan_across_processes on the real job, checks its replicas' outputs
// against the naive reference and the path each case took, and exits 1 if any is wrong (2 when it was not
// started as part of a job). Prints "hierarchical: N cases passed over the MPI transport" when all pass.
#include <exception>
#include <iostream>

#include "../support/hierarchical_cases.hpp"

int main() {
  using namespace weft;
  using namespace weft::testing;
  transport::Interprocess* job = nullptr;
  try {
    job = transport::Interprocess::job();
  } catch (const std::exception& e) {
    std::cerr << "hierarchical: " << e.what() << '\n';
    return 2;
  }
  if (!job) {
    std::cerr << "hierarchical: not part of a job: run it under weftrun --num-instances 2 (or mpirun -n 2)\n";
    return 2;
  }
  const int me = job->rank();
  int passed = 0, failed = 0;
  std::uint64_t round = 0;
  // Every case, then the pair-exchange cases again as processes on different hosts run them (copying the
  // partials instead of sharing memory).
  std::vector<std::pair<HierarchicalCase, bool>> runs;
  for (const HierarchicalCase& c : HierarchicalCases()) runs.emplace_back(c, true);
  for (const HierarchicalCase& c : HierarchicalCases())
    if (c.path == "pair") runs.emplace_back(c, false);
  for (const auto& [c, share_memory] : runs) {
    if (static_cast<int>(c.split.size()) != job->size()) continue;
    const CaseData d = PrepareCase(c);
    const std::string name = CaseName(c) + (share_memory ? "" : " (without shared memory)");
    std::string failures;
    try {
      CountingInterprocess counted(*job, share_memory);
      const transport::PollContext poll(60, {}, [&name] { return name; });
      bool ring_ran = false;
      const std::vector<Array> outputs = RunOnProcess(c, d, counted, round++, poll, &ring_ran);
      failures += CheckPath(c, d, me, counted, ring_ran);
      // (This program runs its instances on one host: there the pair exchange must share memory.)
      if (share_memory && c.path == "pair" && counted.shared == 0 && counted.sendrecvs > 0)
        failures += name + ": process " + std::to_string(me) + " copied the partials instead of sharing memory";
      References references(c, d);
      for (int r = 0; r < d.num_replicas; ++r)
        if (d.process_of[static_cast<std::size_t>(r)] == me) {
          const std::string wrong = Compare(c, d, r, outputs[static_cast<std::size_t>(r)], references);
          if (!wrong.empty()) failures += (failures.empty() ? "" : "\n") + wrong;
        }
    } catch (const std::exception& e) {
      // The processes no longer run the same collectives: the rest would only time out.
      std::cerr << "hierarchical: process " << me << ": " << name << " threw: " << e.what() << '\n';
      job->mark_failed("process " + std::to_string(me) + ": " + name + " threw: " + e.what());
      return 1;
    }
    if (failures.empty()) {
      ++passed;
    } else {
      ++failed;
      std::cerr << "hierarchical: FAIL " << failures << '\n';
    }
  }
  if (failed) {
    std::cerr << "hierarchical: process " << me << ": " << failed << " of " << passed + failed << " cases failed\n";
    return 1;
  }
  if (passed == 0) {
    std::cerr << "hierarchical: the table has no case for " << job->size() << " processes\n";
    return 1;
  }
  std::cout << "hierarchical: " << passed << " cases passed over the MPI transport (process " << me << " of "
            << job->size() << ")\n";
  return 0;
}
