// Random elementwise programs against the eager ops (src/program/fusion.*, the executor's liveness and
// buffer reuse): fusion_test.cc checks each rule of the fused runs on programs written for it; this one
// generates 600 programs (seeded, reproducible: a failure names its seed and prints the program) whose runs
// start and stop anywhere, over one float32 or float64 shape from a scalar to 1 Mi + 5 elements, with
// scalars from inputs, constants and in-program reductions on either side, transcendental ops that end a
// direct loop or join a blocked run, values used once, many times or returned, and outputs that are inputs
// or repeated. Each runs three ways: the caller holding its inputs (which must not change), handing fresh
// copies over (their buffers may take results in place), and handing over one Array twice (its buffer
// shared, so never taken). Every output must have the bytes of evaluating the same equations eagerly, one
// weft op at a time (NaN, inf, -0 and subnormals among the inputs). The generator's coverage is counted
// and asserted: fused runs, direct loops, blocked runs and results written into a consumed input's buffer
// each occur, so the comparison cannot pass by nothing being fused.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/arrays.hpp"
#include "weft/ops.hpp"
#include "weft/program.hpp"

namespace weft {
namespace {
namespace fusion_random_programs_test {

struct Op {
  const char* name;
  int arity;
  bool direct;    // one of the direct loops' ops (fusion.cc's loop_op)
  bool reduces;   // to a scalar, ending any run
  std::function<Array(const Array&, const Array&)> eager;
};

const std::vector<Op>& Ops() {
  static const std::vector<Op> ops = {
      {"add", 2, true, false, [](const Array& a, const Array& b) { return a + b; }},
      {"subtract", 2, true, false, [](const Array& a, const Array& b) { return a - b; }},
      {"multiply", 2, true, false, [](const Array& a, const Array& b) { return a * b; }},
      {"divide", 2, true, false, [](const Array& a, const Array& b) { return a / b; }},
      {"maximum", 2, true, false, [](const Array& a, const Array& b) { return maximum(a, b); }},
      {"minimum", 2, true, false, [](const Array& a, const Array& b) { return minimum(a, b); }},
      {"sqrt", 1, true, false, [](const Array& a, const Array&) { return sqrt(a); }},
      {"exp", 1, false, false, [](const Array& a, const Array&) { return exp(a); }},
      {"tanh", 1, false, false, [](const Array& a, const Array&) { return tanh(a); }},
      {"negative", 1, false, false, [](const Array& a, const Array&) { return negative(a); }},
      {"abs", 1, false, false, [](const Array& a, const Array&) { return abs(a); }},
      {"sum", 1, false, true, [](const Array& a, const Array&) { return sum(a); }},
      {"max", 1, false, true, [](const Array& a, const Array&) { return max(a); }},
  };
  return ops;
}

// One generated program: how to build it and how to evaluate it eagerly.
struct Generated {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<Array> inputs;     // the program's inputs, in order
  std::vector<Array> constants;  // scalars the program holds
  struct Eq {
    int op;
    std::vector<int> operands;  // pool indices: inputs, then constants, then equations' results
  };
  std::vector<Eq> equations;
  std::vector<int> outputs;  // pool indices
  bool big = false;
  bool has_transcendental = false;
};

// Inputs on SampleReals' grid with special values at random places (not only where a vector loop starts).
Array Sample(const Shape& shape, DType dtype, std::mt19937& rng) {
  Array a = testing::SampleReals(shape, dtype, static_cast<std::uint32_t>(rng()));
  std::vector<double> v = a.to_doubles();
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -0.0, 0.0,
                             static_cast<double>(std::numeric_limits<float>::denorm_min()) * 3, 1e30, -1e-30, 88.5};
  const std::size_t count = v.empty() ? 0 : rng() % (std::min<std::size_t>(v.size(), 12) + 1);
  for (std::size_t k = 0; k < count; ++k) v[rng() % v.size()] = specials[rng() % std::size(specials)];
  return Array::from_doubles(v, shape, dtype);
}

Generated Generate(std::uint32_t seed) {
  std::mt19937 rng(seed);
  Generated g;
  g.dtype = rng() % 2 ? DType::f32 : DType::f64;
  const Shape shapes[] = {{}, {1}, {7}, {2048}, {2049}, {3, 700}, {6001}, {4, 1024}};
  g.big = rng() % 12 == 0;  // a blocked run needs 1 Mi elements
  g.shape = g.big ? Shape{(1 << 20) + 5} : shapes[rng() % std::size(shapes)];
  const int full_inputs = 1 + static_cast<int>(rng() % 4), scalar_inputs = static_cast<int>(rng() % 3);
  const int constants = static_cast<int>(rng() % 3);
  std::vector<bool> scalar;  // per pool value: rank 0 (while the shape is not)
  for (int k = 0; k < full_inputs; ++k) {
    g.inputs.push_back(Sample(g.shape, g.dtype, rng));
    scalar.push_back(g.shape.empty());
  }
  for (int k = 0; k < scalar_inputs; ++k) {
    g.inputs.push_back(Sample({}, g.dtype, rng));
    scalar.push_back(true);
  }
  for (int k = 0; k < constants; ++k) {
    const double values[] = {0.5, -3.0, 1e-8, 0.999, 2.0};
    g.constants.push_back(Array::scalar(values[rng() % std::size(values)], g.dtype));
    scalar.push_back(true);
  }
  // Operands favour the newest values, so that chains (runs) form, but reach back anywhere.
  auto pick = [&] {
    const int n = static_cast<int>(scalar.size());
    return rng() % 3 ? std::max(0, n - 1 - static_cast<int>(rng() % 3)) : static_cast<int>(rng() % n);
  };
  const int equations = 1 + static_cast<int>(rng() % (g.big ? 8 : 20));
  for (int e = 0; e < equations; ++e) {
    int op = static_cast<int>(rng() % Ops().size());
    if (Ops()[op].reduces && rng() % 3) op = static_cast<int>(rng() % 6);  // reductions now and then
    Generated::Eq eq{op, {}};
    for (int k = 0; k < Ops()[op].arity; ++k) eq.operands.push_back(pick());
    bool all_scalar = true;
    for (int o : eq.operands) all_scalar = all_scalar && scalar[o];
    g.has_transcendental = g.has_transcendental || !Ops()[op].direct;
    g.equations.push_back(eq);
    scalar.push_back(Ops()[op].reduces || all_scalar);
  }
  const int n = static_cast<int>(scalar.size());
  g.outputs.push_back(n - 1);
  for (int k = static_cast<int>(rng() % 4); k > 0; --k) g.outputs.push_back(static_cast<int>(rng() % n));
  return g;
}

Program Build(const Generated& g) {
  ProgramBuilder b;
  std::vector<int> pool;
  for (const Array& in : g.inputs) pool.push_back(b.input({in.dtype(), in.shape(), {}}));
  for (const Array& c : g.constants) pool.push_back(b.constant(c));
  for (const Generated::Eq& eq : g.equations) {
    std::vector<int> operands;
    for (int o : eq.operands) operands.push_back(pool[static_cast<std::size_t>(o)]);
    pool.push_back(b.emit(Ops()[static_cast<std::size_t>(eq.op)].name, operands)[0]);
  }
  std::vector<int> outputs;
  for (int o : g.outputs) outputs.push_back(pool[static_cast<std::size_t>(o)]);
  b.set_outputs(outputs);
  return b.build();
}

std::vector<Array> Eager(const Generated& g) {
  std::vector<Array> pool(g.inputs);
  pool.insert(pool.end(), g.constants.begin(), g.constants.end());
  for (const Generated::Eq& eq : g.equations) {
    const Op& op = Ops()[static_cast<std::size_t>(eq.op)];
    const Array& a = pool[static_cast<std::size_t>(eq.operands[0])];
    pool.push_back(op.eager(a, op.arity == 2 ? pool[static_cast<std::size_t>(eq.operands[1])] : a));
  }
  std::vector<Array> out;
  for (int o : g.outputs) out.push_back(pool[static_cast<std::size_t>(o)]);
  return out;
}

bool SameBytes(const Array& a, const Array& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

std::string Describe(const Generated& g, const Program& p) {
  std::ostringstream os;
  os << dtype_name(g.dtype) << " shape (";
  for (std::int64_t d : g.shape) os << d << ",";
  os << ")\n" << p;
  return os.str();
}

TEST(FusionRandomPrograms, GiveTheEagerOpsBytesHeldConsumedAndAliased) {
  int fused_programs = 0, direct_programs = 0, blocked_programs = 0, reused = 0;
  for (std::uint32_t seed = 0; seed < 600; ++seed) {
    const Generated g = Generate(seed);
    const Program program = Build(g);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + Describe(g, program));
    const std::vector<Array> want = Eager(g);
    if (program.fused_runs() > 0) {
      ++fused_programs;
      (g.big && g.has_transcendental ? blocked_programs : direct_programs)++;
    }
    auto check = [&](const std::vector<Array>& got, const char* how) {
      ASSERT_EQ(got.size(), want.size()) << how;
      for (std::size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(SameBytes(got[k], want[k])) << how << ": output " << k;
    };

    // Held: the inputs stay as they were, and no result shares their buffers.
    std::vector<Array> before;
    for (const Array& in : g.inputs) before.push_back(in.copy());
    const std::vector<Array> held = run_program(program, std::span<const Array>(g.inputs));
    check(held, "held");
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      EXPECT_TRUE(SameBytes(g.inputs[k], before[k])) << "held input " << k << " written";
    }

    // Consumed: fresh copies handed over; their buffers may take results (counted).
    std::vector<Array> given;
    std::vector<const std::byte*> given_data;
    for (const Array& in : g.inputs) {
      given.push_back(in.copy());
      given_data.push_back(given.back().bytes());
    }
    const std::vector<Array> consumed = run_program(program, std::move(given));
    check(consumed, "consumed");
    for (std::size_t k = 0; k < consumed.size(); ++k) {
      const bool in_input = std::find(given_data.begin(), given_data.end(), consumed[k].bytes()) != given_data.end();
      const bool is_input = g.outputs[k] < static_cast<int>(g.inputs.size());  // handed back as it came
      if (in_input && !is_input) ++reused;
    }

    // Aliased: one Array handed over as the first two inputs of its shape (a shared buffer: never taken).
    if (g.inputs.size() >= 2 && g.inputs[0].shape() == g.inputs[1].shape()) {
      Generated twin = g;
      twin.inputs[1] = twin.inputs[0];
      const std::vector<Array> want_twin = Eager(twin);
      std::vector<Array> handed;
      for (const Array& in : twin.inputs) handed.push_back(in.copy());
      handed[1] = handed[0];
      const std::vector<Array> aliased = run_program(program, std::move(handed));
      ASSERT_EQ(aliased.size(), want_twin.size());
      for (std::size_t k = 0; k < want_twin.size(); ++k) EXPECT_TRUE(SameBytes(aliased[k], want_twin[k])) << "aliased: output " << k;
    }
    if (::testing::Test::HasFailure()) return;  // the first failing seed is enough to debug
  }
  // The generator's coverage: most programs fuse something, both evaluations occur, and consumed inputs
  // really take results (else the comparisons above could pass with fusion never running).
  EXPECT_GE(fused_programs, 300) << "programs with a fused run";
  EXPECT_GE(direct_programs, 200) << "programs with a direct loop";
  EXPECT_GE(blocked_programs, 10) << "big programs with a blocked run";
  EXPECT_GE(reused, 100) << "results written into a consumed input's buffer";
  std::printf("fused %d programs (%d direct, %d blocked); %d results in consumed inputs' buffers\n", fused_programs,
              direct_programs, blocked_programs, reused);
}

}  // namespace fusion_random_programs_test
}  // namespace
}  // namespace weft
