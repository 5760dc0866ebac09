// weft.lax: the JAX collectives a replica's Python code calls (psum, all_gather, ...), and what it asks of its
// replica (axis_index, axis_size, replica_index). Each finds the replica of its thread (current_replica.cc),
// names the user's Python line as its call site (call_site.cc), and releases the GIL while it waits for the
// other replicas, so that they run Python meanwhile.
#include "bindings.hpp"

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
// that names an axis then fails with the fix, in weft.pmap's terms, instead of naming the internal axis.
void check_axes_are_named(const char* op, const Replica& r, const Axes& axes) {
  const Mesh& mesh = r.mesh();
  bool unnamed = false;
  for (const MeshAxis& a : mesh.axes()) unnamed = unnamed || a.name.rfind("_pmap_axis", 0) == 0;
  if (!unnamed) return;
  for (const std::string& name : axes.names) {
    if (mesh.has_axis(name)) continue;
    throw InvalidArgument(std::string(op) + ": axis name '" + name + "' is not bound: this pmap was made without axis_name, so its axis has no name; "
                          "name it where the pmap is made, e.g. weft.pmap(f, axis_name='" + name +
                          "') or @functools.partial(weft.pmap, axis_name='" + name + "')");
  }
}

// Runs `body(replica, input, axes, call site)` with the GIL released.
template <class F>
py::array collective(const char* op, py::handle x, py::handle axis_names, F&& body) {
  Replica& r = current_replica(op);
  const Array a = to_array(x, op);
  const Axes axes = to_axes(axis_names);
  check_axes_are_named(op, r, axes);
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
  m.def("psum", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.psum", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.psum(a, ax, groups, site); });
  });
  m.def("pmean", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmean", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmean(a, ax, groups, site); });
  });
  m.def("pmax", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmax", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmax(a, ax, groups, site); });
  });
  m.def("pmin", [](py::handle x, const Names& axes, const Groups& groups) {
    return collective("weft.lax.pmin", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.pmin(a, ax, groups, site); });
  });
  m.def("all_gather", [](py::handle x, const Names& axes, const Groups& groups, int axis, bool tiled) {
    return collective("weft.lax.all_gather", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.all_gather(a, ax, axis, tiled, groups, site); });
  });
  m.def("psum_scatter", [](py::handle x, const Names& axes, const Groups& groups, int dimension, bool tiled) {
    return collective("weft.lax.psum_scatter", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) {
      return r.psum_scatter(a, ax, dimension, tiled, groups, site);
    });
  });
  m.def("all_to_all", [](py::handle x, const Names& axes, const Groups& groups, int split, int concat, bool tiled) {
    return collective("weft.lax.all_to_all", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) {
      return r.all_to_all(a, ax, split, concat, tiled, groups, site);
    });
  });
  m.def("ppermute", [](py::handle x, const Names& axes, const Permutation& perm) {
    return collective("weft.lax.ppermute", x, axes, [&](Replica& r, const Array& a, const Axes& ax, Site site) { return r.ppermute(a, ax, perm, site); });
  });
  m.def("axis_index", [](const Names& names) -> int {  // Replica::axis_index is an AxisIndex: here, its int
    const Replica& r = current_replica("weft.lax.axis_index");
    const Axes axes = to_axes(names);
    check_axes_are_named("weft.lax.axis_index", r, axes);
    return r.axis_index(axes);
  });
  m.def("axis_size", [](const Names& names) {
    const Replica& r = current_replica("weft.lax.axis_size");
    const Axes axes = to_axes(names);
    check_axes_are_named("weft.lax.axis_size", r, axes);
    return r.axis_size(axes);
  });
  m.def("in_replica", [] { return in_replica(); });
  m.def("replica_index", [] { return current_replica("weft.replica_index").index(); });
}

}  // namespace weft::python
