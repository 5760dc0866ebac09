// The replica's collective API: every collective (JAX-style over named axes, over explicit groups, and the
// PopXL-style ones on flattened tensors) builds a collectives::Request and funnels it into run_collective(),
// which hands it to the execution's communicator (validation, meeting, agreement, plan, the work: all in
// collectives/communicator.hpp) and adds the runtime's own concerns around it. The session's operations a
// replica has inside Session::run (variables, remote buffers, host streams) are the session's:
// session_replica.cc.
#include "collectives/communicator.hpp"
#include "collectives/request.hpp"

#include "core/log.hpp"
#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "runtime/replica_sharding.hpp"
#include "weft/error.hpp"
#include "weft/program.hpp"
#include "array/trace_hook.hpp"

namespace weft {

namespace {
using collectives::Kind;
using collectives::Request;


// The runtime's share of a collective, around the communicator that runs it (collectives/communicator.hpp):
// the injected faults, the flight recorder, the debug log and the trace.
Array run_collective_unmarked(detail::ReplicaState& st, Request& req) {
  detail::Execution& ex = *st.execution;
  collectives::Communicator& comm = ex.communicator;
  req.replica = st.index;
  // WEFT_FAULT (runtime/fault.hpp): null unless a fault plan is set. A mismatch fault's altered input lives here.
  std::optional<Array> injected;
  if (ex.runtime.faults) [[unlikely]] ex.runtime.faults->at_collective(st, req, injected);
  // WEFT_FLIGHT_RECORDER (runtime/flight_recorder.hpp): entered after the fault hook, so a replica stuck
  // before its collective has no record of it. A replica entering an execution already aborted never meets
  // the others at this collective: the dump says so.
  if (st.flight)
    st.flight->start(ex.serial, ex.name, comm.own_completed_rounds(st.local), req.api_name, req.loc.file_name(),
                     req.loc.line(), req.input->dtype(), req.input->size(), req.groups, st.index, ex.num_replicas(),
                     comm.aborted());
  Tracer& tracer = *ex.runtime.tracer;
  const auto begin = tracer.enabled() ? Tracer::Clock::now() : Tracer::Clock::time_point{};
  Tracer::Clock::time_point met{};
  Array out = comm.run(st.local, req, tracer.enabled() ? &met : nullptr);
  if (st.flight) st.flight->complete();
  // WEFT_DEBUG=TRACE (R22): one line per collective; otherwise one relaxed load.
  if (log_enabled(LogLevel::debug, LogSubsys::coll)) [[unlikely]]
    log(LogLevel::debug, LogSubsys::coll,
        ex.name + " #" + std::to_string(ex.serial) + ": seq " + std::to_string(comm.own_completed_rounds(st.local) - 1) +
            " " + collectives::describe(req) + " completed");
  if (tracer.enabled()) {
    const std::string args = "{\"seq\": " + std::to_string(comm.completed_rounds(st.local)) +
                             ", \"bytes\": " + std::to_string(req.input->nbytes()) + ", \"group\": \"" +
                             req.groups->to_string() + "\", \"execution\": \"" + ex.name + "\"}";
    tracer.span(req.api_name, st.index, begin, Tracer::Clock::now(), args);
    tracer.span("wait", st.index, begin, met, "{}");
  }
  return out.with_device(st.device->id);
}

// Every collective: its errors are marked as the runtime's (they name the op, and the call site where it helps).
Array run_collective(detail::ReplicaState& st, Request& req) {
  try {
    return run_collective_unmarked(st, req);
  } catch (...) {
    detail::t_error_from_collective = true;
    if (st.flight) st.flight->fail(current_error());
    throw;
  }
}

// ---- in a traced pmap (weft/jit.hpp): collectives over named axes record equations -------------------------
bool tracing(const detail::ReplicaState& st, const Array& x) { return st.trace != nullptr || x.traced(); }

std::string source_of(CallSite loc) { return std::string(loc.file_name()) + ":" + std::to_string(loc.line()); }

ProgramParams named(const Axes& axes, const AxisIndexGroups& groups = {}) {
  ProgramParams params{{"axes", axes.names}};
  if (!groups.empty()) params["groups"] = groups;
  return params;
}

// The equation `op[params] x` in the replica's trace (or, for a symbolic x met by a concrete replica, x's).
Array record_collective(detail::ReplicaState& st, const char* op, const Array& x, ProgramParams params, CallSite loc) {
  if (st.trace) return st.trace->record(op, {x}, std::move(params), source_of(loc)).at(0);
  return detail::record(op, {x}, std::move(params), source_of(loc)).at(0);
}

[[noreturn]] void refuse_traced(const char* api) {
  throw InvalidArgument(std::string(api) +
                        ": not traced yet: a traced pmap (pmap(jit(f))) records the collectives over named axes "
                        "(psum pmean pmax pmin all_gather psum_scatter all_to_all ppermute axis_index); call this "
                        "one from a pmap of the function without jit");
}

[[noreturn]] void refuse_unknown(const char* api) {
  throw InvalidArgument(std::string("Replica::") + api +
                        ": the replica is traced (pmap(jit(f))): which replica runs is known only when the program "
                        "runs; use r.axis_index(axes), an int32 Array, to compute with its position");
}

Request make(detail::ReplicaState& st, Kind kind, const char* api, const Array& x, const Axes& axes,
             const AxisIndexGroups& index_groups, CallSite loc) {
  Request r;
  r.kind = kind;
  r.api_name = api;
  r.input = &x;
  r.loc = loc;
  r.axes = &axes.names;
  try {
    r.groups = st.execution->groups.along_axes(st.execution->mesh, axes, index_groups);
  } catch (const InvalidArgument& e) {
    detail::t_error_from_collective = true;
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + " over " + collectives::over(r) + ": " + e.what());
  }
  return r;
}

Request make(Kind kind, const char* api, const Array& x, const ReplicaGroups& groups, CallSite loc) {
  Request r;
  r.kind = kind;
  r.api_name = api;
  r.input = &x;
  r.loc = loc;
  r.groups = std::make_shared<const ReplicaGroups>(groups);
  return r;
}

Array reduce_named(detail::ReplicaState& st, const char* api, ReduceOp op, const Array& x, const Axes& axes,
                   const AxisIndexGroups& groups, CallSite loc) {
  Request r = make(st, Kind::all_reduce, api, x, axes, groups, loc);
  r.reduce = op;
  return run_collective(st, r);
}
}  // namespace

namespace detail {
void throw_traced_axis_index() {
  throw InvalidArgument("Replica::axis_index: converted to int in a traced pmap (pmap(jit(f))): the index is known "
                        "only when the program runs; use it as an int32 Array (x * r.axis_index(\"i\"))");
}
}  // namespace detail

int Replica::index() const {
  if (state_->trace) [[unlikely]] refuse_unknown("index");
  return state_->index;
}
int Replica::num_replicas() const {
  if (state_->trace) [[unlikely]] return state_->trace->mesh().size();
  return static_cast<int>(state_->execution->devices.size());
}
const Device& Replica::device() const {
  if (state_->trace) [[unlikely]] refuse_unknown("device");
  return *state_->device;
}
const Mesh& Replica::mesh() const {
  if (state_->trace) [[unlikely]] return state_->trace->mesh();
  return state_->execution->mesh;
}

AxisIndex Replica::axis_index(const Axes& axes, Loc loc) const {
  if (state_->trace) [[unlikely]] {
    return AxisIndex(state_->trace->record("axis_index", {}, named(axes), source_of(loc)).at(0), -1);
  }
  try {
    const int index = mesh().axis_index(state_->index, axes.names);
    return AxisIndex(Array::scalar(index, DType::i32), index);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": axis_index: " + e.what());
  }
}

int Replica::axis_size(const Axes& axes) const {
  try {
    return mesh().axis_size(axes.names);
  } catch (const InvalidArgument& e) {
    if (state_->trace) throw InvalidArgument(std::string("axis_size: ") + e.what());
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": axis_size: " + e.what());
  }
}

ReplicaGroups Replica::groups(const Axes& axes, const AxisIndexGroups& index_groups) const {
  if (state_->trace) [[unlikely]] return index_groups.empty() ? ReplicaGroups::along_axes(mesh(), axes.names)
                                                              : ReplicaGroups::along_axes(mesh(), axes.names).subdivide(index_groups);
  return *state_->execution->groups.along_axes(mesh(), axes, index_groups);
}

Array Replica::psum(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, "psum", x, named(axes, groups), loc);
  return reduce_named(*state_, "psum", ReduceOp::sum, x, axes, groups, loc);
}
Array Replica::pmean(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, "pmean", x, named(axes, groups), loc);
  return reduce_named(*state_, "pmean", ReduceOp::mean, x, axes, groups, loc);
}
Array Replica::pmax(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, "pmax", x, named(axes, groups), loc);
  return reduce_named(*state_, "pmax", ReduceOp::max, x, axes, groups, loc);
}
Array Replica::pmin(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, "pmin", x, named(axes, groups), loc);
  return reduce_named(*state_, "pmin", ReduceOp::min, x, axes, groups, loc);
}

Array Replica::all_gather(const Array& x, const Axes& axes, int axis, bool tiled, const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    ProgramParams params = named(axes, groups);
    params["axis"] = std::int64_t{axis};
    params["tiled"] = tiled;
    return record_collective(*state_, "all_gather", x, std::move(params), loc);
  }
  Request r = make(*state_, Kind::all_gather, "all_gather", x, axes, groups, loc);
  r.axis = axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::psum_scatter(const Array& x, const Axes& axes, int scatter_dimension, bool tiled,
                            const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    ProgramParams params = named(axes, groups);
    params["axis"] = std::int64_t{scatter_dimension};
    params["tiled"] = tiled;
    return record_collective(*state_, "psum_scatter", x, std::move(params), loc);
  }
  Request r = make(*state_, Kind::reduce_scatter, "psum_scatter", x, axes, groups, loc);
  r.axis = scatter_dimension;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::all_to_all(const Array& x, const Axes& axes, int split_axis, int concat_axis, bool tiled,
                          const AxisIndexGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    ProgramParams params = named(axes, groups);
    params["split_axis"] = std::int64_t{split_axis};
    params["concat_axis"] = std::int64_t{concat_axis};
    params["tiled"] = tiled;
    return record_collective(*state_, "all_to_all", x, std::move(params), loc);
  }
  Request r = make(*state_, Kind::all_to_all, "all_to_all", x, axes, groups, loc);
  r.axis = split_axis;
  r.concat_axis = concat_axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::ppermute(const Array& x, const Axes& axes, const Permutation& perm, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    ProgramParams params = named(axes);
    params["perm"] = perm;
    return record_collective(*state_, "ppermute", x, std::move(params), loc);
  }
  Request r = make(*state_, Kind::ppermute, "ppermute", x, axes, {}, loc);
  r.perm = &perm;
  return run_collective(*state_, r);
}

// Explicit groups in a program's terms: over the mesh's one axis (a replica's index along it is its global
// index), the groups' members as index groups. JAX's axis_index_groups apply to a single axis, so a
// multi-axis mesh (a nested pmap) is refused; a session's mesh has one axis.
ProgramParams grouped(const Mesh& mesh, const ReplicaGroups& groups, const char* api) {
  if (mesh.num_axes() != 1) {
    throw InvalidArgument(std::string(api) + " over ReplicaGroups is traced on a 1-d mesh only (a session's, a 1-d "
                          "pmap): its groups become axis_index_groups, which apply to a single axis; this mesh has " +
                          std::to_string(mesh.num_axes()) + " axes");
  }
  if (groups.num_replicas() != mesh.size()) {
    throw InvalidArgument(std::string(api) + ": the groups partition " + std::to_string(groups.num_replicas()) +
                          " replicas but the mesh has " + std::to_string(mesh.size()));
  }
  std::vector<std::string> axes;
  for (const MeshAxis& axis : mesh.axes()) axes.push_back(axis.name);
  return named(Axes(axes), groups.groups());
}

Array Replica::all_reduce(const Array& x, const ReplicaGroups& groups, ReduceOp op, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    static const char* const ops[] = {"psum", "pmean", "pmax", "pmin", "pprod"};  // ReduceOp's order
    return record_collective(*state_, ops[static_cast<int>(op)], x, grouped(mesh(), groups, "all_reduce"), loc);
  }
  Request r = make(Kind::all_reduce, "all_reduce", x, groups, loc);
  r.reduce = op;
  return run_collective(*state_, r);
}

Array Replica::all_reduce_identical_inputs(const Array& x, const ReplicaGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    return record_collective(*state_, "all_reduce_identical_inputs", x,
                             grouped(mesh(), groups, "all_reduce_identical_inputs"), loc);
  }
  return x;  // the forward pass of f is the identity: nothing to meet over
}

Array Replica::all_reduce_identical_grad_inputs(const Array& x, const ReplicaGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    return record_collective(*state_, "all_reduce_identical_grad_inputs", x,
                             grouped(mesh(), groups, "all_reduce_identical_grad_inputs"), loc);
  }
  return all_reduce(x, groups, ReduceOp::sum, loc);
}

Array Replica::all_gather(const Array& x, const ReplicaGroups& groups, int axis, bool tiled, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("all_gather over ReplicaGroups");
  Request r = make(Kind::all_gather, "all_gather", x, groups, loc);
  r.axis = axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op, int scatter_dimension,
                              bool tiled, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("reduce_scatter over ReplicaGroups");
  Request r = make(Kind::reduce_scatter, "reduce_scatter", x, groups, loc);
  r.reduce = op;
  r.axis = scatter_dimension;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::all_to_all(const Array& x, const ReplicaGroups& groups, int split_axis, int concat_axis, bool tiled,
                          Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("all_to_all over ReplicaGroups");
  Request r = make(Kind::all_to_all, "all_to_all", x, groups, loc);
  r.axis = split_axis;
  r.concat_axis = concat_axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::ppermute(const Array& x, const ReplicaGroups& groups, const Permutation& perm, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("ppermute over ReplicaGroups");
  Request r = make(Kind::ppermute, "ppermute", x, groups, loc);
  r.perm = &perm;
  return run_collective(*state_, r);
}

// ---- PopXL-style collectives on flattened tensors ---------------------------------------------------------
namespace {
int group_size_for(const detail::ReplicaState& st, const ReplicaGroups& groups, const char* api) {
  const detail::Execution& ex = *st.execution;
  if (groups.num_replicas() != ex.num_replicas())
    collectives::check_groups_cover(groups, ex.num_replicas(), ex.replica_name(st.index), api, ex.name);
  return static_cast<int>(groups.members(groups.group_of(st.index)).size());
}
}  // namespace

Array Replica::replicated_reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("replicated_reduce_scatter");
  const int g = group_size_for(*state_, groups, "replicated_reduce_scatter");
  Array flat = detail::flat_padded(x, g);
  Request r = make(Kind::reduce_scatter, "replicated_reduce_scatter", flat, groups, loc);
  r.reduce = op;
  r.tiled = true;
  return run_collective(*state_, r);
}

Array Replica::replica_sharded_slice(const Array& x, const ReplicaGroups& groups, Loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("replica_sharded_slice");
  const int g = group_size_for(*state_, groups, "replica_sharded_slice");
  const int k = groups.rank_in_group(state_->index);
  Array flat = detail::flat_padded(x, g);
  const std::int64_t per = flat.size() / g;
  return flat.slice(k * per, (k + 1) * per).copy().with_device(state_->device->id);
}

Array Replica::gather_shards(const Array& shard, const ReplicaGroups& groups, const Shape& full_shape, Loc loc) {
  if (tracing(*state_, shard)) [[unlikely]] refuse_traced("gather_shards");
  if (shard.ndim() != 1)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": gather_shards: a shard is 1-d, got shape " +
                          shape_str(shard.shape()));
  const int g = group_size_for(*state_, groups, "gather_shards");
  const std::int64_t n = num_elements(full_shape);
  if (shard.size() * g < n)
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": gather_shards: " + std::to_string(g) +
                          " shards of " + std::to_string(shard.size()) + " elements cannot hold a tensor of shape " +
                          shape_str(full_shape));
  Request r = make(Kind::all_gather, "gather_shards", shard, groups, loc);
  r.tiled = true;
  Array gathered = run_collective(*state_, r);
  return gathered.slice(0, n).reshape(full_shape);
}

}  // namespace weft
