// A runtime's place in a job of several processes (weftrun, mpirun, srun): joining it (MPI bring-up) and the
// start-up check that every instance sees the same configuration.
#pragma once
#include "weft/runtime.hpp"

namespace weft::detail {

// Registers with the launcher, starts (or joins) the job's transport and sets rt.job, process_index,
// process_count and local_device_count (from rt.options, resolved). Alone: job = null, one process.
void join_job(Runtime::Impl& rt);

// Every instance must see the same configuration (reliability R27): devices per process, and the replica
// count weftrun announced. `given` is the options as the program passed them (where the device count came
// from, for the message). A collective over the job: every instance calls it at start-up.
void check_job_configuration(Runtime::Impl& rt, const RuntimeOptions& given);

}  // namespace weft::detail
