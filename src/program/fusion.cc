// Fusion's plan (runs of fusible equations, and bfloat16 products widened to float32) and its evaluations:
// direct loops for runs of plain arithmetic on one float type, blocked kernels for the other runs, one
// kernel for the widened product.
#include "fusion.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <type_traits>

#include "array/binary_loops.hpp"
#include "array/float_kernels.hpp"
#include "array/isa.hpp"
#include "array/sole_reference.hpp"
#include "array/widened_matmul.hpp"
#include "core/settings.hpp"
#include "op_registry.hpp"
#include "weft/error.hpp"

namespace weft::program {

// A run of add / subtract / multiply / divide / maximum / minimum / sqrt on one float type (float32 or
// float64), each operand of the run's shape or a scalar: evaluated by the array library's own loops
// (array/binary_loops.hpp; sqrt: float_kernels.hpp's sqrt_f32, std::sqrt for float64, as the unfused
// kernels; so the unfused program's bits) over blocks of scratch rows, with no Array per equation or block.
// sqrt is there for the optimizers: AdamW's update is one run. Planned once per program: which operand is
// a whole input, a scalar or an earlier equation's block; which results are written out whole, and into
// which dying input's buffer they may go.
struct LoopPlan {
  enum class Op : std::uint8_t { add, subtract, multiply, divide, maximum, minimum, sqrt };
  struct Operand {
    enum class Kind : std::uint8_t { whole, scalar, local } kind = Kind::whole;
    ValueId id = 0;      // whole, scalar: the value outside the run
    std::size_t at = 0;  // local: the equation of the run (0-based) that defines it
  };
  struct Equation {
    Op op = Op::add;
    Operand a, b;  // b: binary ops only
    int whole_out = -1;  // its index in Step::materialize when written out whole, else -1
    // Whole inputs whose last use is in the run, at this equation or before: the result may take one's
    // buffer (nothing later reads it; block by block, this block's reads come first, and the loops write
    // element i only after reading it). Those dying here first.
    std::vector<ValueId> reusable;
  };
  DType dtype = DType::f32;
  std::vector<Equation> equations;
};

namespace {

// Below this many elements the arrays of a chain stay in cache anyway: fusing through the blocked kernels
// would only add the blocks' dispatch (measured: docs/programs.md, "Fusion"). Direct loops have no such
// dispatch: they fuse runs of any size.
constexpr std::int64_t kMinElements = std::int64_t{1} << 20;
// Elements per block of the blocked kernels: a few blocks of intermediates fit in a core's L2.
constexpr std::int64_t kBlock = std::int64_t{1} << 14;
// Elements per block of the direct loops: one 8 KiB row per float32 intermediate, all in L1.
constexpr std::int64_t kLoopBlock = 2048;

bool fusion_enabled() {
  // WEFT_FUSION's choices are auto (0), off and 0; anything else is refused naming the setting.
  static const bool enabled = settings::choice(settings::Setting::fusion, 0) == 0;
  return enabled;
}

// Whether equation `eq` can join a run over `shape`: elementwise, its result of that shape, each operand of
// that shape or a scalar.
bool fusible(const Program& p, const Equation& eq, const std::vector<std::int64_t>& shape) {
  if (!eq.info().elementwise || eq.outputs.size() != 1) return false;
  if (p.types[eq.outputs[0]].shape != shape) return false;
  for (ValueId in : eq.inputs) {
    const auto& s = p.types[in].shape;
    if (s != shape && !s.empty()) return false;
  }
  return true;
}

std::optional<LoopPlan::Op> loop_op(Prim op) {
  using Op = LoopPlan::Op;
  switch (op) {
    case Prim::add: return Op::add;
    case Prim::subtract: return Op::subtract;
    case Prim::multiply: return Op::multiply;
    case Prim::divide: return Op::divide;
    case Prim::maximum: return Op::maximum;
    case Prim::minimum: return Op::minimum;
    case Prim::sqrt: return Op::sqrt;
    default: return std::nullopt;
  }
}

// Operands of a direct loop's op: sqrt one, the others two.
std::size_t arity(LoopPlan::Op op) { return op == LoopPlan::Op::sqrt ? 1 : 2; }

// Whether `eq` (fusible over its shape) can be one of a direct loop's equations on `dtype`.
bool loopable(const Program& p, const Equation& eq, DType dtype) {
  const auto op = loop_op(eq.prim());
  if (!op || eq.inputs.size() != arity(*op) || p.types[eq.outputs[0]].dtype != dtype) return false;
  if (dtype != DType::f32 && dtype != DType::f64) return false;
  return std::all_of(eq.inputs.begin(), eq.inputs.end(), [&](ValueId id) { return p.types[id].dtype == dtype; });
}

std::shared_ptr<const LoopPlan> plan_loop(const Program& p, const Step& step, const std::vector<std::size_t>& last_use) {
  auto plan = std::make_shared<LoopPlan>();
  plan->dtype = p.types[p.equations[step.first].outputs[0]].dtype;
  std::map<ValueId, std::size_t> local;  // value -> the run's equation defining it
  std::vector<ValueId> dying;            // whole inputs whose last use is in the run, so far
  for (std::size_t k = step.first; k < step.first + step.count; ++k) {
    const Equation& eq = p.equations[k];
    LoopPlan::Equation e;
    e.op = *loop_op(eq.prim());
    LoopPlan::Operand* operands[2] = {&e.a, &e.b};
    for (std::size_t n = 0; n < eq.inputs.size(); ++n) {
      const ValueId id = eq.inputs[n];
      if (auto it = local.find(id); it != local.end()) {
        *operands[n] = {LoopPlan::Operand::Kind::local, id, it->second - step.first};
      } else if (p.types[id].shape.empty() && !p.types[eq.outputs[0]].shape.empty()) {
        *operands[n] = {LoopPlan::Operand::Kind::scalar, id, 0};
      } else {
        *operands[n] = {LoopPlan::Operand::Kind::whole, id, 0};
        if (last_use[id] == k && std::find(dying.begin(), dying.end(), id) == dying.end()) dying.push_back(id);
      }
    }
    const ValueId out = eq.outputs[0];
    auto m = std::find(step.materialize.begin(), step.materialize.end(), out);
    if (m != step.materialize.end()) e.whole_out = static_cast<int>(m - step.materialize.begin());
    if (e.whole_out >= 0) e.reusable.assign(dying.rbegin(), dying.rend());
    local[out] = k;
    plan->equations.push_back(e);
  }
  return plan;
}

template <class T>
void run_loop_op(LoopPlan::Op op, const T* a, bool a_scalar, const T* b, bool b_scalar, T* out, std::int64_t n) {
  using namespace kernels::binary_loops;
  if (op == LoopPlan::Op::sqrt) {  // a is of the run's shape: a scalar operand would make a scalar result
    if constexpr (std::is_same_v<T, float>) {
      isa::ensure_kernels_supported();  // compiled for WEFT_ARCH, as every kernel entry point
      kernels::sqrt_f32(a, out, n);
    } else {
      for (std::int64_t i = 0; i < n; ++i) out[i] = std::sqrt(a[i]);  // elementwise_math.cc's float64 sqrt
    }
    return;
  }
  // Never both scalars: the result would be a scalar too, and a scalar run's operands are whole ones.
  auto run = [&]<class F>(F) {
    if (b_scalar) {
      loop_scalar_b<T, F>(a, b[0], out, n);
    } else if (a_scalar) {
      loop_scalar_a<T, F>(a[0], b, out, n);
    } else {
      loop_same<T, F>(a, b, out, n);
    }
  };
  switch (op) {
    case LoopPlan::Op::add: run(AddF<T>{}); break;
    case LoopPlan::Op::subtract: run(SubF<T>{}); break;
    case LoopPlan::Op::multiply: run(MulF<T>{}); break;
    case LoopPlan::Op::divide: run(DivF<T>{}); break;
    case LoopPlan::Op::maximum: run(MaxF<T>{}); break;
    case LoopPlan::Op::minimum: run(MinF<T>{}); break;
    case LoopPlan::Op::sqrt: break;  // above
  }
}

// A dying input's buffer the result can be written into: held by nothing else, exactly the result's bytes.
// Moved out of `values` (so writing to it copies nothing); its data pointer stays what the loops read.
std::optional<Array> take_buffer(std::optional<Array>& input, std::size_t bytes) {
  if (!input || input->traced() || input->offset() != 0 || !input->buffer() || input->buffer()->size() != bytes ||
      !detail::sole_reference(input->buffer())) {
    return std::nullopt;
  }
  std::optional<Array> taken = std::move(input);
  input.reset();
  return taken;
}

// The outside operands' data: per equation, a (slot 2k) and b (slot 2k + 1), null for the run's own blocks.
template <class T>
std::vector<const T*> outside_operands(const LoopPlan& plan, const std::vector<std::optional<Array>>& values) {
  using Kind = LoopPlan::Operand::Kind;
  const std::size_t count = plan.equations.size();
  std::vector<const T*> outside(2 * count, nullptr);
  for (std::size_t k = 0; k < count; ++k) {
    const LoopPlan::Equation& e = plan.equations[k];
    if (e.a.kind != Kind::local) outside[2 * k] = reinterpret_cast<const T*>(values[e.a.id]->bytes());
    if (arity(e.op) == 2 && e.b.kind != Kind::local) {
      outside[2 * k + 1] = reinterpret_cast<const T*>(values[e.b.id]->bytes());
    }
  }
  return outside;
}

// Elements [begin, end) of the run, block by block (blocks start at multiples of kLoopBlock from `begin`):
// each equation's result into whole_data[k] (written out whole) or a scratch row.
template <class T>
void loop_blocks(const LoopPlan& plan, const std::vector<const T*>& outside, const std::vector<T*>& whole_data,
                 std::int64_t begin, std::int64_t end) {
  using Kind = LoopPlan::Operand::Kind;
  if (begin >= end) return;
  const std::size_t count = plan.equations.size();
  const std::size_t row = static_cast<std::size_t>(std::min(end - begin, kLoopBlock));
  std::vector<T> scratch(count * row);
  std::vector<T*> result(count);
  for (std::int64_t start = begin; start < end; start += kLoopBlock) {
    const std::int64_t m = std::min(kLoopBlock, end - start);
    for (std::size_t k = 0; k < count; ++k) {
      const LoopPlan::Equation& e = plan.equations[k];
      auto operand = [&](const LoopPlan::Operand& o, std::size_t slot) -> const T* {
        if (o.kind == Kind::local) return result[o.at];
        return o.kind == Kind::scalar ? outside[slot] : outside[slot] + start;
      };
      result[k] = whole_data[k] ? whole_data[k] + start : scratch.data() + k * row;
      const bool binary = arity(e.op) == 2;
      run_loop_op<T>(e.op, operand(e.a, 2 * k), e.a.kind == Kind::scalar, binary ? operand(e.b, 2 * k + 1) : nullptr,
                     binary && e.b.kind == Kind::scalar, result[k], m);
    }
  }
}

std::int64_t run_elements(const Program& p, const Step& step) {
  const std::vector<std::int64_t>& shape = p.types[p.equations[step.first].outputs[0]].shape;
  return num_elements(Shape(shape.begin(), shape.end()));
}

template <class T>
void run_loop(const Program& p, const LoopPlan& plan, const Step& step, std::vector<std::optional<Array>>& values) {
  const std::vector<std::int64_t>& shape = p.types[p.equations[step.first].outputs[0]].shape;
  const Shape out_shape(shape.begin(), shape.end());
  const std::int64_t n = num_elements(out_shape);
  const std::size_t count = plan.equations.size();
  // The outside operands' data (read before any buffer is taken over: taking one keeps its data in place).
  const std::vector<const T*> outside = outside_operands<T>(plan, values);
  // Where each equation's result goes: its whole buffer (written out) or a scratch row.
  std::vector<Array> whole(step.materialize.size());
  std::vector<T*> whole_data(count, nullptr);
  for (std::size_t k = 0; k < count; ++k) {
    const LoopPlan::Equation& e = plan.equations[k];
    if (e.whole_out < 0) continue;
    Array& out = whole[static_cast<std::size_t>(e.whole_out)];
    std::optional<Array> reused;
    for (ValueId id : e.reusable) {
      if (!reused) reused = take_buffer(values[id], static_cast<std::size_t>(n) * sizeof(T));  // null once taken
    }
    out = reused ? std::move(*reused) : Array::empty(out_shape, plan.dtype);
    whole_data[k] = reinterpret_cast<T*>(out.mutable_bytes());
  }
  loop_blocks<T>(plan, outside, whole_data, 0, n);
  for (std::size_t i = 0; i < step.materialize.size(); ++i) values[step.materialize[i]] = std::move(whole[i]);
}

template <class T>
void loop_part(const LoopPlan& plan, const std::vector<std::optional<Array>>& values,
               std::span<std::byte* const> outputs, std::int64_t begin, std::int64_t end) {
  std::vector<T*> whole_data(plan.equations.size(), nullptr);
  for (std::size_t k = 0; k < plan.equations.size(); ++k) {
    const int w = plan.equations[k].whole_out;
    if (w >= 0) whole_data[k] = reinterpret_cast<T*>(outputs[static_cast<std::size_t>(w)]);
  }
  loop_blocks<T>(plan, outside_operands<T>(plan, values), whole_data, begin, end);
}

// The blocked evaluation: each block of the run through the equations' own kernels, on views.
void run_blocked(const Program& p, const std::vector<Kernel>& kernels, const Step& step,
                 std::vector<std::optional<Array>>& values) {
  const std::vector<std::int64_t>& shape = p.types[p.equations[step.first].outputs[0]].shape;
  const std::int64_t n = num_elements(Shape(shape.begin(), shape.end()));
  std::vector<bool> inside(p.types.size(), false);
  for (std::size_t k = step.first; k < step.first + step.count; ++k) inside[p.equations[k].outputs[0]] = true;
  std::map<ValueId, Array> whole;  // the materialized results, filled block by block
  for (ValueId id : step.materialize) {
    Array out = Array::empty({n}, p.types[id].dtype);
    out.mutable_bytes();
    whole.emplace(id, std::move(out));
  }
  std::map<ValueId, Array> block;
  std::vector<Array> ins;
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t m = std::min(kBlock, n - start);
    for (std::size_t k = step.first; k < step.first + step.count; ++k) {
      const Equation& eq = p.equations[k];
      ins.clear();
      for (ValueId id : eq.inputs) {
        if (inside[id]) {
          ins.push_back(block.at(id));
        } else if (p.types[id].shape.empty()) {
          ins.push_back(*values[id]);
        } else {
          const Array& full = *values[id];
          const std::size_t size = dtype_size(full.dtype());
          ins.emplace_back(full.dtype(), Shape{m}, full.buffer(), full.offset() + static_cast<std::size_t>(start) * size,
                           full.device());
        }
      }
      block[eq.outputs[0]] = kernels[k](ins, eq.params)[0];
    }
    for (auto& [id, out] : whole) {
      const std::size_t size = dtype_size(out.dtype());
      std::memcpy(out.mutable_bytes() + static_cast<std::size_t>(start) * size, block.at(id).bytes(),
                  static_cast<std::size_t>(m) * size);
    }
  }
  for (auto& [id, out] : whole) values[id] = out.reshape(Shape(shape.begin(), shape.end()));
}

// Equation i a matmul of two bfloat16 values and i + 1 the astype to float32 of its result, which nothing
// else reads (last_use: outputs count as read at the end).
bool widens_a_bf16_product(const Program& p, std::size_t i, const std::vector<std::size_t>& last_use) {
  if (i + 1 >= p.equations.size()) return false;
  const Equation& product = p.equations[i];
  const Equation& cast = p.equations[i + 1];
  if (product.prim() != Prim::matmul || product.outputs.size() != 1 || product.inputs.size() != 2) return false;
  const ValueId out = product.outputs[0];
  if (p.types[out].dtype != DType::bf16 || p.types[product.inputs[0]].dtype != DType::bf16 ||
      p.types[product.inputs[1]].dtype != DType::bf16) {
    return false;
  }
  return cast.prim() == Prim::astype && cast.inputs.size() == 1 && cast.inputs[0] == out && cast.outputs.size() == 1 &&
         p.types[cast.outputs[0]].dtype == DType::f32 && last_use[out] == i + 1;
}

}  // namespace

std::vector<Step> plan_steps(const Program& p) {
  std::vector<Step> steps;
  const std::size_t n = p.equations.size();
  // The last equation using each value (outputs: past the end), to know what a run must write out.
  std::vector<std::size_t> last_use(p.types.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (ValueId id : p.equations[i].inputs) last_use[id] = std::max(last_use[id], i);
  }
  for (ValueId id : p.outputs) last_use[id] = n;
  // Constants belong to the program. An input may be taken over: only when the caller handed it in and holds
  // no other reference (take_buffer checks), as JAX's donated buffers.
  for (ValueId id : p.constants) last_use[id] = n;
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i + 1;
    const Equation& eq = p.equations[i];
    if (fusion_enabled() && widens_a_bf16_product(p, i, last_use)) {
      steps.push_back(Step{i, 2, {p.equations[i + 1].outputs[0]}, nullptr, true});
      i += 2;
      continue;
    }
    if (fusion_enabled() && eq.outputs.size() == 1) {
      const auto& shape = p.types[eq.outputs[0]].shape;
      const DType dtype = p.types[eq.outputs[0]].dtype;
      if (fusible(p, eq, shape)) {
        if (num_elements(Shape(shape.begin(), shape.end())) >= kMinElements) {
          while (j < n && fusible(p, p.equations[j], shape)) ++j;
        } else if (loopable(p, eq, dtype)) {
          while (j < n && fusible(p, p.equations[j], shape) && loopable(p, p.equations[j], dtype)) ++j;
        }
      }
    }
    Step step{i, j - i, {}, nullptr};
    if (step.count > 1) {
      for (std::size_t k = i; k < j; ++k) {
        const ValueId out = p.equations[k].outputs[0];
        if (last_use[out] >= j) step.materialize.push_back(out);
      }
      const DType dtype = p.types[eq.outputs[0]].dtype;
      bool direct = true;
      for (std::size_t k = i; k < j; ++k) direct = direct && loopable(p, p.equations[k], dtype);
      if (direct) step.loop = plan_loop(p, step, last_use);
    }
    steps.push_back(std::move(step));
    i = j;
  }
  return steps;
}

void run_fused(const Program& p, const std::vector<Kernel>& kernels, const Step& step,
               std::vector<std::optional<Array>>& values) {
  if (step.widened_matmul) {
    const Equation& product = p.equations[step.first];
    const MatmulOptions options{.transpose_a = param_flag(product.params, "transpose_a"),
                                .transpose_b = param_flag(product.params, "transpose_b")};
    values[p.equations[step.first + 1].outputs[0]] =
        detail::matmul_bf16_widened(*values[product.inputs[0]], *values[product.inputs[1]], options);
    return;
  }
  if (step.loop && step.loop->dtype == DType::f32) return run_loop<float>(p, *step.loop, step, values);
  if (step.loop && step.loop->dtype == DType::f64) return run_loop<double>(p, *step.loop, step, values);
  run_blocked(p, kernels, step, values);
}

std::int64_t loop_elements(const Program& p, const Step& step) { return run_elements(p, step); }

std::pair<std::int64_t, std::int64_t> loop_part_range(std::int64_t n, int part, int parts) {
  // Block-aligned edges: each element then sits at the same place in its block as in the whole loop (the
  // vector loops' bodies and tails fall where they would), so a part computes the whole loop's bits.
  auto edge = [&](int i) { return i >= parts ? n : (n * i / parts) / kLoopBlock * kLoopBlock; };
  return {edge(part), edge(part + 1)};
}

std::vector<Array> allocate_materialized(const Program& p, const Step& step) {
  const std::vector<std::int64_t>& shape = p.types[p.equations[step.first].outputs[0]].shape;
  std::vector<Array> out;
  for (ValueId id : step.materialize) out.push_back(Array::empty(Shape(shape.begin(), shape.end()), p.types[id].dtype));
  return out;
}

void run_loop_part(const Program&, const Step& step, const std::vector<std::optional<Array>>& values,
                   std::span<std::byte* const> outputs, std::int64_t begin, std::int64_t end) {
  if (!step.loop) throw Error("internal: run_loop_part on a step without direct loops");
  if (step.loop->dtype == DType::f32) return loop_part<float>(*step.loop, values, outputs, begin, end);
  loop_part<double>(*step.loop, values, outputs, begin, end);
}

}  // namespace weft::program
