// The run of one job from end to end (job.hpp), in the order its steps must happen: the signal relay before
// anything is started; the janitor before weftrun becomes a subreaper (it must be nobody's descendant); the
// output socket before mpirun starts the wrappers that connect to it; then start, supervise, sweep up, sum up,
// and clean up.
#include <sys/prctl.h>

#include "host_check.hpp"
#include "job.hpp"
#include "processes.hpp"
#include "signal_relay.hpp"
#include "text.hpp"

namespace weftrun {

int Job::run() {
  if (!install_signal_relay()) {
    say("error: cannot create a pipe");
    return 1;
  }
  if (!make_job_dir()) return 1;
  mpi_tmpdir_base_ = mpi_tmpdir_base(o_.mpi_args);
  // Before becoming a subreaper: the janitor must be nobody's descendant (see start_janitor).
  start_janitor();
  // Orphans of the job become our children, so we can kill and reap them at the end.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  if (o_.wrapper) listen_for_output();
  const std::vector<std::string> env = build_environment();
  const std::vector<std::string> command = build_command(env);
  say_command(command, env);
  const HostNameCheck host_name;  // beside the launch; says at the end what it found, if anything
  int status = 1;
  if (start(command, env)) {
    std::string mpirun_pid = "m";  // built in steps: GCC 12's -Wrestrict misreads "m" + std::to_string(...)
    mpirun_pid += std::to_string(mpirun_);
    mpirun_pid += ";";
    tell_janitor(mpirun_pid);
    supervise();
    final_sweep();
    status = finish();
  }
  clean_up_files();
  stop_janitor();
  return status;
}

Instance& Job::instance(int rank) {
  if (rank >= static_cast<int>(instances_.size())) instances_.resize(static_cast<std::size_t>(rank) + 1);
  return instances_[static_cast<std::size_t>(rank)];
}

}  // namespace weftrun
