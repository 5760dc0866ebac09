// ProgramTrace (weft/program.hpp): the program layer's implementation of the array library's trace hook
// (array/trace_hook.hpp). Symbolic Arrays carry a value id of this trace; each op on them lands here as an
// equation of a ProgramBuilder, which infers its result types (so a shape or dtype error is raised at the
// user's op, naming the equation); concrete operands become constants, as numpy arrays do in a jaxpr.
#include <atomic>
#include <optional>
#include <utility>

#include "array/trace_hook.hpp"
#include "op_registry.hpp"
#include "weft/error.hpp"
#include "weft/program.hpp"

namespace weft::program {
namespace {

// The checkpoint region the equations recorded on this thread belong to (weft::checkpoint), if any: a
// trace runs on the thread that called the traced function.
thread_local std::optional<std::int64_t> current_region;

}  // namespace

class TraceState final : public detail::TraceHook, public std::enable_shared_from_this<TraceState> {
 public:
  TraceState(Mesh m, std::string n) : mesh(m), name(std::move(n)), builder(std::move(m)) {}

  std::vector<Array> record(const std::string& op, const std::vector<Array>& ins, ProgramParams params,
                            std::string source) override {
    std::vector<int> ids;
    ids.reserve(ins.size());
    for (const Array& a : ins) ids.push_back(value_of(a, op));
    if (current_region) params[kCheckpointParam] = ProgramParam{*current_region};
    std::vector<Array> out;
    for (int id : builder.emit(op, ids, std::move(params), std::move(source))) out.push_back(symbolic(id));
    return out;
  }

  // The value `a` is in this trace: its own id, or a new constant for a concrete array.
  int value_of(const Array& a, const std::string& op) {
    check_open(op);
    detail::TraceHook* trace = detail::TraceAccess::trace(a);
    if (trace == nullptr) return builder.constant(a);
    if (trace != this) {
      throw InvalidArgument(op + ": a traced value of another trace reached " + name +
                            ": a symbolic Array of one traced function was kept and used in another (return it "
                            "instead)");
    }
    return detail::TraceAccess::value_id(a);
  }

  void check_open(const std::string& op) const {
    if (closed) {
      throw InvalidArgument(op + ": a traced value of " + name +
                            " was used after its trace ended (a symbolic Array kept from inside a traced "
                            "function: return it from the function instead)");
    }
  }

  Array symbolic(int id) {
    const ValueType& t = builder.type(id);
    return detail::TraceAccess::symbolic(shared_from_this(), id, t.dtype, t.shape);
  }

  Mesh mesh;
  std::string name;
  ProgramBuilder builder;
  bool closed = false;
};

}  // namespace weft::program

namespace weft {

std::int64_t detail::new_checkpoint_region() {
  static std::atomic<std::int64_t> next{0};
  return next++;
}

detail::CheckpointScope::CheckpointScope() : outer_(program::current_region) {
  program::current_region = new_checkpoint_region();
}

detail::CheckpointScope::~CheckpointScope() { program::current_region = outer_; }

ProgramTrace::ProgramTrace(Mesh mesh, std::string name)
    : state_(std::make_shared<program::TraceState>(std::move(mesh), std::move(name))) {}

ProgramTrace::~ProgramTrace() { state_->closed = true; }

Array ProgramTrace::input(ValueType type) {
  state_->check_open("input");
  return state_->symbolic(state_->builder.input(std::move(type)));
}

std::vector<Array> ProgramTrace::record(const std::string& op, const std::vector<Array>& ins, ProgramParams params,
                                        std::string source) {
  state_->check_open(op);
  return state_->record(op, ins, std::move(params), std::move(source));
}

const ValueType& ProgramTrace::type(const Array& value) const {
  if (detail::TraceAccess::trace(value) != state_.get()) {
    throw InvalidArgument("ProgramTrace::type: the array is not a symbolic value of " + state_->name);
  }
  return state_->builder.type(detail::TraceAccess::value_id(value));
}

const Mesh& ProgramTrace::mesh() const { return state_->mesh; }
const std::string& ProgramTrace::name() const { return state_->name; }

Program ProgramTrace::finish(const std::vector<Array>& outputs) {
  std::vector<int> ids;
  for (const Array& out : outputs) ids.push_back(state_->value_of(out, state_->name + " (its outputs)"));
  state_->builder.set_outputs(std::move(ids));
  Program program = state_->builder.build();
  state_->closed = true;
  return program;
}

}  // namespace weft

namespace weft::detail {

std::vector<Array> inline_into_trace(const Program& program, std::span<const Array> inputs) {
  program::TraceState* trace = nullptr;
  for (const Array& a : inputs) {
    if (a.traced()) {
      trace = dynamic_cast<program::TraceState*>(TraceAccess::trace(a));
      break;
    }
  }
  if (trace == nullptr) throw InvalidArgument("inline_into_trace: no input is a symbolic value of a weft trace");
  std::vector<int> ids;
  ids.reserve(inputs.size());
  for (const Array& a : inputs) ids.push_back(trace->value_of(a, "an inlined program"));
  std::vector<Array> out;
  for (int id : trace->builder.inline_program(program, ids)) out.push_back(trace->symbolic(id));
  return out;
}

}  // namespace weft::detail
