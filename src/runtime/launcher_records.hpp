// What this instance tells the launcher (weftrun) through $WEFT_JOB_DIR and stderr: that it started, and
// which failure is the job's root cause (core/launcher_protocol.hpp is the protocol both sides share).
#pragma once
#include <string>

#include "weft/runtime.hpp"

namespace weft::detail {

// $WEFT_JOB_DIR/instance-<i>.registered (reliability R26), before MPI starts; nothing outside a launcher.
void register_instance();

// In a job of several instances: announces a replica's failure on stderr and in
// $WEFT_JOB_DIR/instance-<i>.error (or .aborted when it only follows another instance's).
void report_to_launcher(const Runtime::Impl& rt, const std::string& message);

}  // namespace weft::detail
