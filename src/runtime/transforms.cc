// The non-template parts of weft/transforms.hpp: the cache every transformed function calls through, and the
// programs jvp, jacfwd, jacrev and vmap run, each built from the function's traced program by the program
// transforms (jvp_program, vjp_program, batch_program) and a few equations around them (the standard basis,
// moving the batch axis), so one program per signature does the whole transform.
#include "weft/transforms.hpp"

#include <algorithm>
#include <numeric>

#include "runtime/custom_call_recording.hpp"
#include "weft/error.hpp"

namespace weft {
namespace detail {
namespace {

using Dims = std::vector<std::int64_t>;

std::string dtype_text(DType dtype) { return std::string(dtype_name(dtype)); }

// The standard basis of a value of `shape`: n = its size unit vectors, stacked: [n, *shape].
Array basis(const ValueType& type) {
  const std::int64_t n = type.num_elements();
  std::vector<double> eye(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) eye[static_cast<std::size_t>(i * n + i)] = 1.0;
  Dims shape = type.shape;
  shape.insert(shape.begin(), n);
  return Array::from_doubles(eye, Shape(shape.begin(), shape.end()), type.dtype);
}

int zeros_of(ProgramBuilder& b, const ValueType& type) {
  return b.constant(Array::zeros(Shape(type.shape.begin(), type.shape.end()), type.dtype));
}

// `v` with axis `from` moved to position `to` (numpy's moveaxis); v itself when they agree.
int moveaxis(ProgramBuilder& b, int v, std::size_t from, std::size_t to) {
  if (from == to) return v;
  Dims perm(b.type(v).shape.size());
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  perm.erase(perm.begin() + static_cast<std::ptrdiff_t>(from));
  perm.insert(perm.begin() + static_cast<std::ptrdiff_t>(to), static_cast<std::int64_t>(from));
  return b.emit("transpose", {v}, {{"perm", perm}})[0];
}

// A batched program's output as [size, *shape]: broadcast along the batch axis when no example changes it.
int with_batch_axis(ProgramBuilder& b, int v, bool batched, std::int64_t size) {
  if (batched) return v;
  Dims shape = b.type(v).shape;
  shape.insert(shape.begin(), size);
  return b.emit("broadcast_to", {v}, {{"shape", shape}})[0];
}

int reshape(ProgramBuilder& b, int v, Dims shape) { return b.emit("reshape", {v}, {{"shape", std::move(shape)}})[0]; }

Dims concat(Dims a, const Dims& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The checks jax.jacfwd / jacrev make: the argument and every output of a floating dtype.
void check_jacobian(const Program& fn, int argnum, const std::string& name) {
  const std::vector<ValueType> in = fn.input_types();
  if (argnum < 0 || argnum >= static_cast<int>(in.size())) {
    throw InvalidArgument(name + ": argnum " + std::to_string(argnum) + " is out of range for a function of " +
                          std::to_string(in.size()) + " argument(s)");
  }
  if (!is_floating(in[argnum].dtype)) {
    throw InvalidArgument(name + " requires real-valued inputs (a floating dtype): argument " +
                          std::to_string(argnum) + " is " + dtype_text(in[argnum].dtype));
  }
  const std::vector<ValueType> out = fn.output_types();
  for (std::size_t j = 0; j < out.size(); ++j) {
    if (!is_floating(out[j].dtype)) {
      throw InvalidArgument(name + " requires real-valued outputs (a floating dtype): output " + std::to_string(j) +
                            " is " + dtype_text(out[j].dtype));
    }
  }
}

// One mapped input's axis, made non-negative, and the batch size the mapped inputs agree on.
struct Mapping {
  std::vector<std::optional<std::size_t>> axes;
  std::int64_t size = 0;
};

Mapping mapping(const std::vector<ValueType>& call, const VmapAxes& given, const std::string& name) {
  std::vector<std::optional<int>> in_axes = given.in_axes;
  if (in_axes.empty()) in_axes.assign(call.size(), 0);
  if (in_axes.size() != call.size()) {
    throw InvalidArgument(name + ": in_axes has " + std::to_string(in_axes.size()) + " entries for a call with " +
                          std::to_string(call.size()) + " argument(s)");
  }
  Mapping m;
  std::string sizes;
  bool consistent = true;
  for (std::size_t k = 0; k < call.size(); ++k) {
    if (!in_axes[k]) {
      m.axes.emplace_back();
      continue;
    }
    const auto rank = static_cast<int>(call[k].shape.size());
    const int axis = *in_axes[k] < 0 ? *in_axes[k] + rank : *in_axes[k];
    if (axis < 0 || axis >= rank) {
      throw InvalidArgument(name + ": in_axes[" + std::to_string(k) + "] = " + std::to_string(*in_axes[k]) +
                            " is out of range for argument " + std::to_string(k) + " of rank " + std::to_string(rank));
    }
    const std::int64_t size = call[k].shape[static_cast<std::size_t>(axis)];
    consistent = consistent && (sizes.empty() || size == m.size);
    if (sizes.empty()) m.size = size;
    sizes += (sizes.empty() ? "" : ", ") + std::string("argument ") + std::to_string(k) + " has size " +
             std::to_string(size) + " along axis " + std::to_string(axis);
    m.axes.emplace_back(static_cast<std::size_t>(axis));
  }
  if (sizes.empty()) throw InvalidArgument(name + " must have at least one non-None value in in_axes (JAX's rule)");
  if (!consistent) throw InvalidArgument(name + " got inconsistent sizes for array axes to be mapped: " + sizes);
  return m;
}

std::vector<ValueType> types_of(std::span<const Array> arrays) {
  std::vector<ValueType> types;
  for (const Array& a : arrays) types.push_back(ValueType{a.dtype(), Dims(a.shape().begin(), a.shape().end()), {}});
  return types;
}

}  // namespace

TransformCache::TransformCache(Signature signature, Make make, std::string name, MeshOf mesh_of)
    : signature_(std::move(signature)), make_(std::move(make)), name_(std::move(name)), mesh_of_(std::move(mesh_of)),
      cache_(std::make_shared<ProgramCache>()) {}

std::vector<Array> TransformCache::run(const TraceBody& fn, std::vector<Array> inputs) const {
  static const Mesh no_mesh;
  const Program* program = cache_->find(inputs, no_mesh);
  if (program == nullptr) {
    // The call's program: f traced for its own signature, transformed, and inlined into the call's trace.
    const TraceBody body = [&](Replica*, std::span<const Array> symbolic) {
      const std::vector<ValueType> call = types_of(symbolic);
      const bool replica = static_cast<bool>(mesh_of_);
      const Program f = trace_program(fn, signature_(call), replica ? mesh_of_(call) : no_mesh, replica, name_);
      return inline_into_trace(make_(f, call), symbolic);
    };
    program = &cache_->trace(inputs, no_mesh, false, {}, body, name_);
  }
  const bool traced = std::any_of(inputs.begin(), inputs.end(), [](const Array& a) { return a.traced(); });
  if (traced) return inline_into_trace(*program, inputs);
  return run_program(*program, std::move(inputs));
}

void check_jvp_arguments(std::span<const Array> primals, std::span<const Array> tangents) {
  for (std::size_t k = 0; k < primals.size(); ++k) {
    const Array& p = primals[k];
    const Array& t = tangents[k];
    if (p.dtype() != t.dtype()) {
      throw InvalidArgument("jvp: primal and tangent arguments do not match: argument " + std::to_string(k) +
                            " has dtype " + dtype_text(p.dtype()) + ", its tangent " + dtype_text(t.dtype()) +
                            " (dtypes must be equal)");
    }
    if (p.shape() != t.shape()) {
      throw InvalidArgument("jvp called with different primal and tangent shapes: argument " + std::to_string(k) +
                            " has shape " + shape_str(p.shape()) + ", its tangent " + shape_str(t.shape()));
    }
  }
}

Program jacfwd_call_program(const Program& fn, int argnum, const std::string& name) {
  check_jacobian(fn, argnum, name);
  const std::vector<ValueType> in = fn.input_types(), out = fn.output_types();
  const std::int64_t n = in[argnum].num_elements();
  // The JVP batched over the tangent of `argnum`, fed the standard basis: column i of each Jacobian.
  std::vector<bool> batched(2 * in.size(), false);
  batched[in.size() + argnum] = true;
  const BatchedProgram columns = batch_program(jvp_program(fn), batched, n);
  ProgramBuilder b;
  std::vector<int> args;
  for (const ValueType& t : in) args.push_back(b.input(t));
  for (std::size_t k = 0; k < in.size(); ++k) {
    args.push_back(static_cast<int>(k) == argnum ? b.constant(basis(in[k])) : zeros_of(b, in[k]));
  }
  const std::vector<int> outs = b.inline_program(columns.program, args);
  std::vector<int> jacobians;
  for (std::size_t j = 0; j < out.size(); ++j) {
    int t = with_batch_axis(b, outs[out.size() + j], columns.out_batched[out.size() + j], n);
    t = moveaxis(b, t, 0, out[j].shape.size());  // [*out, n]
    jacobians.push_back(reshape(b, t, concat(out[j].shape, in[argnum].shape)));
  }
  b.set_outputs(jacobians);
  return b.build();
}

Program jacrev_call_program(const Program& fn, int argnum, const std::string& name) {
  check_jacobian(fn, argnum, name);
  const std::vector<ValueType> in = fn.input_types(), out = fn.output_types();
  const Program vjp = vjp_program(fn, {argnum});
  ProgramBuilder b;
  std::vector<int> primals;
  for (const ValueType& t : in) primals.push_back(b.input(t));
  std::vector<int> jacobians;
  for (std::size_t j = 0; j < out.size(); ++j) {
    // The VJP batched over output j's cotangent, fed its standard basis: row i of the Jacobian.
    const std::int64_t m = out[j].num_elements();
    std::vector<bool> batched(in.size() + out.size(), false);
    batched[in.size() + j] = true;
    const BatchedProgram rows = batch_program(vjp, batched, m);
    std::vector<int> args = primals;
    for (std::size_t i = 0; i < out.size(); ++i) args.push_back(i == j ? b.constant(basis(out[i])) : zeros_of(b, out[i]));
    const std::vector<int> outs = b.inline_program(rows.program, args);
    const int t = with_batch_axis(b, outs[out.size()], rows.out_batched[out.size()], m);  // [m, *in]
    jacobians.push_back(reshape(b, t, concat(out[j].shape, in[argnum].shape)));
  }
  b.set_outputs(jacobians);
  return b.build();
}

std::vector<ValueType> vmap_example_types(const std::vector<ValueType>& call, const VmapAxes& axes,
                                          const std::string& name) {
  const Mapping m = mapping(call, axes, name);
  std::vector<ValueType> types = call;
  for (std::size_t k = 0; k < call.size(); ++k) {
    if (!m.axes[k]) continue;
    types[k].shape.erase(types[k].shape.begin() + static_cast<std::ptrdiff_t>(*m.axes[k]));
    // each example is its own value along the named axis (as a pmapped argument varies along pmap's)
    if (!axes.axis_name.empty()) types[k].varying = {axes.axis_name};
  }
  return types;
}

Mesh vmap_mesh(const std::vector<ValueType>& call, const VmapAxes& axes, const std::string& name) {
  return Mesh({{axes.axis_name, static_cast<int>(mapping(call, axes, name).size)}});
}

Program vmap_call_program(const Program& fn, const std::vector<ValueType>& call, const VmapAxes& axes,
                          const std::string& name) {
  const Mapping m = mapping(call, axes, name);
  std::vector<bool> batched;
  for (const auto& axis : m.axes) batched.push_back(axis.has_value());
  const BatchedProgram per_batch = batch_program(fn, batched, m.size, axes.axis_name);
  const std::vector<ValueType> out = fn.output_types();
  std::vector<std::optional<int>> out_axes = axes.out_axes;
  if (out_axes.empty()) out_axes.assign(out.size(), 0);
  if (out_axes.size() != out.size()) {
    throw InvalidArgument(name + ": out_axes has " + std::to_string(out_axes.size()) + " entries for a function of " +
                          std::to_string(out.size()) + " output(s)");
  }
  ProgramBuilder b;
  std::vector<int> args;
  for (std::size_t k = 0; k < call.size(); ++k) {
    const int v = b.input(call[k]);
    args.push_back(m.axes[k] ? moveaxis(b, v, *m.axes[k], 0) : v);
  }
  const std::vector<int> outs = b.inline_program(per_batch.program, args);
  std::vector<int> results;
  for (std::size_t j = 0; j < out.size(); ++j) {
    if (!out_axes[j]) {
      if (per_batch.out_batched[j]) {
        throw InvalidArgument(name + ": output " + std::to_string(j) + " depends on the mapped axis, but its out_axes "
                              "entry is None (JAX: vmap has mapped output but out_axes is None)");
      }
      results.push_back(outs[j]);
      continue;
    }
    const auto rank = static_cast<int>(out[j].shape.size()) + 1;
    const int axis = *out_axes[j] < 0 ? *out_axes[j] + rank : *out_axes[j];
    if (axis < 0 || axis >= rank) {
      throw InvalidArgument(name + ": out_axes[" + std::to_string(j) + "] = " + std::to_string(*out_axes[j]) +
                            " is out of range for output " + std::to_string(j) + " of batched rank " +
                            std::to_string(rank));
    }
    const int v = with_batch_axis(b, outs[j], per_batch.out_batched[j], m.size);
    results.push_back(moveaxis(b, v, 0, static_cast<std::size_t>(axis)));
  }
  b.set_outputs(results);
  return b.build();
}

namespace {

// A value's type as custom_jvp's messages and signatures print it: f32[3].
std::string type_of(const Array& a) { return dtype_text(a.dtype()) + shape_str(a.shape()); }

}  // namespace

std::int64_t CustomJvpRules::rule(const std::vector<Array>& primals, const Array& out, const CustomJvpRule& jvp,
                                  const std::string& name) {
  std::string key;
  for (const Array& a : primals) key += type_of(a) + ",";
  const std::lock_guard lock(mutex_);
  if (const auto it = rules_.find(key); it != rules_.end()) return it->second;
  // The rule's program: (primals..., one tangent per primal, its type) -> (primal output, tangent output).
  ProgramTrace trace(Mesh(), name + " jvp");
  std::vector<Array> p, t;
  for (const Array& a : primals) p.push_back(trace.input({a.dtype(), Dims(a.shape().begin(), a.shape().end()), {}}));
  for (const Array& a : primals) t.push_back(trace.input({a.dtype(), Dims(a.shape().begin(), a.shape().end()), {}}));
  const auto [primal_out, tangent_out] = jvp(p, t);
  // JAX's checks of a rule's results: the primal output as fun's, the tangent of the same shape and dtype.
  const std::string want = type_of(out);
  if (type_of(primal_out) != want) {
    throw InvalidArgument(name + ": the jvp rule's primal output is " + type_of(primal_out) + ", the function's " +
                          want + " (they must have the same shape and dtype)");
  }
  if (type_of(tangent_out) != want) {
    throw InvalidArgument(name + ": the jvp rule's tangent output is " + type_of(tangent_out) +
                          " for a primal output " + want + " (a tangent has its primal's shape and dtype)");
  }
  const std::int64_t rule = register_custom_jvp(trace.finish({primal_out, tangent_out}), name);
  rules_.emplace(key, rule);
  return rule;
}

Array record_custom_jvp_call(std::span<const Array> primals, const Array& out, std::int64_t rule,
                             const std::string& name) {
  return record_custom_call("custom_jvp_call", primals, out, {}, rule, name);
}

}  // namespace detail
}  // namespace weft
