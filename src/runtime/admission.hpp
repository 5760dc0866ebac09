// Executions run one at a time per runtime: two executions sharing devices could otherwise each hold a
// device the other one waits for. A call waits for the one in flight as long as that one makes progress:
// the one in flight may itself wait for the caller (a pmap from a thread a replica started), and a wait for
// it is a blocking wait like any other, with the collective deadlines.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "weft/runtime.hpp"

namespace weft::detail {

// The runtime's side: who runs now (Runtime::Impl::admission).
struct AdmissionState {
  std::mutex mutex;
  std::condition_variable cv;
  bool busy = false;
  std::string running;  // the name of the execution in flight
  std::chrono::steady_clock::time_point since;
};

// The runtime's turn for one execution, held for its lifetime: the constructor waits while another one
// runs and makes progress, and fails (TimeoutError) when the one in flight completes no collective for the
// collective timeout (it may be waiting for this caller); the destructor hands the turn on.
class Admitted {
 public:
  Admitted(Runtime::Impl& rt, const std::string& name);
  ~Admitted();
  Admitted(const Admitted&) = delete;
  Admitted& operator=(const Admitted&) = delete;

 private:
  Runtime::Impl& rt_;
};

}  // namespace weft::detail
