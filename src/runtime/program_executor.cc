// The executor: runs a built weft::Program (weft/program.hpp) as one replica, as an instruction loop on the
// replica's own fiber or thread. Array equations call their resolved kernels; collectives take the Replica's
// one collective path (runtime/collective_call.hpp), driven by their op's row of the collectives' table
// (core/collective.hpp) and the arguments read from their parameters once per program: the same funnel as
// hand-written code (so their mismatch, timeout and stall reports are the usual ones, at the user's traced
// source line). The session effects go through the Replica too (host and remote transfers,
// variables: by the names a session's run gives its handles); each buffer is dropped right after its last
// use (the program's liveness); runs of elementwise equations over large arrays are evaluated block by block
// (fusion.hpp); products by a weight the local replicas share may run as one (shared_products.hpp). An error
// in an equation keeps its kind and gains the equation and its source line.
#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "core/collective.hpp"
#include "program/op_registry.hpp"
#include "program/printer.hpp"
#include "program/program_impl.hpp"
#include "program/shared_products.hpp"
#include "program/shared_runs.hpp"
#include "program/verifier.hpp"
#include "runtime/collective_call.hpp"
#include "runtime/execution.hpp"
#include "runtime/shared_products.hpp"
#include "runtime/shared_runs.hpp"
#include "weft/error.hpp"
#include "weft/pmap.hpp"
#include "weft/replica.hpp"
#include "weft/session.hpp"

namespace weft {
namespace {

using program::Equation;
using program::Params;
using program::Prim;

// The runtime keeps call sites in its histories for the process's life: their text is interned (as many
// strings as distinct traced source files).
const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> texts;
  std::lock_guard lock(mutex);
  return texts.insert(text).first->c_str();
}

// "train.py:42" as a CallSite; the line is what follows the last ':'.
CallSite site_of(const Equation& eq) {
  const std::size_t colon = eq.source.rfind(':');
  if (eq.source.empty() || colon == std::string::npos) return CallSite(interned(eq.source.empty() ? "<program>" : eq.source), 0);
  unsigned line = 0;
  for (std::size_t i = colon + 1; i < eq.source.size(); ++i) {
    if (eq.source[i] < '0' || eq.source[i] > '9') return CallSite(interned(eq.source), 0);
    line = line * 10 + static_cast<unsigned>(eq.source[i] - '0');
  }
  return CallSite(interned(eq.source.substr(0, colon)), line);
}

// One collective equation's arguments, read from its parameters once per program (not per run): those its
// row (core/collective.hpp) reads, by their parameter names.
struct CollectiveCall {
  const CollectiveDescriptor* op = nullptr;  // null: a session effect
  CallSite site;
  Axes axes{std::vector<std::string>{}};
  AxisIndexGroups groups;
  ReduceOp reduce = ReduceOp::sum;
  int axis = 0;
  int concat_axis = 0;
  bool tiled = false;
  Permutation perm;
  int source = 0;
  Shape shape;

  void read(const CollectiveDescriptor& row, const Params& p) {
    using P = CollectiveParam;
    const auto name = [](P q) { return std::string(collective_param_name(q)); };
    op = &row;
    if (row.reads(P::axes)) axes = Axes(program::param_axes(p, name(P::axes)));
    const program::Groups* g = row.reads(P::groups) ? program::param_if<program::Groups>(p, name(P::groups)) : nullptr;
    if (g != nullptr) groups = *g;
    reduce = row.reads(P::op) && p.contains(name(P::op)) ? reduce_op_from_name(program::param_string(p, name(P::op)))
                                                          : row.reduce;
    if (row.reads(P::axis)) axis = static_cast<int>(program::param_int(p, name(P::axis), 0));
    if (row.reads(P::split_axis)) axis = static_cast<int>(program::param_int(p, name(P::split_axis), 0));
    if (row.reads(P::concat_axis)) concat_axis = static_cast<int>(program::param_int(p, name(P::concat_axis), 0));
    if (row.reads(P::tiled)) tiled = program::param_flag(p, name(P::tiled));
    if (row.reads(P::perm)) perm = program::param<Permutation>(p, name(P::perm));
    if (row.reads(P::source)) source = static_cast<int>(program::param_int(p, name(P::source)));
    if (row.reads(P::shape)) {
      const auto& dims = program::param_ints(p, name(P::shape));
      shape.assign(dims.begin(), dims.end());
    }
  }

  detail::CollectiveArgs args() const {
    detail::CollectiveArgs a;
    a.axes = &axes;
    a.index_groups = &groups;
    a.reduce = reduce;
    a.axis = axis;
    a.concat_axis = concat_axis;
    a.tiled = tiled;
    a.perm = &perm;
    a.source = source;
    a.shape = &shape;
    return a;
  }
};

// A segment of shared runs is worth the replicas' meeting (two barriers, ~10 us each across cores here) from
// this many elements of runs on: 64 Ki elements of AdamW's update take ~0.5 ms a replica.
constexpr std::int64_t kMinSharedElements = std::int64_t{1} << 16;

// Per equation, its collective's call (unused for array equations) and the product the local replicas may
// share: prepared on a program's first run.
struct Prepared {
  std::vector<CollectiveCall> calls;
  std::vector<std::optional<program::SharedProduct>> shared;
  std::vector<program::SharedSegment> segments;  // the shared runs' segments, in step order
  // A collective's parameter value refused while preparing (PopXL's reduction name) and its equation: every run
  // throws it. Kept, not thrown inside std::call_once: libstdc++'s call_once over pthread_once leaves the flag
  // locked when its function throws (GCC bug 66146), and the other replicas would wait on it forever.
  std::exception_ptr error;
  std::size_t error_at = 0;
};

[[noreturn]] void rethrow_at(const program::Program& prog, std::size_t index);

const Prepared& prepared(const Program::Impl& impl) {
  std::call_once(impl.executor_once, [&impl] {
    auto p = std::make_shared<Prepared>();
    const program::Program& prog = impl.program;
    p->calls.resize(prog.equations.size());
    std::vector<bool> computes_locally(prog.equations.size());
    for (std::size_t i = 0; i < prog.equations.size(); ++i) computes_locally[i] = impl.kernels[i] != nullptr;
    p->shared = program::find_shared_products(prog, computes_locally);
    p->segments = program::find_shared_segments(prog, impl.steps, computes_locally, kMinSharedElements);
    for (std::size_t i = 0; i < prog.equations.size(); ++i) {
      if (impl.kernels[i] != nullptr) continue;
      const Equation& eq = prog.equations[i];
      CollectiveCall& c = p->calls[i];
      c.site = site_of(eq);
      try {
        if (const CollectiveDescriptor* row = eq.info().collective) c.read(*row, eq.params);
      } catch (const Error&) {
        if (!p->error) {
          p->error = std::current_exception();
          p->error_at = i;
        }
      }
    }
    impl.executor_data = std::move(p);
  });
  const auto& prep = *static_cast<const Prepared*>(impl.executor_data.get());
  if (prep.error) {
    try {
      std::rethrow_exception(prep.error);
    } catch (const Error&) {
      rethrow_at(impl.program, prep.error_at);  // a bad parameter value names its equation, as when it runs
    }
  }
  return prep;
}

template <class Handle>
const Handle& handle(const std::map<std::string, Handle>* handles, const Equation& eq, const char* key,
                     const char* kind) {
  if (handles == nullptr) {
    throw InvalidArgument(eq.name() + " is a session effect: it runs only in a session's run (Session::run of a program)");
  }
  const std::string& name = program::param_string(eq.params, key);
  auto it = handles->find(name);
  if (it == handles->end()) {
    throw InvalidArgument(eq.name() + ": the session's run was given no " + kind + " named '" + name + "'");
  }
  return it->second;
}

// The session effects (host and remote transfers, variables): the equations the replica runs that are not
// collectives. Returns their results (none for the stores).
std::vector<Array> run_session_op(Replica& r, const Equation& eq, const std::vector<Array>& in,
                                  const ProgramHandles* handles) {
  const program::Prim op = eq.prim();
  if (op == Prim::host_load || op == Prim::host_store) {
    const HostStream& stream = handle(handles ? &handles->streams : nullptr, eq, "stream", "stream");
    if (op == Prim::host_load) return {r.host_load(stream)};
    r.host_store(stream, in[0]);
    return {};
  }
  if (op == Prim::remote_load || op == Prim::remote_store) {
    const RemoteBuffer& buffer = handle(handles ? &handles->buffers : nullptr, eq, "buffer", "remote buffer");
    if (op == Prim::remote_load) return {in.empty() ? r.remote_load(buffer, 0) : r.remote_load(buffer, in[0])};
    if (in.size() > 1) {
      r.remote_store(buffer, in[1], in[0]);
    } else {
      r.remote_store(buffer, 0, in[0]);
    }
    return {};
  }
  if (op == Prim::variable_read || op == Prim::variable_update) {
    const Variable& variable = handle(handles ? &handles->variables : nullptr, eq, "variable", "variable");
    if (op == Prim::variable_read) return {r.value(variable)};
    if (in[0].dtype() != variable.dtype() || in[0].shape() != r.value(variable).shape()) {
      throw InvalidArgument("variable_update: variable '" + variable.name() + "' holds " +
                            std::string(dtype_name(variable.dtype())) + shape_str(r.value(variable).shape()) +
                            " on this replica, not " + std::string(dtype_name(in[0].dtype())) + shape_str(in[0].shape()));
    }
    r.value(variable) = in[0];
    return {};
  }
  throw Error("weft internal error: no kernel and no replica operation for op '" + eq.name() + "'");
}

// The same kind of error, with the equation in front: a MismatchError stays one.
[[noreturn]] void rethrow_at(const program::Program& prog, std::size_t index) {
  const std::string where = program::equation_error_prefix(prog, index);
  try {
    throw;
  } catch (const MismatchError& e) {
    throw MismatchError(where + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(where + e.what());
  } catch (const AbortedError& e) {
    throw AbortedError(where + e.what());
  } catch (const PeerLostError& e) {
    throw PeerLostError(where + e.what());
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(where + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + e.what());
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
}

// A collective's result against the type its equation declares, as kernels' results are checked: what the
// program holds was typed by the op's rule for the program's mesh, and a result of another shape would flow
// on into the next equations (a program built for one mesh run on replicas of another gathers their count).
void check_collective_result(const Replica& replica, const program::Program& prog, const Array& got,
                             const ValueType& want) {
  if (got.dtype() == want.dtype && got.shape() == want.shape) return;
  const ValueType gave{got.dtype(), std::vector<std::int64_t>(got.shape().begin(), got.shape().end()), {}};
  std::string message = "replica " + std::to_string(replica.index()) + ": the collective gave " +
                        program::type_text(gave) + " where its equation declares " + program::type_text(want);
  if (replica.mesh().to_string() != prog.mesh.to_string()) {
    message += " (the program was built for mesh " + prog.mesh.to_string() + ", the replica runs on mesh " +
               replica.mesh().to_string() + ")";
  }
  throw Error(message);
}

void check_inputs(const program::Program& prog, std::span<const Array> inputs) {
  if (inputs.size() != prog.inputs.size()) {
    throw InvalidArgument("run_program: the program takes " + std::to_string(prog.inputs.size()) + " input(s), got " +
                          std::to_string(inputs.size()));
  }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const ValueType& want = prog.types[prog.inputs[k]];
    if (inputs[k].dtype() != want.dtype || inputs[k].shape() != want.shape) {
      throw InvalidArgument("run_program: input " + std::to_string(k) + " is " + std::string(dtype_name(inputs[k].dtype())) +
                            shape_str(inputs[k].shape()) + " but the program was traced for " + program::type_text(want));
    }
  }
}

// Segment `index` of shared runs (WEFT_SHARED_RUNS) as local replica `local`: the replicas meet once and split
// its shared runs; its other steps run through `run_step` (whose errors already name their equation).
void run_shared_segment(const Program::Impl& impl, detail::RunSharing& runs, int local, std::size_t index,
                        const program::SharedSegment& seg, std::vector<std::optional<Array>>& values,
                        const std::function<void(std::size_t)>& run_step) {
  const program::Program& prog = impl.program;
  const auto release = [&](std::size_t step_index) {
    const program::Step& step = impl.steps[step_index];
    for (std::size_t i = step.first; i < step.first + step.count; ++i)
      for (program::ValueId id : impl.liveness.dies_after[i]) values[id].reset();
  };
  bool own_step_failed = false;
  const auto own_step = [&](std::size_t t) {
    try {
      run_step(t);
    } catch (...) {
      own_step_failed = true;
      throw;
    }
  };
  const std::size_t first = impl.steps[seg.first].first;
  const program::Step& last = impl.steps[seg.end - 1];
  try {
    runs.run_segment(local, &impl, index, prog, impl.steps, seg, values, own_step, release, [&] {
      return "shared runs of equations " + std::to_string(first) + " to " + std::to_string(last.first + last.count - 1);
    });
  } catch (const Error&) {
    if (own_step_failed) throw;
    rethrow_at(prog, first);
  }
}

std::vector<Array> execute(const Program& program, Replica* replica, std::span<const Array> inputs,
                           std::vector<Array>* owned, const ProgramHandles* handles);

// A control-flow equation's sub-programs (a cond's branch, a loop's body) run as programs of their own on the
// same replica: their collectives meet the other replicas' as the outer program's do.
struct SubRunner final : program::SubProgramRunner {
  SubRunner(Replica* r, const ProgramHandles* h) : replica(r), handles(h) {}
  std::vector<Array> run(const Program& program, std::vector<Array> inputs) override {
    return execute(program, replica, inputs, &inputs, handles);
  }
  // A pmap equation: the runtime's pmap engine runs the body on every replica of its axis, as weft.pmap does.
  std::vector<Array> run_mapped(const Program& body, const std::vector<Array>& inputs,
                                const std::vector<std::int64_t>& in_axes,
                                const std::vector<std::int64_t>& out_axes) override {
    if (replica != nullptr) {
      throw InvalidArgument("pmap: a pmap equation runs outside any replica, and this program runs on replica " +
                            std::to_string(replica->index()) + " (nest the axes instead: pmap(pmap(f)))");
    }
    PmapOptions options;
    if (body.mesh().num_axes() == 1) {
      options.axis = body.mesh().axes()[0].name;
    } else {
      options.mesh = body.mesh().axes();  // the operands' leading axes are the mesh's
    }
    const auto axis_of = [](std::int64_t a) { return a >= 0 ? std::optional<int>(static_cast<int>(a)) : std::nullopt; };
    for (const std::int64_t a : in_axes) options.in_axes.push_back(axis_of(a));
    for (const std::int64_t a : out_axes) options.out_axes.push_back(axis_of(a));
    options.name = "pmap";
    options.shared_products = true;  // every replica runs this one program
    const PmapProgram engine(
        [&body](Replica& r, std::span<Array> in) {
          return run_program(body, r, std::vector<Array>(std::make_move_iterator(in.begin()), std::make_move_iterator(in.end())));
        },
        std::move(options));
    std::vector<ShardedArray> results = engine(std::vector<PmapArg>(inputs.begin(), inputs.end()));
    std::vector<Array> out;
    out.reserve(results.size());
    for (const ShardedArray& r : results) out.push_back(r.to_host());
    return out;
  }
  Replica* replica;
  const ProgramHandles* handles;
};

// `owned`, when given, is `inputs` itself, handed over: its arrays are moved into the run (see run_program's
// consuming form).
std::vector<Array> execute(const Program& program, Replica* replica, std::span<const Array> inputs,
                           std::vector<Array>* owned, const ProgramHandles* handles) {
  const Program::Impl& impl = program.impl();
  const program::Program& prog = impl.program;
  check_inputs(prog, inputs);
  const Prepared& prep = prepared(impl);
  // Optional: a default Array allocates its shape (0,), and a run makes and drops one per value.
  std::vector<std::optional<Array>> values(prog.types.size());
  for (std::size_t k = 0; k < prog.inputs.size(); ++k) {
    values[prog.inputs[k]] = owned ? std::move((*owned)[k]) : inputs[k];
  }
  for (std::size_t k = 0; k < prog.constants.size(); ++k) values[prog.constants[k]] = prog.constant_values[k];
  for (program::ValueId id : impl.liveness.unused_inputs) values[id].reset();
  std::vector<Array> in;
  detail::ProductSharing* sharing = replica != nullptr && replica->state().execution != nullptr
                                        ? replica->state().execution->products.get()
                                        : nullptr;
  const auto run_step = [&](std::size_t step_index) {
    const program::Step& step = impl.steps[step_index];
    // A widened bf16 product the replicas share (WEFT_SHARED_PRODUCTS) runs as its two equations: the
    // shared product first.
    const bool shared_product = step.widened_matmul && sharing != nullptr && prep.shared[step.first];
    if (step.count > 1 && !shared_product) {
      try {
        program::run_fused(prog, impl.kernels, step, values);
      } catch (const Error&) {
        rethrow_at(prog, step.first);
      }
      for (std::size_t i = step.first; i < step.first + step.count; ++i) {
        for (program::ValueId id : impl.liveness.dies_after[i]) values[id].reset();
      }
      return;
    }
    for (std::size_t i = step.first; i < step.first + step.count; ++i) {
      const Equation& eq = prog.equations[i];
      try {
        if (impl.kernels[i] != nullptr) {
          in.clear();
          for (program::ValueId id : eq.inputs) in.push_back(*values[id]);
          std::vector<Array> out;
          if (sharing != nullptr && prep.shared[i]) {
            out.push_back(sharing->multiply(
                replica->state().local, &impl, i, eq.source, prep.shared[i]->weight_axes, in[0], in[1],
                program::param_flag(eq.params, "transpose_b"),
                [&] {
                  return "a shared matmul(" + shape_str(in[0].shape()) + ", " + shape_str(in[1].shape()) + ") at " +
                         (eq.source.empty() ? "equation " + std::to_string(i) : eq.source);
                }));
          } else {
            out = impl.kernels[i](in, eq.params);
          }
          for (std::size_t k = 0; k < eq.outputs.size(); ++k) {
            const ValueType& want = prog.types[eq.outputs[k]];
            if (out[k].dtype() != want.dtype || out[k].shape() != want.shape) {
              throw Error("weft internal error: the kernel gave " + std::string(dtype_name(out[k].dtype())) +
                          shape_str(out[k].shape()) + " where the op's rule gives " + program::type_text(want));
            }
            values[eq.outputs[k]] = std::move(out[k]);
          }
        } else if (const program::ControlKernel control = eq.info().control) {
          in.clear();
          for (program::ValueId id : eq.inputs) in.push_back(*values[id]);
          SubRunner runner{replica, handles};
          std::vector<Array> out = control(in, eq.params, runner);
          for (std::size_t k = 0; k < eq.outputs.size(); ++k) values[eq.outputs[k]] = std::move(out.at(k));
        } else {
          if (replica == nullptr) {
            throw InvalidArgument(eq.name() + " needs replicas to meet, and run_program was given none (collectives run "
                                  "inside pmap or a session)");
          }
          const CollectiveCall& call = prep.calls[i];
          if (call.op != nullptr) {
            Array out = detail::run_collective(replica->state(), *call.op, call.args(),
                                               eq.inputs.empty() ? nullptr : &*values[eq.inputs[0]], call.site);
            check_collective_result(*replica, prog, out, prog.types[eq.outputs.at(0)]);
            values[eq.outputs.at(0)] = std::move(out);
          } else {
            in.clear();
            for (program::ValueId id : eq.inputs) in.push_back(*values[id]);
            std::vector<Array> out = run_session_op(*replica, eq, in, handles);
            for (std::size_t k = 0; k < eq.outputs.size(); ++k) values[eq.outputs[k]] = std::move(out.at(k));
          }
        }
      } catch (const Error&) {
        rethrow_at(prog, i);
      }
      for (program::ValueId id : impl.liveness.dies_after[i]) values[id].reset();
    }
  };
  // Segments of shared runs (WEFT_SHARED_RUNS): the local replicas meet once and split them.
  detail::RunSharing* runs = replica != nullptr && replica->state().execution != nullptr
                                 ? replica->state().execution->runs.get()
                                 : nullptr;
  std::size_t segment = 0;
  for (std::size_t s = 0; s < impl.steps.size();) {
    if (runs != nullptr && segment < prep.segments.size() && prep.segments[segment].first == s) {
      run_shared_segment(impl, *runs, replica->state().local, segment, prep.segments[segment], values, run_step);
      s = prep.segments[segment++].end;
      continue;
    }
    run_step(s);
    ++s;
  }
  std::vector<Array> outputs;
  outputs.reserve(prog.outputs.size());
  for (std::size_t k = 0; k < prog.outputs.size(); ++k) {
    // Moved out unless a later output is the same value.
    const program::ValueId id = prog.outputs[k];
    const bool again = std::find(prog.outputs.begin() + static_cast<std::ptrdiff_t>(k) + 1, prog.outputs.end(), id) !=
                       prog.outputs.end();
    outputs.push_back(again ? *values[id] : std::move(*values[id]));
  }
  return outputs;
}

}  // namespace

std::vector<Array> run_program(const Program& program, std::span<const Array> inputs) {
  return execute(program, nullptr, inputs, nullptr, nullptr);
}

std::vector<Array> run_program(const Program& program, std::vector<Array>&& inputs) {
  std::vector<Array> owned = std::move(inputs);
  return execute(program, nullptr, owned, &owned, nullptr);
}

std::vector<Array> run_program(const Program& program, Replica& replica, std::span<const Array> inputs,
                               const ProgramHandles* handles) {
  return execute(program, &replica, inputs, nullptr, handles);
}

std::vector<Array> run_program(const Program& program, Replica& replica, std::vector<Array>&& inputs,
                               const ProgramHandles* handles) {
  std::vector<Array> owned = std::move(inputs);
  return execute(program, &replica, owned, &owned, handles);
}

}  // namespace weft
