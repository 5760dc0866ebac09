// The replica's collective API: every collective (JAX-style over named axes, over explicit groups, and the
// PopXL-style ones on flattened tensors) is a row of the collectives' table (core/collective.hpp) run by
// detail::run_collective (runtime/collective_call.hpp), the one path the program executor takes too: the row's
// form shapes the operand, its kind and reduction make a collectives::Request, and the execution's
// communicator runs it (validation, meeting, agreement, plan, the work: all in collectives/communicator.hpp)
// with the runtime's own concerns around it. The session's operations a
// replica has inside Session::run (variables, remote buffers, host streams) are the session's:
// session_replica.cc.
#include "collectives/communicator.hpp"
#include "collectives/request.hpp"
#include "runtime/collective_call.hpp"

#include "core/log.hpp"
#include "runtime/execution.hpp"
#include "runtime/internal.hpp"
#include "runtime/replica_sharding.hpp"
#include "weft/error.hpp"
#include "weft/program.hpp"
#include "array/trace_hook.hpp"

namespace weft {

namespace {
using collectives::Request;
namespace rows = collective_rows;

// The runtime's share of a collective, around the communicator that runs it (collectives/communicator.hpp):
// the injected faults, the flight recorder, the debug log and the trace.
Array run_request_unmarked(detail::ReplicaState& st, Request& req) {
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

// Every request: its errors are marked as the runtime's (they name the op, and the call site where it helps).
Array run_request(detail::ReplicaState& st, Request& req) {
  try {
    return run_request_unmarked(st, req);
  } catch (...) {
    detail::t_error_from_collective = true;
    if (st.flight) st.flight->fail(current_error());
    throw;
  }
}

// ---- in a traced pmap (weft/jit.hpp): collectives over named axes record equations -------------------------
bool tracing(const detail::ReplicaState& st, const Array& x) { return st.trace != nullptr || x.traced(); }

std::string source_of(CallSite loc) { return std::string(loc.file_name()) + ":" + std::to_string(loc.line()); }

// The equation's parameters of a call of `op`: the arguments its row reads, by their parameter names.
ProgramParams params_of(const CollectiveDescriptor& op, const detail::CollectiveArgs& a) {
  using P = CollectiveParam;
  const auto name = [](P p) { return collective_param_name(p); };
  ProgramParams params;
  if (op.reads(P::axes)) params[name(P::axes)] = a.axes->names;
  if (op.reads(P::groups) && a.index_groups != nullptr && !a.index_groups->empty()) {
    params[name(P::groups)] = *a.index_groups;
  }
  if (op.reads(P::axis)) params[name(P::axis)] = std::int64_t{a.axis};
  if (op.reads(P::split_axis)) params[name(P::split_axis)] = std::int64_t{a.axis};
  if (op.reads(P::concat_axis)) params[name(P::concat_axis)] = std::int64_t{a.concat_axis};
  if (op.reads(P::tiled)) params[name(P::tiled)] = a.tiled;
  if (op.reads(P::perm)) params[name(P::perm)] = *a.perm;
  if (op.reads(P::source)) params[name(P::source)] = std::int64_t{a.source};
  if (op.reads(P::shape)) params[name(P::shape)] = *a.shape;
  return params;
}

// The equation `op[params] x` in the replica's trace (or, for a symbolic x met by a concrete replica, x's).
Array record_collective(detail::ReplicaState& st, const CollectiveDescriptor& op, const Array& x, ProgramParams params,
                        CallSite loc) {
  if (st.trace) return detail::recording_trace(st.trace)->record(op.name, {x}, std::move(params), source_of(loc)).at(0);
  return detail::record(op.name, {x}, std::move(params), source_of(loc)).at(0);
}

// A collective over named axes, the public methods' one body: recorded when traced, run otherwise.
Array named(detail::ReplicaState& st, const CollectiveDescriptor& op, const detail::CollectiveArgs& a, const Array& x,
            CallSite loc) {
  if (tracing(st, x)) [[unlikely]] return record_collective(st, op, x, params_of(op, a), loc);
  return detail::run_collective(st, op, a, &x, loc);
}

// `groups`: null for none (the args view it, so no temporary may stand in).
detail::CollectiveArgs over_axes(const CollectiveDescriptor& op, const Axes& axes,
                                 const AxisIndexGroups* groups = nullptr) {
  detail::CollectiveArgs a;
  a.axes = &axes;
  a.index_groups = groups;
  a.reduce = op.reduce;
  return a;
}

detail::CollectiveArgs over_groups(const CollectiveDescriptor& op, const ReplicaGroups& groups) {
  detail::CollectiveArgs a;
  a.groups = &groups;
  a.reduce = op.reduce;
  return a;
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

// The groups a call runs in: its explicit ones, or those along its named axes (the execution's cache).
std::shared_ptr<const ReplicaGroups> groups_of(detail::ReplicaState& st, const CollectiveDescriptor& op,
                                               const detail::CollectiveArgs& a) {
  if (a.groups != nullptr) return std::make_shared<const ReplicaGroups>(*a.groups);
  static const AxisIndexGroups kNone;
  try {
    return st.execution->groups.along_axes(st.execution->mesh, *a.axes, a.index_groups ? *a.index_groups : kNone);
  } catch (const InvalidArgument& e) {
    detail::t_error_from_collective = true;
    Request r;
    r.axes = &a.axes->names;
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + op.name + " over " + collectives::over(r) +
                          ": " + e.what());
  }
}

// The size of this replica's group, after checking that explicit groups cover the execution's replicas.
int group_size_for(const detail::ReplicaState& st, const ReplicaGroups& groups, const char* api) {
  const detail::Execution& ex = *st.execution;
  if (groups.num_replicas() != ex.num_replicas())
    collectives::check_groups_cover(groups, ex.num_replicas(), ex.replica_name(st.index), api, ex.name);
  return static_cast<int>(groups.members(groups.group_of(st.index)).size());
}

// The row's kind and reduction, the call's arguments, on `x` in `groups`.
Request request(const CollectiveDescriptor& op, const detail::CollectiveArgs& a, const Array& x,
                std::shared_ptr<const ReplicaGroups> groups, CallSite loc) {
  Request r;
  r.kind = op.kind;
  r.api_name = op.name;
  r.reduce = a.reduce;
  r.groups = std::move(groups);
  r.axes = a.axes != nullptr ? &a.axes->names : nullptr;
  r.input = &x;
  r.axis = a.axis;
  r.concat_axis = a.concat_axis;
  r.tiled = a.tiled;
  r.perm = a.perm;
  r.loc = loc;
  return r;
}

int axis_index_of(const detail::ReplicaState& st, const Axes& axes) {
  try {
    return st.execution->mesh.axis_index(st.index, axes.names);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(st.execution->replica_name(st.index) + ": axis_index: " + e.what());
  }
}
}  // namespace

namespace detail {
void throw_traced_axis_index() {
  throw InvalidArgument("Replica::axis_index: converted to int in a traced pmap (pmap(jit(f))): the index is known "
                        "only when the program runs; use it as an int32 Array (x * r.axis_index(\"i\"))");
}

Array run_collective(ReplicaState& st, const CollectiveDescriptor& op, const CollectiveArgs& a, const Array* x,
                     CallSite loc) {
  switch (op.form) {
    case CollectiveForm::direct: {
      Request r = request(op, a, *x, groups_of(st, op, a), loc);
      return run_request(st, r);
    }
    case CollectiveForm::identity:
      return *x;  // Megatron's f: the inputs are equal over each group already, nothing to meet over
    case CollectiveForm::axis_index:
      return Array::scalar(axis_index_of(st, *a.axes), DType::i32);
    case CollectiveForm::flat_scatter: {
      std::shared_ptr<const ReplicaGroups> groups = groups_of(st, op, a);
      const Array flat = flat_padded(*x, group_size_for(st, *groups, op.name));
      Request r = request(op, a, flat, std::move(groups), loc);
      r.axis = 0;
      r.tiled = true;
      return run_request(st, r);
    }
    case CollectiveForm::flat_slice: {
      const std::shared_ptr<const ReplicaGroups> groups = groups_of(st, op, a);
      const int g = group_size_for(st, *groups, op.name);
      const int k = groups->rank_in_group(st.index);
      const Array flat = flat_padded(*x, g);
      const std::int64_t per = flat.size() / g;
      return flat.slice(k * per, (k + 1) * per).copy().with_device(st.device->id);
    }
    case CollectiveForm::gather_shards: {
      if (x->ndim() != 1)
        throw InvalidArgument(st.execution->replica_name(st.index) + ": " + op.name + ": a shard is 1-d, got shape " +
                              shape_str(x->shape()));
      std::shared_ptr<const ReplicaGroups> groups = groups_of(st, op, a);
      const int g = group_size_for(st, *groups, op.name);
      const std::int64_t n = num_elements(*a.shape);
      if (x->size() * g < n)
        throw InvalidArgument(st.execution->replica_name(st.index) + ": " + op.name + ": " + std::to_string(g) +
                              " shards of " + std::to_string(x->size()) + " elements cannot hold a tensor of shape " +
                              shape_str(*a.shape));
      Request r = request(op, a, *x, std::move(groups), loc);
      r.axis = 0;
      r.tiled = true;
      return run_request(st, r).slice(0, n).reshape(*a.shape);
    }
    case CollectiveForm::broadcast: {
      // Every member gets member `source`'s value. The collectives layer has no broadcast of its own, so the
      // group's values are gathered and the source's taken (exact; a dedicated one would move G times less).
      Request r = request(op, a, *x, groups_of(st, op, a), loc);
      r.axis = 0;
      r.tiled = false;
      return run_request(st, r)[a.source];
    }
  }
  throw Error(std::string("weft internal error: collective ") + op.name + " has no form");
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
    const CollectiveDescriptor& op = rows::axis_index;
    return AxisIndex(detail::recording_trace(state_->trace)->record(op.name, {}, params_of(op, over_axes(op, axes)),
                                                                    source_of(loc)).at(0),
                     -1);
  }
  const int index = axis_index_of(*state_, axes);
  return AxisIndex(Array::scalar(index, DType::i32), index);
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
  return named(*state_, rows::psum, over_axes(rows::psum, axes, &groups), x, loc);
}
Array Replica::pmean(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return named(*state_, rows::pmean, over_axes(rows::pmean, axes, &groups), x, loc);
}
Array Replica::pmax(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return named(*state_, rows::pmax, over_axes(rows::pmax, axes, &groups), x, loc);
}
Array Replica::pmin(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return named(*state_, rows::pmin, over_axes(rows::pmin, axes, &groups), x, loc);
}

Array Replica::all_gather(const Array& x, const Axes& axes, int axis, bool tiled, const AxisIndexGroups& groups, Loc loc) {
  detail::CollectiveArgs a = over_axes(rows::all_gather, axes, &groups);
  a.axis = axis;
  a.tiled = tiled;
  return named(*state_, rows::all_gather, a, x, loc);
}

Array Replica::psum_scatter(const Array& x, const Axes& axes, int scatter_dimension, bool tiled,
                            const AxisIndexGroups& groups, Loc loc) {
  detail::CollectiveArgs a = over_axes(rows::psum_scatter, axes, &groups);
  a.axis = scatter_dimension;
  a.tiled = tiled;
  return named(*state_, rows::psum_scatter, a, x, loc);
}

Array Replica::all_to_all(const Array& x, const Axes& axes, int split_axis, int concat_axis, bool tiled,
                          const AxisIndexGroups& groups, Loc loc) {
  detail::CollectiveArgs a = over_axes(rows::all_to_all, axes, &groups);
  a.axis = split_axis;
  a.concat_axis = concat_axis;
  a.tiled = tiled;
  return named(*state_, rows::all_to_all, a, x, loc);
}

Array Replica::ppermute(const Array& x, const Axes& axes, const Permutation& perm, Loc loc) {
  detail::CollectiveArgs a = over_axes(rows::ppermute, axes);
  a.perm = &perm;
  return named(*state_, rows::ppermute, a, x, loc);
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
  const Axes over(axes);
  return params_of(rows::psum, over_axes(rows::psum, over, &groups.groups()));
}

Array Replica::all_reduce(const Array& x, const ReplicaGroups& groups, ReduceOp op, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] {
    return record_collective(*state_, all_reduce_over_axes(op), x, grouped(mesh(), groups, rows::all_reduce.name), loc);
  }
  detail::CollectiveArgs a = over_groups(rows::all_reduce, groups);
  a.reduce = op;
  return detail::run_collective(*state_, rows::all_reduce, a, &x, loc);
}

Array Replica::all_reduce_identical_inputs(const Array& x, const ReplicaGroups& groups, Loc loc) {
  const CollectiveDescriptor& op = rows::all_reduce_identical_inputs;
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, op, x, grouped(mesh(), groups, op.name), loc);
  return detail::run_collective(*state_, op, over_groups(op, groups), &x, loc);
}

Array Replica::all_reduce_identical_grad_inputs(const Array& x, const ReplicaGroups& groups, Loc loc) {
  const CollectiveDescriptor& op = rows::all_reduce_identical_grad_inputs;
  if (tracing(*state_, x)) [[unlikely]] return record_collective(*state_, op, x, grouped(mesh(), groups, op.name), loc);
  return detail::run_collective(*state_, op, over_groups(op, groups), &x, loc);
}

Array Replica::all_gather(const Array& x, const ReplicaGroups& groups, int axis, bool tiled, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("all_gather over ReplicaGroups");
  detail::CollectiveArgs a = over_groups(rows::all_gather, groups);
  a.axis = axis;
  a.tiled = tiled;
  return detail::run_collective(*state_, rows::all_gather, a, &x, loc);
}

Array Replica::reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op, int scatter_dimension,
                              bool tiled, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("reduce_scatter over ReplicaGroups");
  detail::CollectiveArgs a = over_groups(rows::reduce_scatter, groups);
  a.reduce = op;
  a.axis = scatter_dimension;
  a.tiled = tiled;
  return detail::run_collective(*state_, rows::reduce_scatter, a, &x, loc);
}

Array Replica::all_to_all(const Array& x, const ReplicaGroups& groups, int split_axis, int concat_axis, bool tiled,
                          Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("all_to_all over ReplicaGroups");
  detail::CollectiveArgs a = over_groups(rows::all_to_all, groups);
  a.axis = split_axis;
  a.concat_axis = concat_axis;
  a.tiled = tiled;
  return detail::run_collective(*state_, rows::all_to_all, a, &x, loc);
}

Array Replica::ppermute(const Array& x, const ReplicaGroups& groups, const Permutation& perm, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced("ppermute over ReplicaGroups");
  detail::CollectiveArgs a = over_groups(rows::ppermute, groups);
  a.perm = &perm;
  return detail::run_collective(*state_, rows::ppermute, a, &x, loc);
}

// ---- PopXL-style collectives on flattened tensors ---------------------------------------------------------

Array Replica::replicated_reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced(rows::replicated_reduce_scatter.name);
  detail::CollectiveArgs a = over_groups(rows::replicated_reduce_scatter, groups);
  a.reduce = op;
  return detail::run_collective(*state_, rows::replicated_reduce_scatter, a, &x, loc);
}

Array Replica::replica_sharded_slice(const Array& x, const ReplicaGroups& groups, Loc loc) {
  if (tracing(*state_, x)) [[unlikely]] refuse_traced(rows::replica_sharded_slice.name);
  return detail::run_collective(*state_, rows::replica_sharded_slice, over_groups(rows::replica_sharded_slice, groups),
                                &x, loc);
}

Array Replica::gather_shards(const Array& shard, const ReplicaGroups& groups, const Shape& full_shape, Loc loc) {
  if (tracing(*state_, shard)) [[unlikely]] refuse_traced(rows::gather_shards.name);
  detail::CollectiveArgs a = over_groups(rows::gather_shards, groups);
  a.shape = &full_shape;
  return detail::run_collective(*state_, rows::gather_shards, a, &shard, loc);
}

}  // namespace weft
