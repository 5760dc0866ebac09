// The replica context: what a mapped function receives. Its ids, its coordinates on the mesh, and every
// collective. All collectives funnel into one request path (see src/collectives/request.hpp) that checks
// the replicas agree before any data moves.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/array.hpp"
#include "weft/call_site.hpp"
#include "weft/groups.hpp"
#include "weft/reduce_op.hpp"
#include "weft/runtime.hpp"

namespace weft {

// One axis name or several (reduce over their product; row-major, first name most significant).
struct Axes {
  std::vector<std::string> names;
  Axes(const char* name) : names{name} {}
  Axes(std::string name) : names{std::move(name)} {}
  Axes(std::initializer_list<std::string> list) : names(list) {}
  Axes(std::vector<std::string> list) : names(std::move(list)) {}
};

// JAX's axis_index_groups: lists of indices along the (single) named axis. Empty = no sub-grouping.
using AxisIndexGroups = std::vector<std::vector<int>>;

namespace detail {
struct ReplicaState;
[[noreturn]] void throw_traced_axis_index();
}

// What Replica::axis_index returns: this replica's index along the axes as an int32 scalar Array, which also
// converts to int (`if (r.axis_index("i") == 0)`). In a traced pmap (pmap(jit(f)), weft/jit.hpp) it is a
// symbolic Array (an axis_index equation): use it as an Array (`x * r.axis_index("i")`); converting it to
// int there is an InvalidArgument, as the index is known only when the program runs.
class AxisIndex : public Array {
 public:
  AxisIndex(Array value, int index) : Array(std::move(value)), index_(index) {}
  operator int() const {
    if (traced()) [[unlikely]] detail::throw_traced_axis_index();
    return index_;
  }

 private:
  int index_;
};
class Variable;
class RemoteBuffer;
class HostStream;

class Replica {
 public:
  // Where each collective was called (weft/call_site.hpp): the caller's line unless given.
  using Loc = CallSite;

  // In a traced pmap (weft/jit.hpp) the replica's collectives and axis_index record program equations;
  // index() and device() are unknown there (InvalidArgument), mesh(), axis_size() and num_replicas() known.
  int index() const;         // replica id in this program (row-major over the mesh)
  int num_replicas() const;
  const Device& device() const;
  const Mesh& mesh() const;
  AxisIndex axis_index(const Axes& axes, Loc loc = std::source_location::current()) const;
  int axis_size(const Axes& axes) const;
  // The groups a collective over `axes` (optionally sub-grouped) runs in.
  ReplicaGroups groups(const Axes& axes, const AxisIndexGroups& index_groups = {}) const;

  // ---- JAX-style collectives over named axes --------------------------------------------------------
  Array psum(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {},
             Loc loc = std::source_location::current());
  Array pmean(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {},
              Loc loc = std::source_location::current());
  Array pmax(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {},
             Loc loc = std::source_location::current());
  Array pmin(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {},
             Loc loc = std::source_location::current());
  Array all_gather(const Array& x, const Axes& axes, int axis = 0, bool tiled = false,
                   const AxisIndexGroups& groups = {}, Loc loc = std::source_location::current());
  Array psum_scatter(const Array& x, const Axes& axes, int scatter_dimension = 0, bool tiled = false,
                     const AxisIndexGroups& groups = {}, Loc loc = std::source_location::current());
  Array all_to_all(const Array& x, const Axes& axes, int split_axis, int concat_axis, bool tiled = false,
                   const AxisIndexGroups& groups = {}, Loc loc = std::source_location::current());
  Array ppermute(const Array& x, const Axes& axes, const Permutation& perm, Loc loc = std::source_location::current());

  // ---- the same over explicit groups (PopXL groupings, ReplicaGroups::strided) ----------------------
  // all_reduce is traceable (jit, weft::grad): it records psum / pmean / pmax / pmin / pprod over every mesh
  // axis with the groups as index groups; under differentiation psum's pmap rule applies.
  Array all_reduce(const Array& x, const ReplicaGroups& groups, ReduceOp op = ReduceOp::sum,
                   Loc loc = std::source_location::current());
  // Megatron's f/g pair as PopXL names it (popxl_addons' replicated_all_reduce_identical_inputs /
  // _identical_grad_inputs), for tensor parallelism under differentiation. identical_inputs: the inputs are
  // already equal over each group, so it is the identity, and its transpose is a sum-all-reduce (f, at the
  // input of a column-parallel layer). identical_grad_inputs: a sum-all-reduce whose cotangents are equal over
  // each group, so its transpose is the identity (g, after a row-parallel layer).
  Array all_reduce_identical_inputs(const Array& x, const ReplicaGroups& groups,
                                    Loc loc = std::source_location::current());
  Array all_reduce_identical_grad_inputs(const Array& x, const ReplicaGroups& groups,
                                         Loc loc = std::source_location::current());
  Array all_gather(const Array& x, const ReplicaGroups& groups, int axis = 0, bool tiled = false,
                   Loc loc = std::source_location::current());
  Array reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op = ReduceOp::sum,
                       int scatter_dimension = 0, bool tiled = false, Loc loc = std::source_location::current());
  Array all_to_all(const Array& x, const ReplicaGroups& groups, int split_axis, int concat_axis,
                   bool tiled = false, Loc loc = std::source_location::current());
  Array ppermute(const Array& x, const ReplicaGroups& groups, const Permutation& perm,
                 Loc loc = std::source_location::current());

  // ---- PopXL-style collectives on flattened tensors ---------------------------------------------------
  // Flattens x, zero-pads it to a multiple of the group size G and reduces it over the group; member k
  // gets chunk k, a 1-d array of ceil(size / G) elements.
  Array replicated_reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op = ReduceOp::sum,
                                  Loc loc = std::source_location::current());
  // Like replicated_reduce_scatter without reduction: member k takes chunk k of its own value.
  Array replica_sharded_slice(const Array& x, const ReplicaGroups& groups, Loc loc = std::source_location::current());
  // All-gathers 1-d shards over the group (member order), drops the zero padding and reshapes to
  // `full_shape`: the inverse of replicated_reduce_scatter / replica_sharded_slice.
  Array gather_shards(const Array& shard, const ReplicaGroups& groups, const Shape& full_shape,
                      Loc loc = std::source_location::current());

  // ---- inside Session::run ----------------------------------------------------------------------------
  // This replica's value of an on-device variable (its shard for a replica-sharded one). In-place ops on
  // it (+=, ...) update the variable.
  Array& value(const Variable& variable);
  // Remote buffers live in host memory, one copy per replica; `entry` may be a device scalar.
  Array remote_load(const RemoteBuffer& buffer, int entry = 0);
  Array remote_load(const RemoteBuffer& buffer, const Array& entry);
  void remote_store(const RemoteBuffer& buffer, int entry, const Array& value);
  void remote_store(const RemoteBuffer& buffer, const Array& entry, const Array& value);
  // The next transfer of an h2d stream (this replica's slice of Session::run's input) / into a d2h stream.
  Array host_load(const HostStream& stream);
  void host_store(const HostStream& stream, const Array& value);

  explicit Replica(detail::ReplicaState* state) : state_(state) {}
  detail::ReplicaState& state() const { return *state_; }

 private:
  detail::ReplicaState* state_;
};

}  // namespace weft
