// Joining a job of several processes (weftrun, mpirun, srun): registering with the launcher, starting the
// job's transport (MPI bring-up: transport/interprocess.hpp), and the start-up check that every instance
// runs with the same configuration.
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "collectives/host_exchange.hpp"
#include "core/launcher_protocol.hpp"
#include "core/settings.hpp"
#include "runtime/internal.hpp"
#include "runtime/job.hpp"
#include "runtime/launcher_records.hpp"
#include "weft/error.hpp"

namespace weft::detail {

namespace {

// Where this process's device count came from, for the job checks below. A count hard-coded in the program
// (RuntimeOptions::device_count) overrides the WEFT_DEVICE_COUNT weftrun gives each instance: blaming that
// variable then sent users looking for a setting they never made (issue 10).
std::string device_count_source(const RuntimeOptions& given, int count) {
  if (given.device_count > 0) return "RuntimeOptions::device_count = " + std::to_string(count) + " in the program";
  if (const char* v = settings::value(settings::Setting::device_count)) return std::string("WEFT_DEVICE_COUNT=") + v;
  return "the default of " + std::to_string(count) + " (WEFT_DEVICE_COUNT unset)";
}
}  // namespace

void join_job(Runtime::Impl& rt) {
  // Under weftrun / mpirun this process is one instance of a job; its devices are a slice of the global ones.
  // It registers with the launcher first: starting MPI waits for every other instance.
  register_instance();
  rt.job = transport::Interprocess::job();
  rt.process_index = rt.job ? rt.job->rank() : 0;
  rt.process_count = rt.job ? rt.job->size() : 1;
  rt.local_device_count = rt.options.device_count;
}

void check_job_configuration(Runtime::Impl& rt, const RuntimeOptions& given) {
  const std::string count_source = device_count_source(given, rt.local_device_count);
  const bool hard_coded = given.device_count > 0;
  // What to do when the program's own count is what breaks the job: weftrun sets the count for it.
  const std::string fix = hard_coded ? "; under weftrun leave RuntimeOptions::device_count at 0 (its default) so "
                                       "that each instance takes the WEFT_DEVICE_COUNT weftrun sets "
                                       "(--num-replicas / --num-instances)"
                                     : "";
  collectives::HostExchange exchange(*rt.job, rt.options.collective_timeout_s);
  const int processes = exchange.processes();
  std::vector<int> counts(processes);
  const std::vector<std::byte> all =
      exchange.all_gather("start-up", std::as_bytes(std::span<const int>(&rt.local_device_count, 1)));
  std::memcpy(counts.data(), all.data(), all.size());
  for (int p = 0; p < processes; ++p)
    if (counts[p] != counts[0]) {
      std::string list;
      for (int q = 0; q < processes; ++q) {
        if (q) list += ", ";
        list += "instance " + std::to_string(q) + ": " + std::to_string(counts[q]);
      }
      throw InvalidArgument("the instances of this job disagree on their device count: " + list + " (this instance's " +
                            std::to_string(rt.local_device_count) + " is " + count_source + ")" + fix);
    }
  if (const std::string& r = launcher::launch_environment().num_replicas; !r.empty()) {
    if (std::atoi(r.c_str()) != processes * rt.local_device_count)
      throw InvalidArgument(std::string(launcher::kNumReplicasVariable) + "=" + r + " (weftrun --num-replicas) but this job has " +
                            std::to_string(processes) + " instances x " + std::to_string(rt.local_device_count) +
                            " devices (" + count_source + ")" + fix);
  }
}

}  // namespace weft::detail
