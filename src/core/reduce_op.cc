// Names of the reductions, both ways (weft/reduce_op.hpp).
#include "weft/reduce_op.hpp"

#include <string>

#include "weft/error.hpp"

namespace weft {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::prod: return "prod";
  }
  return "?";
}

ReduceOp reduce_op_from_name(std::string_view name) {
  if (name == "add") return ReduceOp::sum;
  if (name == "mean") return ReduceOp::mean;
  if (name == "mul") return ReduceOp::prod;
  if (name == "min") return ReduceOp::min;
  if (name == "max") return ReduceOp::max;
  throw InvalidArgument("unknown reduce op \"" + std::string(name) + "\"; use add, mean, mul, min or max");
}

}  // namespace weft
