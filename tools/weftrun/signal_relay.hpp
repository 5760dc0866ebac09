// The signals weftrun hears (SIGINT, SIGTERM, SIGHUP from the terminal or a caller, SIGCHLD from mpirun), turned
// into bytes on a pipe (the self-pipe trick), so that the supervision loop (supervise.cc) sees them in the
// same poll as the job's output and acts on them outside the handler: it relays them to the job, kills it,
// and says so. SIGPIPE is ignored: a closed output is seen as EPIPE (Job::output_closed).
#pragma once

namespace weftrun {

// Creates the pipe and installs the handlers. False, with nothing installed, if the pipe cannot be made.
bool install_signal_relay();

// The pipe's read end (non-blocking): one byte per signal received, the signal's number.
int signal_relay_fd();

}  // namespace weftrun
