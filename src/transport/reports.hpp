// The text both transports and the rendezvous put in their reports, in one place so that a wait across
// processes reads the same whichever transport carries it (the MPI one, or the in-process one the tests use):
// lists, durations, and the "arrived: [...]; missing: [...]" stall report with one line per missing process.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "transport/interprocess.hpp"

namespace weft::transport {

// "[0, 1, 2]"
std::string list_str(const std::vector<int>& items);
// "2 s", "0.5 s": a duration as the messages print it.
std::string seconds_str(double seconds);
// What a wait is for, as its PollContext says ("psum(...) seq 3"), or "a collective".
std::string what_of(const PollContext& poll);

// "arrived: [0, 1]; missing: [2, 3]" over `procs` (global replica ids when poll.replicas_of says which process
// holds which, else processes), then a line per missing process, named by `process_name`, with its replicas
// and where they stand (poll.missing_progress).
std::string stall_report(const std::vector<int>& procs, const std::vector<int>& missing, const PollContext& poll,
                         const std::function<std::string(int)>& process_name);

}  // namespace weft::transport
