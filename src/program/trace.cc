// ProgramTrace (weft/program.hpp): the program layer's implementation of the array library's trace hook
// (array/trace_hook.hpp). Symbolic Arrays carry a value id of this trace; each op on them lands here as an
// equation of a ProgramBuilder, which infers its result types (so a shape or dtype error is raised at the
// user's op, naming the equation); concrete operands become constants, as numpy arrays do in a jaxpr.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "array/trace_hook.hpp"
#include "op_registry.hpp"
#include "weft/error.hpp"
#include "weft/program.hpp"

namespace weft::program {
namespace {

// The checkpoint region the equations recorded on this thread belong to (weft::checkpoint), if any: a
// trace runs on the thread that called the traced function.
thread_local std::optional<std::int64_t> current_region;

// The ProgramTraces open on this thread, innermost last (a trace never yields its thread: ProgramCache).
thread_local std::vector<ProgramTrace*> open_traces;

}  // namespace

class TraceState final : public detail::TraceHook, public std::enable_shared_from_this<TraceState> {
 public:
  TraceState(Mesh m, std::string n, std::shared_ptr<TraceState> around = nullptr)
      : mesh(m), name(std::move(n)), builder(std::move(m)), parent(std::move(around)) {}

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
    if (trace != this && encloses(trace)) return capture(a, op);
    if (trace != this) {
      throw InvalidArgument(op + ": a traced value of another trace reached " + name +
                            ": a symbolic Array of one traced function was kept and used in another (return it "
                            "instead)");
    }
    return detail::TraceAccess::value_id(a);
  }

  // Whether `trace` is one this (nested) trace is nested in.
  bool encloses(const detail::TraceHook* trace) const {
    for (const TraceState* p = parent.get(); p != nullptr; p = p->parent.get()) {
      if (p == trace) return true;
    }
    return false;
  }

  // The input standing for `a`, a value of a trace around this one: made on first sight, as the Python trace's
  // capture makes one (JAX's closure conversion).
  int capture(const Array& a, const std::string& op) {
    auto* outer = static_cast<TraceState*>(detail::TraceAccess::trace(a));  // (encloses() found it among ours)
    outer->check_open(op);
    const auto key = std::make_pair(static_cast<const void*>(outer), detail::TraceAccess::value_id(a));
    for (std::size_t k = 0; k < captured_keys.size(); ++k) {
      if (captured_keys[k] == key) return captured_ids[k];
    }
    const int id = builder.input(outer->builder.type(key.second));
    captured.push_back(a);
    captured_keys.push_back(key);
    captured_ids.push_back(id);
    return id;
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
  std::shared_ptr<TraceState> parent;  // the trace a nested one is nested in (null for any other)
  std::vector<Array> captured;         // the values of traces around this one it captured, in input order
  std::vector<std::pair<const void*, int>> captured_keys;  // each one's (trace, value id)
  std::vector<int> captured_ids;                           // and its input here
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
    : state_(std::make_shared<program::TraceState>(std::move(mesh), std::move(name))) {
  program::open_traces.push_back(this);
}

ProgramTrace::ProgramTrace(ProgramTrace& outer, std::string name)
    : state_(std::make_shared<program::TraceState>(outer.mesh(), std::move(name), outer.state_)) {
  outer.state_->check_open(state_->name);
  program::open_traces.push_back(this);
}

ProgramTrace::~ProgramTrace() {
  state_->closed = true;
  auto& open = program::open_traces;
  if (auto it = std::find(open.rbegin(), open.rend(), this); it != open.rend()) open.erase(std::next(it).base());
}

Array ProgramTrace::value(const Array& value) {
  state_->check_open("ProgramTrace::value");
  return state_->symbolic(state_->value_of(value, "ProgramTrace::value"));
}

const std::vector<Array>& ProgramTrace::captured() const { return state_->captured; }

bool ProgramTrace::nested_in(const ProgramTrace& outer) const { return state_->encloses(outer.state_.get()); }

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

ProgramTrace* current_program_trace() {
  return program::open_traces.empty() ? nullptr : program::open_traces.back();
}

ProgramTrace* recording_trace(ProgramTrace* trace) {
  ProgramTrace* innermost = current_program_trace();
  if (innermost == nullptr || innermost == trace) return trace;
  return innermost->nested_in(*trace) ? innermost : trace;
}

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
