// The launcher protocol: what weftrun and the instances it starts tell each other, through records in the
// job directory and through their output. One header for both sides (src/runtime and src/transport/mpi in
// the instances; tools/weftrun and its instance wrapper in the launcher), so that no name can change on
// one side only. docs/weftrun.md describes what each record means and who writes it.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

namespace weft::launcher {

// The job directory weftrun creates and exports to every instance.
inline constexpr const char* kJobDirVariable = "WEFT_JOB_DIR";
// The job's shape, as weftrun's --num-instances and --num-replicas gave it (it also sets WEFT_DEVICE_COUNT).
inline constexpr const char* kNumInstancesVariable = "WEFT_NUM_INSTANCES";
inline constexpr const char* kNumReplicasVariable = "WEFT_NUM_REPLICAS";
// In the job directory: the socket the instance wrappers stream their output to.
inline constexpr const char* kOutputSocket = "output.sock";

// Records, one file per instance: <job dir>/instance-<i><suffix>.
inline constexpr const char* kRegistered = ".registered";  // runtime started: "<pid> <host>" (R26)
inline constexpr const char* kLaunched = ".launched";      // wrapper started the program: "<pid> <host>"
inline constexpr const char* kExit = ".exit";              // wrapper: "<unix ns> <pid> exit|signal <value>"
inline constexpr const char* kError = ".error";            // this instance's own failure (a root cause)
inline constexpr const char* kAborted = ".aborted";        // a failure that follows another instance's
inline constexpr const char* kDeparted = ".departed";      // its program ended while others ran: "<unix ns>"
inline constexpr const char* kBlame = ".blame";            // "<missing|departed|unfinished> <instance>" lines

// The line prefixes the launcher reads in the instances' output: the root cause is the earliest error line.
inline constexpr std::string_view kErrorPrefix = "weft: error: ";
inline constexpr std::string_view kAbortedPrefix = "weft: aborted: ";

// What the launchers (weftrun, mpirun, srun) tell an instance through its environment. Read once per process
// (launch_environment()), by the runtime, the MPI transport and the instance wrapper alike: none of them
// spells these variable names or their order of precedence again.
struct LaunchEnvironment {
  std::string job_dir;          // $WEFT_JOB_DIR: weftrun's job directory; empty when not started by weftrun
  std::string rank;             // this instance's rank from the MPI launcher (Open MPI, PMIx, PMI); empty: none
  std::string num_instances;    // $WEFT_NUM_INSTANCES (weftrun --num-instances), as given; empty: unset
  std::string num_replicas;     // $WEFT_NUM_REPLICAS (weftrun --num-replicas), as given; empty: unset
  int mpi_size = 0;             // the job size the MPI launcher announced; 0: not started by one
  bool mpi_launched = false;    // an MPI launcher started this process (its variables are set)

  // More than one instance was asked for, by weftrun or by an MPI launcher.
  bool several_instances() const { return std::atoi(num_instances.c_str()) > 1 || mpi_size > 1; }
};

inline const LaunchEnvironment& launch_environment() {
  static const LaunchEnvironment environment = [] {
    auto get = [](const char* name) -> std::string {
      const char* v = std::getenv(name);
      return v ? v : "";
    };
    LaunchEnvironment e;
    e.job_dir = get(kJobDirVariable);
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
      if (e.rank.empty()) e.rank = get(name);
    e.num_instances = get(kNumInstancesVariable);
    e.num_replicas = get(kNumReplicasVariable);
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
      if (e.mpi_size <= 1) e.mpi_size = std::max(e.mpi_size, std::atoi(get(name).c_str()));
    e.mpi_launched = !get("OMPI_COMM_WORLD_SIZE").empty() || !get("PMI_SIZE").empty() || !get("PMIX_SIZE").empty() ||
                     !get("PMIX_RANK").empty();
    return e;
  }();
  return environment;
}

inline std::string record_path(std::string_view job_dir, std::string_view instance, const char* suffix) {
  std::string path(job_dir);
  path += "/instance-";
  path += instance;
  path += suffix;
  return path;
}
inline std::string record_path(std::string_view job_dir, int instance, const char* suffix) {
  return record_path(job_dir, std::to_string(instance), suffix);
}
inline std::string output_socket_path(std::string_view job_dir) {
  std::string path(job_dir);
  path += '/';
  path += kOutputSocket;
  return path;
}

}  // namespace weft::launcher
