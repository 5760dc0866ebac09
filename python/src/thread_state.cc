// The Python thread states of the runtime's worker threads: kept from call to call (the GIL taken once per
// replica per call costs no thread state), and which replica threads run Python now (where the caller's
// Ctrl-C and a failed call's ReplicaStopped are delivered).
#include <Python.h>

#include "bindings.hpp"

namespace weft::python {

void keep_python_thread_state(py::gil_scoped_acquire& gil) {
  struct Kept {
    bool kept = false;
    ~Kept() {
      // At thread exit. Python frees every thread state itself when it finalizes; taking the GIL during or
      // after that would end (or crash) this thread.
      if (!kept || !Py_IsInitialized() || _Py_IsFinalizing()) return;
      py::gil_scoped_acquire again;  // this thread's kept state, counted twice now
      again.dec_ref();               // drop the keeping count; `again` frees the state when it ends
    }
  };
  thread_local Kept keeper;
  if (!keeper.kept) {
    gil.inc_ref();
    keeper.kept = true;
  }
}

void note_python_thread(CallState& call, int index, bool running) {
  if (call.python_threads.size() <= static_cast<std::size_t>(index)) call.python_threads.resize(index + 1, 0);
  const unsigned long self = PyThread_get_thread_ident();
  // An interrupt sent while the replica was leaving Python must not fire in this thread's next call (its
  // thread state is kept).
  if (!running) PyThreadState_SetAsyncExc(self, nullptr);
  call.python_threads[index] = running ? self : 0;
}

}  // namespace weft::python
