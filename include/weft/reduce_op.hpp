// The reductions a collective can apply (core layer: the transport and the collectives engine use it
// without knowing the replica API above them).
#pragma once
#include <string_view>

namespace weft {

enum class ReduceOp { sum, mean, max, min, prod };
const char* reduce_op_name(ReduceOp op);

// PopXL's reduction names: "add", "mean", "mul" (a true product; PopXL itself maps "mul" to mean by
// mistake), "min", "max". Anything else is an InvalidArgument naming the value.
ReduceOp reduce_op_from_name(std::string_view name);

}  // namespace weft
