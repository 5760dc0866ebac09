// One descriptor per collective: a table row saying what a collective is on its way down, from the program
// op (its registry row points here, src/program/ops/collectives.cc) and the Replica's methods
// (src/runtime/replica.cc) to the request the collectives layer validates and lowers to flat buffers
// (collectives/request.hpp, flat_collective.hpp). The executor and the Replica read the row, never the op's
// name, so a collective is spelled once here rather than once per layer. Core layer: the program layer's rows
// and the collectives layer both name it without knowing each other.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "weft/dtype.hpp"
#include "weft/reduce_op.hpp"

namespace weft {

// What moves between a group's members; collectives/flat_collective.hpp lowers each kind to flat buffers.
enum class CollectiveKind : std::uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all, ppermute };
const char* collective_kind_name(CollectiveKind kind);

// How the op's operand becomes the kind's input and the kind's result the op's. JAX's collectives take the
// operand as it is (direct); the others wrap the kind, or need no communication at all.
enum class CollectiveForm : std::uint8_t {
  direct,         // the kind on the operand (psum, all_gather, ...)
  identity,       // the operand itself: nothing to meet over (Megatron's f, all_reduce_identical_inputs)
  axis_index,     // no operand, no communication: the member's index along the axes (int32)
  flat_scatter,   // flattened, zero-padded to G chunks, a tiled reduce_scatter (PopXL's replicated_reduce_scatter)
  flat_slice,     // the same layout; member k keeps its own chunk k, no communication (replica_sharded_slice)
  gather_shards,  // 1-d shards all-gathered (tiled), the padding dropped, reshaped to `shape`
  broadcast,      // member `source`'s value on every member (pbroadcast)
};

// The parameters a collective reads: bits of CollectiveDescriptor::params. A program equation holds them as
// params of these names (collective_param_name); a Replica method takes them as arguments.
enum class CollectiveParam : std::uint16_t {
  axes = 1u << 0,         // the named mesh axes it runs over
  groups = 1u << 1,       // JAX's axis_index_groups along those axes
  axis = 1u << 2,         // all_gather's axis, psum_scatter's scatter dimension
  split_axis = 1u << 3,   // all_to_all
  concat_axis = 1u << 4,  // all_to_all
  tiled = 1u << 5,
  perm = 1u << 6,         // ppermute's (source, destination) pairs
  source = 1u << 7,       // pbroadcast's source member
  shape = 1u << 8,        // gather_shards' whole tensor
  op = 1u << 9,           // the reduction is the call's (PopXL's name "add", "mean", ... in a program; the
                          // Replica method's ReduceOp argument), not the row's `reduce`
};
inline constexpr int kCollectiveParamCount = 10;
constexpr unsigned operator|(CollectiveParam a, CollectiveParam b) {
  return static_cast<unsigned>(a) | static_cast<unsigned>(b);
}
constexpr unsigned operator|(unsigned a, CollectiveParam b) { return a | static_cast<unsigned>(b); }
// The equation parameter's name: "axes", "groups", "axis", ...
const char* collective_param_name(CollectiveParam param);

struct CollectiveDescriptor {
  const char* name;  // the op's name, and the API's in messages ("psum over axes (i): ...")
  CollectiveKind kind;  // what moves; unread by the forms that move nothing (identity, axis_index, flat_slice)
  ReduceOp reduce;   // all_reduce / reduce_scatter: mean divides the group's sums by its size
  CollectiveForm form;
  unsigned params;   // CollectiveParam bits

  constexpr bool reads(CollectiveParam p) const { return (params & static_cast<unsigned>(p)) != 0; }
  // Named mesh axes (every program op), or explicit ReplicaGroups only (the Replica's all_reduce and
  // reduce_scatter over PopXL groupings: no program op of their own).
  constexpr bool named() const { return reads(CollectiveParam::axes); }
  constexpr bool mean() const { return reduce == ReduceOp::mean; }
};

// ---- the rows -------------------------------------------------------------------------------------------
namespace collective_rows {
using K = CollectiveKind;
using F = CollectiveForm;
using P = CollectiveParam;
inline constexpr unsigned kAxes = P::axes | P::groups;

// JAX's collectives over named axes (jax.lax).
inline constexpr CollectiveDescriptor psum{"psum", K::all_reduce, ReduceOp::sum, F::direct, kAxes};
inline constexpr CollectiveDescriptor pmean{"pmean", K::all_reduce, ReduceOp::mean, F::direct, kAxes};
inline constexpr CollectiveDescriptor pmax{"pmax", K::all_reduce, ReduceOp::max, F::direct, kAxes};
inline constexpr CollectiveDescriptor pmin{"pmin", K::all_reduce, ReduceOp::min, F::direct, kAxes};
inline constexpr CollectiveDescriptor pprod{"pprod", K::all_reduce, ReduceOp::prod, F::direct, kAxes};
inline constexpr CollectiveDescriptor all_gather{"all_gather", K::all_gather, ReduceOp::sum, F::direct,
                                                 kAxes | P::axis | P::tiled};
inline constexpr CollectiveDescriptor psum_scatter{"psum_scatter", K::reduce_scatter, ReduceOp::sum, F::direct,
                                                   kAxes | P::axis | P::tiled};
inline constexpr CollectiveDescriptor all_to_all{"all_to_all", K::all_to_all, ReduceOp::sum, F::direct,
                                                 kAxes | P::split_axis | P::concat_axis | P::tiled};
inline constexpr CollectiveDescriptor ppermute{"ppermute", K::ppermute, ReduceOp::sum, F::direct,
                                               P::axes | P::perm};
inline constexpr CollectiveDescriptor pbroadcast{"pbroadcast", K::all_gather, ReduceOp::sum, F::broadcast,
                                                 P::axes | P::source};
inline constexpr CollectiveDescriptor axis_index{"axis_index", K::all_reduce, ReduceOp::sum, F::axis_index,
                                                 static_cast<unsigned>(P::axes)};
// Megatron's f / g pair as PopXL names it.
inline constexpr CollectiveDescriptor all_reduce_identical_inputs{
    "all_reduce_identical_inputs", K::all_reduce, ReduceOp::sum, F::identity, kAxes};
inline constexpr CollectiveDescriptor all_reduce_identical_grad_inputs{
    "all_reduce_identical_grad_inputs", K::all_reduce, ReduceOp::sum, F::direct, kAxes};
// PopXL's collectives on flattened tensors.
inline constexpr CollectiveDescriptor replicated_reduce_scatter{
    "replicated_reduce_scatter", K::reduce_scatter, ReduceOp::sum, F::flat_scatter, kAxes | P::op};
inline constexpr CollectiveDescriptor replica_sharded_slice{
    "replica_sharded_slice", K::reduce_scatter, ReduceOp::sum, F::flat_slice, kAxes};
inline constexpr CollectiveDescriptor gather_shards{"gather_shards", K::all_gather, ReduceOp::sum,
                                                    F::gather_shards, kAxes | P::shape};
// The Replica's methods over explicit ReplicaGroups that have no program op of their own (traced, all_reduce
// records the named all-reduce of its ReduceOp: all_reduce_over_axes). Its all_gather, all_to_all and
// ppermute over groups use the rows above.
inline constexpr CollectiveDescriptor all_reduce{"all_reduce", K::all_reduce, ReduceOp::sum, F::direct,
                                                 static_cast<unsigned>(P::op)};
inline constexpr CollectiveDescriptor reduce_scatter{"reduce_scatter", K::reduce_scatter, ReduceOp::sum,
                                                     F::direct, P::op | P::axis | P::tiled};
}  // namespace collective_rows

// Every row, program ops first.
std::span<const CollectiveDescriptor* const> collective_descriptors();
// The row named `name`; nullptr for none.
const CollectiveDescriptor* find_collective(std::string_view name);
// The program op all-reducing with `op` over named axes: psum, pmean, pmax, pmin or pprod.
const CollectiveDescriptor& all_reduce_over_axes(ReduceOp op);
// The dtype a reduction `op` over replicas gives for an operand of dtype `in`, the runtime's and the type
// rules' one rule: mean makes an integer or bool operand floating (float64 for int64, float32 otherwise: JAX's
// pmean divides the sum by the group's size, a true division); sum and prod make bool int32 (JAX's psum
// converts bool to int32 first); max and min keep it.
DType reduction_dtype(ReduceOp op, DType in);

}  // namespace weft
