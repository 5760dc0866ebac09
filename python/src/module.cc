// The extension module weft._weft: the C++ runtime's Python face. Users import `weft` (python/weft/), whose
// modules give these bindings JAX's and PopXL's names, defaults and pytrees; nothing here is meant to be
// called directly.
#include <cstdlib>

#include "bindings.hpp"

PYBIND11_MODULE(_weft, m) {
  m.doc() = "weft's C++ runtime (pmap over virtual CPU devices, collectives, sessions); use the weft package";
  // Python replicas run Python frames, which live on one OS thread each: the runtimes this module makes
  // from the environment use a thread per device unless the user asked otherwise (then pmap refuses with a
  // clear error, python/src/pmap.cc).
  ::setenv("WEFT_SCHEDULER", "threads", /*overwrite=*/0);
  weft::python::init_errors(m);
  weft::python::init_arrays(m);
  weft::python::init_pmap(m);
  weft::python::init_session(m);
  weft::python::init_array_ops(m);
}
