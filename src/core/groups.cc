// Mesh and ReplicaGroups: pure index math (no threads, no I/O).
//
// along_axes follows JAX's axis groups (shared/spec/jax-pmap.md 3.1), subdivide JAX's axis_index_groups,
// strided / transpose PopXL's ReplicaGrouping (shared/spec/popxl-replication.md section 1).
#include "weft/groups.hpp"

#include <cstddef>
#include <limits>

#include "weft/error.hpp"

namespace weft {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw InvalidArgument(message); }

std::string list_string(const std::vector<int>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

std::string lists_string(const std::vector<std::vector<int>>& lists) {
  std::string s = "[";
  for (std::size_t i = 0; i < lists.size(); ++i) {
    if (i > 0) s += ", ";
    s += list_string(lists[i]);
  }
  return s + "]";
}

// For error messages: the lists, shortened when very long so a message stays readable.
std::string lists_brief(const std::vector<std::vector<int>>& lists) {
  constexpr std::size_t kMax = 240;
  std::string s = lists_string(lists);
  if (s.size() > kMax) s = s.substr(0, kMax) + " ...]";
  return s;
}

std::string members_string(std::size_t n) { return std::to_string(n) + (n == 1 ? " member" : " members"); }

std::string names_string(const std::vector<std::string>& names) {
  std::string s = "(";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) s += ", ";
    s += names[i];
  }
  return s + ")";
}

std::string axes_string(const std::vector<MeshAxis>& axes) {
  std::string s = "{";
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (i > 0) s += ", ";
    s += axes[i].name + ": " + std::to_string(axes[i].size);
  }
  return s + "}";
}

// Row-major enumeration of the coordinates of the axes at `positions` (first most significant), each
// turned into a replica offset with `strides`.
std::vector<int> row_major_offsets(const std::vector<int>& positions, const std::vector<int>& sizes,
                                   const std::vector<int>& strides) {
  std::vector<int> offsets{0};
  for (int p : positions) {
    std::vector<int> next;
    next.reserve(offsets.size() * static_cast<std::size_t>(sizes[p]));
    for (int base : offsets) {
      for (int c = 0; c < sizes[p]; ++c) next.push_back(base + c * strides[p]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Mesh

Mesh::Mesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {
  std::int64_t product = 1;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    const MeshAxis& a = axes_[i];
    if (a.name.empty()) {
      invalid("mesh axis " + std::to_string(i) + " has an empty name; axis names must be non-empty (in " +
              axes_string(axes_) + ")");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (axes_[j].name == a.name) {
        invalid("mesh axis name \"" + a.name + "\" appears twice in " + axes_string(axes_) +
                "; axis names must be unique");
      }
    }
    if (a.size < 1) {
      invalid("mesh axis \"" + a.name + "\" has size " + std::to_string(a.size) +
              "; sizes must be >= 1 (in " + axes_string(axes_) + ")");
    }
    product *= a.size;
    if (product > std::numeric_limits<int>::max()) {
      invalid("mesh " + axes_string(axes_) + " has more than " +
              std::to_string(std::numeric_limits<int>::max()) + " replicas");
    }
  }
}

int Mesh::size() const {
  int n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

std::vector<std::int64_t> Mesh::shape() const {
  std::vector<std::int64_t> s;
  s.reserve(axes_.size());
  for (const MeshAxis& a : axes_) s.push_back(a.size);
  return s;
}

int Mesh::axis_position(const std::string& name) const {
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == name) return static_cast<int>(i);
  }
  invalid("unbound axis name: " + name + " (the mesh has axes " + axes_string(axes_) + ")");
}

bool Mesh::has_axis(const std::string& name) const {
  for (const MeshAxis& a : axes_) {
    if (a.name == name) return true;
  }
  return false;
}

int Mesh::axis_index(int replica, const std::string& name) const {
  return axis_index(replica, std::vector<std::string>{name});
}

int Mesh::axis_index(int replica, const std::vector<std::string>& names) const {
  const int n = size();
  if (replica < 0 || replica >= n) {
    invalid("replica " + std::to_string(replica) + " is out of range for mesh " + axes_string(axes_) +
            " (replicas are 0.." + std::to_string(n - 1) + ")");
  }
  const int combined_size = axis_size(names);  // validates the names
  (void)combined_size;
  int index = 0;
  for (const std::string& name : names) {
    const int p = axis_position(name);
    int stride = 1;
    for (std::size_t j = static_cast<std::size_t>(p) + 1; j < axes_.size(); ++j) stride *= axes_[j].size;
    const int coord = (replica / stride) % axes_[static_cast<std::size_t>(p)].size;
    index = index * axes_[static_cast<std::size_t>(p)].size + coord;
  }
  return index;
}

int Mesh::axis_size(const std::vector<std::string>& names) const {
  int n = 1;
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) {
        invalid("axis name " + names[i] + " appears twice in " + names_string(names) +
                "; each axis may be named once");
      }
    }
    n *= axes_[static_cast<std::size_t>(axis_position(names[i]))].size;
  }
  return n;
}

std::string Mesh::to_string() const { return axes_string(axes_); }

// ---------------------------------------------------------------------------------------------------
// ReplicaGroups: factories

ReplicaGroups ReplicaGroups::all(int num_replicas) {
  if (num_replicas < 1) {
    invalid("replica groups: the replica count is " + std::to_string(num_replicas) + "; it must be >= 1");
  }
  ReplicaGroups g;
  g.num_replicas_ = num_replicas;
  g.groups_.assign(1, std::vector<int>(static_cast<std::size_t>(num_replicas)));
  for (int r = 0; r < num_replicas; ++r) g.groups_[0][static_cast<std::size_t>(r)] = r;
  g.index();
  return g;
}

ReplicaGroups ReplicaGroups::along_axes(const Mesh& mesh, const std::vector<std::string>& axes) {
  mesh.axis_size(axes);  // unknown or repeated names throw here, before any work
  const int k = mesh.num_axes();
  std::vector<int> sizes(static_cast<std::size_t>(k));
  std::vector<int> strides(static_cast<std::size_t>(k));
  int stride = 1;
  for (int j = k - 1; j >= 0; --j) {
    sizes[static_cast<std::size_t>(j)] = mesh.axes()[static_cast<std::size_t>(j)].size;
    strides[static_cast<std::size_t>(j)] = stride;
    stride *= sizes[static_cast<std::size_t>(j)];
  }
  std::vector<int> in_group;  // positions of the collective's axes, in the order written
  std::vector<bool> chosen(static_cast<std::size_t>(k), false);
  for (const std::string& name : axes) {
    const int p = mesh.axis_position(name);
    in_group.push_back(p);
    chosen[static_cast<std::size_t>(p)] = true;
  }
  std::vector<int> across;  // the other axes, in mesh order
  for (int j = 0; j < k; ++j) {
    if (!chosen[static_cast<std::size_t>(j)]) across.push_back(j);
  }
  const std::vector<int> group_bases = row_major_offsets(across, sizes, strides);
  const std::vector<int> member_offsets = row_major_offsets(in_group, sizes, strides);

  ReplicaGroups g;
  g.num_replicas_ = mesh.size();
  g.groups_.reserve(group_bases.size());
  for (int base : group_bases) {
    std::vector<int> members;
    members.reserve(member_offsets.size());
    for (int off : member_offsets) members.push_back(base + off);
    g.groups_.push_back(std::move(members));
  }
  g.index();
  return g;
}

ReplicaGroups ReplicaGroups::strided(int num_replicas, int stride, int group_size) {
  const std::string R = std::to_string(num_replicas);
  if (num_replicas < 1) {
    invalid("replica grouping: the replica count is " + R + "; it must be >= 1");
  }
  if (stride < 1 || stride > num_replicas) {
    invalid("replica grouping: stride " + std::to_string(stride) +
            " must be positive and at most the replica count " + R);
  }
  if (num_replicas % stride != 0) {
    invalid("replica grouping: stride " + std::to_string(stride) + " does not divide the replica count " + R);
  }
  if (group_size == 0) group_size = num_replicas / stride;  // "all replicas with that stride"
  if (group_size < 1 || group_size > num_replicas) {
    invalid("replica grouping: group size " + std::to_string(group_size) +
            " must be positive and at most the replica count " + R + " (0 means replica count / stride)");
  }
  const std::int64_t span = static_cast<std::int64_t>(stride) * group_size;
  if (num_replicas % span != 0) {
    invalid("replica grouping: the replica count " + R + " is not divisible by stride " +
            std::to_string(stride) + " x group size " + std::to_string(group_size) + " = " +
            std::to_string(span));
  }
  if (group_size == 1) stride = 1;  // singletons: the stride is meaningless

  // PopART: group g's first member is (g / s) * s * G + g % s; member k is first + k * s.
  const int num_groups = num_replicas / group_size;
  ReplicaGroups g;
  g.num_replicas_ = num_replicas;
  g.groups_.resize(static_cast<std::size_t>(num_groups));
  for (int group = 0; group < num_groups; ++group) {
    const int first = (group / stride) * stride * group_size + group % stride;
    std::vector<int>& members = g.groups_[static_cast<std::size_t>(group)];
    members.reserve(static_cast<std::size_t>(group_size));
    for (int k = 0; k < group_size; ++k) members.push_back(first + k * stride);
  }
  g.index();
  return g;
}

ReplicaGroups ReplicaGroups::from_lists(int num_replicas, std::vector<std::vector<int>> groups,
                                        bool allow_uneven) {
  // Built only when a check fails, so valid input costs no formatting.
  auto where = [&] {
    return "replica groups " + lists_brief(groups) + " over " + std::to_string(num_replicas) + " replicas: ";
  };
  if (num_replicas < 1) {
    invalid(where() + "the replica count must be >= 1");
  }
  if (groups.empty()) {
    invalid(where() + "there are no groups; every replica 0.." + std::to_string(num_replicas - 1) +
            " must appear exactly once");
  }
  std::vector<int> owner(static_cast<std::size_t>(num_replicas), -1);
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const std::vector<int>& members = groups[gi];
    if (members.empty())
      invalid(where() + "group " + std::to_string(gi) + " is empty; groups must be non-empty");
    for (int r : members) {
      if (r < 0 || r >= num_replicas) {
        invalid(where() + "group " + std::to_string(gi) + " holds replica " + std::to_string(r) +
                ", which is out of range 0.." + std::to_string(num_replicas - 1));
      }
      int& o = owner[static_cast<std::size_t>(r)];
      if (o >= 0) {
        invalid(where() + "replica " + std::to_string(r) +
                (o == static_cast<int>(gi)
                     ? " appears twice in group " + std::to_string(gi)
                     : " appears in group " + std::to_string(o) + " and group " + std::to_string(gi)) +
                "; every replica must appear exactly once");
      }
      o = static_cast<int>(gi);
    }
  }
  for (int r = 0; r < num_replicas; ++r) {
    if (owner[static_cast<std::size_t>(r)] < 0) {
      invalid(where() + "replica " + std::to_string(r) + " is in no group; every replica 0.." +
              std::to_string(num_replicas - 1) + " must appear exactly once");
    }
  }
  if (!allow_uneven) {
    for (std::size_t gi = 1; gi < groups.size(); ++gi) {
      if (groups[gi].size() != groups[0].size()) {
        invalid(where() + "group " + std::to_string(gi) + " has " + members_string(groups[gi].size()) +
                " but group 0 has " + members_string(groups[0].size()) + "; groups must have equal sizes");
      }
    }
  }
  ReplicaGroups g;
  g.num_replicas_ = num_replicas;
  g.groups_ = std::move(groups);
  g.index();
  return g;
}

// ---------------------------------------------------------------------------------------------------
// ReplicaGroups: derived groupings

ReplicaGroups ReplicaGroups::subdivide(const std::vector<std::vector<int>>& index_groups) const {
  if (groups_.empty())
    invalid("axis_index_groups " + lists_brief(index_groups) + ": there are no groups to subdivide");
  if (!uniform()) {
    invalid("axis_index_groups " + lists_brief(index_groups) + " need groups of equal size, but " +
            lists_brief(groups_) + " are uneven");
  }
  const int n = group_size();
  auto cover = [&] {
    return "axis_index_groups must cover all indices exactly once: got " + lists_brief(index_groups) +
           " for groups of size " + std::to_string(n) + " (indices 0.." + std::to_string(n - 1) + "); ";
  };
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const std::vector<int>& user : index_groups) {
    for (int i : user) {
      if (i < 0 || i >= n) invalid(cover() + "index " + std::to_string(i) + " is out of range");
      if (seen[static_cast<std::size_t>(i)]++ > 0)
        invalid(cover() + "index " + std::to_string(i) + " appears twice");
    }
  }
  for (int i = 0; i < n; ++i) {
    if (seen[static_cast<std::size_t>(i)] == 0)
      invalid(cover() + "index " + std::to_string(i) + " is missing");
  }
  bool uneven = false;
  for (const std::vector<int>& user : index_groups) {
    if (user.empty()) {
      invalid("axis_index_groups " + lists_brief(index_groups) +
              " contain an empty group; groups must be non-empty");
    }
    if (user.size() != index_groups[0].size()) uneven = true;
  }
  std::vector<std::vector<int>> out;
  out.reserve(groups_.size() * index_groups.size());
  for (const std::vector<int>& g : groups_) {
    for (const std::vector<int>& user : index_groups) {
      std::vector<int> members;
      members.reserve(user.size());
      for (int i : user) members.push_back(g[static_cast<std::size_t>(i)]);
      out.push_back(std::move(members));
    }
  }
  return from_lists(num_replicas_, std::move(out), uneven);
}

ReplicaGroups ReplicaGroups::transpose() const {
  if (groups_.empty()) invalid("transpose of an empty replica grouping");
  if (!uniform()) {
    invalid("transpose of " + lists_brief(groups_) + ": groups have unequal sizes, so there is no transpose");
  }
  // Group matrix: rows = groups, columns = members. Transposed, a replica's group is its rank.
  const int size = group_size();
  std::vector<std::vector<int>> t(static_cast<std::size_t>(size));
  for (auto& row : t) row.reserve(groups_.size());
  for (const std::vector<int>& g : groups_) {
    for (int k = 0; k < size; ++k) t[static_cast<std::size_t>(k)].push_back(g[static_cast<std::size_t>(k)]);
  }
  ReplicaGroups result;
  result.num_replicas_ = num_replicas_;
  result.groups_ = std::move(t);
  result.index();
  int s = 0;
  int gs = 0;
  if (!result.is_strided(&s, &gs)) {
    std::string what = lists_brief(groups_);
    int in_s = 0;
    int in_g = 0;
    if (is_strided(&in_s, &in_g)) {
      what = "replica grouping (replicas " + std::to_string(num_replicas_) + ", stride " +
             std::to_string(in_s) + ", group size " + std::to_string(in_g) + ")";
    }
    invalid("the transpose of " + what + " would be " + lists_brief(result.groups_) +
            ", which is not a strided replica grouping; a strided grouping has a strided transpose only "
            "when its stride is 1 or stride x group size equals the replica count");
  }
  return result;
}

// ---------------------------------------------------------------------------------------------------
// ReplicaGroups: queries

int ReplicaGroups::group_size() const { return groups_.empty() ? 0 : static_cast<int>(groups_[0].size()); }

const std::vector<int>& ReplicaGroups::members(int group) const {
  if (group < 0 || group >= num_groups()) {
    invalid("group " + std::to_string(group) + " is out of range: " + to_string() + " has " +
            std::to_string(num_groups()) + " groups");
  }
  return groups_[static_cast<std::size_t>(group)];
}

int ReplicaGroups::group_of(int replica) const {
  if (replica < 0 || replica >= num_replicas_) {
    invalid("replica " + std::to_string(replica) + " is out of range: the groups " + lists_brief(groups_) +
            " cover replicas 0.." + std::to_string(num_replicas_ - 1));
  }
  return group_of_[static_cast<std::size_t>(replica)];
}

int ReplicaGroups::rank_in_group(int replica) const {
  if (replica < 0 || replica >= num_replicas_) {
    invalid("replica " + std::to_string(replica) + " is out of range: the groups " + lists_brief(groups_) +
            " cover replicas 0.." + std::to_string(num_replicas_ - 1));
  }
  return rank_[static_cast<std::size_t>(replica)];
}

std::vector<int> ReplicaGroups::assignment() const { return group_of_; }

bool ReplicaGroups::uniform() const {
  for (const std::vector<int>& g : groups_) {
    if (g.size() != groups_[0].size()) return false;
  }
  return true;
}

bool ReplicaGroups::is_strided(int* stride, int* group_size) const {
  if (groups_.empty() || !uniform()) return false;
  const int size = this->group_size();
  const int s = size == 1 ? 1 : groups_[0][1] - groups_[0][0];
  if (s < 1 || num_replicas_ % s != 0 || num_replicas_ % (static_cast<std::int64_t>(s) * size) != 0) {
    return false;
  }
  // A strided grouping is determined by (s, size): compare member by member, order included.
  for (int g = 0; g < num_groups(); ++g) {
    const int first = (g / s) * s * size + g % s;
    const std::vector<int>& members = groups_[static_cast<std::size_t>(g)];
    for (int k = 0; k < size; ++k) {
      if (members[static_cast<std::size_t>(k)] != first + k * s) return false;
    }
  }
  if (stride != nullptr) *stride = s;
  if (group_size != nullptr) *group_size = size;
  return true;
}

std::string ReplicaGroups::to_string() const { return lists_string(groups_); }
std::string ReplicaGroups::brief() const { return lists_brief(groups_); }

void ReplicaGroups::index() {
  group_of_.assign(static_cast<std::size_t>(num_replicas_), -1);
  rank_.assign(static_cast<std::size_t>(num_replicas_), -1);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int>& members = groups_[g];
    for (std::size_t k = 0; k < members.size(); ++k) {
      group_of_[static_cast<std::size_t>(members[k])] = static_cast<int>(g);
      rank_[static_cast<std::size_t>(members[k])] = static_cast<int>(k);
    }
  }
}

}  // namespace weft
