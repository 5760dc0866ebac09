// Collective cases: parse (JSON -> CollectiveCase), run (a pmap over the case's mesh on the shared runtime)
// and compare (each replica's shard against its slice of the expected output). Dispatch is on "op" and
// "params" only.
#include "collective_cases.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <weft/weft.hpp>

#include "compare.hpp"
#include "json_array.hpp"

namespace conformance {
namespace {

constexpr double kRelativeTolerance = 1e-5;  // inexact cases
constexpr double kAbsoluteTolerance = 1e-6;  // ... near zero
constexpr int kIntMax = std::numeric_limits<int>::max();

bool g_traced = false;  // set_traced_collectives

// What one replica does, from "op" and "params".
struct OpSpec {
  std::string op;
  std::vector<std::string> axes;
  weft::AxisIndexGroups axis_index_groups;  // reductions; empty = none
  int axis = 0;                             // all_gather
  bool tiled = false;                       // all_gather, psum_scatter, all_to_all
  int scatter_dimension = 0;                // psum_scatter
  int split_axis = 0;                       // all_to_all
  int concat_axis = 0;                      // all_to_all
  weft::Permutation perm;                   // ppermute
};

// "axes" is a list of mesh axis names (a single name is accepted too).
std::vector<std::string> parse_axes(const json& params) {
  const json& axes = params.at("axes");
  if (axes.is_string()) return {axes.get<std::string>()};
  return axes.get<std::vector<std::string>>();
}

OpSpec parse_op(const std::string& op, const json& params) {
  OpSpec spec;
  spec.op = op;
  if (op.starts_with("program:")) {
    if (op != "program:square" && op != "program:normalize" && op != "program:normalize_pmean" &&
        op != "program:rows_cols")
      throw std::runtime_error("unknown program '" + op + "'");
    return spec;
  }
  spec.axes = parse_axes(params);  // every collective names its axes
  // Integers are range-checked here (parse_int): a wrapped or truncated value would run a different case.
  auto axis_param = [&](const char* key, bool required) {
    if (!params.contains(key)) {
      if (required) throw std::runtime_error(std::string("params needs \"") + key + "\"");
      return 0;
    }
    return parse_int(params.at(key), std::string("params.") + key, -kIntMax, kIntMax);
  };
  if (op == "psum" || op == "pmean" || op == "pmax" || op == "pmin") {
    if (params.contains("axis_index_groups") && !params.at("axis_index_groups").is_null()) {
      const json& groups = params.at("axis_index_groups");
      if (!groups.is_array()) throw std::runtime_error("params.axis_index_groups is not a list of lists");
      for (const json& group : groups) {
        if (!group.is_array()) throw std::runtime_error("params.axis_index_groups holds " + group.dump() + ", not a list");
        std::vector<int> members;
        for (const json& m : group) members.push_back(parse_int(m, "params.axis_index_groups member", 0, kIntMax));
        spec.axis_index_groups.push_back(std::move(members));
      }
    }
  } else if (op == "all_gather") {
    spec.axis = axis_param("axis", false);
    spec.tiled = params.value("tiled", false);
  } else if (op == "psum_scatter") {
    spec.scatter_dimension = axis_param("scatter_dimension", false);
    spec.tiled = params.value("tiled", false);
  } else if (op == "all_to_all") {
    spec.split_axis = axis_param("split_axis", true);
    spec.concat_axis = axis_param("concat_axis", true);
    spec.tiled = params.value("tiled", false);
  } else if (op == "ppermute") {
    if (!params.contains("perm") || !params.at("perm").is_array())
      throw std::runtime_error("params.perm is not a list of [source, destination] pairs");
    for (const json& pair : params.at("perm")) {
      if (!pair.is_array() || pair.size() != 2) throw std::runtime_error("perm entry is not a pair: " + pair.dump());
      spec.perm.emplace_back(parse_int(pair[0], "params.perm source", 0, kIntMax),
                             parse_int(pair[1], "params.perm destination", 0, kIntMax));
    }
  } else if (op != "axis_index") {
    throw std::runtime_error("unknown op '" + op + "'");
  }
  return spec;
}

// The body of the pmapped function: the case's op applied to this replica's slice.
weft::Array apply_op(weft::Replica& r, const OpSpec& s, const weft::Array& x) {
  const std::string& op = s.op;
  if (op == "psum") return r.psum(x, s.axes, s.axis_index_groups);
  if (op == "pmean") return r.pmean(x, s.axes, s.axis_index_groups);
  if (op == "pmax") return r.pmax(x, s.axes, s.axis_index_groups);
  if (op == "pmin") return r.pmin(x, s.axes, s.axis_index_groups);
  if (op == "all_gather") return r.all_gather(x, s.axes, s.axis, s.tiled);
  if (op == "psum_scatter") return r.psum_scatter(x, s.axes, s.scatter_dimension, s.tiled);
  if (op == "all_to_all") return r.all_to_all(x, s.axes, s.split_axis, s.concat_axis, s.tiled);
  if (op == "ppermute") return r.ppermute(x, s.axes, s.perm);
  // The index as an Array (not an int), so the traced mode records it: zeros + index is the index exactly.
  if (op == "axis_index") return weft::Array::zeros(x.shape(), x.dtype()) + r.axis_index(s.axes).astype(x.dtype());
  if (op == "program:square") return weft::power(x, 2.0);
  if (op == "program:normalize") return x / r.psum(x, "i");
  if (op == "program:normalize_pmean") return x / r.pmean(x, "i");
  if (op == "program:rows_cols")
    return weft::Array::stack({x / r.psum(x, "rows"), x / r.psum(x, "cols"), x / r.psum(x, {"rows", "cols"})});
  throw std::runtime_error("unknown op '" + op + "'");  // parse_op rejects these already
}

std::string mesh_str(const std::vector<weft::MeshAxis>& mesh) {
  std::string text = "{";
  for (std::size_t i = 0; i < mesh.size(); ++i)
    text += (i ? ", " : "") + mesh[i].name + ": " + std::to_string(mesh[i].size);
  return text + "}";
}

class CollectiveCase final : public Case {
 public:
  using Case::Case;

  std::vector<weft::MeshAxis> mesh;  // outermost first
  OpSpec spec;
  Tolerance tolerance;
  weft::Array input;     // mesh shape + the local shape one replica sees
  weft::Array expected;  // mesh shape + the local output shape

  int device_count = 1;  // the product of the mesh sizes, checked to fit in an int when parsed

  int devices() const override { return device_count; }

  std::string describe() const override { return spec.op + " on " + mesh_str(mesh); }

  // Runs on the first mesh-size global devices; device d (row-major) gets slice d of the input. Compares
  // every shard this process holds (all of them in one process; under weftrun, the local ones) with its
  // slice of the expected output: shard i of a mesh laid over the first global devices is replica i.
  std::optional<std::string> run(weft::Runtime* runtime) const override {
    // The driver sizes the runtime for every mesh a process can hold; a larger one cannot run here.
    if (!runtime || runtime->device_count() < device_count)
      return "bad case: its mesh " + mesh_str(mesh) + " needs " + std::to_string(device_count) + " devices, this run has " +
             std::to_string(runtime ? runtime->device_count() : 0);
    weft::PmapOptions options;
    options.mesh = mesh;
    options.runtime = runtime;
    options.name = name();
    const OpSpec& s = spec;
    auto body = [&s](weft::Replica& r, const weft::Array& x) { return apply_op(r, s, x); };
    weft::ShardedArray got;
    if (g_traced) {
      auto jitted = weft::jit(body, name());
      got = weft::pmap(jitted, options)(input);
      // Traced means one trace for the one signature: a pmap that ran the function per replica fails here.
      // A process holding none of the mesh's devices (under weftrun) runs no replica, so traces nothing.
      const std::size_t want = got.shards().empty() ? 0 : 1;
      if (jitted.traces() != want)
        return "traced mode: " + std::to_string(jitted.traces()) + " traces for one signature (expected " +
               std::to_string(want) + ")";
    } else {
      got = weft::pmap(body, options)(input);
    }

    weft::Shape slice_shape(expected.shape().begin() + static_cast<long>(mesh.size()), expected.shape().end());
    weft::Shape flat{devices()};
    flat.insert(flat.end(), slice_shape.begin(), slice_shape.end());
    const weft::Array per_replica = expected.reshape(flat);
    for (const weft::Shard& shard : got.shards()) {
      if (auto failure = compare_arrays(shard.data, per_replica[shard.device.id], tolerance))
        return "replica " + std::to_string(shard.device.id) + ": " + *failure;
    }
    return std::nullopt;
  }
};

}  // namespace

void set_traced_collectives(bool traced) { g_traced = traced; }

std::unique_ptr<Case> parse_collective_case(const json& j) {
  auto c = std::make_unique<CollectiveCase>(j.at("name").get<std::string>());
  const json& mesh = j.at("mesh");
  const auto names = mesh.at("axes").get<std::vector<std::string>>();
  const json& sizes = mesh.at("shape");
  if (!sizes.is_array()) throw std::runtime_error("mesh.shape is not a list of axis sizes");
  if (names.size() != sizes.size())
    throw std::runtime_error("mesh has " + std::to_string(names.size()) + " axis names but " +
                             std::to_string(sizes.size()) + " sizes");
  weft::Shape mesh_shape;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int size = parse_int(sizes[i], "mesh.shape[" + std::to_string(i) + "]", 1, kIntMax);
    if (size > kIntMax / c->device_count)
      throw std::runtime_error("mesh.shape " + sizes.dump() + " has more than " + std::to_string(kIntMax) + " devices");
    c->device_count *= size;
    c->mesh.push_back({names[i], size});
    mesh_shape.push_back(size);
  }
  c->spec = parse_op(j.at("op").get<std::string>(), j.value("params", json::object()));
  c->tolerance = {j.value("exact", true), kRelativeTolerance, kAbsoluteTolerance};
  c->input = parse_array(j.at("input"), "input");
  c->expected = parse_array(j.at("expected"), "expected");
  // Both arrays hold one slice per replica: they start with the mesh shape.
  for (const auto& [array, what] : {std::pair{&c->input, "input"}, std::pair{&c->expected, "expected"}}) {
    const weft::Shape& shape = array->shape();
    if (shape.size() < mesh_shape.size() || !std::equal(mesh_shape.begin(), mesh_shape.end(), shape.begin()))
      throw std::runtime_error(std::string(what) + " has shape " + weft::shape_str(shape) +
                               "; a collective case's arrays start with the mesh shape " + weft::shape_str(mesh_shape));
  }
  return c;
}

}  // namespace conformance
