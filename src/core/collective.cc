// The collectives' table (core/collective.hpp): the rows in one list, and the names of its enums.
#include "core/collective.hpp"

namespace weft {
namespace {

namespace rows = collective_rows;

constexpr std::array<const CollectiveDescriptor*, 18> kRows = {
    &rows::psum, &rows::pmean, &rows::pmax, &rows::pmin, &rows::pprod, &rows::all_gather, &rows::psum_scatter,
    &rows::all_to_all, &rows::ppermute, &rows::pbroadcast, &rows::axis_index, &rows::all_reduce_identical_inputs,
    &rows::all_reduce_identical_grad_inputs, &rows::replicated_reduce_scatter, &rows::replica_sharded_slice,
    &rows::gather_shards, &rows::all_reduce, &rows::reduce_scatter};

}  // namespace

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::ppermute: return "ppermute";
  }
  return "?";
}

const char* collective_param_name(CollectiveParam param) {
  switch (param) {
    case CollectiveParam::axes: return "axes";
    case CollectiveParam::groups: return "groups";
    case CollectiveParam::axis: return "axis";
    case CollectiveParam::split_axis: return "split_axis";
    case CollectiveParam::concat_axis: return "concat_axis";
    case CollectiveParam::tiled: return "tiled";
    case CollectiveParam::perm: return "perm";
    case CollectiveParam::source: return "source";
    case CollectiveParam::shape: return "shape";
    case CollectiveParam::op: return "op";
  }
  return "?";
}

std::span<const CollectiveDescriptor* const> collective_descriptors() { return kRows; }

const CollectiveDescriptor* find_collective(std::string_view name) {
  for (const CollectiveDescriptor* row : kRows) {
    if (name == row->name) return row;
  }
  return nullptr;
}

const CollectiveDescriptor& all_reduce_over_axes(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return rows::psum;
    case ReduceOp::mean: return rows::pmean;
    case ReduceOp::max: return rows::pmax;
    case ReduceOp::min: return rows::pmin;
    case ReduceOp::prod: return rows::pprod;
  }
  return rows::psum;
}

DType reduction_dtype(ReduceOp op, DType in) {
  if (op == ReduceOp::mean) return is_floating(in) ? in : (in == DType::i64 ? DType::f64 : DType::f32);
  if (in == DType::boolean && (op == ReduceOp::sum || op == ReduceOp::prod)) return DType::i32;
  return in;
}

}  // namespace weft
