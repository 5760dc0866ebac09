// ValueType's size arithmetic and its jaxpr spelling.
#include "program.hpp"

namespace weft {

std::int64_t ValueType::num_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::size_t ValueType::num_bytes() const {
  return static_cast<std::size_t>(num_elements()) * dtype_size(dtype);
}

namespace program {

std::string short_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::string type_text(const ValueType& type) {
  std::string text = short_dtype_name(type.dtype) + "[";
  for (std::size_t i = 0; i < type.shape.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(type.shape[i]);
  }
  return text + "]";
}

}  // namespace program
}  // namespace weft
