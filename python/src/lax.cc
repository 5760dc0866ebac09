// weft.lax: the JAX collectives a replica's Python code calls (psum, all_gather, ...), and what it asks of its
// replica (axis_index, axis_size, replica_index). Each finds the replica of its thread (current_replica.cc),
// names the user's Python line as its call site (call_site.cc), and releases the GIL while it waits for the
// other replicas, so that they run Python meanwhile.
#include "bindings.hpp"

#include <algorithm>
#include <string_view>

namespace weft::python {
namespace {

// An axis name or a tuple / list of names, as jax.lax takes them.
Axes to_axes(py::handle names) {
  if (py::isinstance<py::str>(names)) return Axes(names.cast<std::string>());
  std::vector<std::string> list;
  for (py::handle n : names) list.push_back(py::str(n).cast<std::string>());
  return Axes(std::move(list));
}

// A pmap made without axis_name has an axis the user cannot name (the engine calls it _pmap_axis): a collective
// that names an axis then fails with the fix, in weft.pmap's terms, instead of naming the internal axis. The one
// home of this check, for both of weft.lax's paths: an eager replica's collectives below check their replica's
// mesh, and a traced one (python/weft/lax.py) its trace's mesh through the binding check_axes_named.
void check_axes_are_named(std::string_view op, const std::vector<MeshAxis>& mesh, const Axes& axes) {
  bool unnamed = false;
  for (const MeshAxis& a : mesh) unnamed = unnamed || a.name.rfind("_pmap_axis", 0) == 0;
  if (!unnamed) return;
  for (const std::string& name : axes.names) {
    if (std::any_of(mesh.begin(), mesh.end(), [&](const MeshAxis& a) { return a.name == name; })) continue;
    throw InvalidArgument(std::string(op) + ": axis name '" + name + "' is not bound: this pmap was made without axis_name, so its axis has no name; "
                          "name it where the pmap is made, e.g. weft.pmap(f, axis_name='" + name +
                          "') or @functools.partial(weft.pmap, axis_name='" + name + "')");
  }
}

// The calling replica, once its mesh names `axes`.
Replica& replica_naming(const char* op, const Axes& axes) {
  Replica& r = current_replica(op);
  check_axes_are_named(op, r.mesh().axes(), axes);
  return r;
}

// Runs `body(replica, input, axes, call site)` with the GIL released.
template <class F>
py::array collective(const char* op, py::handle x, py::handle axis_names, F&& body) {
  Replica& r = current_replica(op);
  const Array a = to_array(x, op);
  const Axes axes = to_axes(axis_names);
  check_axes_are_named(op, r.mesh().axes(), axes);
  const CallSite site = python_call_site();
  Array result;
  {
    py::gil_scoped_release nogil;
    result = body(r, a, axes, site);
  }
  return to_numpy(result);
}

}  // namespace

void init_lax(py::module_& m) {
  using Names = py::object;
  using Site = CallSite;
  using Groups = AxisIndexGroups;
  // Each takes its arguments in the order of its equation's parameters (axes first, axis_index_groups last, as
  // weft.lax's table builds them for both paths).
  const auto no_groups = [] { return py::arg("groups") = Groups{}; };
  m.def("psum", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.psum", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.psum(a, ax, groups, site); });
  }, py::arg("x"), py::arg("axes"), no_groups());
  m.def("pmean", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmean", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmean(a, ax, groups, site); });
  }, py::arg("x"), py::arg("axes"), no_groups());
  m.def("pmax", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmax", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmax(a, ax, groups, site); });
  }, py::arg("x"), py::arg("axes"), no_groups());
  m.def("pmin", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmin", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmin(a, ax, groups, site); });
  }, py::arg("x"), py::arg("axes"), no_groups());
  m.def("all_gather", [](py::handle x, const Names& axes, int axis, bool tiled, const Groups& groups) {
    return collective("weft.lax.all_gather", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.all_gather(a, ax, axis, tiled, groups, site); });
  }, py::arg("x"), py::arg("axes"), py::arg("axis"), py::arg("tiled"), no_groups());
  m.def("psum_scatter", [](py::handle x, const Names& axes, int dimension, bool tiled, const Groups& groups) {
    return collective("weft.lax.psum_scatter", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) {
      return r.psum_scatter(a, ax, dimension, tiled, groups, site);
    });
  }, py::arg("x"), py::arg("axes"), py::arg("axis"), py::arg("tiled"), no_groups());
  m.def("all_to_all", [](py::handle x, const Names& axes, int split, int concat, bool tiled, const Groups& groups) {
    return collective("weft.lax.all_to_all", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) {
      return r.all_to_all(a, ax, split, concat, tiled, groups, site);
    });
  }, py::arg("x"), py::arg("axes"), py::arg("split_axis"), py::arg("concat_axis"), py::arg("tiled"), no_groups());
  m.def("ppermute", [](py::handle x, const Names& axes, const Permutation& perm) {
    return collective("weft.lax.ppermute", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.ppermute(a, ax, perm, site); });
  });
  // jax.lax.pbroadcast, as the runtime runs the traced one: the group's values gathered, the source's taken.
  m.def("pbroadcast", [](py::handle x, const Names& axes, int source) -> py::object {
    return collective("weft.lax.pbroadcast", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) {
      return r.all_gather(a, ax, 0, false, {}, site);
    })[py::int_(source)];
  });
  // jax.lax.pvary outside a trace: no types to change, x itself (its axes named all the same).
  m.def("pvary", [](py::handle x, const Names& axes) {
    replica_naming("weft.lax.pvary", to_axes(axes));
    return py::reinterpret_borrow<py::object>(x);
  });
  m.def("axis_index", [](const Names& names) -> int {  // Replica::axis_index is an AxisIndex: here, its int
    const Axes axes = to_axes(names);
    return replica_naming("weft.lax.axis_index", axes).axis_index(axes);
  });
  m.def("axis_size", [](const Names& names) {
    const Axes axes = to_axes(names);
    return replica_naming("weft.lax.axis_size", axes).axis_size(axes);
  });
  // The check above for a traced collective (python/weft/lax.py): `mesh`, the trace's axes [(name, size), ...].
  m.def("check_axes_named", [](const std::string& op, const std::vector<std::pair<std::string, int>>& mesh, const Names& names) {
    std::vector<MeshAxis> axes;
    for (const auto& [name, size] : mesh) axes.push_back({name, size});
    check_axes_are_named(op, axes, to_axes(names));
  });
  m.def("in_replica", [] { return in_replica(); });
  m.def("replica_index", [] { return current_replica("weft.replica_index").index(); });
}

}  // namespace weft::python
