// weft.pmap's C++ side: a Python function as a weft pmap program (weft._weft.PmapProgram). Each replica runs
// the function on its device's worker thread with the GIL (run_python_replica, bindings.hpp); the caller
// waits interruptibly (interrupt.cc). The collectives the function calls are weft.lax (lax.cc).
//
// A PmapProgram holds its Python function, and the function may hold what holds the program (a model that
// keeps a pmap of its own method): the type takes part in garbage collection (tp_traverse / tp_clear), so
// such a cycle is collected instead of leaking with everything it holds (issue 21, item 10).
#include <Python.h>

#include <mutex>
#include <utility>

#include "bindings.hpp"

namespace weft::python {
namespace {

// A py::object whose last owner may be a C++ thread without the GIL.
std::shared_ptr<py::object> shared_object(py::object object) {
  return {new py::object(std::move(object)), [](py::object* o) {
            if (!Py_IsInitialized()) {  // interpreter gone: leak rather than touch it
              o->release();
              delete o;
              return;
            }
            py::gil_scoped_acquire gil;
            delete o;
          }};
}

// A Python function as a weft pmap program. The Python wrapper (weft/_pmap.py) flattens pytrees: the
// function receives the leaves as numpy arrays and returns a list of leaves.
class PythonPmap {
 public:
  PythonPmap(py::object fn, std::string axis, std::vector<std::pair<std::string, int>> mesh,
             std::vector<std::optional<int>> in_axes, std::vector<std::optional<int>> out_axes,
             std::vector<Device> devices, std::string name)
      : state_(std::make_shared<State>()) {
    state_->fn = shared_object(std::move(fn));
    state_->name = name;
    PmapOptions options;
    options.axis = std::move(axis);
    for (auto& [axis_name, size] : mesh) options.mesh.push_back({axis_name, size});
    options.in_axes = std::move(in_axes);
    options.out_axes = std::move(out_axes);
    options.devices = std::move(devices);
    options.name = std::move(name);
    options.replica_threads = true;  // a Python frame lives on one OS thread: a replica each
    std::shared_ptr<State> state = state_;
    program_ = std::make_shared<PmapProgram>(
        [state](Replica& r, std::span<const Array> inputs) -> std::vector<Array> {
          return run_python_replica(r, *state->call, [&] {
            if (!state->fn) throw weft::Error(state->name + ": the pmapped function was collected");
            py::tuple args(inputs.size());
            for (std::size_t i = 0; i < inputs.size(); ++i) args[i] = to_numpy(inputs[i]);
            py::object out = (*state->fn)(*args);
            std::vector<Array> outputs;
            for (py::handle leaf : out) outputs.push_back(to_array(leaf, "an output of the mapped function"));
            return outputs;
          });
        },
        std::move(options));
  }

  // The function goes first, with every member intact: dropping it runs Python code (its closure's
  // destructors), during which the garbage collector may traverse this object.
  ~PythonPmap() { clear_function(); }
  PythonPmap(const PythonPmap&) = delete;
  PythonPmap& operator=(const PythonPmap&) = delete;

  // The garbage collector's view (needs the GIL, as do the replicas that call the function).
  PyObject* function() const { return state_->fn ? state_->fn->ptr() : nullptr; }
  void clear_function() { std::exchange(state_->fn, nullptr).reset(); }

  py::list call(py::sequence args, py::handle sharded_type) {
    std::vector<PmapArg> arguments;
    for (py::handle a : args) {
      if (py::isinstance(a, sharded_type)) {
        arguments.emplace_back(a.cast<ShardedArray>());
      } else {
        arguments.emplace_back(to_array(a, "a pmap argument"));
      }
    }
    CallState call;
    call.name = state_->name;
    std::vector<ShardedArray> result;
    run_interruptibly(call, [&] {
      // Calls of one Python pmap from several threads take turns (the runtime runs executions one at a time
      // anyway); the replicas find this call's state through the program.
      std::lock_guard lock(state_->mutex);
      state_->call = &call;
      result = (*program_)(std::move(arguments));
    });
    py::list out;
    for (ShardedArray& s : result) out.append(py::cast(std::move(s)));
    return out;
  }

 private:
  struct State {
    std::shared_ptr<py::object> fn;
    std::string name;
    std::mutex mutex;
    CallState* call = nullptr;
  };
  std::shared_ptr<State> state_;
  std::shared_ptr<PmapProgram> program_;
};

// The PythonPmap of a PmapProgram instance; nullptr before its constructor ran or after its destructor.
PythonPmap* pmap_of(PyObject* self) {
  auto* instance = reinterpret_cast<py::detail::instance*>(self);
  py::detail::value_and_holder held = instance->get_value_and_holder(nullptr, false);
  return held && held.holder_constructed() ? held.value_ptr<PythonPmap>() : nullptr;
}

void enable_garbage_collection(PyHeapTypeObject* heap_type) {
  PyTypeObject* type = &heap_type->ht_type;
  type->tp_flags |= Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it
    if (PythonPmap* pmap = pmap_of(self)) Py_VISIT(pmap->function());
    return 0;
  };
  type->tp_clear = [](PyObject* self) {
    if (PythonPmap* pmap = pmap_of(self)) pmap->clear_function();
    return 0;
  };
}

}  // namespace

void init_pmap(py::module_& m) {
  py::class_<PythonPmap>(m, "PmapProgram", py::custom_type_setup(enable_garbage_collection))
      .def(py::init<py::object, std::string, std::vector<std::pair<std::string, int>>, std::vector<std::optional<int>>,
                    std::vector<std::optional<int>>, std::vector<Device>, std::string>(),
           py::arg("fn"), py::arg("axis"), py::arg("mesh"), py::arg("in_axes"), py::arg("out_axes"),
           py::arg("devices"), py::arg("name"))
      .def("__call__", &PythonPmap::call);
}

}  // namespace weft::python
