// The runtime's one path for every collective: a row of the collectives' table (core/collective.hpp) and its
// arguments. The Replica's methods (replica.cc) and the program executor (program_executor.cc, per equation)
// both call run_collective; the row's form says how the operand meets its kind, the row's params which
// arguments are read.
#pragma once
#include "core/collective.hpp"
#include "weft/replica.hpp"

namespace weft::detail {

struct ReplicaState;

// A collective's arguments, viewing the caller's (a method's arguments, the executor's prepared parameters):
// the row's `params` say which are read.
struct CollectiveArgs {
  const Axes* axes = nullptr;                     // named axes (the rows with CollectiveParam::axes), or
  const ReplicaGroups* groups = nullptr;          // explicit groups (the Replica's methods over ReplicaGroups)
  const AxisIndexGroups* index_groups = nullptr;  // JAX's axis_index_groups along `axes`; null or empty: none
  ReduceOp reduce = ReduceOp::sum;                // the row's, or the call's where it reads CollectiveParam::op
  int axis = 0;                                   // axis, scatter dimension or split_axis
  int concat_axis = 0;
  bool tiled = false;
  const Permutation* perm = nullptr;
  int source = 0;
  const Shape* shape = nullptr;
};

// Runs `op` as replica `st` (concrete values: a traced replica records instead, in the Replica's methods).
// `x` is the operand (none for axis_index). Errors name the op and the replica, marked as the collective's.
Array run_collective(ReplicaState& st, const CollectiveDescriptor& op, const CollectiveArgs& args, const Array* x,
                     CallSite loc);

}  // namespace weft::detail
