// Fusion's plan (runs of fusible equations) and its blocked evaluation.
#include "fusion.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

#include "op_registry.hpp"

namespace weft::program {
namespace {

// Below this many elements the arrays of a chain stay in cache anyway: fusing would only add the blocks'
// dispatch (measured: docs/programs.md, "Fusion").
constexpr std::int64_t kMinElements = std::int64_t{1} << 20;
// Elements per block: a few blocks of intermediates fit in a core's L2.
constexpr std::int64_t kBlock = std::int64_t{1} << 14;

bool fusion_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("WEFT_FUSION");
    return !(v && (std::string_view(v) == "off" || std::string_view(v) == "0"));
  }();
  return enabled;
}

// Whether equation `eq` can join a run over `shape`: elementwise, its result of that shape, each operand of
// that shape or a scalar.
bool fusible(const Program& p, const Equation& eq, const std::vector<std::int64_t>& shape) {
  if (!is_elementwise_op(eq.op) || eq.outputs.size() != 1) return false;
  if (p.types[eq.outputs[0]].shape != shape) return false;
  for (ValueId in : eq.inputs) {
    const auto& s = p.types[in].shape;
    if (s != shape && !s.empty()) return false;
  }
  return true;
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
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
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i + 1;
    const Equation& eq = p.equations[i];
    if (fusion_enabled() && eq.outputs.size() == 1) {
      const auto& shape = p.types[eq.outputs[0]].shape;
      if (elements(shape) >= kMinElements && fusible(p, eq, shape)) {
        while (j < n && fusible(p, p.equations[j], shape)) ++j;
      }
    }
    Step step{i, j - i, {}};
    if (step.count > 1) {
      for (std::size_t k = i; k < j; ++k) {
        const ValueId out = p.equations[k].outputs[0];
        if (last_use[out] >= j) step.materialize.push_back(out);
      }
    }
    steps.push_back(std::move(step));
    i = j;
  }
  return steps;
}

void run_fused(const Program& p, const std::vector<Kernel>& kernels, const Step& step,
               std::vector<std::optional<Array>>& values) {
  const std::vector<std::int64_t>& shape = p.types[p.equations[step.first].outputs[0]].shape;
  const std::int64_t n = elements(shape);
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
  for (auto& [id, out] : whole) values[id] = out.reshape(shape);
}

}  // namespace weft::program
