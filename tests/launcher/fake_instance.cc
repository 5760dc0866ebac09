// A stand-in for a weft program under weftrun: an MPI program that does what the weft runtime does towards
// the launcher (registers in $WEFT_JOB_DIR, reports a replica's failure as "weft: error: instance <i>: ..."
// on stderr and in instance-<i>.error) without the runtime itself.
//
//   weftrun_fake_instance hello               every instance prints its view of the job, exits 0
//   weftrun_fake_instance weft-error I        instance I reports its last replica failed and exits 1
//   weftrun_fake_instance early-exit I CODE   instance I exits CODE before MPI_Init and before registering
//   weftrun_fake_instance sleep S             every instance sleeps S seconds (exits 0)
// Any further arguments are ignored (a marker to find the processes by). Instances that do not fail sleep
// 60 s: the launcher must end them.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/launcher_protocol.hpp"  // the names the real runtime uses

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void register_instance(int rank) {
  const char* dir = std::getenv(weft::launcher::kJobDirVariable);
  if (!dir) return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string path = weft::launcher::record_path(dir, rank, weft::launcher::kRegistered);
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d %s\n", static_cast<int>(getpid()), host);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "hello";
  const int target = argc > 2 ? std::atoi(argv[2]) : 1;
  if (mode == "early-exit" && env_int("OMPI_COMM_WORLD_RANK", -1) == target) return argc > 3 ? std::atoi(argv[3]) : 1;

  // Registered before MPI_Init: MPI_Init waits for every rank, and an instance that exits early must not keep
  // the others from registering.
  register_instance(env_int("OMPI_COMM_WORLD_RANK", 0));
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int local = env_int("WEFT_DEVICE_COUNT", 1);

  if (mode == "hello") {
    std::printf("rank %d of %d, devices %d, replicas %d, instances %d\n", rank, size, local,
                env_int("WEFT_NUM_REPLICAS", -1), env_int("WEFT_NUM_INSTANCES", -1));
    std::fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
  }
  if (mode == "sleep") {
    sleep(static_cast<unsigned>(target));
    MPI_Finalize();
    return 0;
  }
  if (mode == "weft-error" && rank == target) {
    const int replica = rank * local + local - 1;
    char line[256];
    std::snprintf(line, sizeof line, "instance %d: replica %d (CpuDevice(id=%d, process=%d)) failed: boom-%d", rank,
                  replica, replica, rank, replica);
    std::fprintf(stderr, "%s%s\n", std::string(weft::launcher::kErrorPrefix).c_str(), line);
    std::fflush(stderr);
    if (const char* dir = std::getenv(weft::launcher::kJobDirVariable)) {
      const std::string path = weft::launcher::record_path(dir, rank, weft::launcher::kError);
      if (std::FILE* f = std::fopen(path.c_str(), "a")) {
        std::fprintf(f, "%s\n", line);
        std::fclose(f);
      }
    }
    std::exit(1);
  }
  sleep(60);
  MPI_Finalize();
  return 0;
}
