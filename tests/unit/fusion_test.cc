// Fused elementwise runs (src/program/fusion.*): the direct loops of plain float arithmetic and sqrt give the
// eager ops' bits at every size (one element, a block, a block and one, several blocks with a remainder), with
// scalars on either side and NaN, inf and -0 among the values; a run is really fused (fused_runs), so the
// comparison cannot pass by running op by op. A bfloat16 product widened to float32 runs as one kernel with
// the pair's bytes. Consumed inputs (run_program's consuming form, JAX's donated buffers) take the results in
// place; inputs the caller still holds are never written.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "../support/arrays.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace fusion_test {

// Every op of the direct loops, a scalar as either operand, each result used once (so the run keeps
// intermediates in its scratch rows) and one intermediate also returned (written out whole). sqrt sees
// negatives (NaN), NaN and inf too; the whole chain is one run (sqrt included).
std::tuple<Array, Array> Chain(const Array& x, const Array& y, const Array& s) {
  const Array a = x * s + y;
  const Array b = maximum(a, y / x) - minimum(x, s) * (s - y) + sqrt(a) * s;
  return {b, a};
}

Array WithSpecials(Array a) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = a.to_doubles();
  const double specials[] = {nan, inf, -inf, -0.0, 0.0};
  for (std::size_t i = 0; i < v.size() && i < 5; ++i) v[i] = specials[i];
  return Array::from_doubles(v, a.shape(), a.dtype());
}

bool SameBytes(const Array& a, const Array& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

TEST(FusedLoops, GiveTheEagerOpsBitsAtEverySize) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (std::int64_t n : {1, 7, 2048, 2049, 6001}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      const Array x = WithSpecials(testing::SampleReals({n}, dtype, 1));
      const Array y = testing::SampleReals({n}, dtype, 2);
      const Array s = Array::scalar(0.375, dtype);
      const Program program = make_program(Chain)(x, y, s);
      ASSERT_EQ(program.fused_runs(), 1u) << program;
      const std::vector<Array> fused = run_program(program, std::vector<Array>{x, y, s});
      const auto [b, a] = Chain(x, y, s);
      EXPECT_TRUE(SameBytes(fused.at(0), b));
      EXPECT_TRUE(SameBytes(fused.at(1), a));
    }
  }
}

// SGD with momentum, as an optimizer step writes it.
std::tuple<Array, Array> Update(const Array& param, const Array& velocity, const Array& grad) {
  const Array v = velocity * 0.9 + grad;
  return {param - v * 0.1, v};
}

// torch.optim.AdamW's update as train.py writes it, c1 and c2 the bias corrections: one run, sqrt and all.
std::tuple<Array, Array, Array> AdamW(const Array& p, const Array& g, const Array& m, const Array& v,
                                      const Array& c1, const Array& c2) {
  const Array decayed = p * (1.0 - 1e-3 * 0.01);
  const Array m2 = m * 0.9 + g * (1.0 - 0.9);
  const Array v2 = v * 0.999 + g * g * (1.0 - 0.999);
  return {decayed - (m2 * c1) * 1e-3 / (sqrt(v2 * c2) + 1e-8), m2, v2};
}

TEST(FusedLoops, AdamWsUpdateIsOneRunWithTheEagerBits) {
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{128, 37};
    std::vector<Array> in{testing::SampleReals(shape, dtype, 6), WithSpecials(testing::SampleReals(shape, dtype, 7)),
                          testing::SampleReals(shape, dtype, 8),
                          testing::SampleReals(shape, dtype, 9) * testing::SampleReals(shape, dtype, 9),
                          Array::scalar(1.0 / (1.0 - 0.9), dtype), Array::scalar(1.0 / (1.0 - 0.999), dtype)};
    const Program program = make_program(AdamW)(in[0], in[1], in[2], in[3], in[4], in[5]);
    ASSERT_EQ(program.fused_runs(), 1u) << program;
    const auto [p, m, v] = AdamW(in[0], in[1], in[2], in[3], in[4], in[5]);
    const std::vector<Array> fused = run_program(program, in);
    EXPECT_TRUE(SameBytes(fused.at(0), p));
    EXPECT_TRUE(SameBytes(fused.at(1), m));
    EXPECT_TRUE(SameBytes(fused.at(2), v));
  }
}

// Mixed precision's product: float32 in, the product of their bfloat16 roundings, handed on in float32.
template <bool kTa, bool kTb>
Array Bf16Product(const Array& a, const Array& b) {
  return matmul(a.astype(DType::bf16), b.astype(DType::bf16), {.transpose_a = kTa, .transpose_b = kTb})
      .astype(DType::f32);
}

// The bfloat16 result also returned: it has another use, so the pair stays two equations.
std::tuple<Array, Array> Bf16ProductKept(const Array& a, const Array& b) {
  const Array r = matmul(a.astype(DType::bf16), b.astype(DType::bf16));
  return {r.astype(DType::f32), r};
}

// A matmul of bfloat16 operands and the astype to float32 of its result run as one kernel
// (array/widened_matmul.hpp): the eager pair's bytes in every transpose form, batched, below the size that
// calls a library (Eigen) and above (oneDNN's bf16 kernels or the float32 fallback, whichever this CPU has),
// NaN and inf among the values; fused (fused_runs), so the comparison cannot pass op by op.
TEST(WidenedBf16Product, GivesTheEagerPairsBits) {
  struct Case {
    const char* name;
    Shape a, b;
    std::function<Array(const Array&, const Array&)> f;
    Program (*trace)(const Array&, const Array&);
  };
  const Case cases[] = {
      {"plain", {64, 96}, {96, 48}, Bf16Product<false, false>,
       [](const Array& a, const Array& b) { return make_program(Bf16Product<false, false>)(a, b); }},
      {"a transposed", {96, 64}, {96, 48}, Bf16Product<true, false>,
       [](const Array& a, const Array& b) { return make_program(Bf16Product<true, false>)(a, b); }},
      {"b transposed", {64, 96}, {48, 96}, Bf16Product<false, true>,
       [](const Array& a, const Array& b) { return make_program(Bf16Product<false, true>)(a, b); }},
      {"batched", {3, 40, 33}, {3, 33, 50}, Bf16Product<false, false>,
       [](const Array& a, const Array& b) { return make_program(Bf16Product<false, false>)(a, b); }},
      {"tiny (Eigen)", {3, 5}, {5, 2}, Bf16Product<false, false>,
       [](const Array& a, const Array& b) { return make_program(Bf16Product<false, false>)(a, b); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Array a = WithSpecials(testing::SampleReals(c.a, DType::f32, 11));
    const Array b = testing::SampleReals(c.b, DType::f32, 12);
    const Program program = c.trace(a, b);
    ASSERT_EQ(program.fused_runs(), 1u) << program;
    const std::vector<Array> fused = run_program(program, std::vector<Array>{a, b});
    EXPECT_TRUE(SameBytes(fused.at(0), c.f(a, b)));
  }
  // Kept: not fused, the same values.
  const Array a = testing::SampleReals({64, 96}, DType::f32, 13), b = testing::SampleReals({96, 48}, DType::f32, 14);
  const Program kept = make_program(Bf16ProductKept)(a, b);
  EXPECT_EQ(kept.fused_runs(), 0u) << kept;
  const std::vector<Array> out = run_program(kept, std::vector<Array>{a, b});
  const auto [widened, r] = Bf16ProductKept(a, b);
  EXPECT_TRUE(SameBytes(out.at(0), widened));
  EXPECT_TRUE(SameBytes(out.at(1), r));
}

TEST(FusedLoops, ConsumedInputsTakeTheResultsAndHeldOnesAreNeverWritten) {
  const Shape shape{3000};
  const Program program = make_program(Update)(Array::zeros(shape), Array::zeros(shape), Array::zeros(shape));
  ASSERT_EQ(program.fused_runs(), 1u) << program;
  const auto [want_param, want_velocity] =
      Update(testing::SampleReals(shape, DType::f32, 3), testing::SampleReals(shape, DType::f32, 4),
             testing::SampleReals(shape, DType::f32, 5));

  // Handed over, each fresh: both results land in input buffers, the right values.
  std::vector<Array> given{testing::SampleReals(shape, DType::f32, 3), testing::SampleReals(shape, DType::f32, 4),
                           testing::SampleReals(shape, DType::f32, 5)};
  std::vector<const std::byte*> buffers;
  for (const Array& a : given) buffers.push_back(a.bytes());
  const std::vector<Array> out = run_program(program, std::move(given));
  EXPECT_TRUE(SameBytes(out.at(0), want_param));
  EXPECT_TRUE(SameBytes(out.at(1), want_velocity));
  for (const Array& result : out) {
    EXPECT_NE(std::find(buffers.begin(), buffers.end(), result.bytes()), buffers.end()) << "a result in fresh memory";
  }

  // Held by the caller (copies kept), or not handed over at all: no input changes, no result shares one.
  const std::vector<Array> held{testing::SampleReals(shape, DType::f32, 3), testing::SampleReals(shape, DType::f32, 4),
                                testing::SampleReals(shape, DType::f32, 5)};
  std::vector<Array> before;
  for (const Array& a : held) before.push_back(a.copy());
  for (const std::vector<Array>& run : {run_program(program, std::vector<Array>(held)), run_program(program, held)}) {
    EXPECT_TRUE(SameBytes(run.at(0), want_param));
    EXPECT_TRUE(SameBytes(run.at(1), want_velocity));
    for (const Array& result : run) {
      for (const Array& input : held) EXPECT_FALSE(result.shares_buffer_with(input));
    }
  }
  for (std::size_t k = 0; k < held.size(); ++k) EXPECT_TRUE(SameBytes(held[k], before[k])) << "input " << k << " written";
}

}  // namespace fusion_test
}  // namespace
}  // namespace weft
