// The replica context: what a mapped function receives. Its ids, its coordinates on the mesh, and every
// collective. All collectives funnel into one request path (see src/collectives/request.hpp) that checks
// the replicas agree before any data moves.
#pragma once
#include <initializer_list>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "weft/array.hpp"
#include "weft/groups.hpp"
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
// ppermute pairs (source index, destination index) along the axis / in the group.
using Permutation = std::vector<std::pair<int, int>>;

enum class ReduceOp { sum, mean, max, min, prod };
const char* reduce_op_name(ReduceOp op);

namespace detail {
struct ReplicaState;
}

class Replica {
 public:
  using Loc = std::source_location;

  int index() const;         // replica id in this program (row-major over the mesh)
  int num_replicas() const;
  const Device& device() const;
  const Mesh& mesh() const;
  int axis_index(const Axes& axes) const;
  int axis_size(const Axes& axes) const;
  // The groups a collective over `axes` (optionally sub-grouped) runs in.
  ReplicaGroups groups(const Axes& axes, const AxisIndexGroups& index_groups = {}) const;

  // ---- JAX-style collectives over named axes --------------------------------------------------------
  Array psum(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array pmean(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array pmax(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array pmin(const Array& x, const Axes& axes, const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array all_gather(const Array& x, const Axes& axes, int axis = 0, bool tiled = false,
                   const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array psum_scatter(const Array& x, const Axes& axes, int scatter_dimension = 0, bool tiled = false,
                     const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array all_to_all(const Array& x, const Axes& axes, int split_axis, int concat_axis, bool tiled = false,
                   const AxisIndexGroups& groups = {}, Loc loc = Loc::current());
  Array ppermute(const Array& x, const Axes& axes, const Permutation& perm, Loc loc = Loc::current());

  // ---- the same over explicit groups (PopXL groupings, ReplicaGroups::strided) ----------------------
  Array all_reduce(const Array& x, const ReplicaGroups& groups, ReduceOp op = ReduceOp::sum,
                   Loc loc = Loc::current());
  Array all_gather(const Array& x, const ReplicaGroups& groups, int axis = 0, bool tiled = false,
                   Loc loc = Loc::current());
  Array reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op = ReduceOp::sum,
                       int scatter_dimension = 0, bool tiled = false, Loc loc = Loc::current());
  Array all_to_all(const Array& x, const ReplicaGroups& groups, int split_axis, int concat_axis,
                   bool tiled = false, Loc loc = Loc::current());
  Array ppermute(const Array& x, const ReplicaGroups& groups, const Permutation& perm,
                 Loc loc = Loc::current());

  explicit Replica(detail::ReplicaState* state) : state_(state) {}
  detail::ReplicaState& state() const { return *state_; }

 private:
  detail::ReplicaState* state_;
};

}  // namespace weft
