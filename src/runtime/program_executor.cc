// The executor: runs a built weft::Program (weft/program.hpp) as one replica, as an instruction loop on the
// replica's own fiber or thread. Array equations call their resolved kernels; collectives go through the
// Replica, the same funnel as hand-written code, and so do the session effects (host and remote transfers,
// variables: by the names a session's run gives its handles) (so their mismatch, timeout and stall reports are the usual
// ones, at the user's traced source line); each buffer is dropped right after its last use (the program's
// liveness); runs of elementwise equations over large arrays are evaluated block by block (fusion.hpp). An error in an equation keeps its kind and gains the equation and its source line.
#include <mutex>
#include <set>

#include "program/printer.hpp"
#include "program/program_impl.hpp"
#include "program/verifier.hpp"
#include "weft/error.hpp"
#include "weft/replica.hpp"
#include "weft/session.hpp"

namespace weft {
namespace {

using program::Equation;
using program::Params;

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

const std::vector<std::string>& axes_of(const Params& p) { return std::get<std::vector<std::string>>(p.at("axes")); }
AxisIndexGroups groups_of(const Params& p) {
  auto it = p.find("groups");
  return it == p.end() ? AxisIndexGroups{} : std::get<std::vector<std::vector<int>>>(it->second);
}
int int_of(const Params& p, const char* name) { return static_cast<int>(std::get<std::int64_t>(p.at(name))); }
bool flag(const Params& p, const char* name) {
  auto it = p.find(name);
  return it != p.end() && std::get<bool>(it->second);
}

ReduceOp reduce_of(const Params& p) {
  auto it = p.find("op");
  return it == p.end() ? ReduceOp::sum : reduce_op_from_name(std::get<std::string>(it->second));
}

const std::string& name_of(const Params& p, const char* key) { return std::get<std::string>(p.at(key)); }

template <class Handle>
const Handle& handle(const std::map<std::string, Handle>* handles, const Equation& eq, const char* key,
                     const char* kind) {
  if (handles == nullptr) {
    throw InvalidArgument(eq.op + " is a session effect: it runs only in a session's run (Session::run of a program)");
  }
  const std::string& name = name_of(eq.params, key);
  auto it = handles->find(name);
  if (it == handles->end()) {
    throw InvalidArgument(eq.op + ": the session's run was given no " + kind + " named '" + name + "'");
  }
  return it->second;
}

// An equation the Replica runs: a collective, or a session effect. Returns its results (none for stores).
std::vector<Array> run_on_replica(Replica& r, const Equation& eq, const std::vector<Array>& in,
                                  const ProgramHandles* handles) {
  const Params& p = eq.params;
  const std::string& op = eq.op;
  if (op == "host_load" || op == "host_store") {
    const HostStream& stream = handle(handles ? &handles->streams : nullptr, eq, "stream", "stream");
    if (op == "host_load") return {r.host_load(stream)};
    r.host_store(stream, in[0]);
    return {};
  }
  if (op == "remote_load" || op == "remote_store") {
    const RemoteBuffer& buffer = handle(handles ? &handles->buffers : nullptr, eq, "buffer", "remote buffer");
    if (op == "remote_load") return {in.empty() ? r.remote_load(buffer, 0) : r.remote_load(buffer, in[0])};
    if (in.size() > 1) {
      r.remote_store(buffer, in[1], in[0]);
    } else {
      r.remote_store(buffer, 0, in[0]);
    }
    return {};
  }
  if (op == "variable_read" || op == "variable_update") {
    const Variable& variable = handle(handles ? &handles->variables : nullptr, eq, "variable", "variable");
    if (op == "variable_read") return {r.value(variable)};
    if (in[0].dtype() != variable.dtype() || in[0].shape() != r.value(variable).shape()) {
      throw InvalidArgument("variable_update: variable '" + variable.name() + "' holds " +
                            std::string(dtype_name(variable.dtype())) + shape_str(r.value(variable).shape()) +
                            " on this replica, not " + std::string(dtype_name(in[0].dtype())) + shape_str(in[0].shape()));
    }
    r.value(variable) = in[0];
    return {};
  }
  const CallSite site = site_of(eq);
  if (op == "psum") return {r.psum(in[0], axes_of(p), groups_of(p), site)};
  if (op == "pmean") return {r.pmean(in[0], axes_of(p), groups_of(p), site)};
  if (op == "pmax") return {r.pmax(in[0], axes_of(p), groups_of(p), site)};
  if (op == "pmin") return {r.pmin(in[0], axes_of(p), groups_of(p), site)};
  if (op == "pprod") return {r.all_reduce(in[0], r.groups(axes_of(p), groups_of(p)), ReduceOp::prod, site)};
  if (op == "all_gather") {
    return {r.all_gather(in[0], axes_of(p), int_of(p, "axis"), flag(p, "tiled"), groups_of(p), site)};
  }
  if (op == "psum_scatter") {
    return {r.psum_scatter(in[0], axes_of(p), int_of(p, "axis"), flag(p, "tiled"), groups_of(p), site)};
  }
  if (op == "all_to_all") {
    return {r.all_to_all(in[0], axes_of(p), int_of(p, "split_axis"), int_of(p, "concat_axis"), flag(p, "tiled"),
                         groups_of(p), site)};
  }
  if (op == "ppermute") return {r.ppermute(in[0], axes_of(p), std::get<Permutation>(p.at("perm")), site)};
  if (op == "axis_index") return {Array::scalar(r.axis_index(axes_of(p)), DType::i32)};
  if (op == "replicated_reduce_scatter") {
    return {r.replicated_reduce_scatter(in[0], r.groups(axes_of(p), groups_of(p)), reduce_of(p), site)};
  }
  if (op == "replica_sharded_slice") return {r.replica_sharded_slice(in[0], r.groups(axes_of(p), groups_of(p)), site)};
  if (op == "gather_shards") {
    const auto& shape = std::get<std::vector<std::int64_t>>(p.at("shape"));
    return {r.gather_shards(in[0], r.groups(axes_of(p), groups_of(p)), Shape(shape.begin(), shape.end()), site)};
  }
  throw Error("weft internal error: no kernel and no replica operation for op '" + op + "'");
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

std::vector<Array> execute(const Program& program, Replica* replica, std::span<const Array> inputs,
                           const ProgramHandles* handles) {
  const Program::Impl& impl = program.impl();
  const program::Program& prog = impl.program;
  check_inputs(prog, inputs);
  std::vector<Array> values(prog.types.size());
  for (std::size_t k = 0; k < prog.inputs.size(); ++k) values[prog.inputs[k]] = inputs[k];
  for (std::size_t k = 0; k < prog.constants.size(); ++k) values[prog.constants[k]] = prog.constant_values[k];
  for (program::ValueId id : impl.liveness.unused_inputs) values[id] = Array();
  std::vector<Array> in;
  for (const program::Step& step : impl.steps) {
    if (step.count > 1) {
      try {
        program::run_fused(prog, impl.kernels, step, values);
      } catch (const Error&) {
        rethrow_at(prog, step.first);
      }
      for (std::size_t i = step.first; i < step.first + step.count; ++i) {
        for (program::ValueId id : impl.liveness.dies_after[i]) values[id] = Array();
      }
      continue;
    }
    const std::size_t i = step.first;
    const Equation& eq = prog.equations[i];
    in.clear();
    for (program::ValueId id : eq.inputs) in.push_back(values[id]);
    try {
      if (impl.kernels[i] != nullptr) {
        std::vector<Array> out = impl.kernels[i](in, eq.params);
        for (std::size_t k = 0; k < eq.outputs.size(); ++k) {
          const ValueType& want = prog.types[eq.outputs[k]];
          if (out[k].dtype() != want.dtype || out[k].shape() != want.shape) {
            throw Error("weft internal error: the kernel gave " + std::string(dtype_name(out[k].dtype())) +
                        shape_str(out[k].shape()) + " where the op's rule gives " + program::type_text(want));
          }
          values[eq.outputs[k]] = std::move(out[k]);
        }
      } else {
        if (replica == nullptr) {
          throw InvalidArgument(eq.op + " needs replicas to meet, and run_program was given none (collectives run "
                                "inside pmap or a session)");
        }
        std::vector<Array> out = run_on_replica(*replica, eq, in, handles);
        for (std::size_t k = 0; k < eq.outputs.size(); ++k) values[eq.outputs[k]] = std::move(out.at(k));
      }
    } catch (const Error&) {
      rethrow_at(prog, i);
    }
    for (program::ValueId id : impl.liveness.dies_after[i]) values[id] = Array();
  }
  std::vector<Array> outputs;
  outputs.reserve(prog.outputs.size());
  for (program::ValueId id : prog.outputs) outputs.push_back(values[id]);
  return outputs;
}

}  // namespace

std::vector<Array> run_program(const Program& program, std::span<const Array> inputs) {
  return execute(program, nullptr, inputs, nullptr);
}

std::vector<Array> run_program(const Program& program, Replica& replica, std::span<const Array> inputs,
                               const ProgramHandles* handles) {
  return execute(program, &replica, inputs, handles);
}

}  // namespace weft
