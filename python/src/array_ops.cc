// weft's array math (include/weft/ops.hpp: matmul, elementwise math, the softmax family, reductions,
// indexing) for Python: numpy in, numpy out, computed by weft's Eigen kernels with the GIL released, so the
// replicas of a pmap that call them compute at the same time. The Python names and defaults are in
// python/weft/ops.py (PopXL's ops module) and python/weft/nn.py (jax.nn's).
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <weft/ops.hpp>

#include "bindings.hpp"

namespace weft::python {
namespace {

// A Python number (not an array): the ops then take it in the array's dtype, as JAX's weak typing does.
std::optional<double> python_scalar(py::handle value) {
  if (py::isinstance<py::bool_>(value) || !(py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value)))
    return std::nullopt;
  return value.cast<double>();
}

// Runs `compute` on arrays converted with the GIL held, without the GIL, and returns its result as numpy.
template <class F>
py::array compute_released(F&& compute) {
  Array out;
  {
    py::gil_scoped_release release;
    out = compute();
  }
  return to_numpy(out);
}

// An int argument (an int, or anything with __index__: numpy's integer scalars; bools excepted) as a C++
// int, or nothing when it is none or outside int32.
std::optional<int> int32_of(py::handle value) {
  if (py::isinstance<py::bool_>(value) || !PyIndex_Check(value.ptr())) return std::nullopt;
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < INT32_MIN || v > INT32_MAX) return std::nullopt;
  return static_cast<int>(v);
}

// An axis argument as a C++ int, or an InvalidArgument naming the op and the value (pybind11's cast would
// say only "Unable to cast Python instance to C++ type"; issue 21, item 12). Ranks are the ops' to check.
int python_axis(py::handle axis, const char* op) {
  if (const std::optional<int> v = int32_of(axis)) return *v;
  throw InvalidArgument(std::string(op) + ": axis " + py::repr(axis).cast<std::string>() +
                        " is not an axis (an int, negative from the end)");
}

// A count argument (one_hot's num_classes), likewise named with its value.
int python_count(py::handle value, const char* what) {
  if (const std::optional<int> v = int32_of(value); v && *v >= 0) return *v;
  throw InvalidArgument(std::string(what) + " = " + py::repr(value).cast<std::string>() +
                        " is not a count (an int from 0 to 2147483647)");
}

ReduceAxes reduce_axes(py::handle axis, const char* op) {
  if (axis.is_none()) return ReduceAxes();
  if (!py::isinstance<py::sequence>(axis) || py::isinstance<py::str>(axis) || PyIndex_Check(axis.ptr()))
    return ReduceAxes(python_axis(axis, op));
  std::vector<int> axes;
  for (py::handle a : axis) axes.push_back(python_axis(a, op));
  return ReduceAxes(std::move(axes));
}

std::optional<int> optional_axis(py::handle axis, const char* op) {
  if (axis.is_none()) return std::nullopt;
  return python_axis(axis, op);
}

using Unary = Array (*)(const Array&);

void def_unary(py::module_& m, const char* name, Unary op) {
  m.def(name, [name, op](py::handle x) {
    const Array a = to_array(x, name);
    return compute_released([&] { return op(a); });
  });
}

}  // namespace

void init_array_ops(py::module_& parent) {
  py::module_ m = parent.def_submodule("array_ops", "weft's array math on numpy arrays");
  m.def("matmul", [](py::handle a, py::handle b, bool transpose_a, bool transpose_b) {
    const Array x = to_array(a, "matmul: a"), y = to_array(b, "matmul: b");
    return compute_released([&] { return matmul(x, y, {.transpose_a = transpose_a, .transpose_b = transpose_b}); });
  }, py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false);
  m.def("matmul_backend", &matmul_backend,
        "Which library computes matmul in this process and why (oneDNN for large float32 products, OpenBLAS "
        "for float64 ones when it runs kernels made for this CPU, else Eigen; WEFT_GEMM overrides)");
  m.def("transpose", [](py::handle x, std::optional<std::vector<int>> axes) {
    const Array a = to_array(x, "transpose");
    return compute_released([&] { return transpose(a, axes.value_or(std::vector<int>{})); });
  }, py::arg("x"), py::arg("axes") = py::none());

  def_unary(m, "exp", &exp);
  def_unary(m, "log", &log);
  def_unary(m, "log1p", &log1p);
  def_unary(m, "tanh", &tanh);
  def_unary(m, "sqrt", &sqrt);
  def_unary(m, "rsqrt", &rsqrt);
  def_unary(m, "abs", &abs);
  def_unary(m, "negative", &negative);
  def_unary(m, "sign", &sign);
  def_unary(m, "sigmoid", &sigmoid);
  def_unary(m, "relu", &relu);

  // maximum / minimum: a Python number on either side takes the array's dtype.
  auto binary = [&m](const char* name, Array (*with_array)(const Array&, const Array&),
                     Array (*with_scalar)(const Array&, double)) {
    m.def(name, [name, with_array, with_scalar](py::handle a, py::handle b) {
      if (const auto s = python_scalar(b)) {
        const Array x = to_array(a, name);
        return compute_released([&] { return with_scalar(x, *s); });
      }
      if (const auto s = python_scalar(a)) {
        const Array y = to_array(b, name);
        return compute_released([&] { return with_scalar(y, *s); });
      }
      const Array x = to_array(a, name), y = to_array(b, name);
      return compute_released([&] { return with_array(x, y); });
    });
  };
  binary("maximum", &maximum, &maximum);
  binary("minimum", &minimum, &minimum);

  m.def("where", [](py::handle condition, py::handle a, py::handle b) {
    const Array c = to_array(condition, "where: condition");
    const Array x = to_array(a, "where: x");
    if (const auto s = python_scalar(b)) return compute_released([&] { return where(c, x, *s); });
    const Array y = to_array(b, "where: y");
    return compute_released([&] { return where(c, x, y); });
  }, py::arg("condition"), py::arg("x"), py::arg("y"));
  m.def("clip", [](py::handle x, std::optional<double> lo, std::optional<double> hi) {
    const Array a = to_array(x, "clip");
    return compute_released([&] { return clip(a, lo, hi); });
  }, py::arg("x"), py::arg("a_min") = py::none(), py::arg("a_max") = py::none());

  m.def("softmax", [](py::handle x, py::handle axis_arg) {
    const Array a = to_array(x, "softmax");
    const int axis = python_axis(axis_arg, "softmax");
    return compute_released([&] { return softmax(a, axis); });
  }, py::arg("x"), py::arg("axis") = -1);
  m.def("log_softmax", [](py::handle x, py::handle axis_arg) {
    const Array a = to_array(x, "log_softmax");
    const int axis = python_axis(axis_arg, "log_softmax");
    return compute_released([&] { return log_softmax(a, axis); });
  }, py::arg("x"), py::arg("axis") = -1);
  m.def("logsumexp", [](py::handle x, py::handle axis_arg, bool keepdims) {
    const Array a = to_array(x, "logsumexp");
    const int axis = python_axis(axis_arg, "logsumexp");
    return compute_released([&] { return logsumexp(a, axis, keepdims); });
  }, py::arg("x"), py::arg("axis") = -1, py::arg("keepdims") = false);

  using Reduction = Array (*)(const Array&, const ReduceAxes&, bool);
  auto reduction = [&m](const char* name, Reduction op) {
    m.def(name, [name, op](py::handle x, py::handle axis, bool keepdims) {
      const Array a = to_array(x, name);
      const ReduceAxes axes = reduce_axes(axis, name);
      return compute_released([&] { return op(a, axes, keepdims); });
    }, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
  };
  reduction("sum", &sum);
  reduction("mean", &mean);
  reduction("max", &max);
  reduction("min", &min);

  using ArgReduction = Array (*)(const Array&, std::optional<int>, bool);
  auto arg_reduction = [&m](const char* name, ArgReduction op) {
    m.def(name, [name, op](py::handle x, py::handle axis, bool keepdims) {
      const Array a = to_array(x, name);
      const std::optional<int> ax = optional_axis(axis, name);
      return compute_released([&] { return op(a, ax, keepdims); });
    }, py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
  };
  arg_reduction("argmax", &argmax);
  arg_reduction("argmin", &argmin);

  m.def("one_hot", [](py::handle labels, py::handle classes, py::object dtype) {
    const Array l = to_array(labels, "one_hot: labels");
    const int num_classes = python_count(classes, "one_hot: num_classes");
    const DType d = dtype.is_none() ? DType::f32 : weft_dtype(py::dtype::from_args(dtype), "one_hot: dtype");
    return compute_released([&] { return one_hot(l, num_classes, d); });
  }, py::arg("labels"), py::arg("num_classes"), py::arg("dtype") = py::none());
  m.def("take", [](py::handle x, py::handle indices, py::handle axis) {
    const Array a = to_array(x, "take: x"), i = to_array(indices, "take: indices");
    const std::optional<int> ax = optional_axis(axis, "take");
    return compute_released([&] { return take(a, i, ax); });
  }, py::arg("x"), py::arg("indices"), py::arg("axis") = py::none());
}

}  // namespace weft::python
