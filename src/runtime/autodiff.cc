// The non-template parts of weft/autodiff.hpp: value_and_grad's seeds (checking that the value differentiated
// is a float scalar, as JAX's grad does) and vjp's pullback's check of its cotangents.
#include "weft/autodiff.hpp"
#include "weft/error.hpp"

namespace weft {
namespace detail {

std::vector<Array> scalar_loss_seeds(const std::vector<ValueType>& outputs, const std::string& name) {
  if (outputs.empty()) throw InvalidArgument(name + ": the function returned nothing to differentiate");
  const ValueType& value = outputs[0];
  if (!value.shape.empty()) {
    throw InvalidArgument(name + " requires a scalar output (the value differentiated), got " +
                          std::string(dtype_name(value.dtype)) + shape_str(Shape(value.shape.begin(), value.shape.end())) +
                          ": reduce it first (e.g. .sum()), or use weft::vjp");
  }
  if (value.dtype != DType::f32 && value.dtype != DType::f64 && value.dtype != DType::f16 && value.dtype != DType::bf16) {
    throw InvalidArgument(name + " requires a floating output (the value differentiated), got " +
                          std::string(dtype_name(value.dtype)));
  }
  std::vector<Array> seeds{Array::scalar(1.0, value.dtype)};
  for (std::size_t k = 1; k < outputs.size(); ++k) {
    seeds.push_back(Array::zeros(Shape(outputs[k].shape.begin(), outputs[k].shape.end()), outputs[k].dtype));
  }
  return seeds;
}

}  // namespace detail

std::vector<Array> Pullback::operator()(std::vector<Array> cotangents) const {
  if (cotangents.size() != outputs_) {
    throw InvalidArgument("vjp pullback: the function has " + std::to_string(outputs_) + " outputs, got " +
                          std::to_string(cotangents.size()) + " cotangents (one per output)");
  }
  return run_(std::move(cotangents));
}

}  // namespace weft
