// The Python caller's line as the call site of a collective (weft::CallSite, include/weft/call_site.hpp): the
// first frame outside the weft package, so that a mismatch, a timeout or a stall report names "train.py:42"
// rather than the binding's C++ line. The runtime keeps a site's text in its histories for the process's life,
// so the text is kept here for as long: one entry per code object on the stacks that called weft.
#include <Python.h>

#include <unordered_map>
#include <utility>

#include "bindings.hpp"

namespace weft::python {
namespace {

// Where the weft package lives: frames there are weft's own, not the user's call site.
std::string g_package_dir;

// What a code object tells: whether it is weft's own, and its file and function names (the text a CallSite
// points to; a node of an unordered_map never moves, so neither does the text).
struct CodeInfo {
  bool internal;
  std::string file, function;
};

}  // namespace

CallSite python_call_site() {
  // The table keeps a reference to each code object, so an address is never reused for another code (bounded
  // by the program's code; under the GIL).
  static std::unordered_map<PyCodeObject*, CodeInfo> codes;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    auto found = codes.find(code);
    if (found == codes.end()) {
      py::handle code_object(reinterpret_cast<PyObject*>(code));
      std::string file = py::str(code_object.attr("co_filename")).cast<std::string>();
      const bool internal = !g_package_dir.empty() && file.rfind(g_package_dir, 0) == 0;
      std::string function = py::str(code_object.attr("co_name")).cast<std::string>();
      Py_INCREF(code);  // kept by the table
      found = codes.emplace(code, CodeInfo{internal, std::move(file), std::move(function)}).first;
    }
    if (!found->second.internal) {
      const int line = PyFrame_GetLineNumber(frame);
      Py_DECREF(code);
      Py_DECREF(frame);
      const CodeInfo& info = found->second;
      return CallSite(info.file.c_str(), static_cast<unsigned>(line), info.function.c_str());
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return std::source_location::current();  // no frame outside weft: this binding's own line
}

void init_call_site(py::module_&) {
  g_package_dir = py::str(py::module_::import("os").attr("path").attr("dirname")(
                                 py::module_::import("weft").attr("__file__")))
                      .cast<std::string>() + "/";
}

}  // namespace weft::python
