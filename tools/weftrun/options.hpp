// weftrun's command line (docs/weftrun.md): the options, their checks and the usage text. Separate from the
// launcher (main.cc) so that tests and the fuzz target (tests/fuzz/weftrun_args_fuzz.cc) drive the parser on
// its own: it reports a bad command line by throwing UsageError (main prints it and exits 2) and never exits.
//
// Options stop at the first argument that is not one (PROGRAM); PROGRAM's arguments pass through untouched.
// The options are parsed by hand rather than with CLI11 for exactly that: CLI11 has no "stop at the first
// positional and keep the rest verbatim" mode that also leaves `--` and option-like words after PROGRAM alone.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace weftrun {

// Bounds: one process holds at most 4096 devices (weft's RuntimeOptions::device_count), so R/N is at most
// that; weftrun keeps a record per instance, so N is bounded too (mpirun could not start more anyway).
inline constexpr int kMaxInstances = 1 << 16;
inline constexpr int kMaxReplicasPerInstance = 4096;

struct Options {
  int num_instances = 1;
  int num_replicas = -1;  // default: num_instances
  int devices_per_replica = 1;
  int only_output_from = -1;
  int verbose = 0;
  std::vector<std::string> mpi_args;
  std::string hosts, hostfile;
  double timeout_s = 0;
  bool wrapper = true;
  bool help = false;                // -h / --help: print kUsage, run nothing
  std::vector<std::string> notes;   // to print before running (ignored PopRun options)
  std::vector<std::string> program;
};

// The command line's problem, as the text after "weftrun: error: ".
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr const char* kUsage = R"(usage: weftrun [options] [--] PROGRAM [ARGS...]

Runs PROGRAM as --num-instances processes under Open MPI's mpirun; instance i holds the global replicas
[i*R/N, (i+1)*R/N). Options end at the first argument that is not an option: PROGRAM and its arguments pass
through untouched.

options:
  --num-instances N              instances (processes) to start (default 1)
  --num-replicas R               replicas of the whole job (default N); must be divisible by N
  --devices-per-replica D        devices per replica; only 1 is supported (alias --ipus-per-replica)
  --only-output-from-instance K  show only instance K's output; other instances' error lines still show
  --timeout S                    kill the whole job after S seconds and exit 124
  --hosts H1,H2,...              hosts to run on (mpirun --host)
  --hostfile FILE                hosts to run on (mpirun --hostfile)
  --mpi-local-args='ARGS'        extra mpirun arguments, split on spaces (e.g. '-x MY_VAR')
  --mpi-global-args='ARGS'       the same (PopRun's name for arguments of every host)
  --no-instance-wrapper          start PROGRAM directly, without weftrun's per-instance exit records
  -v, -vv                        print the mpirun command line; -vv also the environment passed
  -h, --help                     this text
accepted and ignored (PopRun's IPU partitions): --vipu-partition, --update-partition, --remove-partition,
  --reset-partition, --vipu-server-host, --vipu-server-port, --vipu-cluster

exit status: 0 if every instance succeeded; 124 on --timeout; 2 for a usage error; otherwise the first
failing instance's exit status (128+n for signal n) when known, else 1. See docs/weftrun.md.
)";

// `args` are argv[1..]. Throws UsageError; with --help returns at once with help set.
Options parse_options(const std::vector<std::string>& args);

// "replica 3" or "replicas [4, 7]": the global replicas instance `instance` holds.
std::string replicas_of(int instance, const Options& o);

}  // namespace weftrun
