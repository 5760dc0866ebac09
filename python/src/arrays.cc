// Arrays across the Python boundary: numpy <-> weft::Array, devices, the runtime, sharded arrays and
// device_put*.
//
// weft arrays are immutable and reference counted, so a weft array reaches Python as a read-only numpy view
// of its buffer (no copy; the view holds a reference, a write raises). The other way, a numpy array is
// copied once into a weft buffer, except a view this module made, which gives its weft array back: a psum
// result passed to the next psum, or returned from a replica, moves no bytes.
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "bindings.hpp"

namespace weft::python {
namespace {

constexpr const char* kCapsule = "weft.Array";

void free_capsule(PyObject* capsule) {
  delete static_cast<Array*>(PyCapsule_GetPointer(capsule, kCapsule));
}

std::vector<py::ssize_t> numpy_shape(const Shape& shape) { return {shape.begin(), shape.end()}; }

// numpy's PyArray_BASE without numpy's C headers: pybind11's proxy of the array object.
PyObject* PyArray_BASE_ptr(const py::array& array) { return py::detail::array_proxy(array.ptr())->base; }

// np.ascontiguousarray(value). Not py::array::ensure, which clears the Python error it fails with: the
// user's own exception (numpy's ValueError for a ragged list, MemoryError for a huge broadcast view, or
// whatever their __array__ raised) must reach them, not pybind11's "error indicator not set".
py::array contiguous_array(py::handle value) {
  auto& api = py::detail::npy_api::get();
  PyObject* array = api.PyArray_FromAny_(value.ptr(), nullptr, 0, 0,
                                         static_cast<int>(py::detail::npy_api::NPY_ARRAY_ENSUREARRAY_) | py::array::c_style,
                                         nullptr);
  if (!array) throw py::error_already_set();
  return py::reinterpret_steal<py::array>(array);
}

// A Python int as int32 (JAX's default integer type), or an InvalidArgument naming it and the range.
std::int32_t python_int32(py::handle value, const char* what) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < INT32_MIN || v > INT32_MAX)
    throw InvalidArgument(std::string(what) + ": the Python int " + py::str(value).cast<std::string>() +
                          " is outside int32's range [-2147483648, 2147483647] (weft takes a Python int as int32, "
                          "as JAX does; pass np.int64(...) for a 64-bit integer)");
  return static_cast<std::int32_t>(v);
}

}  // namespace

// bfloat16 has no numpy dtype: traced values of it (weft.bfloat16, python/weft/__init__.py) carry this
// stand-in, a one-field structured dtype ('bfloat16', uint16), distinct from every numpy number type. Arrays
// never cross to numpy as it: their values come out as float32 (to_numpy). Built once and never destroyed
// (a static py::object would be released after the interpreter is gone).
py::dtype bfloat16_marker() {
  static const py::dtype* marker = [] {
    py::list fields;
    fields.append(py::make_tuple("bfloat16", "<u2"));
    return new py::dtype(py::dtype::from_args(fields));
  }();
  return *marker;
}

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return py::dtype("float32");
    case DType::f64: return py::dtype("float64");
    case DType::f16: return py::dtype("float16");
    case DType::i8: return py::dtype("int8");
    case DType::i32: return py::dtype("int32");
    case DType::i64: return py::dtype("int64");
    case DType::u8: return py::dtype("uint8");
    case DType::boolean: return py::dtype("bool");
    case DType::bf16: return bfloat16_marker();
  }
  throw InvalidArgument("numpy_dtype: unknown weft dtype");
}

DType weft_dtype(const py::dtype& dtype, const char* what) {
  const std::string name = py::str(dtype.attr("name")).cast<std::string>();
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  if (name == "float16") return DType::f16;
  if (name == "int8") return DType::i8;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  if (name == "bool") return DType::boolean;
  if (dtype.is(bfloat16_marker()) || py::bool_(dtype.attr("__eq__")(bfloat16_marker()))) return DType::bf16;
  throw InvalidArgument(std::string(what) + ": numpy dtype " + name +
                        " has no weft equivalent (weft has float32, float64, float16, int8, int32, int64, uint8, "
                        "bool)");
}

py::array to_numpy(const Array& array) {
  // bfloat16 has no numpy dtype: its values come out as float32 (a copy).
  const Array a = array.dtype() == DType::bf16 ? array.astype(DType::f32) : array;
  const py::dtype dtype = numpy_dtype(a.dtype());
  if (a.size() == 0 || !a.buffer()) return py::array(dtype, numpy_shape(a.shape()));
  std::vector<py::ssize_t> strides(a.shape().size());
  py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(a.dtype()));
  for (std::size_t d = strides.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= static_cast<py::ssize_t>(a.shape()[d]);
  }
  py::capsule owner(new Array(a), kCapsule, free_capsule);
  py::array view(dtype, numpy_shape(a.shape()), strides, a.bytes(), owner);
  py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return view;
}

Array to_array(py::handle value, const char* what) {
  if (py::isinstance<py::array>(value)) {
    auto array = py::reinterpret_borrow<py::array>(value);
    // Views of views (a DeviceArray wrapping a shard) lead back to the capsule through their bases.
    PyObject* base = PyArray_BASE_ptr(array);
    while (base && py::isinstance<py::array>(base)) base = PyArray_BASE_ptr(py::reinterpret_borrow<py::array>(base));
    if (base && PyCapsule_IsValid(base, kCapsule)) {
      const Array& own = *static_cast<const Array*>(PyCapsule_GetPointer(base, kCapsule));
      // The whole weft array, same element type, row-major (not a slice, transpose or .view(other dtype) of
      // it): hand back the weft array.
      if (own.dtype() != DType::bf16 && array.data() == static_cast<const void*>(own.bytes()) &&
          array.ndim() == own.ndim() && std::equal(own.shape().begin(), own.shape().end(), array.shape()) &&
          (array.flags() & py::array::c_style) && array.dtype().is(numpy_dtype(own.dtype())))
        return own;
    }
  }
  // Python scalars take JAX's default types (float32, int32) rather than numpy's 64-bit ones. Exactly Python's:
  // numpy.float64 subclasses float but is a numpy scalar, which keeps its dtype as a 0-d array does.
  py::array array;
  if (PyFloat_CheckExact(value.ptr())) {
    array = py::array_t<float>(std::vector<py::ssize_t>{}, std::vector<py::ssize_t>{});
    *static_cast<float*>(array.mutable_data()) = static_cast<float>(value.cast<double>());
  } else if (PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr())) {
    array = py::array_t<std::int32_t>(std::vector<py::ssize_t>{}, std::vector<py::ssize_t>{});
    *static_cast<std::int32_t*>(array.mutable_data()) = python_int32(value, what);
  } else {
    array = contiguous_array(value);
  }
  const DType dtype = weft_dtype(array.dtype(), what);
  Shape shape(array.shape(), array.shape() + array.ndim());
  return Array::from_bytes(dtype, std::move(shape), array.data());
}

namespace {

// A runtime made from Python is destroyed with the GIL released: its worker threads may be waiting for
// the GIL to finish a replica's Python code.
struct RuntimeDeleter {
  void operator()(Runtime* runtime) const {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete runtime;
    } else {
      delete runtime;
    }
  }
};

}  // namespace

void init_arrays(py::module_& m) {
  m.attr("bfloat16") = bfloat16_marker();
  py::class_<Device>(m, "Device", "A weft device: one worker thread with its own memory accounting.")
      .def_readonly("id", &Device::id)
      .def_readonly("process_index", &Device::process_index)
      .def_property_readonly("platform", [](const Device& d) { return d.kind; })
      .def_property_readonly("device_kind", [](const Device& d) { return d.kind; })
      .def("__repr__", [](const Device& d) { return to_string(d); })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__hash__", [](const Device& d) { return py::hash(py::make_tuple(d.id, d.process_index)); });

  py::class_<Runtime, std::unique_ptr<Runtime, RuntimeDeleter>>(
      m, "Runtime", "The devices and worker threads; the newest live one is the one pmap and Session use.")
      .def(py::init([](int device_count, std::int64_t device_memory, double collective_warn,
                       double collective_timeout, std::string log_level, int shared_products,
                       int shared_runs, int flush_denormals) {
             RuntimeOptions options;
             options.device_count = device_count;
             options.device_memory = device_memory;
             options.collective_warn_s = collective_warn;
             options.collective_timeout_s = collective_timeout;
             options.log_level = std::move(log_level);
             options.shared_products = shared_products;
             options.shared_runs = shared_runs;
             options.flush_denormals = flush_denormals;
             py::gil_scoped_release nogil;  // under weftrun this meets the other instances
             return std::unique_ptr<Runtime, RuntimeDeleter>(new Runtime(options));
           }),
           py::kw_only(), py::arg("device_count") = 0, py::arg("device_memory") = -1,
           py::arg("collective_warn") = -1.0, py::arg("collective_timeout") = -1.0, py::arg("log_level") = "",
           py::arg("shared_products") = -1, py::arg("shared_runs") = -1, py::arg("flush_denormals") = -1)
      .def_property_readonly("platform", &Runtime::platform)
      .def_property_readonly("device_count", &Runtime::device_count)
      .def_property_readonly("local_device_count", &Runtime::local_device_count)
      .def_property_readonly("process_index", &Runtime::process_index)
      .def_property_readonly("process_count", &Runtime::process_count)
      .def("devices", [](const Runtime& rt) { return rt.devices(); })
      .def("local_devices", &Runtime::local_devices)
      .def("stats", [](const Runtime& rt) {
        const RuntimeStats s = rt.stats();
        py::dict d;
        d["preparations"] = s.preparations;
        d["executions"] = s.executions;
        d["bytes_host_to_device"] = s.bytes_host_to_device;
        d["bytes_device_to_host"] = s.bytes_device_to_host;
        d["collectives"] = s.collectives;
        d["bytes_reduced"] = s.bytes_reduced;
        d["shared_products"] = s.shared_products;
        d["shared_runs"] = s.shared_runs;
        return d;
      });
  // Runtime::current(): made from the environment (WEFT_DEVICE_COUNT, ...) on first use; owned by C++.
  m.def("current_runtime", []() -> Runtime& {
        py::gil_scoped_release nogil;
        return Runtime::current();
      },
      py::return_value_policy::reference);

  py::class_<ShardedArray>(m, "ShardedArray", "A pmap result: one shard per device (see weft.ShardedArray).")
      .def_property_readonly("shape", [](const ShardedArray& a) { return py::tuple(py::cast(a.shape())); })
      .def_property_readonly("dtype", [](const ShardedArray& a) { return numpy_dtype(a.dtype()); })
      .def_property_readonly("mesh_shape", [](const ShardedArray& a) { return py::tuple(py::cast(a.mesh_shape())); })
      .def_property_readonly("replicated", &ShardedArray::replicated)
      .def("devices", &ShardedArray::devices)
      .def("shards", [](const ShardedArray& a) {
        py::list shards;
        for (const Shard& s : a.shards()) shards.append(py::make_tuple(s.device, to_numpy(s.data)));
        return shards;
      })
      .def("to_host", [](const ShardedArray& a) { return to_numpy(a.to_host()); })
      .def("index", [](const ShardedArray& a, std::int64_t i) {
        const Array shard = a[i];
        return py::make_tuple(to_numpy(shard), shard.device());
      })
      .def("slice", [](const ShardedArray& a, std::int64_t begin, std::int64_t end) { return to_numpy(a.slice(begin, end)); })
      .def("__repr__", [](const ShardedArray& a) { return repr(a); });

  m.def("device_put", [](py::handle x, const Device& device) {
    const Array a = to_array(x, "device_put");
    const Array placed = device_put(a, device);
    return py::make_tuple(to_numpy(placed), placed.device());
  });
  m.def("device_put_sharded", [](py::sequence shards, const std::vector<Device>& devices) {
    std::vector<Array> arrays;
    for (py::handle s : shards) arrays.push_back(to_array(s, "device_put_sharded"));
    return device_put_sharded(arrays, devices);
  });
  m.def("device_put_replicated", [](py::handle x, const std::vector<Device>& devices) {
    return device_put_replicated(to_array(x, "device_put_replicated"), devices);
  });
  m.def("array_repr", [](py::handle x, const std::string& prefix) { return repr(to_array(x, "repr"), prefix); },
        "weft's numpy-style repr with another prefix (JAX's DeviceArray(...)).");
}

}  // namespace weft::python
