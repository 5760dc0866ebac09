// The extension module weft._weft: the C++ runtime's Python face. Users import `weft` (python/weft/), whose
// modules give these bindings JAX's and PopXL's names, defaults and pytrees; nothing here is meant to be
// called directly.
//
// The runtimes made from Python take WEFT_SCHEDULER's choice like any other (fibers by default): a traced
// program runs on fibers, and the executions that run Python frames (eager pmaps, sessions) ask for a thread
// per replica (PmapOptions::replica_threads, python/src/pmap.cc and session.cc).
#include "bindings.hpp"
#include "weft/settings.hpp"

PYBIND11_MODULE(_weft, m) {
  m.doc() = "weft's C++ runtime (pmap over virtual CPU devices, collectives, sessions); use the weft package";
  weft::python::init_errors(m);
  weft::python::init_arrays(m);
  weft::python::init_shutdown(m);
  weft::python::init_call_site(m);
  weft::python::init_pmap(m);
  weft::python::init_lax(m);
  weft::python::init_session(m);
  weft::python::init_array_ops(m);
  weft::python::init_program(m);
  m.def("setting_choice", &weft::setting_choice, pybind11::arg("variable"),
        "A WEFT_* setting's value through weft's one parser of them ('' = unset); a value it does not know raises "
        "InvalidArgument naming the variable and what it accepts.");
}
