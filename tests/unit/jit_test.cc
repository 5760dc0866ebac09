// Tracing from C++ (weft/jit.hpp): make_program's printed program against golden text written by hand from
// jaxpr's conventions, jit against eager evaluation bit for bit over a table of functions (and a check that
// each one really was traced, so the comparison cannot pass by jit calling the function eagerly), the
// trace-once counter, and the errors for reading a traced Array's data.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace jit_test {

// Deterministic values in [-2, 2) (a 32-bit LCG), float32, shaped.
Array Values(Shape shape, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(num_elements(shape)));
  std::uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 4.0 - 2.0);
  }
  return Array::from_vector(v, shape);
}

void ExpectInvalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::ExpectThrowsWith<InvalidArgument>(f, parts);
}

TEST(MakeProgram, PrintsLikeAJaxpr) {
  auto f = [](const Array& x, const Array& w) { return tanh(matmul(x, w) + 1.0).sum({1}); };
  const Program p = make_program(f)(Array::zeros({2, 3}), Array::zeros({3, 4}));
  EXPECT_EQ(p.text(),
            "{ lambda a:f32[] ; b:f32[2,3] c:f32[3,4] . let\n"
            "    d:f32[2,4] = matmul b c\n"
            "    e:f32[2,4] = add d a\n"
            "    f:f32[2,4] = tanh e\n"
            "    g:f32[2] = sum[axes=(1,) keepdims=False] f\n"
            "  in (g,) }");
}

TEST(MakeProgram, MethodsAndShapeOpsRecordPythonsOps) {
  // The same ops and parameters weft/_jnp.py records: axes normalised, transpose's perm, astype's dtype.
  auto f = [](const Array& x) {
    const Array y = transpose(x.reshape({4, 2}), {-1, 0}).astype(DType::f64);
    return std::tuple{y.mean({-1}, true), softmax(x, -1), argmax(x, 0)};
  };
  const Program p = make_program(f)(Array::zeros({2, 4}));
  EXPECT_EQ(p.text(),
            "{ lambda ; a:f32[2,4] . let\n"
            "    b:f32[4,2] = reshape[shape=(4, 2)] a\n"
            "    c:f32[2,4] = transpose[perm=(1, 0)] b\n"
            "    d:f64[2,4] = astype[dtype=float64] c\n"
            "    e:f64[2,1] = mean[axes=(1,) keepdims=True] d\n"
            "    f:f32[2,4] = softmax[axis=1] a\n"
            "    g:i32[4] = argmax[axis=0 keepdims=False] a\n"
            "  in (e, f, g) }");
}

TEST(MakeProgram, IndexingRecordsPythonsSlices) {
  // x[1], x[1:3] and where(x > 0, x, 0.0) as weft.make_program prints them from weft.numpy (the constants
  // aside: C++ scalars are f32[]).
  auto f = [](const Array& x) {
    Array row = x[1];
    Array rows = x.slice(1, 3);
    return std::tuple{row, rows, where(x > Array::scalar(0.0), x, 0.0)};
  };
  const Program p = make_program(f)(Array::zeros({4, 8}));
  EXPECT_EQ(p.text(),
            "{ lambda a:f32[] b:f32[] ; c:f32[4,8] . let\n"
            "    d:f32[1,8] = slice[limit=(2, 8) start=(1, 0) step=(1, 1)] c\n"
            "    e:f32[8] = reshape[shape=(8,)] d\n"
            "    f:f32[2,8] = slice[limit=(3, 8) start=(1, 0) step=(1, 1)] c\n"
            "    g:bool[4,8] = greater c a\n"
            "    h:f32[4,8] = where g c b\n"
            "  in (e, f, h) }");
}

TEST(MakeProgram, ReplicaFunctionOverAMesh) {
  auto f = [](Replica& r, const Array& x) {
    const Array total = r.psum(x, "i");  // statements, not one expression: C++ leaves operand order open
    const Array index = r.axis_index("i").astype(DType::f32);
    return x / total + index;
  };
  const Program p = make_program(f, Mesh({{"i", 4}}))(Array::zeros({3}));
  EXPECT_EQ(p.text(),
            "{ lambda ; a:f32[3] . let\n"
            "    b:f32[3] = psum[axes=('i',)] a\n"
            "    c:i32[] = axis_index[axes=('i',)]\n"
            "    d:f32[] = astype[dtype=float32] c\n"
            "    e:f32[3] = divide a b\n"
            "    f:f32[3] = add e d\n"
            "  in (f,) }");
  EXPECT_EQ(p.input_types()[0].varying, std::vector<std::string>{"i"});
  EXPECT_TRUE(p.output_types()[0].varying == std::vector<std::string>{"i"});
}

// ---- jit against eager, bit for bit ------------------------------------------------------------------

using Fn = std::function<Array(const Array&, const Array&)>;
struct Case {
  const char* name;
  Fn fn;
};

std::vector<Case> Cases() {
  const Array table = Values({3, 8}, 99);  // a captured constant
  const Array indices = Array::from_vector(std::vector<std::int32_t>{3, 0, 7, 7, -1});
  return {
      {"add_broadcast", [](const Array& x, const Array& y) { return x + y[0]; }},
      {"scalars", [](const Array& x, const Array& y) { return x * 2.0 - y / 3.0 + 1.5; }},
      {"scalar_left", [](const Array& x, const Array& y) { return 2.0 - x * y + 0.25 / (abs(y) + 1.0); }},
      {"transcendental",
       [](const Array& x, const Array& y) { return sigmoid(tanh(x)) + exp(-abs(x)) + log1p(abs(y)) + sqrt(abs(y)); }},
      {"log_rsqrt", [](const Array& x, const Array& y) { return log(abs(x) + 0.5) * rsqrt(abs(y) + 1.0); }},
      {"relu_sign_negative", [](const Array& x, const Array& y) { return relu(x) - sign(y) + negative(x); }},
      {"sum_all", [](const Array& x, const Array&) { return x.sum(); }},
      {"sum_keepdims", [](const Array& x, const Array& y) { return x.sum({0}, true) + sum(y, {-1}, true); }},
      {"mean_max_min", [](const Array& x, const Array& y) { return x.mean({1}) + max(y, {1}) - x.min({-1}); }},
      {"argmax_argmin", [](const Array& x, const Array& y) { return argmax(x, 1) + argmin(y) + argmax(x); }},
      {"matmul", [](const Array& x, const Array& y) { return matmul(x, transpose(y)); }},
      {"matmul_transposed",
       [](const Array& x, const Array& y) {
         return matmul(x, y, {.transpose_b = true}) + matmul(x, y, {.transpose_a = true}).sum();
       }},
      {"matmul_vector", [](const Array& x, const Array& y) { return matmul(x, y[1]); }},
      {"softmax", [](const Array& x, const Array&) { return softmax(x * 3.0, -1); }},
      {"log_softmax_logsumexp",
       [](const Array& x, const Array& y) { return log_softmax(x, 0) + logsumexp(y, 1, true); }},
      {"reshape_transpose",
       [](const Array& x, const Array& y) { return transpose(x.reshape({8, 4})) + y.reshape({-1, 8}); }},
      {"moveaxis_expand_squeeze",
       [](const Array& x, const Array& y) { return x.moveaxis(0, 1).expand_dims(0).squeeze(0) * y.moveaxis(1, 0); }},
      {"index_slice", [](const Array& x, const Array& y) { return x[1] + x.slice(1, 3).sum({0}) + y.slice_axis(1, 2, 5).sum(); }},
      {"astype", [](const Array& x, const Array& y) { return x.astype(DType::f64) * y.astype(DType::f16).astype(DType::f64); }},
      {"integers",
       [](const Array& x, const Array& y) {
         const Array a = (x * 10.0).astype(DType::i32);
         const Array b = (y * 10.0).astype(DType::i32);
         return ((a & b) | (a ^ ~b)) + a * 3.0 + (a / b).astype(DType::i32) + b.sum({1}, true);
       }},
      {"compare_where",
       [](const Array& x, const Array& y) {
         return where(x > y, x, y) + where(x <= 0.0 * y, 1.0 * x, -1.0).astype(DType::f32) +
                equal(x, y).astype(DType::f32) - not_equal(x, x).astype(DType::f32) + (x >= y).sum().astype(DType::f32);
       }},
      {"where_nonbool_condition", [](const Array& x, const Array& y) { return where(x.astype(DType::i32), x, y); }},
      {"clip_maximum_minimum",
       [](const Array& x, const Array& y) { return clip(x, -0.5, 0.5) + maximum(x, 0.0) - minimum(y, x) + clip(y, std::nullopt, 1.0); }},
      {"power", [](const Array& x, const Array& y) { return power(x, 2.0) + power(abs(x) + 0.5, y); }},
      {"concatenate_stack",
       [](const Array& x, const Array& y) { return Array::concatenate({x, y}, 1).sum({1}) + Array::stack({x, y}, 1).sum({1, 2}); }},
      {"compound_assign",
       [](const Array& x, const Array& y) {
         Array z = x;
         z += y;
         z *= 2.0;
         z -= y[0];
         z /= 3.0;
         Array i = (y * 4.0).astype(DType::i32);
         i += x;  // int32 += float32 stays int32
         return z + i;
       }},
      {"one_hot_take",
       [table, indices](const Array& x, const Array& y) {
         return one_hot(argmax(x, 1), 8) + take(table, indices, 1).sum() + take(y, indices).sum() + take(x, argmin(y, 0), 0).sum();
       }},
      {"captured_constant", [table](const Array& x, const Array&) { return x.slice(0, 3) * table + Array::ones({8}); }},
      {"copy_bitwise_bool", [](const Array& x, const Array& y) { return ((x > Array::scalar(0.0)) & ~(y > Array::scalar(0.0))).copy().astype(DType::f32) + x.copy(); }},
  };
}

TEST(Jit, EqualsEagerBitForBit) {
  const Array x = Values({4, 8}, 1);
  const Array y = Values({4, 8}, 2);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Array want = c.fn(x, y);
    auto jitted = jit(c.fn);
    Array got;
    ASSERT_NO_THROW(got = jitted(x, y));
    EXPECT_EQ(jitted.traces(), 1u);
    // Traced, not called eagerly: the program holds the equations.
    EXPECT_GT(make_program(c.fn)(x, y).num_equations(), 0u);
    EXPECT_FALSE(got.traced());
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(got.identical(want)) << "jit: " << got << "\neager: " << want;
    // The second call runs the cached program.
    EXPECT_TRUE(jitted(x, y).identical(want));
    EXPECT_EQ(jitted.traces(), 1u);
  }
}

TEST(Jit, TracesOncePerSignature) {
  int calls = 0;
  auto f = jit([&calls](const Array& x, const Array& y) {
    ++calls;
    return matmul(x, y).sum() * 2.0;
  });
  const Array x = Values({4, 8}, 3);
  const Array y = Values({8, 2}, 4);
  Array last;
  for (int i = 0; i < 1000; ++i) last = f(x, y);
  EXPECT_EQ(calls, 1);
  EXPECT_FLOAT_EQ(last.item<float>(), (matmul(x, y).sum() * 2.0).item<float>());
  // Another signature traces again; the first stays cached.
  f(Values({2, 8}, 5), y);
  EXPECT_EQ(calls, 2);
  f(x, y);
  f(x.astype(DType::f64), y);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(f.traces(), 3u);
}

TEST(Jit, ResultsAsTheFunctionReturnsThem) {
  auto f = jit([](const Array& x) { return std::tuple{x + 1.0, x.sum()}; });
  auto [a, b] = f(Array::arange(3));
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(b.item<double>(), 3.0);
  auto g = jit([](const Array& x) { return std::vector<Array>{x, x * x}; });
  EXPECT_EQ(g(Array::arange(3))[1].to_doubles(), (std::vector<double>{0, 1, 4}));
  // An output that is a constant of the trace (it does not depend on the inputs).
  auto h = jit([](const Array&) { return Array::full({2}, 7.0); });
  EXPECT_EQ(h(Array::arange(3)).to_doubles(), (std::vector<double>{7, 7}));
}

TEST(Jit, NestedJitIsInlined) {
  auto inner = jit([](const Array& x) { return exp(x) * 2.0; });
  auto outer = [&inner](const Array& x) { return inner(x + 1.0).sum(); };
  const Program p = make_program(outer)(Array::zeros({3}));
  EXPECT_EQ(p.count("exp"), 1u);
  EXPECT_EQ(p.num_equations(), 4u);  // add, exp, multiply, sum
  EXPECT_EQ(inner.traces(), 0u);
}

// ---- reading a traced Array ----------------------------------------------------------------------------

TEST(TracedArray, ReadingItsDataThrowsNamingTheOp) {
  const Array x = Array::arange(4);
  const std::vector<std::string> traced = {"the array is traced", "no data until the program runs"};
  auto expect = [&](const char* op, std::function<void(const Array&)> read) {
    SCOPED_TRACE(op);
    std::vector<std::string> parts = traced;
    parts.push_back(op);
    ExpectInvalid([&] { jit([&](const Array& a) { read(a); return a; })(x); }, parts);
  };
  expect("Array::item", [](const Array& a) { (void)a.sum().item<float>(); });
  expect("Array::to_doubles", [](const Array& a) { (void)a.to_doubles(); });
  expect("Array::data", [](const Array& a) { (void)a.data<float>(); });
  expect("Array::bytes", [](const Array& a) { (void)a.bytes(); });
  expect("Array::value_at", [](const Array& a) { (void)a.value_at(0); });
  expect("Array::to_vector", [](const Array& a) { (void)a.to_vector<float>(); });
  expect("Array::identical", [](const Array& a) { (void)a.identical(a); });
  expect("Array::mutable_bytes", [](const Array& a) {
    Array b = a;
    (void)b.mutable_bytes();
  });
  // Shape and dtype are known while tracing, and printing says what it is.
  jit([](const Array& a) {
    EXPECT_TRUE(a.traced());
    EXPECT_EQ(a.shape(), (Shape{4}));
    EXPECT_EQ(to_string(a), "Traced<float32[4]>");
    return a;
  })(x);
}

TEST(TracedArray, ShapeErrorsNameTheEquation) {
  ExpectInvalid([] { jit([](const Array& a, const Array& b) { return matmul(a, b); })(Array::zeros({2, 3}), Array::zeros({4, 2})); },
                {"matmul", "contracting dimensions differ"});
  ExpectInvalid([] { jit([](const Array& a) { return a.reshape({5}); })(Array::zeros({2, 3})); },
                {"reshape", "cannot reshape"});
}

TEST(TracedArray, AValueKeptPastItsTraceIsRefused) {
  Array kept;
  jit([&kept](const Array& a) {
    kept = a * 2.0;
    return a;
  })(Array::arange(3));
  ASSERT_TRUE(kept.traced());
  ExpectInvalid([&] { (void)(kept + 1.0); }, {"add", "used after its trace ended"});
  ExpectInvalid([&] { jit([&kept](const Array& a) { return a + kept; })(Array::arange(3)); },
                {"add", "a traced value of another trace reached jit", "return it instead"});
}

}  // namespace jit_test
}  // namespace
}  // namespace weft
