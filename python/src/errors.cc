// weft's C++ exceptions as Python classes, both ways.
//
// C++ -> Python: each weft::Error subclass raises the Python class of the same name, which also derives from
// the builtin a Python user catches for that situation (InvalidArgument is a ValueError, TimeoutError the
// builtin TimeoutError, OutOfMemoryError a MemoryError). Python -> C++: a weft error raised in a replica's
// Python code (a psum that timed out) goes back into the runtime as the same C++ class, so the runtime's
// root-cause report keeps its kind and the caller gets the class it would get from C++.
#include <Python.h>

#include <cctype>
#include <utility>

#include "bindings.hpp"

namespace weft::python {
namespace {

// New references kept for the interpreter's life (classes are never freed; a py::object destroyed after
// Py_Finalize would crash at exit).
struct Classes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* timeout = nullptr;
  PyObject* aborted = nullptr;
  PyObject* peer_lost = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* replica_stopped = nullptr;
} classes;

PyObject* make_class(py::module_& m, const char* name, std::initializer_list<PyObject*> bases, const char* doc) {
  const std::string qualified = std::string("weft.") + name;
  py::tuple base_tuple(bases.size());
  std::size_t i = 0;
  for (PyObject* b : bases) base_tuple[i++] = py::handle(b);
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module's own reference; ours is leaked on purpose
  return cls;
}

// The runtime's messages name the C++ settings (RuntimeOptions::device_count); a Python user sets the same
// ones through weft.init: the message says so in those terms. Options weft.init does not take keep their
// WEFT_* variable, which the messages name beside them.
std::string in_python_terms(std::string message) {
  static const std::pair<const char*, const char*> names[] = {
      {"device_count", "device_count"},           {"device_memory", "device_memory"},
      {"collective_warn_s", "collective_warn"},   {"collective_timeout_s", "collective_timeout"},
      {"log_level", "log_level"}};
  for (const auto& [field, keyword] : names) {
    const std::string cxx = std::string("RuntimeOptions::") + field;
    for (std::size_t at = message.find(cxx); at != std::string::npos; at = message.find(cxx, at)) {
      std::size_t end = at + cxx.size();
      if (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_')) {
        at = end;  // a longer field name
        continue;
      }
      // "RuntimeOptions::device_count = 4" -> "weft.init(device_count=4)"
      std::string value = "...";
      if (message.compare(end, 3, " = ") == 0) {
        std::size_t v = end + 3;
        while (v < message.size() && message[v] != ' ' && message[v] != ',' && message[v] != ';' && message[v] != ')')
          ++v;
        value = message.substr(end + 3, v - end - 3);
        end = v;
      }
      const std::string python = std::string("weft.init(") + keyword + "=" + value + ")";
      message.replace(at, end - at, python);
      at += python.size();
    }
  }
  return message;
}

void set_error(PyObject* cls, const char* what) { PyErr_SetString(cls, in_python_terms(what).c_str()); }

}  // namespace

void stop_other_replicas(CallState& call, int failed, const char* reason) {
  if (call.stopping) return;
  call.stopping = true;
  call.stop_reason = reason;
  for (std::size_t i = 0; i < call.python_threads.size(); ++i)
    if (static_cast<int>(i) != failed && call.python_threads[i])
      PyThreadState_SetAsyncExc(call.python_threads[i], classes.replica_stopped);
}

bool is_replica_stopped(const py::error_already_set& error) { return error.matches(classes.replica_stopped); }

void rethrow_as_weft_error(const py::error_already_set& error, const std::string& prefix) {
  // Most derived first.
  const std::string message = prefix + py::str(error.value()).cast<std::string>();
  if (error.matches(classes.invalid_argument)) throw InvalidArgument(message);
  if (error.matches(classes.mismatch)) throw MismatchError(message);
  if (error.matches(classes.timeout)) throw weft::TimeoutError(message);
  if (error.matches(classes.aborted)) throw AbortedError(message);
  if (error.matches(classes.peer_lost)) throw PeerLostError(message);
  if (error.matches(classes.out_of_memory)) throw OutOfMemoryError(message);
  if (error.matches(classes.error)) throw weft::Error(message);
}

void init_errors(py::module_& m) {
  classes.error = make_class(m, "Error", {PyExc_RuntimeError},
                             "Base of weft's errors; every message names the replica, the op and the rule broken.");
  classes.invalid_argument = make_class(m, "InvalidArgument", {classes.error, PyExc_ValueError},
                                        "Bad arguments (shapes, axes, groups, options), raised before any data moves.");
  classes.mismatch = make_class(m, "MismatchError", {classes.error},
                                "Replicas disagree about a collective (op, dtype, shape, group); names both sides.");
  classes.timeout = make_class(m, "TimeoutError", {classes.error, PyExc_TimeoutError},
                               "A blocking wait passed its deadline (WEFT_COLLECTIVE_TIMEOUT); names who is missing.");
  classes.aborted = make_class(m, "AbortedError", {classes.error},
                               "A replica stopped because another one failed; the message names the root cause.");
  classes.peer_lost = make_class(m, "PeerLostError", {classes.error},
                                 "A peer (a replica that returned early, a lost process) cannot take part any more.");
  classes.out_of_memory = make_class(m, "OutOfMemoryError", {classes.error, PyExc_MemoryError},
                                     "A device has not enough memory (WEFT_DEVICE_MEMORY) for an allocation.");
  classes.replica_stopped = make_class(m, "ReplicaStopped", {classes.aborted},
                                       "Raised inside a replica's Python code when another replica of the same "
                                       "call failed: its result could no longer be used.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      set_error(classes.invalid_argument, e.what());
    } catch (const MismatchError& e) {
      set_error(classes.mismatch, e.what());
    } catch (const weft::TimeoutError& e) {
      set_error(classes.timeout, e.what());
    } catch (const AbortedError& e) {
      set_error(classes.aborted, e.what());
    } catch (const PeerLostError& e) {
      set_error(classes.peer_lost, e.what());
    } catch (const OutOfMemoryError& e) {
      set_error(classes.out_of_memory, e.what());
    } catch (const weft::Error& e) {
      set_error(classes.error, e.what());
    }
  });
}

}  // namespace weft::python
