// matmul and transpose (weft/ops.hpp) against naive references written here: a triple loop in long double
// (floats) or in wrapping 64-bit unsigned arithmetic (integers, bool) with numpy's 1-d promotion and batch
// broadcasting spelled out index by index, and an index-mapping transpose. Every dtype, the transposed
// operands of a dense layer's backward pass, batches, empty dimensions, and the error texts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "weft/array.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft {
namespace {
namespace linalg_test {

using testing::ErrorOf;
using testing::Ravel;
using testing::SampleIntegers;
using testing::SampleReals;
using testing::Unravel;
using testing::WrapTo;

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

// ---- the reference -------------------------------------------------------------------------------------------

struct Reference {
  Shape shape;
  std::vector<long double> real;        // float results
  std::vector<std::uint64_t> integer;  // integer results, mod 2^64
  std::vector<long double> magnitude;  // sum of |a| |b| over each dot product, for the rounding bound
  std::int64_t k = 0;                  // terms per dot product
};

// numpy.matmul by definition: element (batch..., i, j) = sum_l A[batch..., i, l] * B[batch..., l, j] where A and
// B are the operands seen as stacks of matrices (1-d promoted, transposes applied, batch axes broadcast).
Reference naive_matmul(const Array& a, const Array& b, bool ta, bool tb) {
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  Shape as = a.shape(), bs = b.shape();
  if (a_vec) as.insert(as.begin(), 1);  // a row
  if (b_vec) bs.push_back(1);           // a column
  const std::size_t na = as.size(), nb = bs.size();
  const std::int64_t m = ta ? as[na - 1] : as[na - 2];
  const std::int64_t k = ta ? as[na - 2] : as[na - 1];
  const std::int64_t n = tb ? bs[nb - 2] : bs[nb - 1];
  const std::size_t batch_nd = std::max(na, nb) - 2;
  Shape batch(batch_nd);
  for (std::size_t i = 0; i < batch_nd; ++i) {
    const std::int64_t da = i + na >= batch_nd + 2 ? as[i + na - 2 - batch_nd] : 1;
    const std::int64_t db = i + nb >= batch_nd + 2 ? bs[i + nb - 2 - batch_nd] : 1;
    batch[i] = da == 1 ? db : da;
  }
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  const std::vector<std::int64_t> ai = a.astype(DType::i64).to_vector<std::int64_t>();
  const std::vector<std::int64_t> bi = b.astype(DType::i64).to_vector<std::int64_t>();
  // Flat index of operand element (batch index, row, col) with broadcasting of size-1 batch axes.
  auto flat = [&](const Shape& s, const std::vector<std::int64_t>& bidx, std::int64_t r, std::int64_t c) {
    std::vector<std::int64_t> idx;
    const std::size_t own = s.size() - 2;
    for (std::size_t i = 0; i < own; ++i) {
      const std::int64_t bi_ = bidx[batch_nd - own + i];
      idx.push_back(s[i] == 1 ? 0 : bi_);
    }
    idx.push_back(r);
    idx.push_back(c);
    return Ravel(idx, s);
  };
  Reference ref;
  ref.shape = batch;
  ref.k = k;
  if (!a_vec) ref.shape.push_back(m);
  if (!b_vec) ref.shape.push_back(n);
  const std::int64_t batches = num_elements(batch);
  for (std::int64_t t = 0; t < batches; ++t) {
    const std::vector<std::int64_t> bidx = Unravel(t, batch);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        long double acc = 0, mag = 0;
        std::uint64_t iacc = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          const std::int64_t fa = ta ? flat(as, bidx, l, i) : flat(as, bidx, i, l);
          const std::int64_t fb = tb ? flat(bs, bidx, j, l) : flat(bs, bidx, l, j);
          acc += static_cast<long double>(av[fa]) * bv[fb];
          mag += std::abs(static_cast<long double>(av[fa]) * bv[fb]);
          iacc += static_cast<std::uint64_t>(ai[fa]) * static_cast<std::uint64_t>(bi[fb]);
        }
        ref.real.push_back(acc);
        ref.integer.push_back(iacc);
        ref.magnitude.push_back(mag);
      }
    }
  }
  return ref;
}

// Compares got with the reference: integers exactly (int64 through its own vector, doubles lose bits);
// floats within the classic dot-product bound (k + 2) u sum|a||b| for the accumulation type's unit roundoff
// u (float32 for 16-bit floats), plus one final rounding to the dtype for 16-bit floats.
void expect_matches(const Array& got, const Reference& ref, DType dtype, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.dtype(), dtype);
  ASSERT_EQ(got.shape(), ref.shape);
  if (dtype == DType::i64) {
    const std::vector<std::int64_t> v = got.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<std::int64_t>(ref.integer[i])) << i;
    return;
  }
  const std::vector<double> v = got.to_doubles();
  const double u = dtype == DType::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double final_rounding = dtype == DType::f16    ? std::ldexp(1.0, -11)
                                : dtype == DType::bf16 ? std::ldexp(1.0, -8)
                                                       : 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (is_floating(dtype)) {
      const double r = static_cast<double>(ref.real[i]);
      const double accumulation = (static_cast<double>(ref.k) + 2) * u * static_cast<double>(ref.magnitude[i]);
      const double bound = accumulation * (1 + final_rounding) + final_rounding * std::abs(r);
      EXPECT_NEAR(v[i], r, bound) << "element " << i;
    } else {
      EXPECT_EQ(v[i], WrapTo(static_cast<std::int64_t>(ref.integer[i]), dtype)) << "element " << i;
    }
  }
}

// ---- matmul ----------------------------------------------------------------------------------------------------

struct MatmulCase {
  Shape a, b;
  bool ta, tb;
  Shape out;  // written out by hand, not taken from either implementation
};

const std::vector<MatmulCase> kMatmulCases = {
    {{4, 7}, {7, 2}, false, false, {4, 2}},
    {{1, 1}, {1, 1}, false, false, {1, 1}},
    {{5}, {5}, false, false, {}},                  // 1-d @ 1-d: a scalar
    {{5}, {5, 3}, false, false, {3}},              // a row, the added axis removed
    {{4, 5}, {5}, false, false, {4}},              // a column, removed
    {{2, 3, 4}, {4, 5}, false, false, {2, 3, 5}},  // batch @ matrix
    {{4, 5}, {2, 5, 3}, false, false, {2, 4, 3}},
    {{2, 1, 3, 4}, {1, 5, 4, 2}, false, false, {2, 5, 3, 2}},  // batch axes broadcast both ways
    {{5}, {2, 5, 3}, false, false, {2, 3}},                   // 1-d against a batch
    {{2, 3, 5}, {5}, false, false, {2, 3}},
    {{7, 4}, {7, 2}, true, false, {4, 2}},                    // x^T @ dy: the weight gradient
    {{4, 7}, {2, 7}, false, true, {4, 2}},                    // dy @ W^T: the input gradient
    {{7, 4}, {2, 7}, true, true, {4, 2}},
    {{3, 7, 4}, {3, 7, 5}, true, false, {3, 4, 5}},
    {{3, 4, 7}, {1, 5, 7}, false, true, {3, 4, 5}},
    {{6}, {3, 6}, false, true, {3}},
    {{3, 0}, {0, 4}, false, false, {3, 4}},  // empty contraction: zeros
    {{3, 4}, {4, 0}, false, false, {3, 0}},
    {{0, 3}, {3, 2}, false, false, {0, 2}},
    {{0, 2, 3}, {3, 2}, false, false, {0, 2, 2}},
    {{17, 33}, {33, 9}, false, false, {17, 9}},  // sizes off Eigen's register blocks
};

TEST(Matmul, ShapesTransposesAndBatchesForEveryDType) {
  std::uint32_t seed = 1;
  for (const MatmulCase& c : kMatmulCases) {
    for (DType dtype : kAllDTypes) {
      const Array a = SampleIntegers(c.a, dtype, seed++, -4, 4);
      const Array b = SampleIntegers(c.b, dtype, seed++, -4, 4);
      const Array got = matmul(a, b, {c.ta, c.tb});
      const std::string what = shape_str(c.a) + (c.ta ? ".T" : "") + " @ " + shape_str(c.b) + (c.tb ? ".T " : " ") +
                               std::string(dtype_name(dtype));
      EXPECT_EQ(got.shape(), c.out) << what;
      expect_matches(got, naive_matmul(a, b, c.ta, c.tb), dtype, what);
    }
  }
}

// The shapes of a training step (batch 32, 784 -> 64 for speed of the reference) with the transposes of the
// backward pass, on real-valued inputs.
TEST(Matmul, DenseLayerShapesFloat) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{32, 784}, {784, 64}, false, false},  // forward
      {{32, 784}, {32, 64}, true, false},    // dW = x^T dy
      {{32, 64}, {784, 64}, false, true},    // dx = dy W^T
      {{64, 10}, {32, 64}, true, true},
  };
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      const Array a = SampleReals(c.a, dtype, 11);
      const Array b = SampleReals(c.b, dtype, 12);
      expect_matches(matmul(a, b, {c.ta, c.tb}), naive_matmul(a, b, c.ta, c.tb), dtype,
                     shape_str(c.a) + " @ " + shape_str(c.b) + " " + std::string(dtype_name(dtype)));
    }
  }
}

TEST(Matmul, IntegersWrapLikeNumpy) {
  // Products and sums far beyond the dtype's range: numpy wraps modulo 2^bits, as the reference does.
  struct Case {
    DType dtype;
    int lo, hi;
  };
  for (const Case& c : {Case{DType::i8, -128, 127}, Case{DType::u8, 0, 255}, Case{DType::i32, -2000000000, 2000000000},
                        Case{DType::i64, -2000000000, 2000000000}}) {
    const Array a = SampleIntegers({5, 9}, c.dtype, 3, c.lo, c.hi);
    const Array b = SampleIntegers({9, 4}, c.dtype, 4, c.lo, c.hi);
    expect_matches(matmul(a, b), naive_matmul(a, b, false, false), c.dtype, std::string(dtype_name(c.dtype)));
  }
  // int64 beyond 2^53 (where doubles would lose the low bits): (2^40 + 3) * (2^30 + 5) * 2 mod 2^64.
  const std::int64_t x = (std::int64_t{1} << 40) + 3, y = (std::int64_t{1} << 30) + 5;
  const Array a = Array::from_vector<std::int64_t>({x, x}, {1, 2});
  const Array b = Array::from_vector<std::int64_t>({y, y}, {2, 1});
  const std::uint64_t expected = 2 * (static_cast<std::uint64_t>(x) * static_cast<std::uint64_t>(y));
  EXPECT_EQ(matmul(a, b).to_vector<std::int64_t>(), std::vector<std::int64_t>{static_cast<std::int64_t>(expected)});
}

TEST(Matmul, BoolIsLogicalOrOfAnds) {
  const Array a = Array::from_vector<bool>({true, false, false, false}, {2, 2});
  const Array b = Array::from_vector<bool>({true, true, true, true}, {2, 2});
  const Array c = matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::boolean);
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{1, 1, 0, 0}));
}

TEST(Matmul, MixedDTypesPromoteLikeTheOperators) {
  struct Case {
    DType a, b, out;
  };
  for (const Case& c : {Case{DType::i32, DType::f32, DType::f32}, Case{DType::f16, DType::bf16, DType::f32},
                        Case{DType::f32, DType::f64, DType::f64}, Case{DType::boolean, DType::i8, DType::i8},
                        Case{DType::u8, DType::i8, DType::i32}, Case{DType::bf16, DType::i64, DType::bf16}}) {
    const Array a = SampleIntegers({3, 4}, c.a, 5);
    const Array b = SampleIntegers({4, 2}, c.b, 6);
    const Array got = matmul(a, b);
    EXPECT_EQ(got.dtype(), c.out) << dtype_name(c.a) << " @ " << dtype_name(c.b);
    expect_matches(got, naive_matmul(a.astype(c.out), b.astype(c.out), false, false), c.out,
                   std::string(dtype_name(c.a)) + " @ " + std::string(dtype_name(c.b)));
  }
}

TEST(Matmul, SixteenBitFloatsRoundOnce) {
  // 4096 products of 1: a float16 accumulator would stop at 2048 (2048 + 1 rounds back to 2048); computed in
  // float32 and rounded once, the sum is exact. bfloat16 would stop at 256.
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Array got = matmul(Array::ones({1, 4096}, dtype), Array::ones({4096, 1}, dtype));
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_EQ(got.item<double>(), 4096) << dtype_name(dtype);
  }
  // One rounding of the float32 sum: 1 + 2^-11 + 2^-11 in float16 steps gives 1 (each half-ulp tie rounds to
  // even), the float32 sum 1 + 2^-10 is a float16 number.
  const Array a = Array::from_doubles({1, 1, 1}, {1, 3}, DType::f16);
  const Array b = Array::from_doubles({1, std::ldexp(1.0, -11), std::ldexp(1.0, -11)}, {3, 1}, DType::f16);
  EXPECT_EQ(matmul(a, b).item<double>(), 1 + std::ldexp(1.0, -10));
}

TEST(Matmul, ResultIsANewArray) {
  const Array a = Array::ones({2, 2});
  const Array c = matmul(a, a);
  EXPECT_FALSE(c.shares_buffer_with(a));
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{2, 2, 2, 2}));
}

TEST(Matmul, ErrorsNameBothShapes) {
  struct Case {
    Shape a, b;
    bool ta, tb;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{4, 7}, {6, 2}, false, false, "matmul: contracting dimensions differ: (4, 7) @ (6, 2) (7 != 6)"},
      {{7, 4}, {6, 2}, true, false, "matmul: contracting dimensions differ: (7, 4).T @ (6, 2) (7 != 6)"},
      {{4, 7}, {2, 6}, false, true, "matmul: contracting dimensions differ: (4, 7) @ (2, 6).T (7 != 6)"},
      {{5}, {4}, false, false, "matmul: contracting dimensions differ: (5,) @ (4,) (5 != 4)"},
      {{2, 4, 7}, {3, 7, 2}, false, false,
       "matmul: batch dimensions (2,) and (3,) do not broadcast: (2, 4, 7) @ (3, 7, 2)"},
      {{}, {3}, false, false, "matmul: operands need at least 1 dimension, got a 0-d array: () @ (3,)"},
      {{3}, {3, 2}, true, false,
       "matmul: transpose_a swaps the last two axes, so it needs an operand of at least 2 dimensions: (3,) @ (3, 2)"},
      {{2, 3}, {3}, false, true,
       "matmul: transpose_b swaps the last two axes, so it needs an operand of at least 2 dimensions: (2, 3) @ (3,)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ErrorOf<InvalidArgument>([&] { matmul(Array::zeros(c.a), Array::zeros(c.b), {c.ta, c.tb}); }),
              c.message);
  }
}

// ---- transpose ---------------------------------------------------------------------------------------------------

// numpy.transpose by definition: out[i_0, ..., i_{n-1}] = x[j] with j[perm[k]] = i_k.
std::vector<double> naive_transpose(const Array& x, const std::vector<int>& perm, Shape* out_shape) {
  const int nd = x.ndim();
  Shape shape(nd);
  for (int k = 0; k < nd; ++k) shape[k] = x.shape()[perm[k]];
  const std::vector<double> v = x.to_doubles();
  std::vector<double> out(v.size());
  for (std::int64_t f = 0; f < static_cast<std::int64_t>(out.size()); ++f) {
    const std::vector<std::int64_t> i = Unravel(f, shape);
    std::vector<std::int64_t> j(nd);
    for (int k = 0; k < nd; ++k) j[perm[k]] = i[k];
    out[f] = v[Ravel(j, x.shape())];
  }
  *out_shape = shape;
  return out;
}

TEST(Transpose, EveryPermutationAndElementSize) {
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  const std::vector<Case> cases = {
      {{5, 2}, {1, 0}},           {{5, 2}, {0, 1}},        {{3, 4, 5}, {0, 2, 1}},      {{3, 4, 5}, {2, 1, 0}},
      {{3, 4, 5}, {1, 0, 2}},     {{3, 4, 5}, {1, 2, 0}},  {{3, 4, 5}, {2, 0, 1}},      {{1, 4, 1}, {0, 2, 1}},
      {{3, 1, 2, 2}, {3, 2, 1, 0}}, {{2, 1, 5, 5}, {1, 2, 0, 3}}, {{2, 3, 4, 5}, {0, 3, 1, 2}},
      {{37, 70}, {1, 0}},         {{3, 37, 70}, {0, 2, 1}},  // more than one tile in both directions
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {{4, 0, 3}, {2, 0, 1}},
  };
  std::uint32_t seed = 100;
  for (const Case& c : cases) {
    for (DType dtype : kAllDTypes) {
      const Array x = SampleIntegers(c.shape, dtype, seed++, -100, 100);
      Shape shape;
      const std::vector<double> expected = naive_transpose(x, c.perm, &shape);
      const Array got = transpose(x, c.perm);
      SCOPED_TRACE(shape_str(c.shape) + " " + std::string(dtype_name(dtype)));
      EXPECT_EQ(got.dtype(), dtype);
      EXPECT_EQ(got.shape(), shape);
      EXPECT_EQ(got.to_doubles(), expected);
    }
  }
}

TEST(Transpose, TrainingSizeFloat32) {
  const Array x = SampleReals({784, 512}, DType::f32, 9);
  Shape shape;
  const std::vector<double> expected = naive_transpose(x, {1, 0}, &shape);
  const Array got = transpose(x);
  EXPECT_EQ(got.shape(), (Shape{512, 784}));
  EXPECT_EQ(got.to_doubles(), expected);
}

TEST(Transpose, EmptyPermReversesAndNegativeAxesCount) {
  const Array x = SampleIntegers({2, 3, 4}, DType::i32, 8);
  Shape shape;
  EXPECT_EQ(transpose(x).to_doubles(), naive_transpose(x, {2, 1, 0}, &shape));
  EXPECT_EQ(transpose(x).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(transpose(x, {-1, 0, -2}).to_doubles(), naive_transpose(x, {2, 0, 1}, &shape));
  EXPECT_EQ(transpose(Array::scalar(3)).item<double>(), 3);
  EXPECT_EQ(transpose(Array::arange(4)).to_doubles(), (std::vector<double>{0, 1, 2, 3}));
}

TEST(Transpose, OrderKeepingPermutationsAreViews) {
  // Moving size-1 axes keeps the element order: the result shares the buffer (arrays are immutable values).
  const Array x = SampleIntegers({1, 4, 1, 3}, DType::f32, 2);
  const Array t = transpose(x, {2, 1, 0, 3});
  EXPECT_EQ(t.shape(), (Shape{1, 4, 1, 3}));
  EXPECT_TRUE(t.shares_buffer_with(x));
  EXPECT_FALSE(transpose(x, {0, 3, 2, 1}).shares_buffer_with(x));
}

TEST(Transpose, InvalidPermsAreRefusedByName) {
  const Array x = Array::zeros({2, 3});
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { transpose(x, {1, 0, 2}); }),
            "transpose: perm (1, 0, 2) names 3 axes but the array has 2 dimensions (shape (2, 3))");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { transpose(x, {0}); }),
            "transpose: perm (0,) names 1 axes but the array has 2 dimensions (shape (2, 3))");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { transpose(x, {0, 0}); }),
            "transpose: perm (0, 0) repeats axis 0; it must be a permutation of the 2 axes");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { transpose(x, {1, -1}); }),
            "transpose: perm (1, -1) repeats axis 1; it must be a permutation of the 2 axes");
  EXPECT_EQ(ErrorOf<InvalidArgument>([&] { transpose(x, {2, 0}); }),
            "transpose: axis 2 in perm (2, 0) is out of bounds for array of dimension 2");
}

}  // namespace linalg_test
}  // namespace
}  // namespace weft
