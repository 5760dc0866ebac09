// The one place that maps an array-op case's "op" and "params" onto weft's array API (include/weft/ops.hpp
// and Array's reductions): which ops exist, how many inputs each takes, which params it accepts, their
// types and defaults. Params follow the numpy / JAX signatures; a param may be left out only where weft's
// default is numpy's (or JAX's) default too.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <weft/array.hpp>

namespace conformance {

// An op with its params bound; applied to the case's inputs it returns the result.
using ArrayOp = std::function<weft::Array(const std::vector<weft::Array>& inputs)>;

// Binds `op` with `params` (a JSON object, or null for none) for `num_inputs` inputs. Throws
// std::runtime_error naming the op and the rule broken: an unknown op, a number of inputs the op does not
// take, a missing, unknown or ill-typed param.
ArrayOp bind_array_op(const std::string& op, const nlohmann::json& params, std::size_t num_inputs);

}  // namespace conformance
