// What the instances left in $WEFT_JOB_DIR (job.hpp), read once the job has ended: each instance's records
// from its wrapper (launched, exit) and from the weft runtime in it (registered, error, departed, blame).
// docs/weftrun.md lists the records; core/launcher_protocol.hpp names their files.
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/launcher_protocol.hpp"
#include "job.hpp"
#include "text.hpp"

namespace weftrun {

void Job::read_records() {
  for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
    Instance& inst = instances_[static_cast<std::size_t>(i)];
    auto record = [&](const char* suffix) { return read_file(weft::launcher::record_path(job_dir_, i, suffix)); };
    if (const auto t = record(weft::launcher::kRegistered)) {
      inst.registered = true;
      char host[256] = {};
      long pid = 0;
      if (std::sscanf(t->c_str(), "%ld %255s", &pid, host) >= 1) {
        inst.reg_pid = pid;
        inst.reg_host = host;
      }
    }
    if (const auto t = record(weft::launcher::kLaunched)) {
      char host[256] = {};
      long pid = 0;
      if (std::sscanf(t->c_str(), "%ld %255s", &pid, host) >= 1) {
        inst.launched = true;
        inst.launch_pid = pid;
        inst.launch_host = host;
      }
    }
    if (const auto t = record(weft::launcher::kExit)) {
      long long ns = 0;
      long pid = 0;
      char kind[16] = {};
      int value = 0;
      if (std::sscanf(t->c_str(), "%lld %ld %15s %d", &ns, &pid, kind, &value) == 4) {
        inst.ended = true;
        inst.end_ns = ns;
        if (std::strcmp(kind, "signal") == 0)
          inst.exit_signal = value;
        else
          inst.exit_code = value;
      }
    }
    if (const auto t = record(weft::launcher::kError)) inst.error_file = first_line(*t);
    if (record(weft::launcher::kDeparted)) inst.departed = true;
    if (const auto t = record(weft::launcher::kBlame)) {
      std::istringstream in(*t);
      std::string kind;
      int who = -1;
      while (in >> kind >> who)
        if (who >= 0 && who < static_cast<int>(instances_.size()) && who != i) inst.blames.emplace_back(kind, who);
    }
  }
}

}  // namespace weftrun
