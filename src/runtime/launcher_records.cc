// Launcher records: what this instance tells weftrun (or the user reading a job's output) through stderr and
// $WEFT_JOB_DIR, in the protocol core/launcher_protocol.hpp shares with the launcher: that it started, and
// whether its failure is a root cause or only follows another instance's.
#include <cstdio>
#include <string>

#include <unistd.h>

#include "core/launcher_protocol.hpp"
#include "core/log.hpp"
#include "core/record_files.hpp"
#include "runtime/internal.hpp"
#include "runtime/launcher_records.hpp"

namespace weft::detail {

// Tells the launcher this instance started (reliability R26): $WEFT_JOB_DIR/instance-<i>.registered, with
// the rank from the MPI launcher's environment (known before MPI starts, which waits for every instance).
void register_instance() {
  const launcher::LaunchEnvironment& launch = launcher::launch_environment();
  if (launch.job_dir.empty() || launch.rank.empty()) return;
  const std::string path = launcher::record_path(launch.job_dir, launch.rank, launcher::kRegistered);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  launcher::write_record(path, std::to_string(getpid()) + " " + host + "\n");
}

// In a job of several instances, the launcher shows the root cause first: announce it on stderr and in
// $WEFT_JOB_DIR/instance-<i>.error before the error travels up this process's stack.
// A failure that only follows another instance's (it announced itself first) is reported as "aborted", so
// the launcher, which takes the earliest "weft: error:" line as the root cause, cannot mistake it for one
// when its output happens to arrive first.
void report_to_launcher(const Runtime::Impl& rt, const std::string& message) {
  if (rt.process_count <= 1) return;
  const std::string line = "instance " + std::to_string(rt.process_index) + ": " + message;
  const bool consequence = rt.job->peer_failed();
  rt.job->mark_failed(line.substr(0, line.find('\n')));
  if (consequence) {
    const std::string text = std::string(launcher::kAbortedPrefix) + line + "\n";
    [[maybe_unused]] ssize_t written = ::write(2, text.data(), text.size());
  } else {
    log(LogLevel::error, line);
  }
  if (const std::string& dir = launcher::launch_environment().job_dir; !dir.empty()) {
    const std::string path =
        launcher::record_path(dir, rt.process_index, consequence ? launcher::kAborted : launcher::kError);
    launcher::append_record(path, line + "\n");
  }
}

}  // namespace weft::detail
