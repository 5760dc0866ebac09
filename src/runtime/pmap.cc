// The pmap engine: resolves the mesh and devices from the arguments, prepares once per call signature
// (cached), places each replica's slice on its device (or reuses shards already there), runs the replicas
// and restacks their outputs as sharded arrays.
#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "weft/error.hpp"
#include "weft/pmap.hpp"

namespace weft {
namespace {

// What stays the same between calls with the same signature.
struct Prepared {
  Mesh mesh;
  std::vector<Device> devices;
  std::vector<std::optional<int>> in_axes;  // per argument: the mapped axis (>= 0), or nullopt = broadcast
  // In a job of several processes, JAX's convention: each process passes arrays whose mapped size is its
  // local device count, and the global mapped size is that times the process count.
  bool process_local_args = false;
  int first_local = 0;  // global index of this process's first replica
  detail::GroupCache groups;
};

const Shape& arg_shape(const PmapArg& a, Shape& scratch) {
  if (const Array* x = std::get_if<Array>(&a)) return x->shape();
  scratch = std::get<ShardedArray>(a).shape();
  return scratch;
}

DType arg_dtype(const PmapArg& a) {
  if (const Array* x = std::get_if<Array>(&a)) return x->dtype();
  return std::get<ShardedArray>(a).dtype();
}

// A pmap's result in a job of several processes: this process's replicas' shards only, their mesh axes
// flattened into one (sharded_array.hpp). Passed back to a pmap over the same devices, each shard is its
// replica's input where it is.
bool process_local(const Runtime& rt, const ShardedArray& s, int mesh_size) {
  return rt.process_count() > 1 && !s.replicated() && s.mapped_axis() == 0 && s.mesh_shape().size() == 1 &&
         s.mesh_shape()[0] == static_cast<std::int64_t>(s.shards().size()) &&
         static_cast<int>(s.shards().size()) < mesh_size;
}

std::string devices_str(const std::vector<Device>& devices) {
  std::string s;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (i) s += ", ";
    s += to_string(devices[i]);
  }
  return s;
}

}  // namespace

struct PmapProgram::Impl {
  ReplicaFunction fn;
  PmapOptions options;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Prepared>> cache;

  std::shared_ptr<Prepared> prepare(Runtime& rt, const std::vector<PmapArg>& args);
  std::vector<Array> replica_inputs(Runtime& rt, const Prepared& p, const std::vector<PmapArg>& args, int replica) const;
};

PmapProgram::PmapProgram(ReplicaFunction fn, PmapOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->fn = std::move(fn);
  impl_->options = std::move(options);
  if (!impl_->options.mesh.empty() && !impl_->options.axis.empty())
    throw InvalidArgument(impl_->options.name + ": give either axis (a 1-d pmap) or mesh (nested pmap), not both");
}

namespace {

// Per argument, the axis it is mapped along as given (negative: from the end), or nullopt = broadcast.
std::vector<std::optional<int>> resolve_in_axes(const PmapOptions& options, int nargs) {
  const std::string& name = options.name;
  if (options.in_axes.empty()) return std::vector<std::optional<int>>(nargs, 0);
  if (static_cast<int>(options.in_axes.size()) != nargs)
    throw InvalidArgument(name + ": in_axes has " + std::to_string(options.in_axes.size()) + " entries but the function was called with " +
                          std::to_string(nargs) + " arguments");
  return options.in_axes;
}

// Signature: what a cached preparation depends on.
std::string signature_of(const std::vector<PmapArg>& args) {
  std::ostringstream key;
  Shape scratch;
  for (const PmapArg& arg : args) {
    key << (std::holds_alternative<Array>(arg) ? 'h' : 's') << dtype_name(arg_dtype(arg))
        << shape_str(arg_shape(arg, scratch)) << ';';
  }
  return key.str();
}

// Every mapped argument has the axis it is mapped along, and at least one argument is mapped. Negative axes
// count from the end, as in JAX (axis a of a rank-n argument is n + a): the result holds them as such.
std::vector<std::optional<int>> check_mapped_arguments(const std::string& name, const std::vector<PmapArg>& args,
                                                       std::vector<std::optional<int>> in_axes) {
  Shape scratch;
  bool any_mapped = false;
  for (int i = 0; i < static_cast<int>(args.size()); ++i) {
    if (!in_axes[i]) continue;
    any_mapped = true;
    const Shape& s = arg_shape(args[i], scratch);
    const int axis = *in_axes[i], rank = static_cast<int>(s.size());
    const int needed = axis < 0 ? -axis : axis + 1;  // the rank that has this axis
    if (rank < needed)
      throw InvalidArgument(name + ": pmap was requested to map its argument " + std::to_string(i) + " along axis " +
                            std::to_string(axis) + ", which implies that its rank should be at least " +
                            std::to_string(needed) + ", but is only " + std::to_string(rank) + " (its shape is " +
                            shape_str(s) + ")");
    if (axis < 0) in_axes[i] = rank + axis;
  }
  // JAX refuses this too (same words): with every argument broadcast nothing gives the number of replicas.
  // The message shows the two idioms that say it (issue 10; docs/using-weft.md).
  if (!any_mapped)
    throw InvalidArgument(name + ": pmap must have at least one non-None value in in_axes: every argument is "
                          "broadcast (nullopt), so nothing gives the number of replicas (jax.pmap refuses this "
                          "too). To give each of N replicas the whole of x, map a replicated copy: "
                          "f(device_put_replicated(x, devices)) with in_axes 0, or map a dummy argument: "
                          "in_axes {0, std::nullopt} and f(Array::arange(N), x)");
  return in_axes;
}

// A nested pmap (PmapOptions::mesh): every mapped argument's leading dimensions are the mesh's shape.
Mesh mesh_of_nested(const Runtime& rt, const PmapOptions& options, const std::vector<PmapArg>& args,
                    const std::vector<std::optional<int>>& in_axes) {
  const std::string& name = options.name;
  Mesh mesh(options.mesh);
  const Shape mesh_shape = mesh.shape();
  Shape scratch;
  for (int i = 0; i < static_cast<int>(args.size()); ++i) {
    if (!in_axes[i]) continue;
    if (*in_axes[i] != 0)
      throw InvalidArgument(name + ": with a multi-axis mesh " + mesh.to_string() +
                            " arguments are mapped along their leading dimensions; in_axes[" + std::to_string(i) +
                            "] = " + std::to_string(*in_axes[i]) + " is not supported (use 0 or broadcast)");
    const ShardedArray* sharded = std::get_if<ShardedArray>(&args[i]);
    if (sharded && process_local(rt, *sharded, mesh.size())) continue;  // its shards are matched by device
    const Shape& s = arg_shape(args[i], scratch);
    if (s.size() < mesh_shape.size() || !std::equal(mesh_shape.begin(), mesh_shape.end(), s.begin()))
      throw InvalidArgument(name + ": argument " + std::to_string(i) + " has shape " + shape_str(s) +
                            "; its leading dimensions must equal the mesh shape " + shape_str(mesh_shape) + " of " +
                            mesh.to_string());
  }
  return mesh;
}

// A 1-d pmap: the mapped arguments agree on the size of their mapped axis, which (times the process count
// when each process passes its local share) is the number of replicas. Sets p.mesh and p.process_local_args.
void map_one_axis(Prepared& p, Runtime& rt, const PmapOptions& options, const std::vector<PmapArg>& args,
                  const std::vector<std::optional<int>>& in_axes) {
  const std::string& name = options.name;
  Shape scratch;
  int size = -1;
  std::string sizes;
  bool consistent = true;
  for (int i = 0; i < static_cast<int>(args.size()); ++i) {
    if (!in_axes[i]) continue;
    const int s = static_cast<int>(arg_shape(args[i], scratch)[*in_axes[i]]);
    sizes += "\n  argument " + std::to_string(i) + " of shape " + shape_str(arg_shape(args[i], scratch)) +
             " has size " + std::to_string(s) + " along axis " + std::to_string(*in_axes[i]);
    if (size < 0) {
      size = s;
    } else if (s != size) {
      consistent = false;
    }
  }
  if (!consistent) throw InvalidArgument(name + ": pmap got inconsistent sizes for array axes to be mapped:" + sizes);
  if (size < 1) throw InvalidArgument(name + ": the mapped axis has size 0; pmap needs at least one replica");
  if (rt.process_count() > 1 && options.devices.empty() && size == rt.local_device_count()) {
    p.process_local_args = true;
    size *= rt.process_count();
  }
  p.mesh = Mesh({{options.axis.empty() ? std::string("_pmap_axis") : options.axis, size}});
}

// The devices of the mesh's replicas: the ones PmapOptions::devices names (checked), else the runtime's first.
std::vector<Device> devices_for(Runtime& rt, const PmapOptions& options, const Mesh& mesh) {
  const std::string& name = options.name;
  const int size = mesh.size();
  if (!options.devices.empty()) {
    if (static_cast<int>(options.devices.size()) != size)
      throw InvalidArgument(name + ": Leading axis size of input to pmapped function must equal the number of local "
                            "devices passed to pmap. Got axis_size=" + std::to_string(size) + ", num_local_devices=" +
                            std::to_string(options.devices.size()) + ".\n(Local devices available to pmap: " +
                            devices_str(options.devices) + ")");
    std::vector<char> seen(rt.device_count(), 0);
    for (const Device& d : options.devices) {
      rt.impl().device(d, name);  // an existing id, on the process that owns it
      if (seen[d.id]++) throw InvalidArgument(name + ": " + to_string(d) + " appears twice in devices=[" + devices_str(options.devices) + "]");
    }
    return options.devices;
  }
  if (size > rt.device_count())
    throw InvalidArgument(name + ": compiling computation that requires " + std::to_string(size) +
                          " logical devices, but only " + std::to_string(rt.device_count()) +
                          " devices are available (num_replicas=" + std::to_string(size) +
                          ", num_partitions=1); the mesh is " +
                          (options.axis.empty() && options.mesh.empty() ? "one axis of size " + std::to_string(size)
                                                                       : mesh.to_string()) +
                          " (set WEFT_DEVICE_COUNT or RuntimeOptions::device_count for more devices)");
  return {rt.devices().begin(), rt.devices().begin() + size};
}

}  // namespace

std::shared_ptr<Prepared> PmapProgram::Impl::prepare(Runtime& rt, const std::vector<PmapArg>& args) {
  const int nargs = static_cast<int>(args.size());
  if (nargs == 0)
    throw InvalidArgument(options.name + ": a pmapped function must be passed at least one argument containing an array");
  const std::vector<std::optional<int>> given_axes = resolve_in_axes(options, nargs);
  // The runtime is part of the key: a program prepared on an earlier runtime (another device count) is
  // prepared again for the current one.
  const std::string key = std::to_string(rt.impl().serial) + '|' + signature_of(args);
  // Preparing is cheap (no data moves) and is done under the lock, so that concurrent first calls with one
  // signature prepare it once.
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  auto p = std::make_shared<Prepared>();
  p->in_axes = check_mapped_arguments(options.name, args, given_axes);  // the axes, counted from the front
  const std::vector<std::optional<int>>& in_axes = p->in_axes;
  if (!options.mesh.empty()) {
    p->mesh = mesh_of_nested(rt, options, args, in_axes);
  } else {
    map_one_axis(*p, rt, options, args, in_axes);
  }
  p->devices = devices_for(rt, options, p->mesh);
  for (std::size_t r = 0; r < p->devices.size(); ++r)
    if (p->devices[r].process_index == rt.process_index()) {
      p->first_local = static_cast<int>(r);
      break;
    }
  rt.impl().stats.preparations++;
  return cache.emplace(key, p).first->second;
}

std::vector<Array> PmapProgram::Impl::replica_inputs(Runtime& rt, const Prepared& p, const std::vector<PmapArg>& args,
                                                     int replica) const {
  auto& stats = rt.impl().stats;
  const Device& device = p.devices[replica];
  const int k = p.mesh.num_axes();
  std::vector<Array> inputs;
  inputs.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::optional<int> axis = p.in_axes[i];
    if (const ShardedArray* s = std::get_if<ShardedArray>(&args[i]); s && axis == 0 && process_local(rt, *s, p.mesh.size())) {
      // Another call's result across processes: the shard on this replica's device is its input, as is.
      const auto at = std::find_if(s->shards().begin(), s->shards().end(),
                                   [&](const Shard& shard) { return shard.device == device; });
      if (at == s->shards().end())
        throw InvalidArgument(options.name + ": argument " + std::to_string(i) + " holds this process's shards of " +
                              "another program's result, none on " + to_string(device) + " (replica " +
                              std::to_string(replica) + "): pass it to a program over the same devices");
      inputs.push_back(at->data);
      continue;
    }
    if (const ShardedArray* s = std::get_if<ShardedArray>(&args[i])) {
      // Already on the right device: reuse the shard as is, nothing moves.
      if (axis == 0 && s->mapped_axis() == 0 && s->mesh_shape() == p.mesh.shape() &&
          s->shards()[replica].device == device) {
        inputs.push_back(s->shards()[replica].data);
        continue;
      }
    }
    Array host = std::holds_alternative<Array>(args[i]) ? std::get<Array>(args[i]) : std::get<ShardedArray>(args[i]).to_host();
    Array slice;
    if (!axis) {
      slice = host;  // broadcast: every replica reads the same immutable value
    } else {
      if (*axis != 0) host = host.moveaxis(*axis, 0);
      if (k > 1) {
        Shape flat{p.mesh.size()};
        flat.insert(flat.end(), host.shape().begin() + k, host.shape().end());
        host = host.reshape(flat);
      }
      // A process-local argument holds only this process's replicas, in order.
      slice = host[p.process_local_args ? replica - p.first_local : replica];
    }
    if (host.device() != device.id) stats.h2d += slice.nbytes();
    Array placed = Array::empty(slice.shape(), slice.dtype(), rt.memory_account(device), device.id);
    std::memcpy(placed.mutable_bytes(), slice.bytes(), slice.nbytes());
    inputs.push_back(std::move(placed));
  }
  return inputs;
}

std::vector<ShardedArray> PmapProgram::operator()(std::vector<PmapArg> args) const {
  Runtime& rt = impl_->options.runtime ? *impl_->options.runtime : Runtime::current();
  std::shared_ptr<Prepared> p = impl_->prepare(rt, args);
  const int n = p->mesh.size();
  detail::Execution execution(rt.impl(), impl_->options.name, p->mesh, p->devices, p->groups);
  execution.on_threads = impl_->options.replica_threads;
  if (impl_->options.shared_products) execution.share(rt.options().shared_products, rt.options().shared_runs);
  const std::vector<int>& local = execution.local_replicas;
  std::vector<std::vector<Array>> inputs(n), outputs(n);
  for (int r : local) inputs[r] = impl_->replica_inputs(rt, *p, args, r);
  if (local.empty()) return {};  // this process holds none of the program's devices
  // The replicas' inputs hold what they need: dropping the arguments leaves a moved-in (donated) shard's
  // buffer held by its replica alone, so a program may write a result into it (run_program's consuming form).
  args.clear();
  execution.run([&](Replica& replica) {
    outputs[replica.index()] = impl_->fn(replica, inputs[replica.index()]);
  });

  // Every replica must return the same structure.
  const std::string& name = impl_->options.name;
  const int r0 = local[0];
  const std::size_t nout = outputs[r0].size();
  for (int r : local) {
    if (outputs[r].size() != nout)
      throw InvalidArgument(name + ": " + execution.replica_name(r) + " returned " + std::to_string(outputs[r].size()) +
                            " outputs but " + execution.replica_name(r0) + " returned " + std::to_string(nout));
    for (std::size_t j = 0; j < nout; ++j)
      if (outputs[r][j].shape() != outputs[r0][j].shape() || outputs[r][j].dtype() != outputs[r0][j].dtype())
        throw InvalidArgument(name + ": output " + std::to_string(j) + " of " + execution.replica_name(r) + " is " +
                              std::string(dtype_name(outputs[r][j].dtype())) + shape_str(outputs[r][j].shape()) +
                              " but " + execution.replica_name(r0) + "'s is " +
                              std::string(dtype_name(outputs[r0][j].dtype())) + shape_str(outputs[r0][j].shape()));
  }
  const auto& out_axes = impl_->options.out_axes;
  if (!out_axes.empty() && out_axes.size() != nout)
    throw InvalidArgument(name + ": out_axes has " + std::to_string(out_axes.size()) + " entries but the function returned " +
                          std::to_string(nout) + " outputs");
  std::vector<ShardedArray> result;
  for (std::size_t j = 0; j < nout; ++j) {
    std::optional<int> out_axis = out_axes.empty() ? std::optional<int>(0) : out_axes[j];
    std::vector<Shard> shards;
    for (int r : local) shards.push_back({p->devices[r], outputs[r][j].with_device(p->devices[r].id)});
    // Across processes each process gets back its own replicas' slices, as JAX's multi-process pmap does.
    const bool all_local = static_cast<int>(local.size()) == n;
    if (!out_axis) {
      result.emplace_back(std::move(shards), Shape{}, &rt, 0);
      continue;
    }
    // The result has the output's axes and the mapped one: a negative out_axes counts from its end (JAX).
    const int local_rank = outputs[r0][j].ndim();
    const int axis = *out_axis < 0 ? *out_axis + local_rank + 1 : *out_axis;
    if (axis < 0 || axis > local_rank || (axis != 0 && p->mesh.num_axes() > 1))
      throw InvalidArgument(name + ": out_axes[" + std::to_string(j) + "] = " + std::to_string(*out_axis) +
                            " is out of range for an output of rank " + std::to_string(local_rank) +
                            (p->mesh.num_axes() > 1 ? " (a multi-axis mesh supports only 0)"
                                                    : " (its result has rank " + std::to_string(local_rank + 1) +
                                                          ": an axis in [" + std::to_string(-local_rank - 1) + ", " +
                                                          std::to_string(local_rank) + "])"));
    result.emplace_back(std::move(shards), all_local ? p->mesh.shape() : Shape{static_cast<std::int64_t>(local.size())}, &rt,
                        axis);
  }
  return result;
}

}  // namespace weft
