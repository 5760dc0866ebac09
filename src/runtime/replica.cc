// Replica context: every collective API funnels into run_collective(), which validates the request, meets
// the other replicas at the rendezvous (where the requests are compared before any data moves), and runs
// the in-process algorithm.
#include "collectives/algorithms.hpp"
#include "collectives/request.hpp"
#include "runtime/internal.hpp"
#include "weft/error.hpp"

namespace weft {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::prod: return "prod";
  }
  return "?";
}

namespace {
using collectives::Kind;
using collectives::Request;

std::string axes_str(const Axes& axes) {
  std::string s = "axes (";
  for (std::size_t i = 0; i < axes.names.size(); ++i) {
    if (i) s += ", ";
    s += axes.names[i];
  }
  return s + ")";
}

Array run_collective(detail::ReplicaState& st, Request& req) {
  detail::Execution& ex = *st.execution;
  req.replica = st.index;
  if (req.groups->num_replicas() != static_cast<int>(ex.devices.size()))
    throw InvalidArgument(ex.replica_name(st.index) + ": " + req.api_name + " over " + req.over + ": the groups " +
                          req.groups->to_string() + " are for " + std::to_string(req.groups->num_replicas()) +
                          " replicas but " + ex.name + " runs " + std::to_string(ex.devices.size()));
  try {
    collectives::validate(req);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(ex.replica_name(st.index) + ": " + e.what());
  }
  auto describe = [&req] { return collectives::describe(req); };
  auto complete = [&ex](std::span<const void* const> payloads) -> std::shared_ptr<void> {
    std::vector<const Request*> requests(payloads.size());
    for (std::size_t i = 0; i < payloads.size(); ++i) requests[i] = static_cast<const Request*>(payloads[i]);
    for (std::size_t i = 1; i < requests.size(); ++i) {
      const std::string diff = collectives::differences(*requests[0], *requests[i]);
      if (!diff.empty())
        throw MismatchError("collective mismatch in " + ex.name + ": " + ex.replica_name(0) + " called " +
                            collectives::describe(*requests[0]) + " but " + ex.replica_name(static_cast<int>(i)) +
                            " called " + collectives::describe(*requests[i]) + ": " + diff);
    }
    auto plan = collectives::make_plan(requests, [&ex](int r) { return ex.runtime.accounts[ex.devices[r].id]; });
    ex.runtime.stats.collectives++;
    ex.runtime.stats.bytes_reduced += plan->bytes_reduced;
    return plan;
  };
  Tracer& tracer = *ex.runtime.tracer;
  const auto begin = tracer.enabled() ? Tracer::Clock::now() : Tracer::Clock::time_point{};
  auto plan = std::static_pointer_cast<collectives::Plan>(ex.rendezvous.arrive(st.index, &req, complete, describe));
  const auto met = tracer.enabled() ? Tracer::Clock::now() : Tracer::Clock::time_point{};
  if (plan->split_work) {
    // Always reach the second barrier, even if our part failed: partners may be reading our input.
    std::exception_ptr error;
    try {
      collectives::execute_part(*plan, st.index);
    } catch (...) {
      error = std::current_exception();
    }
    ex.rendezvous.finish(st.index, describe);
    if (error) std::rethrow_exception(error);
  }
  if (tracer.enabled()) {
    const std::string args = "{\"seq\": " + std::to_string(ex.rendezvous.completed_rounds(st.index)) +
                             ", \"bytes\": " + std::to_string(req.input->nbytes()) + ", \"group\": \"" +
                             req.groups->to_string() + "\", \"execution\": \"" + ex.name + "\"}";
    tracer.span(req.api_name, st.index, begin, Tracer::Clock::now(), args);
    tracer.span("wait", st.index, begin, met, "{}");
  }
  return plan->outputs[st.index].with_device(st.device->id);
}

Request make(detail::ReplicaState& st, Kind kind, const char* api, const Array& x, const Axes& axes,
             const AxisIndexGroups& index_groups, std::source_location loc) {
  Request r;
  r.kind = kind;
  r.api_name = api;
  r.input = &x;
  r.loc = loc;
  r.over = axes_str(axes);
  try {
    r.groups = st.execution->groups.along_axes(st.execution->mesh, axes, index_groups);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(st.execution->replica_name(st.index) + ": " + api + " over " + r.over + ": " + e.what());
  }
  return r;
}

Request make(Kind kind, const char* api, const Array& x, const ReplicaGroups& groups, std::source_location loc) {
  Request r;
  r.kind = kind;
  r.api_name = api;
  r.input = &x;
  r.loc = loc;
  r.groups = std::make_shared<const ReplicaGroups>(groups);
  r.over = "groups " + groups.to_string();
  return r;
}

Array reduce_named(detail::ReplicaState& st, const char* api, ReduceOp op, const Array& x, const Axes& axes,
                   const AxisIndexGroups& groups, std::source_location loc) {
  Request r = make(st, Kind::all_reduce, api, x, axes, groups, loc);
  r.reduce = op;
  return run_collective(st, r);
}
}  // namespace

int Replica::index() const { return state_->index; }
int Replica::num_replicas() const { return static_cast<int>(state_->execution->devices.size()); }
const Device& Replica::device() const { return *state_->device; }
const Mesh& Replica::mesh() const { return state_->execution->mesh; }

int Replica::axis_index(const Axes& axes) const {
  try {
    return mesh().axis_index(state_->index, axes.names);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": axis_index: " + e.what());
  }
}

int Replica::axis_size(const Axes& axes) const {
  try {
    return mesh().axis_size(axes.names);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(state_->execution->replica_name(state_->index) + ": axis_size: " + e.what());
  }
}

ReplicaGroups Replica::groups(const Axes& axes, const AxisIndexGroups& index_groups) const {
  return *state_->execution->groups.along_axes(mesh(), axes, index_groups);
}

Array Replica::psum(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return reduce_named(*state_, "psum", ReduceOp::sum, x, axes, groups, loc);
}
Array Replica::pmean(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return reduce_named(*state_, "pmean", ReduceOp::mean, x, axes, groups, loc);
}
Array Replica::pmax(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return reduce_named(*state_, "pmax", ReduceOp::max, x, axes, groups, loc);
}
Array Replica::pmin(const Array& x, const Axes& axes, const AxisIndexGroups& groups, Loc loc) {
  return reduce_named(*state_, "pmin", ReduceOp::min, x, axes, groups, loc);
}

Array Replica::all_gather(const Array& x, const Axes& axes, int axis, bool tiled, const AxisIndexGroups& groups, Loc loc) {
  Request r = make(*state_, Kind::all_gather, "all_gather", x, axes, groups, loc);
  r.axis = axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::psum_scatter(const Array& x, const Axes& axes, int scatter_dimension, bool tiled,
                            const AxisIndexGroups& groups, Loc loc) {
  Request r = make(*state_, Kind::reduce_scatter, "psum_scatter", x, axes, groups, loc);
  r.axis = scatter_dimension;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::all_to_all(const Array& x, const Axes& axes, int split_axis, int concat_axis, bool tiled,
                          const AxisIndexGroups& groups, Loc loc) {
  Request r = make(*state_, Kind::all_to_all, "all_to_all", x, axes, groups, loc);
  r.axis = split_axis;
  r.concat_axis = concat_axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::ppermute(const Array& x, const Axes& axes, const Permutation& perm, Loc loc) {
  Request r = make(*state_, Kind::ppermute, "ppermute", x, axes, {}, loc);
  r.perm = &perm;
  return run_collective(*state_, r);
}

Array Replica::all_reduce(const Array& x, const ReplicaGroups& groups, ReduceOp op, Loc loc) {
  Request r = make(Kind::all_reduce, "all_reduce", x, groups, loc);
  r.reduce = op;
  return run_collective(*state_, r);
}

Array Replica::all_gather(const Array& x, const ReplicaGroups& groups, int axis, bool tiled, Loc loc) {
  Request r = make(Kind::all_gather, "all_gather", x, groups, loc);
  r.axis = axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::reduce_scatter(const Array& x, const ReplicaGroups& groups, ReduceOp op, int scatter_dimension,
                              bool tiled, Loc loc) {
  Request r = make(Kind::reduce_scatter, "reduce_scatter", x, groups, loc);
  r.reduce = op;
  r.axis = scatter_dimension;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::all_to_all(const Array& x, const ReplicaGroups& groups, int split_axis, int concat_axis, bool tiled,
                          Loc loc) {
  Request r = make(Kind::all_to_all, "all_to_all", x, groups, loc);
  r.axis = split_axis;
  r.concat_axis = concat_axis;
  r.tiled = tiled;
  return run_collective(*state_, r);
}

Array Replica::ppermute(const Array& x, const ReplicaGroups& groups, const Permutation& perm, Loc loc) {
  Request r = make(Kind::ppermute, "ppermute", x, groups, loc);
  r.perm = &perm;
  return run_collective(*state_, r);
}

}  // namespace weft
