// Meshes of named axes and the one canonical replica-group type. Pure math: no threads, no I/O.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace weft {

// ppermute pairs (source index, destination index) along an axis or in a group.
using Permutation = std::vector<std::pair<int, int>>;

struct MeshAxis {
  std::string name;
  int size = 0;
};

// Named axes, outermost first; replicas are numbered row-major over them (nested pmap order).
class Mesh {
 public:
  Mesh() = default;
  explicit Mesh(std::vector<MeshAxis> axes);  // validates: non-empty unique names, sizes >= 1
  const std::vector<MeshAxis>& axes() const { return axes_; }
  int num_axes() const { return static_cast<int>(axes_.size()); }
  int size() const;  // product of axis sizes = number of replicas
  std::vector<std::int64_t> shape() const;
  // Position of `name` among the axes; throws InvalidArgument ("unbound axis name: x (the mesh has axes {...})").
  int axis_position(const std::string& name) const;
  bool has_axis(const std::string& name) const;
  // Replica `replica`'s coordinate along `name`.
  int axis_index(int replica, const std::string& name) const;
  // Combined row-major coordinate along several axes, first one most significant (JAX's tuple axis_index).
  int axis_index(int replica, const std::vector<std::string>& names) const;
  int axis_size(const std::vector<std::string>& names) const;
  std::string to_string() const;  // "{rows: 2, cols: 2}"

 private:
  std::vector<MeshAxis> axes_;
};

// A partition of `num_replicas` replicas into disjoint groups, each an ordered member list. Order matters
// for all_gather, psum_scatter, all_to_all and ppermute (rank in group = position in the list).
// Every collective, JAX-style (axes, axis_index_groups) or PopXL-style (stride, group size), resolves its
// participants into this type.
class ReplicaGroups {
 public:
  ReplicaGroups() = default;
  // One group holding every replica in order.
  static ReplicaGroups all(int num_replicas);
  // JAX's axis groups: replicas sharing every coordinate not in `axes` form a group, members ordered
  // row-major over `axes` in the order written.
  static ReplicaGroups along_axes(const Mesh& mesh, const std::vector<std::string>& axes);
  // PopXL's ReplicaGrouping(num_replicas, stride, group_size): group members are `stride` apart.
  // group_size 0 means "all replicas with that stride" (num_replicas / stride).
  static ReplicaGroups strided(int num_replicas, int stride, int group_size = 0);
  // Explicit lists; validated to be a partition of 0..num_replicas-1 (equal sizes unless allow_uneven).
  static ReplicaGroups from_lists(int num_replicas, std::vector<std::vector<int>> groups,
                                  bool allow_uneven = false);

  // JAX's axis_index_groups: splits every group G into [G[i] for i in user_group] for each user group.
  ReplicaGroups subdivide(const std::vector<std::vector<int>>& index_groups) const;

  int num_replicas() const { return num_replicas_; }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  int group_size() const;  // size of group 0 (all equal unless built uneven)
  const std::vector<std::vector<int>>& groups() const { return groups_; }
  const std::vector<int>& members(int group) const;
  int group_of(int replica) const;
  int rank_in_group(int replica) const;
  std::vector<int> assignment() const;  // group of each replica
  bool uniform() const;                 // all groups the same size
  // As a strided grouping, if it is one: (stride, group_size).
  bool is_strided(int* stride, int* group_size) const;
  // PopXL's transpose: the grouping whose groups take one member from each of this one's groups
  // (the "orthogonal" partition). Throws InvalidArgument when that is not a strided grouping.
  ReplicaGroups transpose() const;

  bool operator==(const ReplicaGroups& other) const = default;
  std::string to_string() const;  // "[[0, 2], [1, 3]]"
  std::string brief() const;      // to_string(), cut after 240 characters (" ...]"): for error messages

 private:
  void index();
  int num_replicas_ = 0;
  std::vector<std::vector<int>> groups_;
  std::vector<int> group_of_;
  std::vector<int> rank_;
};

// PopXL's name: ReplicaGrouping(num_replicas, stride, group_size) is a factory of the canonical type, not a
// second group type. group_size 0 = num_replicas / stride; size 1 forces stride 1.
inline ReplicaGroups ReplicaGrouping(int num_replicas, int stride = 1, int group_size = 0) {
  return ReplicaGroups::strided(num_replicas, stride, group_size);
}

}  // namespace weft
