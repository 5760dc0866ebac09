// Which products the local replicas of one execution may run as one (the executor's shared products,
// docs/settings.md WEFT_SHARED_PRODUCTS). A data-parallel replica multiplies its few rows (32 in the MLP's
// step) by a weight every replica holds alike: 8 products of 32 rows, each too small for the GEMM kernels to
// reach their speed. Where the program's types prove the replicas' weights equal, the executor may stack
// their rows, run one product of 256 rows, and hand each replica its slice: the same dot products, so the
// same bits whenever the GEMM's per-row sums do not depend on how many rows it is given.
//
// Proof from the types: a value's varying axes (ValueType::varying) are where it may differ between
// replicas. shard_map's rules pvary an invariant weight before it meets varying rows, so the matmul's
// declared operand types both vary; the analysis below therefore tracks, per value, the axes it may *truly*
// differ along: a pvary changes the type, not the data, so its result differs along what its operand does;
// any other array op computes the same outputs from the same inputs (the union of its inputs'); a
// collective's results differ as declared (a reduction in several axis index groups keeps its operand's axes:
// the groups' results differ, ops/collectives.cc); PopXL's
// all_reduce_identical_inputs is the identity forward (its invariant type is the user's promise), so its
// result differs as its operand does; a session effect's results (variables, host and remote loads) may
// differ along every mesh axis. A product is shared when its weight truly
// varies over strictly fewer axes than its rows: replicas that agree on the weight's axes hold the same
// weight, and at least two of them hold different rows.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "program.hpp"

namespace weft::program {

struct SharedProduct {
  // The mesh axes the weight may truly differ along (sorted): replicas with the same coordinates on them
  // multiply by the same weight and may share one product.
  std::vector<std::string> weight_axes;
};

// Per equation of `program` (verified): the product it may share, or nullopt. Eligible: matmul of rows (rank
// >= 2, not transposed: they stack along their leading axes) by a rank-2 weight (transposed or not) of the
// same floating dtype, the weight's true axes a strict subset of the rows'. `computes_locally[i]` says whether
// equation i's outputs depend on its inputs alone (an array op, pvary included), rather than on other
// replicas or the session (a collective, an effect).
std::vector<std::optional<SharedProduct>> find_shared_products(const Program& program,
                                                               const std::vector<bool>& computes_locally);

// Which replicas hold the same data of one value: per mesh axis (in the mesh's order), a class per coordinate.
// Replicas whose coordinates fall in the same class along every axis hold equal data. An axis along which
// the value is invariant has one class, one it varies along freely a class per coordinate, and one a
// collective reduced in axis index groups a class per group: a grouped psum's result is equal within each
// group (JAX's axis_index_groups), so the replicas of one group may share the work that follows it.
struct ReplicaClasses {
  std::vector<std::vector<int>> per_axis;

  bool varies_along(std::size_t axis) const;
  // Per replica of `mesh`: its class along every axis as one number (mixed radix of the classes; equal numbers,
  // equal data).
  std::vector<int> keys(const Mesh& mesh) const;
  bool operator==(const ReplicaClasses&) const = default;
};

// The coarsest classes finer than both (replicas in one class of each): what two values determine together.
ReplicaClasses meet(const ReplicaClasses& a, const ReplicaClasses& b);

// Per value id of `program`: its replicas' classes, the finer analysis behind true_varying (described above).
std::vector<ReplicaClasses> replica_classes(const Program& program, const std::vector<bool>& computes_locally);

// The axes each value of `program` may truly differ along between replicas, as described above (per value id):
// those along which its replica_classes has more than one class.
std::vector<std::vector<std::string>> true_varying(const Program& program, const std::vector<bool>& computes_locally);

}  // namespace weft::program
