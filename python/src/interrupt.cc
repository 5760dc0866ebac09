// The caller's side of a Python pmap or session run, and Ctrl-C. The caller releases the GIL for the whole
// execution, which runs on its Waiter thread, and waits in 50 ms slices, taking the GIL between slices to let
// Python handle signals: Ctrl-C (KeyboardInterrupt) during a call stops the replicas at their next weft call
// or Python bytecode, and the caller raises KeyboardInterrupt once they have stopped (each is bounded by the
// collective deadlines). The same slices stop the replicas still in Python once another has failed.
#include <Python.h>

#include <unistd.h>

#include <exception>
#include <memory>
#include <optional>

#include "bindings.hpp"
#include "waiter.hpp"

namespace weft::python {

void run_interruptibly(CallState& call, const std::function<void()>& work) {
  if (in_replica())
    throw InvalidArgument(call.name + ": cannot start a program from inside a replica's function (" +
                          current_call()->name + "); nest pmap inside pmap (a multi-axis mesh) instead");
  ActiveCall active(call);
  std::exception_ptr failure;
  std::optional<py::error_already_set> interrupt;
  // One per calling thread, kept (a thread per call costs ~50 us). A forked child inherits the object but not
  // its thread: it leaves that one be (freeing it would join a thread that is not there) and makes its own.
  thread_local std::unique_ptr<Waiter> kept;
  thread_local int kept_by = 0;
  if (!kept || kept_by != getpid()) {
    if (kept) static_cast<void>(kept.release());
    kept = std::make_unique<Waiter>();
    kept_by = getpid();
  }
  Waiter& waiter = *kept;
  {
    py::gil_scoped_release nogil;
    waiter.start([&] {
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
    });
    while (!waiter.wait_for(std::chrono::milliseconds(50))) {
      py::gil_scoped_acquire gil;
      if (call.failed_replica >= 0 && !call.stopping && std::chrono::steady_clock::now() - call.failed_at > kStopDelay)
        stop_other_replicas(call, call.failed_replica, "another replica failed");
      if (call.interrupted) continue;  // already told the replicas; wait for them to stop
      if (PyErr_CheckSignals() != 0) {  // a Python signal handler raised (KeyboardInterrupt)
        interrupt.emplace();
        call.interrupted = true;
        for (unsigned long thread : call.python_threads)
          if (thread) PyThreadState_SetAsyncExc(thread, PyExc_KeyboardInterrupt);
      }
    }
  }
  if (interrupt) {
    call.python_error = py::object();  // the replicas' KeyboardInterrupts are this one
    throw std::move(*interrupt);
  }
  raise_python_error(call);
  if (failure) std::rethrow_exception(failure);
}

}  // namespace weft::python
