// A replica's own Python exception (not a weft error), carried to the caller: the first one of a call is kept
// with its traceback and replica while the runtime reports the failure as weft::Error, and the caller raises
// it as itself, with a note naming the replica (PEP 678's add_note).
#include <Python.h>

#include "bindings.hpp"

namespace weft::python {

std::string describe_python_error(const py::error_already_set& error) {
  std::string type = py::str(error.type().attr("__name__")).cast<std::string>();
  const std::string text = py::str(error.value()).cast<std::string>();
  return text.empty() ? type : type + ": " + text;
}

void stash_python_error(CallState& call, Replica& replica, const py::error_already_set& error) {
  if (call.python_error) return;  // the first one is the root cause
  py::object value = error.value();
  if (error.trace() && !PyException_GetTraceback(value.ptr())) PyException_SetTraceback(value.ptr(), error.trace().ptr());
  call.python_error = value;
  call.python_error_replica = replica.index();
  call.python_error_where = "replica " + std::to_string(replica.index()) + " (" + to_string(replica.device()) + ")";
}

void raise_python_error(CallState& call) {
  if (!call.python_error) return;
  py::object value = std::move(call.python_error);
  call.python_error = py::object();
  const std::string note = "raised in " + call.python_error_where + " of " + call.name;
  if (py::hasattr(value, "add_note")) value.attr("add_note")(note);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr())), value.ptr());
  throw py::error_already_set();
}

}  // namespace weft::python
