// Mesh and ReplicaGroups: JAX axis groups (shared/spec/jax-pmap.md 3.1-3.3, 3.7), PopXL replica groupings
// (shared/spec/popxl-replication.md section 1 and the groupings of section 9), and every validation message.
#include "weft/groups.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {
namespace groups_test {

using Lists = std::vector<std::vector<int>>;
using Names = std::vector<std::string>;

// Runs `f`, expects InvalidArgument, and checks that its message contains every one of `parts`.
void ExpectInvalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::ExpectThrowsWith<InvalidArgument>(f, parts);
}

Mesh Mesh2x2() { return Mesh({{"rows", 2}, {"cols", 2}}); }

// Naive reference for along_axes, written differently from the implementation: group key = the
// coordinates outside `axes`; position in group = row-major over `axes` in the order written.
Lists ReferenceAxisGroups(const Mesh& mesh, const Names& axes) {
  const int n = mesh.size();
  std::vector<std::string> rest;
  for (const MeshAxis& a : mesh.axes()) {
    bool chosen = false;
    for (const std::string& x : axes) chosen = chosen || x == a.name;
    if (!chosen) rest.push_back(a.name);
  }
  const int num_groups = n / mesh.axis_size(axes);
  Lists groups(static_cast<std::size_t>(num_groups),
               std::vector<int>(static_cast<std::size_t>(mesh.axis_size(axes))));
  for (int r = 0; r < n; ++r) {
    groups[static_cast<std::size_t>(mesh.axis_index(r, rest))]
          [static_cast<std::size_t>(mesh.axis_index(r, axes))] = r;
  }
  return groups;
}

// ---------------------------------------------------------------------------------------------------
// Mesh

TEST(Mesh, Basics) {
  const Mesh m({{"rows", 4}, {"cols", 2}});
  EXPECT_EQ(m.num_axes(), 2);
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.shape(), (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(m.axis_position("rows"), 0);
  EXPECT_EQ(m.axis_position("cols"), 1);
  EXPECT_TRUE(m.has_axis("cols"));
  EXPECT_FALSE(m.has_axis("batch"));
  EXPECT_EQ(m.axis_size({"rows"}), 4);
  EXPECT_EQ(m.axis_size({"cols", "rows"}), 8);
  EXPECT_EQ(m.axis_size({}), 1);
  EXPECT_EQ(m.to_string(), "{rows: 4, cols: 2}");
  EXPECT_EQ(Mesh2x2().to_string(), "{rows: 2, cols: 2}");
  EXPECT_EQ(Mesh().to_string(), "{}");
  EXPECT_EQ(Mesh().size(), 1);
  EXPECT_EQ(Mesh({{"i", 1}}).size(), 1);
}

// jax.lax.axis_index docstring: a (4, 2) input under pmap('rows')(pmap('cols')).
TEST(Mesh, AxisIndexDocstringExample) {
  const Mesh m({{"rows", 4}, {"cols", 2}});
  const Lists rows = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  const Lists cols = {{0, 1}, {0, 1}, {0, 1}, {0, 1}};
  for (int row = 0; row < 4; ++row) {
    for (int col = 0; col < 2; ++col) {
      const int replica = row * 2 + col;
      EXPECT_EQ(m.axis_index(replica, "rows"), rows[row][col]) << "replica " << replica;
      EXPECT_EQ(m.axis_index(replica, "cols"), cols[row][col]) << "replica " << replica;
    }
  }
}

TEST(Mesh, AxisIndexOneDimensional) {
  const Mesh m({{"i", 4}});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(m.axis_index(r, "i"), r);
}

struct TupleIndexCase {
  std::vector<MeshAxis> axes;
  Names names;
  std::vector<int> expected;  // per replica
};

TEST(Mesh, TupleAxisIndexIsRowMajorFirstNameMostSignificant) {
  const std::vector<TupleIndexCase> cases = {
      {{{"i", 4}, {"j", 2}}, {"i", "j"}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {{{"i", 4}, {"j", 2}}, {"j", "i"}, {0, 4, 1, 5, 2, 6, 3, 7}},
      {{{"rows", 2}, {"cols", 2}}, {"rows", "cols"}, {0, 1, 2, 3}},
      {{{"rows", 2}, {"cols", 2}}, {"cols", "rows"}, {0, 2, 1, 3}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"c", "a"}, {0, 2, 0, 2, 0, 2, 1, 3, 1, 3, 1, 3}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"a", "c"}, {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"b"}, {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (const TupleIndexCase& c : cases) {
    const Mesh m(c.axes);
    ASSERT_EQ(static_cast<int>(c.expected.size()), m.size());
    for (int r = 0; r < m.size(); ++r) {
      EXPECT_EQ(m.axis_index(r, c.names), c.expected[r]) << m.to_string() << " replica " << r;
    }
  }
}

struct ErrorCase {
  std::string what;
  std::function<void()> f;
  std::vector<std::string> parts;
};

TEST(Mesh, ValidationMessages) {
  const std::vector<ErrorCase> cases = {
      {"size 0", [] { Mesh({{"rows", 2}, {"cols", 0}}); },
       {"mesh axis \"cols\" has size 0; sizes must be >= 1", "{rows: 2, cols: 0}"}},
      {"negative size", [] { Mesh({{"i", -3}}); },
       {"mesh axis \"i\" has size -3; sizes must be >= 1"}},
      {"duplicate name", [] { Mesh({{"i", 2}, {"i", 4}}); },
       {"mesh axis name \"i\" appears twice in {i: 2, i: 4}"}},
      {"empty name", [] { Mesh({{"rows", 2}, {"", 4}}); },
       {"mesh axis 1 has an empty name", "names must be non-empty", "{rows: 2, : 4}"}},
      {"too many replicas", [] { Mesh({{"a", 65536}, {"b", 65536}}); },
       {"{a: 65536, b: 65536}", "replicas"}},
      {"unbound axis", [] { Mesh2x2().axis_position("batch"); },
       {"unbound axis name: batch (the mesh has axes {rows: 2, cols: 2})"}},
      {"axis_index unbound", [] { Mesh2x2().axis_index(0, "batch"); }, {"unbound axis name: batch"}},
      {"axis_size unbound", [] { Mesh2x2().axis_size({"rows", "x"}); },
       {"unbound axis name: x"}},
      {"axis_index replica too large", [] { Mesh2x2().axis_index(4, "rows"); },
       {"replica 4 is out of range for mesh {rows: 2, cols: 2}", "0..3"}},
      {"axis_index negative replica", [] { Mesh2x2().axis_index(-1, Names{"rows"}); },
       {"replica -1 is out of range"}},
      {"tuple repeats a name", [] { Mesh2x2().axis_index(0, Names{"rows", "rows"}); },
       {"axis name rows appears twice in (rows, rows)"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// ---------------------------------------------------------------------------------------------------
// along_axes: the table of jax-pmap.md 3.2

struct AxisGroupsCase {
  std::vector<MeshAxis> mesh;
  Names axes;
  Lists expected;
};

TEST(AlongAxes, JaxPmapTable) {
  const std::vector<AxisGroupsCase> cases = {
      {{{"rows", 2}, {"cols", 2}}, {"rows"}, {{0, 2}, {1, 3}}},
      {{{"rows", 2}, {"cols", 2}}, {"cols"}, {{0, 1}, {2, 3}}},
      {{{"rows", 2}, {"cols", 2}}, {"rows", "cols"}, {{0, 1, 2, 3}}},
      {{{"rows", 2}, {"cols", 2}}, {"cols", "rows"}, {{0, 2, 1, 3}}},
      {{{"i", 4}, {"j", 2}}, {"i"}, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {{{"i", 4}, {"j", 2}}, {"j"}, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {{{"i", 4}, {"j", 2}}, {"i", "j"}, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {{{"i", 4}, {"j", 2}}, {"j", "i"}, {{0, 2, 4, 6, 1, 3, 5, 7}}},
      {{{"r", 2}, {"c", 4}}, {"r"}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      // 1-D pmap, and the pmap with devices=[IPU2, IPU3]: groups are in replica ids.
      {{{"i", 4}}, {"i"}, {{0, 1, 2, 3}}},
      {{{"i", 2}}, {"i"}, {{0, 1}}},
      // No axes: every replica alone.
      {{{"rows", 2}, {"cols", 2}}, {}, {{0}, {1}, {2}, {3}}},
      // Three axes.
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"b"}, {{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"c", "a"}, {{0, 6, 1, 7}, {2, 8, 3, 9}, {4, 10, 5, 11}}},
      {{{"a", 2}, {"b", 3}, {"c", 2}}, {"a", "c"}, {{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}},
  };
  for (const AxisGroupsCase& c : cases) {
    const Mesh mesh(c.mesh);
    const ReplicaGroups g = ReplicaGroups::along_axes(mesh, c.axes);
    SCOPED_TRACE(mesh.to_string() + " over " + std::to_string(c.axes.size()) + " axes");
    EXPECT_EQ(g.groups(), c.expected);
    EXPECT_EQ(g.num_replicas(), mesh.size());
    EXPECT_EQ(g.group_size(), mesh.axis_size(c.axes));
    EXPECT_TRUE(g.uniform());
    EXPECT_EQ(g.groups(), ReferenceAxisGroups(mesh, c.axes));
  }
}

// Every ordered subset of the axes of a 3-D and a 4-D mesh against the naive reference; a member's rank
// in its group is the tuple axis_index, as JAX's axis_index over those axes.
TEST(AlongAxes, AllAxisTuplesMatchReference) {
  for (const Mesh& mesh :
       {Mesh({{"a", 2}, {"b", 3}, {"c", 2}}), Mesh({{"w", 3}, {"x", 1}, {"y", 2}, {"z", 2}})}) {
    std::vector<Names> tuples = {{}};
    for (int len = 1; len <= mesh.num_axes(); ++len) {
      std::vector<Names> next;
      for (const Names& t : tuples) {
        if (static_cast<int>(t.size()) != len - 1) continue;
        for (const MeshAxis& a : mesh.axes()) {
          bool used = false;
          for (const std::string& x : t) used = used || x == a.name;
          if (used) continue;
          Names u = t;
          u.push_back(a.name);
          next.push_back(u);
        }
      }
      tuples.insert(tuples.end(), next.begin(), next.end());
    }
    for (const Names& axes : tuples) {
      const ReplicaGroups g = ReplicaGroups::along_axes(mesh, axes);
      EXPECT_EQ(g.groups(), ReferenceAxisGroups(mesh, axes)) << mesh.to_string();
      for (int r = 0; r < mesh.size(); ++r) EXPECT_EQ(g.rank_in_group(r), mesh.axis_index(r, axes));
    }
  }
}

TEST(AlongAxes, Errors) {
  const std::vector<ErrorCase> cases = {
      {"unknown axis", [] { ReplicaGroups::along_axes(Mesh2x2(), {"batch"}); },
       {"unbound axis name: batch (the mesh has axes {rows: 2, cols: 2})"}},
      {"duplicate axis", [] { ReplicaGroups::along_axes(Mesh2x2(), {"rows", "cols", "rows"}); },
       {"axis name rows appears twice in (rows, cols, rows)"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// ---------------------------------------------------------------------------------------------------
// subdivide: JAX axis_index_groups

struct SubdivideCase {
  ReplicaGroups base;
  Lists index_groups;
  Lists expected;
  bool uniform;
};

TEST(Subdivide, AxisIndexGroups) {
  const Mesh line({{"i", 4}});
  const Mesh m2x4({{"r", 2}, {"c", 4}});
  const std::vector<SubdivideCase> cases = {
      {ReplicaGroups::along_axes(line, {"i"}), {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}, true},
      {ReplicaGroups::along_axes(line, {"i"}), {{0, 2}, {3, 1}}, {{0, 2}, {3, 1}}, true},  // order kept
      {ReplicaGroups::along_axes(line, {"i"}), {{0, 1, 2, 3}}, {{0, 1, 2, 3}}, true},
      {ReplicaGroups::along_axes(line, {"i"}), {{3, 2, 1, 0}}, {{3, 2, 1, 0}}, true},
      {ReplicaGroups::along_axes(line, {"i"}), {{0}, {1}, {2}, {3}}, {{0}, {1}, {2}, {3}}, true},
      // Every axis group is split, ordered by axis group first, then by the user's list.
      {ReplicaGroups::along_axes(m2x4, {"c"}), {{0, 2}, {3, 1}}, {{0, 2}, {3, 1}, {4, 6}, {7, 5}}, true},
      {ReplicaGroups::along_axes(m2x4, {"r"}), {{1}, {0}}, {{4}, {0}, {5}, {1}, {6}, {2}, {7}, {3}}, true},
      // Indices are positions in the group's order, not replica ids: ('cols', 'rows') gives [0, 2, 1, 3].
      {ReplicaGroups::along_axes(Mesh2x2(), {"cols", "rows"}), {{1, 2}, {0, 3}}, {{2, 1}, {0, 3}}, true},
      // Uneven groups are allowed (CPU/GPU), flagged by uniform().
      {ReplicaGroups::along_axes(line, {"i"}), {{0}, {1, 2, 3}}, {{0}, {1, 2, 3}}, false},
  };
  for (const SubdivideCase& c : cases) {
    const ReplicaGroups g = c.base.subdivide(c.index_groups);
    SCOPED_TRACE(c.base.to_string() + " subdivided");
    EXPECT_EQ(g.groups(), c.expected);
    EXPECT_EQ(g.uniform(), c.uniform);
    EXPECT_EQ(g.num_replicas(), c.base.num_replicas());
  }
}

TEST(Subdivide, Errors) {
  const ReplicaGroups line = ReplicaGroups::all(4);
  const std::vector<ErrorCase> cases = {
      {"duplicate index", [&] { line.subdivide({{0, 1}, {1, 2}}); },
       {"axis_index_groups must cover all indices exactly once", "[[0, 1], [1, 2]]", "size 4",
        "index 1 appears twice"}},
      {"missing index", [&] { line.subdivide({{0, 1}, {2}}); },
       {"axis_index_groups must cover all indices exactly once", "[[0, 1], [2]]", "index 3 is missing"}},
      {"out of range", [&] { line.subdivide({{0, 1}, {2, 4}}); },
       {"axis_index_groups must cover all indices exactly once", "index 4 is out of range"}},
      {"negative", [&] { line.subdivide({{0, 1}, {-1, 2, 3}}); },
       {"axis_index_groups must cover all indices exactly once", "index -1 is out of range"}},
      {"no groups", [&] { line.subdivide({}); },
       {"axis_index_groups must cover all indices exactly once", "index 0 is missing"}},
      {"empty user group", [&] { line.subdivide({{0, 1, 2, 3}, {}}); },
       {"contain an empty group"}},
      {"uneven base", [] { ReplicaGroups::from_lists(3, {{0}, {1, 2}}, true).subdivide({{0}}); },
       {"need groups of equal size", "[[0], [1, 2]]"}},
      {"empty base", [] { ReplicaGroups().subdivide({{0}}); }, {"no groups to subdivide"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// ---------------------------------------------------------------------------------------------------
// strided: PopXL's ReplicaGrouping

struct StridedCase {
  int replicas, stride, size;  // as passed (size 0 = replicas / stride)
  int effective_stride, effective_size;
  std::vector<int> assignment;
  Lists groups;
};

TEST(Strided, PopxlExamples) {
  const std::vector<StridedCase> cases = {
      // popxl-replication.md 1.3, R = 8.
      {8, 1, 8, 1, 8, {0, 0, 0, 0, 0, 0, 0, 0}, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {8, 1, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6, 7}, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {8, 1, 2, 1, 2, {0, 0, 1, 1, 2, 2, 3, 3}, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {8, 2, 2, 2, 2, {0, 1, 0, 1, 2, 3, 2, 3}, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {8, 1, 4, 1, 4, {0, 0, 0, 0, 1, 1, 1, 1}, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {8, 2, 4, 2, 4, {0, 1, 0, 1, 0, 1, 0, 1}, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {8, 4, 2, 4, 2, {0, 1, 2, 3, 0, 1, 2, 3}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      // Defaults: group size 0 = R / stride; ir.replica_grouping() = everything.
      {8, 1, 0, 1, 8, {0, 0, 0, 0, 0, 0, 0, 0}, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {8, 2, 0, 2, 4, {0, 1, 0, 1, 0, 1, 0, 1}, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {8, 4, 0, 4, 2, {0, 1, 2, 3, 0, 1, 2, 3}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {2, 1, 0, 1, 2, {0, 0}, {{0, 1}}},
      // Group size 1 forces stride 1.
      {8, 8, 0, 1, 1, {0, 1, 2, 3, 4, 5, 6, 7}, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {8, 4, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6, 7}, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {1, 1, 0, 1, 1, {0}, {{0}}},
      // The reference test's groupings (section 9).
      {4, 1, 1, 1, 1, {0, 1, 2, 3}, {{0}, {1}, {2}, {3}}},
      {2, 1, 1, 1, 1, {0, 1}, {{0}, {1}}},
      {4, 1, 2, 1, 2, {0, 0, 1, 1}, {{0, 1}, {2, 3}}},
      {4, 2, 2, 2, 2, {0, 1, 0, 1}, {{0, 2}, {1, 3}}},
      {4, 1, 4, 1, 4, {0, 0, 0, 0}, {{0, 1, 2, 3}}},
      {2, 1, 2, 1, 2, {0, 0}, {{0, 1}}},
      {16,
       2,
       2,
       2,
       2,
       {0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7},
       {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}},
      {16,
       4,
       2,
       4,
       2,
       {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}},
      {16,
       4,
       4,
       4,
       4,
       {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3},
       {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}},
      // CommGroupType::Orthogonal of size k over R = stride R / k, size k.
      {12, 4, 3, 4, 3, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}}},
      {12, 2, 3, 2, 3, {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3}, {{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}},
  };
  for (const StridedCase& c : cases) {
    const ReplicaGroups g = ReplicaGroups::strided(c.replicas, c.stride, c.size);
    SCOPED_TRACE("strided(" + std::to_string(c.replicas) + ", " + std::to_string(c.stride) + ", " +
                 std::to_string(c.size) + ") = " + g.to_string());
    EXPECT_EQ(g.assignment(), c.assignment);
    EXPECT_EQ(g.groups(), c.groups);
    EXPECT_EQ(g.num_replicas(), c.replicas);
    EXPECT_EQ(g.group_size(), c.effective_size);
    EXPECT_EQ(g.num_groups(), c.replicas / c.effective_size);
    EXPECT_TRUE(g.uniform());
    int s = -1;
    int size = -1;
    ASSERT_TRUE(g.is_strided(&s, &size));
    EXPECT_EQ(s, c.effective_stride);
    EXPECT_EQ(size, c.effective_size);
    for (int r = 0; r < c.replicas; ++r) {
      const int group = g.group_of(r);
      EXPECT_EQ(group, c.assignment[r]);
      EXPECT_EQ(g.members(group)[g.rank_in_group(r)], r);
    }
  }
  EXPECT_EQ(ReplicaGroups::strided(8, 1), ReplicaGroups::all(8));
}

// The closed forms of popxl-replication.md 1.3 and PopXL's assignment procedure (lowest unassigned replica f
// starts a group f, f+s, ..., f+(G-1)s) agree with strided() for every valid (R, s, G) up to R = 36.
TEST(Strided, FormulasForAllValidGroupings) {
  int checked = 0;
  for (int R = 1; R <= 36; ++R) {
    for (int s = 1; s <= R; ++s) {
      if (R % s != 0) continue;
      for (int G = 1; G <= R; ++G) {
        if (R % (s * G) != 0) continue;
        const ReplicaGroups g = ReplicaGroups::strided(R, s, G);
        const int es = G == 1 ? 1 : s;
        std::vector<int> python(static_cast<std::size_t>(R), -1);
        int next_group = 0;
        for (int f = 0; f < R; ++f) {
          if (python[f] >= 0) continue;
          for (int k = 0; k < G; ++k) python[f + k * es] = next_group;
          ++next_group;
        }
        ASSERT_EQ(g.assignment(), python) << R << " " << s << " " << G;
        for (int r = 0; r < R; ++r) {
          ASSERT_EQ(g.group_of(r), r % es + es * (r / (es * G)));
          const int first = (g.group_of(r) / es) * es * G + g.group_of(r) % es;
          ASSERT_EQ(g.rank_in_group(r), (r - first) / es);
        }
        int is = 0;
        int isize = 0;
        ASSERT_TRUE(g.is_strided(&is, &isize));
        ASSERT_EQ(is, es);
        ASSERT_EQ(isize, G);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Strided, Errors) {
  const std::vector<ErrorCase> cases = {
      {"stride does not divide", [] { ReplicaGroups::strided(8, 3, 2); },
       {"replica grouping: stride 3 does not divide the replica count 8"}},
      {"stride does not divide, size 1", [] { ReplicaGroups::strided(8, 3, 1); },
       {"replica grouping: stride 3 does not divide the replica count 8"}},
      {"stride 0", [] { ReplicaGroups::strided(8, 0, 2); },
       {"replica grouping: stride 0 must be positive and at most the replica count 8"}},
      {"stride negative", [] { ReplicaGroups::strided(8, -2, 2); }, {"stride -2 must be positive"}},
      {"stride too large", [] { ReplicaGroups::strided(8, 16, 1); },
       {"replica grouping: stride 16 must be positive and at most the replica count 8"}},
      {"group size too large", [] { ReplicaGroups::strided(8, 1, 16); },
       {"replica grouping: group size 16 must be positive and at most the replica count 8"}},
      {"group size negative", [] { ReplicaGroups::strided(8, 1, -1); },
       {"replica grouping: group size -1 must be positive"}},
      {"not divisible by stride x size", [] { ReplicaGroups::strided(8, 2, 3); },
       {"replica grouping: the replica count 8 is not divisible by stride 2 x group size 3 = 6"}},
      {"size does not divide", [] { ReplicaGroups::strided(8, 1, 3); },
       {"the replica count 8 is not divisible by stride 1 x group size 3 = 3"}},
      {"stride x size exceeds", [] { ReplicaGroups::strided(8, 4, 4); },
       {"the replica count 8 is not divisible by stride 4 x group size 4 = 16"}},
      {"no replicas", [] { ReplicaGroups::strided(0, 1, 1); },
       {"replica grouping: the replica count is 0; it must be >= 1"}},
      {"all of no replicas", [] { ReplicaGroups::all(0); }, {"the replica count is 0; it must be >= 1"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// ---------------------------------------------------------------------------------------------------
// transpose

struct TransposeCase {
  int replicas, stride, size;
  int t_stride, t_size;
};

TEST(Transpose, PopxlExamples) {
  const std::vector<TransposeCase> cases = {
      // test_transpose, R = 16.
      {16, 1, 1, 1, 16},
      {16, 1, 4, 4, 4},
      {16, 2, 8, 1, 2},
      {16, 8, 2, 1, 8},
      // s == 1: (G, NG); s * G == R: (1, s).
      {8, 1, 8, 8, 1},
      {8, 1, 2, 2, 4},
      {8, 4, 2, 1, 4},
      {8, 2, 4, 1, 2},
      {12, 1, 3, 3, 4},
      {12, 3, 4, 1, 3},
  };
  for (const TransposeCase& c : cases) {
    const ReplicaGroups g = ReplicaGroups::strided(c.replicas, c.stride, c.size);
    const ReplicaGroups t = g.transpose();
    SCOPED_TRACE(g.to_string() + " transposed " + t.to_string());
    EXPECT_EQ(t, ReplicaGroups::strided(c.replicas, c.t_stride, c.t_size));
    // A replica's group in the transpose is its rank in the original, and transposing twice is the identity.
    for (int r = 0; r < c.replicas; ++r) {
      EXPECT_EQ(t.group_of(r), g.rank_in_group(r));
      EXPECT_EQ(t.rank_in_group(r), g.group_of(r));
    }
    EXPECT_EQ(t.transpose(), g);
  }
  EXPECT_EQ(ReplicaGroups::strided(8, 2, 4).transpose().groups(), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ReplicaGroups::along_axes(Mesh2x2(), {"rows"}).transpose(),
            ReplicaGroups::along_axes(Mesh2x2(), {"cols"}));
}

// Strided groupings have a strided transpose exactly when s == 1 or s * G == R (PopART getTranspose).
TEST(Transpose, RepresentableExactlyForClosedForms) {
  for (int R = 1; R <= 32; ++R) {
    for (int s = 1; s <= R; ++s) {
      if (R % s != 0) continue;
      for (int G = 1; G <= R; ++G) {
        if (R % (s * G) != 0) continue;
        const ReplicaGroups g = ReplicaGroups::strided(R, s, G);
        const int es = G == 1 ? 1 : s;
        if (es == 1) {
          EXPECT_EQ(g.transpose(), ReplicaGroups::strided(R, G, R / G)) << R << " " << s << " " << G;
        } else if (es * G == R) {
          EXPECT_EQ(g.transpose(), ReplicaGroups::strided(R, 1, es)) << R << " " << s << " " << G;
        } else {
          EXPECT_THROW(g.transpose(), InvalidArgument) << R << " " << s << " " << G;
        }
      }
    }
  }
}

TEST(Transpose, Errors) {
  const std::vector<ErrorCase> cases = {
      // PopXL's Python would return the non-const grouping 0 0 1 1 0 0 1 1; PopART's C++ (and we) refuse.
      {"R=8 s=2 G=2", [] { ReplicaGroups::strided(8, 2, 2).transpose(); },
       {"the transpose of replica grouping (replicas 8, stride 2, group size 2)",
        "would be [[0, 1, 4, 5], [2, 3, 6, 7]]", "not a strided replica grouping",
        "stride is 1 or stride x group size equals the replica count"}},
      {"explicit lists", [] { ReplicaGroups::from_lists(4, {{0, 2}, {3, 1}}).transpose(); },
       {"the transpose of [[0, 2], [3, 1]] would be [[0, 3], [2, 1]]", "not a strided replica grouping"}},
      {"uneven", [] { ReplicaGroups::from_lists(3, {{0}, {1, 2}}, true).transpose(); },
       {"transpose of [[0], [1, 2]]", "unequal sizes"}},
      {"empty", [] { ReplicaGroups().transpose(); }, {"transpose of an empty replica grouping"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// ---------------------------------------------------------------------------------------------------
// from_lists, is_strided, queries

TEST(FromLists, ValidPartitions) {
  const ReplicaGroups g = ReplicaGroups::from_lists(4, {{3, 1}, {0, 2}});
  EXPECT_EQ(g.groups(), (Lists{{3, 1}, {0, 2}}));
  EXPECT_EQ(g.assignment(), (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(g.rank_in_group(3), 0);
  EXPECT_EQ(g.rank_in_group(1), 1);
  EXPECT_EQ(g.rank_in_group(0), 0);
  EXPECT_EQ(g.rank_in_group(2), 1);
  EXPECT_EQ(g.members(1), (std::vector<int>{0, 2}));
  EXPECT_EQ(g.num_groups(), 2);
  EXPECT_EQ(g.group_size(), 2);
  EXPECT_TRUE(g.uniform());

  const ReplicaGroups uneven = ReplicaGroups::from_lists(5, {{4}, {0, 1, 2, 3}}, /*allow_uneven=*/true);
  EXPECT_FALSE(uneven.uniform());
  EXPECT_EQ(uneven.group_size(), 1);
  EXPECT_EQ(uneven.group_of(2), 1);
  EXPECT_EQ(uneven.rank_in_group(2), 2);
  EXPECT_FALSE(uneven.is_strided(nullptr, nullptr));

  EXPECT_EQ(ReplicaGroups::from_lists(4, {{0, 1, 2, 3}}), ReplicaGroups::all(4));
  EXPECT_EQ(ReplicaGroups::from_lists(4, {{0, 2}, {1, 3}}), ReplicaGroups::strided(4, 2, 2));
  EXPECT_NE(ReplicaGroups::from_lists(4, {{1, 3}, {0, 2}}), ReplicaGroups::strided(4, 2, 2));
}

TEST(FromLists, Errors) {
  const std::vector<ErrorCase> cases = {
      {"out of range", [] { ReplicaGroups::from_lists(4, {{0, 1}, {2, 7}}); },
       {"replica groups [[0, 1], [2, 7]] over 4 replicas", "group 1 holds replica 7", "out of range 0..3"}},
      {"negative", [] { ReplicaGroups::from_lists(4, {{0, -1}, {2, 3}}); },
       {"group 0 holds replica -1"}},
      {"duplicate across groups", [] { ReplicaGroups::from_lists(4, {{0, 1}, {1, 2}}); },
       {"replica 1 appears in group 0 and group 1", "exactly once"}},
      {"duplicate within a group", [] { ReplicaGroups::from_lists(4, {{0, 0}, {1, 2, 3}}, true); },
       {"replica 0 appears twice in group 0"}},
      {"missing", [] { ReplicaGroups::from_lists(4, {{0, 1}, {2}}, true); },
       {"replica 3 is in no group", "every replica 0..3 must appear exactly once"}},
      {"unequal sizes", [] { ReplicaGroups::from_lists(4, {{0, 1, 2}, {3}}); },
       {"[[0, 1, 2], [3]] over 4 replicas", "group 1 has 1 member but group 0 has 3 members",
        "groups must have equal sizes"}},
      {"empty group", [] { ReplicaGroups::from_lists(2, {{0, 1}, {}}, true); },
       {"group 1 is empty"}},
      {"no groups", [] { ReplicaGroups::from_lists(2, {}); }, {"there are no groups"}},
      {"no replicas", [] { ReplicaGroups::from_lists(0, {{0}}); }, {"the replica count must be >= 1"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

struct IsStridedCase {
  ReplicaGroups groups;
  bool strided;
  int stride, size;
};

TEST(IsStrided, Detection) {
  const std::vector<IsStridedCase> cases = {
      {ReplicaGroups::along_axes(Mesh2x2(), {"rows"}), true, 2, 2},
      {ReplicaGroups::along_axes(Mesh2x2(), {"cols"}), true, 1, 2},
      {ReplicaGroups::along_axes(Mesh2x2(), {"rows", "cols"}), true, 1, 4},
      {ReplicaGroups::along_axes(Mesh2x2(), {"cols", "rows"}), false, 0, 0},  // [[0, 2, 1, 3]]
      {ReplicaGroups::along_axes(Mesh2x2(), {}), true, 1, 1},
      {ReplicaGroups::along_axes(Mesh({{"a", 2}, {"b", 3}, {"c", 2}}), {"b"}), true, 2, 3},
      {ReplicaGroups::along_axes(Mesh({{"a", 2}, {"b", 3}, {"c", 2}}), {"a", "c"}), false, 0, 0},
      // popxl-replication.md 1.5: assignments 0 1 0 1 2 3 2 3 (const) and 0 0 1 1 0 0 1 1 (non-const).
      {ReplicaGroups::from_lists(8, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}), true, 2, 2},
      {ReplicaGroups::from_lists(8, {{0, 1, 4, 5}, {2, 3, 6, 7}}), false, 0, 0},
      {ReplicaGroups::from_lists(4, {{1, 3}, {0, 2}}), false, 0, 0},  // group order differs
      {ReplicaGroups::from_lists(4, {{2, 0}, {3, 1}}), false, 0, 0},  // member order differs
      {ReplicaGroups::from_lists(6, {{0, 3}, {1, 4}, {2, 5}}), true, 3, 2},
      {ReplicaGroups::from_lists(6, {{0, 2, 4}, {1, 3, 5}}), true, 2, 3},
      {ReplicaGroups::from_lists(6, {{0, 4}, {1, 5}, {2, 3}}), false, 0, 0},
      {ReplicaGroups::from_lists(3, {{1}, {0}, {2}}), false, 0, 0},
      {ReplicaGroups(), false, 0, 0},
  };
  for (const IsStridedCase& c : cases) {
    SCOPED_TRACE(c.groups.to_string());
    int s = 0;
    int size = 0;
    EXPECT_EQ(c.groups.is_strided(&s, &size), c.strided);
    if (c.strided) {
      EXPECT_EQ(s, c.stride);
      EXPECT_EQ(size, c.size);
      EXPECT_EQ(c.groups, ReplicaGroups::strided(c.groups.num_replicas(), s, size));
    }
  }
}

TEST(ReplicaGroups, ToString) {
  EXPECT_EQ(ReplicaGroups::along_axes(Mesh2x2(), {"rows"}).to_string(), "[[0, 2], [1, 3]]");
  EXPECT_EQ(ReplicaGroups::all(3).to_string(), "[[0, 1, 2]]");
  EXPECT_EQ(ReplicaGroups::strided(2, 1, 1).to_string(), "[[0], [1]]");
  EXPECT_EQ(ReplicaGroups().to_string(), "[]");
}

TEST(ReplicaGroups, DefaultIsEmpty) {
  const ReplicaGroups g;
  EXPECT_EQ(g.num_replicas(), 0);
  EXPECT_EQ(g.num_groups(), 0);
  EXPECT_EQ(g.group_size(), 0);
  EXPECT_TRUE(g.uniform());
  EXPECT_TRUE(g.assignment().empty());
}

TEST(ReplicaGroups, QueryErrors) {
  const ReplicaGroups g = ReplicaGroups::strided(4, 2, 2);
  const std::vector<ErrorCase> cases = {
      {"members", [&] { g.members(2); }, {"group 2 is out of range", "[[0, 2], [1, 3]] has 2 groups"}},
      {"members negative", [&] { g.members(-1); }, {"group -1 is out of range"}},
      {"group_of", [&] { g.group_of(4); }, {"replica 4 is out of range", "cover replicas 0..3"}},
      {"rank_in_group", [&] { g.rank_in_group(-1); }, {"replica -1 is out of range"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectInvalid(c.f, c.parts);
  }
}

// Long group lists are shortened in messages, never in to_string().
TEST(ReplicaGroups, LongListsAreShortenedInMessages) {
  std::vector<std::vector<int>> groups(1);
  for (int r = 0; r < 500; ++r) groups[0].push_back(r);
  groups[0].push_back(500);  // out of range for 500 replicas
  try {
    ReplicaGroups::from_lists(500, groups);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_LT(message.size(), 600u) << message;
    EXPECT_NE(message.find("group 0 holds replica 500"), std::string::npos) << message;
  }
  EXPECT_GT(ReplicaGroups::all(500).to_string().size(), 1000u);
}

}  // namespace groups_test
}  // namespace
}  // namespace weft

namespace {
namespace groups_test {
// PopXL's ReplicaGrouping is a factory of the one ReplicaGroups type (spec table, R = 8, stride 4, size 2).
TEST(ReplicaGroupingFactory, IsTheStridedReplicaGroups) {
  const weft::ReplicaGroups g = weft::ReplicaGrouping(8, 4, 2);
  EXPECT_EQ(g, weft::ReplicaGroups::strided(8, 4, 2));
  EXPECT_EQ(g.assignment(), (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(weft::ReplicaGrouping(8).num_groups(), 1);
}
}  // namespace groups_test
}  // namespace
