// The processes and files of one job, as the operating system knows them: every process of mpirun's session
// (read from /proc), signalling all of them at once, and Open MPI's session directory of the job, which a
// killed mpirun cannot remove itself. Used by weftrun's supervision and by its janitor (janitor.cc).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace weftrun {

struct ProcInfo {
  pid_t pid = 0, ppid = 0, sid = 0;
  char state = 0;  // 'Z' for a zombie
};

// Every process this user can see in /proc.
std::vector<ProcInfo> list_processes();

// Sends `sig` to every process of the job: mpirun's session `session`, and weftrun's own children (orphans
// of the job reparented to it). Returns how many were signalled, zombies included.
int signal_job(pid_t session, int sig);

// Where Open MPI puts the session directories of this job's mpirun (its orte_tmpdir_base).
std::string mpi_tmpdir_base(const std::vector<std::string>& mpi_args);

// Removes <base>/ompi.<node>.<uid>/pid.<mpirun>, and the ompi.<node>.<uid> directory when that leaves it empty.
void remove_mpi_session_dir(const std::string& base, pid_t mpirun);

}  // namespace weftrun
