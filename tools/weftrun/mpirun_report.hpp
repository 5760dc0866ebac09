// weftrun: reads the messages Open MPI's mpirun prints itself (untagged lines, usually in blocks between
// lines of dashes) and recognises the ones that say which rank failed and how. Open MPI 4.1.4 prints, e.g.:
//
//   Primary job  terminated normally, but 1 process returned
//   a non-zero exit code. Per user-direction, the job has been aborted.
//
//   mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
//
//   mpirun detected that one or more processes exited with non-zero status, thus causing
//   the job to be terminated. The first process to do so was:
//     Process name: [[28782,1],1]
//     Exit code:    3
//
//   mpirun has exited due to process rank 1 with PID 0 on
//   node vm exiting improperly. There are three reasons this could occur: ...
//
//   MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
//   with errorcode 5.
//
// (Open MPI 4.1 reports "PID 0" for a local rank; the launcher substitutes the pid it knows.)
#pragma once

#include <string>
#include <vector>

namespace weftrun {

struct MpirunEvent {
  enum Kind { signal, exit_code, improper_exit, mpi_abort, aborted_job };
  Kind kind = aborted_job;
  int rank = -1;      // -1 when the message names no rank (aborted_job)
  long pid = 0;       // 0 when unknown
  std::string node;
  int value = 0;      // signal number, exit code, MPI_Abort error code, or the count of failed processes
  std::string signal_name;
};

struct MpirunReport {
  std::vector<MpirunEvent> events;
  std::vector<std::string> other_lines;  // lines of blocks nothing above recognised (dash lines dropped)
};

MpirunReport parse_mpirun_report(const std::vector<std::string>& lines);

}  // namespace weftrun
