// weftrun's instance wrapper: what mpirun actually starts on every rank, as
//
//   weftrun --weftrun-instance-wrapper PROGRAM [ARGS...]
//
// It forks PROGRAM (same environment, same process group, parent-death signal SIGKILL), forwards the signals
// it is sent, waits, and records in $WEFT_JOB_DIR
//   instance-<i>.launched   "<pid> <host>"                 when PROGRAM has been forked
//   instance-<i>.exit       "<unix ns> <pid> exit <code>"   or "<unix ns> <pid> signal <n>" when it ended
// (i = OMPI_COMM_WORLD_RANK), then ends the same way PROGRAM did (same exit code, or the same signal), so
// mpirun sees what it would have seen without the wrapper. mpirun itself does not say which rank exited
// non-zero unless the rank called MPI_Init, and reports "PID 0" for killed ranks; these records let the
// launcher name the first instance that failed, its real pid and its exit status.
#pragma once

namespace weftrun {

inline constexpr const char* kWrapperFlag = "--weftrun-instance-wrapper";

// argv[0] = weftrun, argv[1] = kWrapperFlag, argv[2...] = PROGRAM ARGS. Returns the exit status (or does
// not return: re-raises PROGRAM's fatal signal).
int run_instance_wrapper(int argc, char** argv);

}  // namespace weftrun
