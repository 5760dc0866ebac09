// weftrun: weft's launcher, in the role PopRun plays for Poplar. It runs PROGRAM as N instances under Open
// MPI's mpirun, each holding R/N of the job's R replicas, tags every output line with its instance, and when
// the job fails says first which instance failed and why (reliability R24). docs/weftrun.md is the manual.
//
//   weftrun [options] [--] PROGRAM [ARGS...]
//
// This is the entry point: the same binary is also the instance wrapper mpirun starts on every rank
// (instance_wrapper.cc); otherwise the command line is parsed (options.cc) and the job run (job.hpp lists
// the files of the Job).
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "instance_wrapper.hpp"
#include "job.hpp"
#include "options.hpp"

namespace {

constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace weftrun;
  if (argc >= 2 && std::strcmp(argv[1], kWrapperFlag) == 0) return run_instance_wrapper(argc, argv);
  Options options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "weftrun: error: %s\nweftrun: run 'weftrun --help' for the options\n", e.what());
    return kUsageError;
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  for (const std::string& note : options.notes) std::fprintf(stderr, "weftrun: note: %s\n", note.c_str());
  Job job(std::move(options));
  return job.run();
}
