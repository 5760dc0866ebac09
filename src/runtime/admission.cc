// Admission (admission.hpp): one execution at a time per runtime, with a caller that waits on a stuck one
// warned and then failed on the collective deadlines.
#include <algorithm>
#include <chrono>
#include <string>

#include "core/log.hpp"
#include "runtime/admission.hpp"
#include "runtime/internal.hpp"
#include "transport/rendezvous.hpp"  // deadline_after, seconds_str
#include "weft/error.hpp"

namespace weft::detail {

Admitted::Admitted(Runtime::Impl& rt, const std::string& name) : rt_(rt) {
  refuse_if_forked(rt.made_in, name);  // its workers are gone: nothing would run the replicas
  using Clock = std::chrono::steady_clock;
  auto& a = rt.admission;
  std::unique_lock lock(a.mutex);
  if (a.busy) {
    const double warn_s = rt.options.collective_warn_s, timeout_s = rt.options.collective_timeout_s;
    Clock::time_point start = Clock::now();
    std::uint64_t seen = rt.liveness();
    bool warned = false;
    while (a.busy) {
      const Clock::time_point fail_at = transport::deadline_after(start, timeout_s);
      const Clock::time_point warn_at = warned ? Clock::time_point::max() : transport::deadline_after(start, warn_s);
      a.cv.wait_until(lock, std::min(fail_at, warn_at));
      if (!a.busy) break;
      const Clock::time_point now = Clock::now();
      if (rt.liveness() != seen) {  // the execution in flight is alive: wait afresh
        seen = rt.liveness();
        start = now;
        warned = false;
        continue;
      }
      const double running_s = std::chrono::duration<double>(now - a.since).count();
      const std::string why = a.running + " is running on this runtime (for " + transport::seconds_str(running_s) +
                              ") and completed no collective meanwhile; executions run one at a time, so a pmap "
                              "called from a thread that a replica started cannot start before that replica "
                              "returns (use one program over a multi-axis mesh instead)";
      if (now >= fail_at)
        throw TimeoutError(name + ": could not start within " + transport::seconds_str(timeout_s) +
                           " (WEFT_COLLECTIVE_TIMEOUT): " + why);
      if (now >= warn_at) {
        warned = true;
        log(LogLevel::warn, name + ": waiting " + transport::seconds_str(warn_s) + " (WEFT_COLLECTIVE_WARN) to start: " + why);
      }
    }
  }
  a.busy = true;
  a.running = name;
  a.since = Clock::now();
}

Admitted::~Admitted() {
  {
    std::lock_guard lock(rt_.admission.mutex);
    rt_.admission.busy = false;
  }
  rt_.progress++;
  rt_.admission.cv.notify_all();
}

}  // namespace weft::detail
