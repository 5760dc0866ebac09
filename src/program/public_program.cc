// weft::Program and weft::ProgramBuilder (weft/program.hpp): the public face of the program layer. Building
// verifies, removes dead code, computes liveness and resolves each equation's kernel once, so a run does no
// lookups.
#include <ostream>

#include "autodiff.hpp"
#include "builder.hpp"
#include "custom_calls.hpp"
#include "dead_code.hpp"
#include "partial_eval.hpp"
#include "printer.hpp"
#include "program_impl.hpp"
#include "scattered_products.hpp"
#include "transforms.hpp"
#include "verifier.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

const Program::Impl& empty_impl() {
  static const Program::Impl impl{};
  return impl;
}

}  // namespace

Program::Program() = default;
Program::Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
const Program::Impl& Program::impl() const { return impl_ ? *impl_ : empty_impl(); }

std::string Program::text() const { return program::program_text(impl().program); }
std::size_t Program::num_equations() const { return impl().program.equations.size(); }
std::size_t Program::count(std::string_view op) const {
  const program::OpInfo* info = program::find_op(op);  // none of an unknown op
  std::size_t n = 0;
  for (const program::Equation& eq : impl().program.equations) n += &eq.info() == info ? 1 : 0;
  return n;
}
const std::string& Program::equation_op(std::size_t i) const {
  const auto& equations = impl().program.equations;
  if (i >= equations.size()) {
    throw InvalidArgument("Program::equation_op: equation " + std::to_string(i) + " of a program of " +
                          std::to_string(equations.size()));
  }
  return equations[i].name();
}
const Mesh& Program::mesh() const { return impl().program.mesh; }
CollectiveRules Program::collective_rules() const { return impl().program.rules; }
std::vector<ValueType> Program::input_types() const {
  std::vector<ValueType> types;
  for (program::ValueId id : impl().program.inputs) types.push_back(impl().program.types[id]);
  return types;
}
std::vector<ValueType> Program::output_types() const {
  std::vector<ValueType> types;
  for (program::ValueId id : impl().program.outputs) types.push_back(impl().program.types[id]);
  return types;
}
std::size_t Program::peak_live_bytes() const { return impl().liveness.peak_bytes; }
std::size_t Program::fused_runs() const {
  std::size_t n = 0;
  for (const program::Step& step : impl().steps) n += step.count > 1 ? 1 : 0;
  return n;
}

std::ostream& operator<<(std::ostream& os, const Program& program) { return os << program.text(); }

const char* program_param_kind_text(ProgramParamKind kind) {
  using ParamKind = ProgramParamKind;
  using program::param_kind;
  switch (kind) {
    case ParamKind::boolean: return param_kind<bool>();
    case ParamKind::integer: return param_kind<std::int64_t>();
    case ParamKind::string: return param_kind<std::string>();
    case ParamKind::dtype: return param_kind<DType>();
    case ParamKind::ints: return param_kind<std::vector<std::int64_t>>();
    case ParamKind::axes: return param_kind<std::vector<std::string>>();
    case ParamKind::permutation: return param_kind<Permutation>();
    case ParamKind::groups: return param_kind<program::Groups>();
    case ParamKind::programs: return param_kind<SubPrograms>();
  }
  return "a parameter";
}

const char* program_param_kind_name(ProgramParamKind kind) {
  using ParamKind = ProgramParamKind;
  switch (kind) {
    case ParamKind::boolean: return "bool";
    case ParamKind::integer: return "int";
    case ParamKind::string: return "str";
    case ParamKind::dtype: return "dtype";
    case ParamKind::ints: return "ints";
    case ParamKind::axes: return "strs";
    case ParamKind::permutation: return "perm";
    case ParamKind::groups: return "groups";
    case ParamKind::programs: return "programs";
  }
  return "?";
}

std::vector<ProgramParamSpec> op_schema(std::string_view op) {
  const program::OpInfo* info = program::find_op(op);
  if (info == nullptr) throw InvalidArgument("unknown op '" + std::string(op) + "'");
  std::vector<ProgramParamSpec> schema = info->params;
  schema.push_back(*program::param_spec(*info, program::kCheckpointParam));  // any equation may carry it
  return schema;
}

ProgramBuilder::ProgramBuilder(Mesh mesh, CollectiveRules rules)
    : builder_(std::make_unique<program::Builder>(std::move(mesh), rules)) {}
ProgramBuilder::~ProgramBuilder() = default;
ProgramBuilder::ProgramBuilder(ProgramBuilder&&) noexcept = default;
ProgramBuilder& ProgramBuilder::operator=(ProgramBuilder&&) noexcept = default;

int ProgramBuilder::input(ValueType type) { return builder_->input(std::move(type)); }
int ProgramBuilder::constant(Array value) { return builder_->constant(std::move(value)); }
std::vector<int> ProgramBuilder::emit(const std::string& op, const std::vector<int>& inputs, ProgramParams params,
                                      std::string source) {
  return builder_->emit(op, inputs, std::move(params), std::move(source));
}
const ValueType& ProgramBuilder::type(int value) const { return builder_->type(value); }
void ProgramBuilder::set_outputs(std::vector<int> outputs) { builder_->set_outputs(std::move(outputs)); }
std::size_t ProgramBuilder::num_equations() const { return builder_->num_equations(); }

// A verified program made runnable: dead code removed, weight gradients' reduce-scatters turned into gathers
// where that moves less (scattered_products.hpp), liveness, kernels, steps.
Program program::runnable(program::Program verified) {
  auto impl = std::make_shared<weft::Program::Impl>();
  impl->program = program::eliminate_dead_code(verified);
  if (impl->program.mesh.num_axes() > 0) {
    impl->program = program::gather_scattered_products(impl->program);
    program::verify(impl->program);
  }
  impl->liveness = program::analyze_liveness(impl->program);
  for (const program::Equation& eq : impl->program.equations) impl->kernels.push_back(eq.info().kernel);
  impl->steps = program::plan_steps(impl->program);
  return weft::Program(std::move(impl));
}


Program ProgramBuilder::build() const { return program::runnable(builder_->build()); }

std::vector<int> ProgramBuilder::inline_program(const Program& program, const std::vector<int>& inputs) {
  return program::inline_program(*builder_, program.impl().program, inputs);
}

std::int64_t detail::register_custom_vjp(const Program& bwd, std::string name) {
  return program::register_custom_vjp(bwd.impl().program, std::move(name));
}

std::int64_t detail::register_custom_jvp(const Program& jvp, std::string name) {
  return program::register_custom_jvp(jvp.impl().program, std::move(name));
}

Program vjp_program(const Program& program, const std::vector<int>& wrt) {
  return program::runnable(program::vjp_program(program.impl().program, wrt));
}

std::vector<SavedResidual> saved_residuals(const Program& program, const std::vector<int>& wrt) {
  std::vector<SavedResidual> out;
  for (program::SavedResidual& r : program::saved_residuals(program.impl().program, wrt)) {
    out.push_back({std::move(r.type), r.input, std::move(r.op), std::move(r.source)});
  }
  return out;
}

Program jvp_program(const Program& program) { return program::runnable(program::jvp_program(program.impl().program)); }

BatchedProgram batch_program(const Program& program, const std::vector<bool>& batched, std::int64_t size,
                             const std::string& axis_name) {
  program::BatchedProgram result = program::batch_program(program.impl().program, batched, size, axis_name);
  return {program::runnable(std::move(result.program)), std::move(result.out_batched)};
}

PartialEval partial_eval(const Program& program, const std::vector<bool>& unknowns,
                         const std::vector<bool>& instantiate) {
  program::PartialEval split = program::partial_eval(program.impl().program, unknowns, instantiate);
  return {program::runnable(std::move(split.known)), program::runnable(std::move(split.unknown)), std::move(split.out_unknowns),
          split.num_residuals};
}

}  // namespace weft
