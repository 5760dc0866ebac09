// Shared pieces of the Python bindings (python/src/*.cc), one section per file that defines them: numpy <->
// weft::Array conversion, the state of a call in flight and the replica the calling thread runs (what weft.lax
// finds, as jax.lax finds its axis environment), the Python call site, the caller's interruptible wait, and
// the init functions of each concern. Only the binding files include this header: pybind11 never reaches
// weft's own headers.
//
// Threads and the GIL. A replica of a Python pmap (or session run) runs its Python function on its device's
// worker thread (an OS thread of the C++ runtime: a Python frame cannot live anywhere else). It holds the GIL
// only while it runs Python; every collective releases it before it waits, so the replicas meet in C++ while
// the others run Python. The caller releases the GIL for the whole execution and waits on a helper thread's
// result in 50 ms slices, taking the GIL between slices to let Python handle signals: Ctrl-C
// (KeyboardInterrupt) during a pmap stops the replicas at their next weft call or Python bytecode, and the
// caller raises KeyboardInterrupt once they have stopped (each is bounded by the collective deadlines).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include <weft/weft.hpp>

namespace py = pybind11;

namespace weft::python {

// ---- arrays (arrays.cc) ----------------------------------------------------------------------------------
// numpy's dtype for a weft dtype. bfloat16 has none in numpy: it is refused with InvalidArgument.
py::dtype numpy_dtype(DType dtype);
py::dtype bfloat16_marker();  // the stand-in dtype of bfloat16 values (arrays.cc)
DType weft_dtype(const py::dtype& dtype, const char* what);
// A read-only numpy view of `array`'s buffer: no copy; the view keeps the buffer alive, and a write raises
// ValueError ("assignment destination is read-only"), as weft buffers are immutable.
py::array to_numpy(const Array& array);
// Anything np.asarray accepts, as an Array. A numpy view made by to_numpy gives its Array back (no copy);
// anything else is copied once (weft owns its buffers). `what` names the value in errors.
Array to_array(py::handle value, const char* what);

// ---- a call in flight (shared by the files below) -----------------------------------------------------------
// Per call of a Python pmap or session run: what the replicas' threads share with the caller's thread.
struct CallState {
  std::string name;
  std::atomic<bool> interrupted{false};  // Ctrl-C in the caller: replicas stop at their next weft call
  bool stopping = false;                 // the replicas in Python were told to stop (guarded by the GIL)
  int failed_replica = -1;               // the first replica whose Python code raised (guarded by the GIL)
  std::chrono::steady_clock::time_point failed_at;
  std::string stop_reason;               // why: "another replica failed", "the interpreter is exiting"
  std::mutex mutex;
  // The first Python exception raised by a replica's own code (not a weft error), re-raised in the caller.
  py::object python_error;  // guarded by the GIL
  int python_error_replica = -1;
  std::string python_error_where;
  // Replica threads running Python now (thread id per replica), for delivering KeyboardInterrupt.
  std::vector<unsigned long> python_threads;  // guarded by the GIL; 0 = not in Python
};

// ---- the replica of the calling thread (current_replica.cc) -----------------------------------------------
// The replica this thread runs, or an InvalidArgument naming `op` ("weft.lax.psum called outside pmap").
Replica& current_replica(const char* op);
CallState* current_call();
bool in_replica();  // whether this thread runs a replica now

// While alive, this thread runs replica `replica` of `call` (nests: restores the previous one).
class ReplicaScope {
 public:
  ReplicaScope(Replica& replica, CallState* call);
  ~ReplicaScope();
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;

 private:
  Replica* previous_replica_;
  CallState* previous_call_;
};

// Runs `python_body` (a Python call) for `replica` on this (worker) thread: takes the GIL, makes the
// replica current, and turns a Python exception into a C++ one the runtime can carry: weft's own errors
// keep their kind (a MismatchError stays one), any other exception is stashed in `call` (re-raised in the
// caller as itself, with the replica named) and reported to the runtime as weft::Error.
template <class F>
auto run_python_replica(Replica& replica, CallState& call, F&& python_body) -> decltype(python_body());

// ---- the caller's wait, and Ctrl-C (interrupt.cc) ----------------------------------------------------------
// Runs `work` (blocking C++ with the GIL released) on a helper thread (waiter.hpp) while this thread waits
// with the GIL released, checking for signals (Ctrl-C) every 50 ms. On a signal the call is marked
// interrupted, every replica thread in Python gets KeyboardInterrupt, the work is still waited for (its own
// deadlines bound it), and the signal's exception (KeyboardInterrupt) is raised. Then re-raises a replica's
// stashed Python exception, or the work's C++ exception.
void run_interruptibly(CallState& call, const std::function<void()>& work);

// ---- the calls in flight, and the interpreter's exit (shutdown.cc) -----------------------------------------
// While alive, `call` is in flight; made when the interpreter is exiting, it throws weft::Error instead (no
// new call can start then).
class ActiveCall {
 public:
  explicit ActiveCall(CallState& call);
  ~ActiveCall();
  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

 private:
  CallState& call_;
};

// ---- a replica's Python exception, carried to the caller (replica_errors.cc) ------------------------------
// Throws the stashed Python exception of `call` if there is one, with a note naming its replica.
void raise_python_error(CallState& call);

// ---- the Python call site (call_site.cc) ------------------------------------------------------------------
// The Python line that called into weft (the first frame outside the weft package), as the call site a
// collective records and names in its errors (mismatch, timeout, stall reports): "at train.py:42" rather than
// the binding's C++ line. Needs the GIL. The sites' text is kept for the process's life (the runtime keeps it
// in its histories); there are as many as distinct call sites.
CallSite python_call_site();

// ---- errors (errors.cc) ---------------------------------------------------------------------------------
// When `error` is an instance of one of weft's Python exception classes, rethrows it as the C++ class
// (so the runtime sees its kind); otherwise returns.
void rethrow_as_weft_error(const py::error_already_set& error, const std::string& prefix);

// ---- module parts -----------------------------------------------------------------------------------------
void init_errors(py::module_& m);
void init_arrays(py::module_& m);
void init_shutdown(py::module_& m);   // the exit hook and weft._weft.calls_in_flight
void init_call_site(py::module_& m);  // where the weft package lives (its frames are not call sites)
void init_pmap(py::module_& m);
void init_lax(py::module_& m);
void init_session(py::module_& m);
void init_array_ops(py::module_& m);
void init_program(py::module_& m);    // traced programs: builder, jit runs, traced pmap

// ---- template implementation ------------------------------------------------------------------------------
// Worker threads' Python thread states (thread_state.cc). Records whether replica `index`'s thread is in
// Python now (`call.python_threads`, where KeyboardInterrupt and ReplicaStopped are delivered).
void note_python_thread(CallState& call, int index, bool running);
// A worker thread keeps its Python thread state from call to call (pybind11 would otherwise make and free
// one per acquire: tens of microseconds per replica per call) and frees it when the thread ends (a runtime
// destroyed), unless the interpreter is finalizing or gone by then.
void keep_python_thread_state(py::gil_scoped_acquire& gil);
// The replicas still running Python when the call has failed (a busy loop would otherwise hold the call
// until it ends) are stopped: each gets weft.ReplicaStopped (an AbortedError) at its next bytecode. The
// caller's wait does it, kStopDelay after the first failure, so that the runtime has recorded that failure as
// the root cause first; at interpreter exit it is done at once. Needs the GIL (errors.cc).
constexpr auto kStopDelay = std::chrono::milliseconds(100);
void stop_other_replicas(CallState& call, int failed, const char* reason);
bool is_replica_stopped(const py::error_already_set& error);
// "ValueError: text" (replica_errors.cc).
std::string describe_python_error(const py::error_already_set& error);
// Keeps the first Python exception of `call` (the root cause), with its traceback and replica.
void stash_python_error(CallState& call, Replica& replica, const py::error_already_set& error);

template <class F>
auto run_python_replica(Replica& replica, CallState& call, F&& python_body) -> decltype(python_body()) {
  if (call.interrupted) throw weft::Error(call.name + ": interrupted (KeyboardInterrupt in the caller)");
  ReplicaScope scope(replica, &call);
  py::gil_scoped_acquire gil;
  keep_python_thread_state(gil);
  note_python_thread(call, replica.index(), true);
  struct Leave {
    CallState& call;
    int index;
    ~Leave() { note_python_thread(call, index, false); }
  } leave{call, replica.index()};
  try {
    return python_body();
  } catch (py::error_already_set& error) {
    if (is_replica_stopped(error))
      throw AbortedError(call.name + ": replica " + std::to_string(replica.index()) +
                         " was stopped in its Python code because " + call.stop_reason);
    if (call.failed_replica < 0) {
      call.failed_replica = replica.index();
      call.failed_at = std::chrono::steady_clock::now();
    }
    rethrow_as_weft_error(error, "");
    stash_python_error(call, replica, error);
    throw weft::Error("Python " + describe_python_error(error));
  }
}

}  // namespace weft::python
