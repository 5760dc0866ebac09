// The calls in flight, for the interpreter's exit: a daemon thread may be inside a pmap or session run when
// the main thread ends, and the runtime (and the replicas' Python state) must not be torn down under it. An
// atexit hook, which runs before the interpreter finalizes (and before module globals, such as a runtime made
// by weft.init, are freed), stops every call in flight as Ctrl-C would and waits for them to end.
#include <Python.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "bindings.hpp"

namespace weft::python {
namespace {

struct ActiveCalls {
  std::mutex mutex;
  std::condition_variable cv;
  std::set<CallState*> calls;
  bool exiting = false;
} g_active;

// How long the exit waits for the calls in flight: past that (a replica blocked outside Python and weft, in
// time.sleep or I/O) the process ends now with a message rather than crash in a half-finalized interpreter.
constexpr auto kExitWait = std::chrono::seconds(30);

void stop_calls_at_exit() {
  {
    std::lock_guard lock(g_active.mutex);
    g_active.exiting = true;
    if (g_active.calls.empty()) return;
    std::string names;
    for (CallState* call : g_active.calls) {
      call->interrupted = true;
      stop_other_replicas(*call, -1, "the interpreter is exiting");
      names += (names.empty() ? "" : ", ") + call->name;
    }
    // Said here, once: the threads that made these calls are daemon threads, which the interpreter may stop
    // before they report anything.
    std::fprintf(stderr, "weft: the interpreter is exiting: stopping %zu call(s) still running in other threads (%s)\n",
                 g_active.calls.size(), names.c_str());
    std::fflush(stderr);
  }
  py::gil_scoped_release nogil;
  std::unique_lock lock(g_active.mutex);
  if (!g_active.cv.wait_for(lock, kExitWait, [] { return g_active.calls.empty(); })) {
    std::fprintf(stderr,
                 "weft: the interpreter is exiting but %zu pmap/session call(s) in other threads did not stop "
                 "within %lld s (a replica blocked outside Python and weft); exiting now\n",
                 g_active.calls.size(), static_cast<long long>(kExitWait.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace

ActiveCall::ActiveCall(CallState& call) : call_(call) {
  std::lock_guard lock(g_active.mutex);
  if (g_active.exiting)
    throw weft::Error(call.name + ": the interpreter is exiting; no new pmap or session run can start");
  g_active.calls.insert(&call_);
}

ActiveCall::~ActiveCall() {
  std::lock_guard lock(g_active.mutex);
  g_active.calls.erase(&call_);
  g_active.cv.notify_all();
}

void init_shutdown(py::module_& m) {
  py::module_::import("atexit").attr("register")(py::cpp_function(&stop_calls_at_exit));
  m.def("calls_in_flight", [] {
    std::lock_guard lock(g_active.mutex);
    return g_active.calls.size();
  });
}

}  // namespace weft::python
