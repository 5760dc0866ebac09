// weft-conformance: runs collective conformance cases (the JSON format described in docs/conformance.md,
// e.g. tests/data/jax-cases.json, whose expectations were computed by JAX) through weft's public API and
// compares every result with the expected output.
//
//   weft-conformance [--verbose] [--filter SUBSTR] FILE...
//
// Each case is handled in three steps: parse (JSON -> Case), run (a pmap over the case's mesh on one shared
// Runtime) and compare (dtype, shape, then values). Dispatch is on the case's "op" and "params" only.
#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <weft/weft.hpp>

namespace {

using json = nlohmann::json;

constexpr double kRelativeTolerance = 1e-5;  // inexact cases
constexpr double kAbsoluteTolerance = 1e-6;  // ... near zero

// ---- the parsed form of a case ----------------------------------------------------------------------

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

struct Case {
  std::string name;
  std::string broken;  // why the case could not be parsed; such a case is reported as failed
  std::vector<weft::MeshAxis> mesh;  // outermost first
  OpSpec spec;
  bool exact = true;
  weft::Array input;     // mesh shape + the local shape one replica sees
  weft::Array expected;  // mesh shape + the local output shape
};

// ---- parse ------------------------------------------------------------------------------------------

// One element of a "data" list. JSON has no NaN or infinity; accept the spellings other writers use.
double parse_number(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_boolean()) return value.get<bool>() ? 1.0 : 0.0;
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf" || text == "infinity" || text == "+inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf" || text == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  throw std::runtime_error("not a number in data: " + value.dump());
}

// "data" is row-major and flat; nested lists are flattened, a lone number is one element.
void flatten(const json& data, std::vector<const json*>& out) {
  if (data.is_array()) {
    for (const json& item : data) flatten(item, out);
  } else {
    out.push_back(&data);
  }
}

// {"dtype": ..., "shape": [...], "data": [...]} -> Array.
weft::Array parse_array(const json& spec, const std::string& what) {
  const weft::DType dtype = weft::dtype_from_name(spec.at("dtype").get<std::string>());
  const weft::Shape shape = spec.at("shape").get<weft::Shape>();
  std::vector<const json*> elements;
  flatten(spec.at("data"), elements);
  if (static_cast<std::int64_t>(elements.size()) != weft::num_elements(shape)) {
    throw std::runtime_error(what + ": shape " + weft::shape_str(shape) + " needs " +
                             std::to_string(weft::num_elements(shape)) + " values, data has " +
                             std::to_string(elements.size()));
  }
  if (dtype == weft::DType::i64) {  // read as integers: doubles round beyond 2^53
    std::vector<std::int64_t> values;
    for (const json* e : elements) {
      if (!e->is_number_integer()) throw std::runtime_error(what + ": not an int64 value: " + e->dump());
      values.push_back(e->get<std::int64_t>());
    }
    return weft::Array::from_vector(values, shape);
  }
  std::vector<double> values;
  for (const json* e : elements) values.push_back(parse_number(*e));
  return weft::Array::from_doubles(values, shape, dtype);
}

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
  if (op == "psum" || op == "pmean" || op == "pmax" || op == "pmin") {
    if (params.contains("axis_index_groups") && !params.at("axis_index_groups").is_null())
      spec.axis_index_groups = params.at("axis_index_groups").get<weft::AxisIndexGroups>();
  } else if (op == "all_gather") {
    spec.axis = params.value("axis", 0);
    spec.tiled = params.value("tiled", false);
  } else if (op == "psum_scatter") {
    spec.scatter_dimension = params.value("scatter_dimension", 0);
    spec.tiled = params.value("tiled", false);
  } else if (op == "all_to_all") {
    spec.split_axis = params.at("split_axis").get<int>();
    spec.concat_axis = params.at("concat_axis").get<int>();
    spec.tiled = params.value("tiled", false);
  } else if (op == "ppermute") {
    for (const json& pair : params.at("perm")) {
      if (!pair.is_array() || pair.size() != 2) throw std::runtime_error("perm entry is not a pair: " + pair.dump());
      spec.perm.emplace_back(pair[0].get<int>(), pair[1].get<int>());
    }
  } else if (op != "axis_index") {
    throw std::runtime_error("unknown op '" + op + "'");
  }
  return spec;
}

Case parse_case(const json& j) {
  Case c;
  c.name = j.at("name").get<std::string>();
  const json& mesh = j.at("mesh");
  const auto names = mesh.at("axes").get<std::vector<std::string>>();
  const auto sizes = mesh.at("shape").get<std::vector<int>>();
  if (names.size() != sizes.size())
    throw std::runtime_error("mesh has " + std::to_string(names.size()) + " axis names but " +
                             std::to_string(sizes.size()) + " sizes");
  for (std::size_t i = 0; i < names.size(); ++i) c.mesh.push_back({names[i], sizes[i]});
  c.spec = parse_op(j.at("op").get<std::string>(), j.value("params", json::object()));
  c.exact = j.value("exact", true);
  c.input = parse_array(j.at("input"), "input");
  c.expected = parse_array(j.at("expected"), "expected");
  return c;
}

// Reads one file; throws (naming the file) when it cannot be read or is not a case file at all. A case that
// cannot be parsed comes back by name with `broken` set.
std::vector<Case> load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("cases") || !doc.at("cases").is_array())
    throw std::runtime_error(path + " has no \"cases\" list");

  std::vector<Case> cases;
  int index = 0;
  for (const json& j : doc.at("cases")) {
    try {
      cases.push_back(parse_case(j));
    } catch (const std::exception& e) {
      Case c;
      c.name = j.is_object() && j.contains("name") && j.at("name").is_string()
                   ? j.at("name").get<std::string>()
                   : path + " case #" + std::to_string(index);
      c.broken = std::string("bad case: ") + e.what();
      cases.push_back(std::move(c));
    }
    ++index;
  }
  return cases;
}

// ---- run --------------------------------------------------------------------------------------------

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
  if (op == "axis_index") return weft::Array::full(x.shape(), r.axis_index(s.axes), x.dtype());
  if (op == "program:square") return weft::power(x, 2.0);
  if (op == "program:normalize") return x / r.psum(x, "i");
  if (op == "program:normalize_pmean") return x / r.pmean(x, "i");
  if (op == "program:rows_cols")
    return weft::Array::stack({x / r.psum(x, "rows"), x / r.psum(x, "cols"), x / r.psum(x, {"rows", "cols"})});
  throw std::runtime_error("unknown op '" + op + "'");  // parse_op rejects these already
}

// Runs the case on the first mesh-size global devices; device d (row-major) gets slice d of the input.
// Returns this process's shards (all of them in one process; under weftrun, the local ones).
weft::ShardedArray run_case(weft::Runtime& runtime, const Case& c) {
  weft::PmapOptions options;
  options.mesh = c.mesh;
  options.runtime = &runtime;
  options.name = c.name;
  const OpSpec& spec = c.spec;
  auto program = weft::pmap([&spec](weft::Replica& r, const weft::Array& x) { return apply_op(r, spec, x); },
                            options);
  return program(c.input);
}

// ---- compare ----------------------------------------------------------------------------------------

// Shortest text that reads back as the value in its own precision.
std::string format_value(double value, weft::DType dtype) {
  char buffer[64];
  std::to_chars_result result;
  if (std::isnan(value)) return "nan";
  if (dtype == weft::DType::f32 || dtype == weft::DType::f16 || dtype == weft::DType::bf16)
    result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<float>(value));
  else
    result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

bool close_enough(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::abs(got - want) <= kAbsoluteTolerance + kRelativeTolerance * std::abs(want);
}

// Empty when `got` matches `want`, else why not (with the first differing element).
std::optional<std::string> compare(const weft::Array& got, const weft::Array& want, const Case& c) {
  if (got.dtype() != want.dtype())
    return "dtype: got " + std::string(weft::dtype_name(got.dtype())) + ", expected " +
           std::string(weft::dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return "shape: got " + weft::shape_str(got.shape()) + ", expected " + weft::shape_str(want.shape());

  std::int64_t first = -1;
  std::int64_t differing = 0;
  if (want.dtype() == weft::DType::i64) {  // compared as integers: doubles round beyond 2^53
    const auto g = got.to_vector<std::int64_t>();
    const auto w = want.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (g[i] == w[i]) continue;
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++differing;
    }
  } else {
    for (std::int64_t i = 0; i < want.size(); ++i) {
      const double g = got.value_at(i);
      const double w = want.value_at(i);
      if (c.exact ? same_bits(g, w) : close_enough(g, w)) continue;
      if (first < 0) first = i;
      ++differing;
    }
  }
  if (first < 0) return std::nullopt;

  std::ostringstream reason;
  reason << "element " << first << " of " << want.size() << " (" << differing << " differ"
         << (c.exact ? ", exact" : ", rel. tol. 1e-5") << "): got "
         << (want.dtype() == weft::DType::i64 ? std::to_string(got.to_vector<std::int64_t>()[first])
                                               : format_value(got.value_at(first), got.dtype()))
         << ", expected "
         << (want.dtype() == weft::DType::i64 ? std::to_string(want.to_vector<std::int64_t>()[first])
                                               : format_value(want.value_at(first), want.dtype()));
  return reason.str();
}

int mesh_size(const std::vector<weft::MeshAxis>& mesh) {
  int size = 1;
  for (const auto& axis : mesh) size *= axis.size;
  return size;
}

// Compares every shard this process holds with its slice of the expected output (shard i of a mesh laid
// over the first global devices is replica i, the device with id i).
std::optional<std::string> compare(const weft::ShardedArray& got, const Case& c) {
  const int replicas = mesh_size(c.mesh);
  weft::Shape slice_shape(c.expected.shape().begin() + static_cast<long>(c.mesh.size()), c.expected.shape().end());
  weft::Shape flat{replicas};
  flat.insert(flat.end(), slice_shape.begin(), slice_shape.end());
  const weft::Array expected = c.expected.reshape(flat);
  for (const weft::Shard& shard : got.shards()) {
    if (auto failure = compare(shard.data, expected[shard.device.id], c))
      return "replica " + std::to_string(shard.device.id) + ": " + *failure;
  }
  return std::nullopt;
}

// Exception texts may span lines (one per replica); a report line must stay one line.
std::string one_line(const std::string& text) {
  std::string out;
  bool at_line_start = false;
  for (char c : text) {
    if (c == '\n') {
      out += "; ";
      at_line_start = true;
    } else if (!(at_line_start && (c == ' ' || c == '\t'))) {
      out += c;
      at_line_start = false;
    }
  }
  return out;
}

std::string mesh_str(const std::vector<weft::MeshAxis>& mesh) {
  std::string text = "{";
  for (std::size_t i = 0; i < mesh.size(); ++i)
    text += (i ? ", " : "") + mesh[i].name + ": " + std::to_string(mesh[i].size);
  return text + "}";
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs collective conformance cases (e.g. tests/data/jax-cases.json) through weft and compares "
               "each result with the expected output. See docs/conformance.md."};
  std::vector<std::string> paths;
  bool verbose = false;
  std::string filter;
  double collective_timeout = -1;
  app.add_option("FILE", paths, "case files (JSON)")->required();
  app.add_flag("-v,--verbose", verbose, "print every case, not only the failing ones");
  app.add_option("-f,--filter", filter, "run only the cases whose name contains SUBSTR")->option_text("SUBSTR");
  app.add_option("--collective-timeout", collective_timeout,
                 "seconds a collective may wait before failing its case (default: the runtime's)");
  CLI11_PARSE(app, argc, argv);

  // Parse every file first: the runtime needs the largest mesh.
  bool unreadable = false;
  std::vector<Case> cases;
  for (const std::string& path : paths) {
    try {
      for (Case& c : load_file(path))
        if (c.name.find(filter) != std::string::npos) cases.push_back(std::move(c));
    } catch (const std::exception& e) {
      std::cerr << "weft-conformance: error: " << e.what() << "\n";
      unreadable = true;
    }
  }

  // In one process: enough devices for the largest mesh. Under weftrun each instance has WEFT_DEVICE_COUNT
  // devices and the meshes are laid over the global ones.
  int device_count = 8;
  for (const Case& c : cases) device_count = std::max(device_count, mesh_size(c.mesh));
  weft::RuntimeOptions options;
  options.device_count = std::getenv("WEFT_DEVICE_COUNT") ? 0 : device_count;
  if (collective_timeout >= 0) options.collective_timeout_s = collective_timeout;
  weft::Runtime runtime(options);

  int passed = 0;
  int failed = 0;
  for (const Case& c : cases) {
    std::optional<std::string> failure;
    try {
      failure = c.broken.empty() ? compare(run_case(runtime, c), c) : c.broken;
    } catch (const std::exception& e) {
      failure = "error: " + one_line(e.what());
    }
    if (failure) {
      std::cout << "FAIL " << c.name << ": " << *failure << "\n";
      ++failed;
    } else {
      if (verbose) std::cout << "PASS " << c.name << " (" << c.spec.op << " on " << mesh_str(c.mesh) << ")\n";
      ++passed;
    }
    std::cout.flush();
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  if (unreadable) return 2;
  return failed > 0 ? 1 : 0;
}
