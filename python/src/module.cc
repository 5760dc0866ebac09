// The extension module weft._weft: the C++ runtime's Python face. Users import `weft` (python/weft/), whose
// modules give these bindings JAX's and PopXL's names, defaults and pytrees; nothing here is meant to be
// called directly.
#include <cstdlib>

#include "bindings.hpp"

namespace {

// Python replicas run Python frames, which live on one OS thread each: the default runtime (the one made on
// first use when the program makes none) gets a thread per device unless the user's own WEFT_SCHEDULER says
// otherwise (then pmap refuses with a clear error, python/src/pmap.cc). Asked of the runtime, not written
// into the process's environment, which child processes and other libraries share. weft.Runtime (weft.init)
// asks for threads itself (arrays.cc).
void prefer_threads_by_default() {
  const char* scheduler = std::getenv("WEFT_SCHEDULER");
  if (scheduler && *scheduler) return;  // the user's choice (empty means unset, as everywhere in weft)
  weft::RuntimeOptions options;
  options.scheduler = "threads";
  weft::Runtime::set_default_options(options);
}

}  // namespace

PYBIND11_MODULE(_weft, m) {
  m.doc() = "weft's C++ runtime (pmap over virtual CPU devices, collectives, sessions); use the weft package";
  prefer_threads_by_default();
  weft::python::init_errors(m);
  weft::python::init_arrays(m);
  weft::python::init_shutdown(m);
  weft::python::init_call_site(m);
  weft::python::init_pmap(m);
  weft::python::init_lax(m);
  weft::python::init_session(m);
  weft::python::init_array_ops(m);
  weft::python::init_program(m);
}
