// weft::Array: a dtype-tagged, row-major n-d array. Arrays are values over shared, reference-counted,
// immutable buffers (as JAX arrays are): copying an Array copies a pointer, slicing along the first axis
// and reshaping are views, and every mutation goes through copy-on-write. That is what lets a collective
// hand one result buffer to every replica of a group instead of N copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/memory.hpp"

namespace weft {

using Shape = std::vector<std::int64_t>;
std::int64_t num_elements(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2, 3)", "(3,)", "()" as numpy prints shapes

// The axes a reduction runs over: every axis (the default, or std::nullopt), one, or several (negative
// counts from the end): x.sum(), x.sum(0), x.sum({0, 2}, /*keepdims=*/true).
class ReduceAxes {
 public:
  ReduceAxes() = default;
  ReduceAxes(std::nullopt_t) {}
  ReduceAxes(int axis) : axes_{axis}, all_(false) {}
  ReduceAxes(std::initializer_list<int> axes) : axes_(axes), all_(false) {}
  ReduceAxes(std::vector<int> axes) : axes_(std::move(axes)), all_(false) {}
  ReduceAxes(std::optional<int> axis) : all_(!axis) { if (axis) axes_.push_back(*axis); }
  bool all() const { return all_; }
  const std::vector<int>& axes() const { return axes_; }

 private:
  std::vector<int> axes_;
  bool all_ = true;
};

// Storage behind arrays. Internal, but shared between layers (collectives fill buffers in place before
// handing them out as immutable arrays).
class Buffer {
 public:
  // Allocates `bytes` (uninitialised) charged to `account`; null means default_memory_account() of this thread.
  Buffer(std::size_t bytes, std::shared_ptr<MemoryAccount> account);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  const std::shared_ptr<MemoryAccount>& account() const { return account_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::shared_ptr<MemoryAccount> account_;
};

namespace detail {
// The trace a symbolic Array belongs to (src/array/trace_hook.hpp; the program layer implements it).
class TraceHook;
struct TraceAccess;
// Reading the data of a traced Array: InvalidArgument naming `op` and saying the value is traced.
[[noreturn]] void throw_traced_read(const char* op);
}  // namespace detail

// While a function is traced (weft::jit, weft::make_program, pmap(jit(f)): weft/jit.hpp), its Arrays are
// symbolic: they have a dtype and a shape but no buffer, and every op on them (operators, weft::ops, the
// methods below, Replica collectives) records a program equation instead of computing. Reading their data
// (bytes, data, to_doubles, value_at, item, ...) is an InvalidArgument naming the op.
class Array {
 public:
  // An empty float32 array of shape (0,).
  Array();
  // Wraps `buffer` (not copied): `shape` elements of `dtype` starting at byte `offset`.
  Array(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer, std::size_t offset = 0, int device = -1);

  // ---- creation ---------------------------------------------------------------------------------
  // Copies `data` (num_elements(shape) elements of dtype, row-major).
  static Array from_bytes(DType dtype, Shape shape, const void* data);
  template <class T>
  static Array from_vector(const std::vector<T>& values, Shape shape = {}) {
    if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes(values.begin(), values.end());
      return from_bytes(DType::boolean, std::move(shape), bytes.data());
    } else {
      return from_bytes(dtype_v<T>, std::move(shape), values.data());
    }
  }
  template <class T>
  static Array from_list(std::initializer_list<T> values) { return from_vector(std::vector<T>(values)); }
  // Values given as doubles, converted to `dtype` (for 16-bit floats: rounded to nearest even).
  static Array from_doubles(const std::vector<double>& values, Shape shape, DType dtype);
  static Array scalar(double value, DType dtype = DType::f32);
  static Array full(const Shape& shape, double value, DType dtype = DType::f32);
  static Array zeros(const Shape& shape, DType dtype = DType::f32);
  static Array ones(const Shape& shape, DType dtype = DType::f32);
  // 0, 1, ..., n-1 as a 1-d array.
  static Array arange(std::int64_t n, DType dtype = DType::f32);
  // Uninitialised array (callers fill it through mutable_bytes()); charged to `account` if given.
  static Array empty(const Shape& shape, DType dtype, std::shared_ptr<MemoryAccount> account = nullptr,
                     int device = -1);
  // Stacks equally shaped arrays along a new first axis / joins them along an existing axis.
  static Array stack(const std::vector<Array>& arrays, int axis = 0);
  static Array concatenate(const std::vector<Array>& arrays, int axis = 0);

  // ---- properties ---------------------------------------------------------------------------------
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size() const { return num_elements(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(size()) * dtype_size(dtype_); }
  // Global id of the device this array lives on, -1 for host memory.
  int device() const { return device_; }
  // True for a symbolic array of a function being traced (no data until the program runs).
  bool traced() const { return trace_ != nullptr; }
  const std::byte* bytes() const;
  template <class T>
  std::span<const T> data() const {
    if (trace_) [[unlikely]] detail::throw_traced_read("Array::data");
    check_element_type(dtype_v<T>);
    return {reinterpret_cast<const T*>(bytes()), static_cast<std::size_t>(size())};
  }
  // Copy-on-write: detaches from a shared buffer before handing out writable memory.
  std::byte* mutable_bytes();
  template <class T>
  std::span<T> mutable_data() {
    if (trace_) [[unlikely]] detail::throw_traced_read("Array::mutable_data");
    check_element_type(dtype_v<T>);
    return {reinterpret_cast<T*>(mutable_bytes()), static_cast<std::size_t>(size())};
  }
  // Element `flat_index` (row-major) converted to double; for tests and printing.
  double value_at(std::int64_t flat_index) const;
  std::vector<double> to_doubles() const;
  template <class T>
  std::vector<T> to_vector() const {
    if (trace_) [[unlikely]] detail::throw_traced_read("Array::to_vector");
    auto d = data<T>();
    return {d.begin(), d.end()};
  }
  // The only element of a size-1 array, as T.
  template <class T>
  T item() const {
    if (trace_) [[unlikely]] detail::throw_traced_read("Array::item");
    return static_cast<T>(value_at(0));
  }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  std::size_t offset() const { return offset_; }
  bool shares_buffer_with(const Array& other) const { return buffer_ && buffer_ == other.buffer_; }

  // ---- views and copies -------------------------------------------------------------------------
  Array reshape(Shape shape) const;  // one -1 allowed; a view
  Array operator[](std::int64_t index) const;  // first-axis index (negative counts from the end); a view
  Array slice(std::int64_t begin, std::int64_t end) const;  // first-axis [begin, end), clamped; a view
  Array slice_axis(int axis, std::int64_t begin, std::int64_t end) const;  // any axis; copies
  Array astype(DType dtype) const;
  Array copy() const;  // a new buffer with the same values, on the same device
  Array moveaxis(int source, int destination) const;  // copies
  Array squeeze(int axis) const;
  Array expand_dims(int axis) const;
  // The same values tagged with another placement (no copy, no accounting).
  Array with_device(int device) const;
  // True when dtype, shape and every byte agree.
  bool identical(const Array& other) const;

  // ---- elementwise, numpy broadcasting; a scalar operand takes the array's dtype (JAX weak typing) -----
  friend Array operator+(const Array& a, const Array& b);
  friend Array operator-(const Array& a, const Array& b);
  friend Array operator*(const Array& a, const Array& b);
  friend Array operator/(const Array& a, const Array& b);  // true division: integers give float32
  friend Array operator&(const Array& a, const Array& b);  // bitwise (logical for bool)
  friend Array operator|(const Array& a, const Array& b);
  friend Array operator^(const Array& a, const Array& b);
  friend Array operator<(const Array& a, const Array& b);
  friend Array operator<=(const Array& a, const Array& b);
  friend Array operator>(const Array& a, const Array& b);
  friend Array operator>=(const Array& a, const Array& b);
  Array operator-() const;
  Array operator~() const;
  Array& operator+=(const Array& other);
  Array& operator-=(const Array& other);
  Array& operator*=(const Array& other);
  Array& operator/=(const Array& other);
  // Scalar compound assignment keeps the array's dtype (x += 1.0 on float16 stays float16).
  Array& operator+=(double value);
  Array& operator-=(double value);
  Array& operator*=(double value);
  Array& operator/=(double value);

  // ---- reductions over every axis, one or several; keepdims leaves the reduced axes with size 1 -------
  // sum of bool, int8 and uint8 accumulates in int32 (JAX's dtypes); mean of integers is float32; max/min of an
  // empty axis is an error.
  Array sum(const ReduceAxes& axes = {}, bool keepdims = false) const;
  Array max(const ReduceAxes& axes = {}, bool keepdims = false) const;
  Array min(const ReduceAxes& axes = {}, bool keepdims = false) const;
  Array mean(const ReduceAxes& axes = {}, bool keepdims = false) const;

 private:
  friend struct detail::TraceAccess;
  void check_element_type(DType wanted) const;
  DType dtype_ = DType::f32;
  Shape shape_{0};
  std::shared_ptr<Buffer> buffer_;
  std::size_t offset_ = 0;
  int device_ = -1;
  int value_id_ = -1;                   // a symbolic array's value in its trace
  std::shared_ptr<detail::TraceHook> trace_;  // null for every concrete array
};

Array operator+(const Array& a, double b);
Array operator+(double a, const Array& b);
Array operator-(const Array& a, double b);
Array operator-(double a, const Array& b);
Array operator*(const Array& a, double b);
Array operator*(double a, const Array& b);
Array operator/(const Array& a, double b);
Array operator/(double a, const Array& b);
Array power(const Array& a, const Array& b);
Array power(const Array& a, double exponent);
Array equal(const Array& a, const Array& b);
Array not_equal(const Array& a, const Array& b);

// numpy's str(): "[[ 0.  1.  2.]\n [ 3.  4.  5.]]", shortest round-trip floats, 1.4641e+04 notation where
// numpy switches to it.
std::string to_string(const Array& array);
// numpy-style repr with a chosen prefix: repr(a) = "array([1., 2.], dtype=float32)";
// repr(a, "DeviceArray") = "DeviceArray([1., 2.], dtype=float32)". `always_dtype` = false omits the dtype
// for float64/int64/bool as numpy does.
std::string repr(const Array& array, std::string_view prefix = "array", bool always_dtype = true);
std::ostream& operator<<(std::ostream& os, const Array& array);

}  // namespace weft
