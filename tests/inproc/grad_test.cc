// weft::grad, weft::value_and_grad and weft::vjp (weft/autodiff.hpp) on C++ functions, against closed-form
// gradients in float64: a least-squares loss (d/dw sum((x w - y)^2) = 2 x^T (x w - y), d/dx = 2 (x w - y) w^T),
// argnums lists, has_aux tuples, vjp's pullback with a given cotangent; the same inside jit (inlined: the
// program has the backward pass's equations, and its result is the eager one bit for bit), traced once per
// signature; inside pmap with a Replica (a psum'ed loss: JAX's pmap rule makes the gradient n times the
// replica's own, issue 3970), eager and traced; the errors (a non-scalar or integer value, a cotangent count).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "../support/arrays.hpp"
#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace grad_test {

Array Reals(Shape shape, std::uint32_t seed) { return testing::SampleReals(shape, DType::f64, seed); }

Array LeastSquares(const Array& w, const Array& x, const Array& y) {
  const Array r = matmul(x, w) - y;
  return (r * r).sum();
}

// The closed forms, written with plain loops (no weft op shared with what is tested but the data).
std::vector<double> Residual(const Array& w, const Array& x, const Array& y, int n, int k, int m) {
  const auto W = w.to_doubles(), X = x.to_doubles(), Y = y.to_doubles();
  std::vector<double> r(static_cast<std::size_t>(n * m));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      double s = 0;
      for (int t = 0; t < k; ++t) s += X[i * k + t] * W[t * m + j];
      r[i * m + j] = s - Y[i * m + j];
    }
  return r;
}
std::vector<double> GradW(const Array& w, const Array& x, const Array& y, int n, int k, int m) {
  const auto r = Residual(w, x, y, n, k, m);
  const auto X = x.to_doubles();
  std::vector<double> g(static_cast<std::size_t>(k * m), 0.0);
  for (int t = 0; t < k; ++t)
    for (int j = 0; j < m; ++j)
      for (int i = 0; i < n; ++i) g[t * m + j] += 2 * X[i * k + t] * r[i * m + j];
  return g;
}
std::vector<double> GradX(const Array& w, const Array& x, const Array& y, int n, int k, int m) {
  const auto r = Residual(w, x, y, n, k, m);
  const auto W = w.to_doubles();
  std::vector<double> g(static_cast<std::size_t>(n * k), 0.0);
  for (int i = 0; i < n; ++i)
    for (int t = 0; t < k; ++t)
      for (int j = 0; j < m; ++j) g[i * k + t] += 2 * r[i * m + j] * W[t * m + j];
  return g;
}

void ExpectClose(const Array& got, const std::vector<double>& want, double scale = 1.0) {
  const auto g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], scale * want[i], 1e-12 * (1 + std::abs(scale * want[i]))) << "element " << i;
  }
}

void ExpectClose(const Array& got, const Array& want) { ExpectClose(got, want.to_doubles()); }

constexpr int N = 5, K = 4, M = 3;

TEST(Grad, LeastSquaresMatchesTheClosedForm) {
  const Array w = Reals({K, M}, 1), x = Reals({N, K}, 2), y = Reals({N, M}, 3);
  ExpectClose(grad(LeastSquares)(w, x, y), GradW(w, x, y, N, K, M));
  ExpectClose(grad(LeastSquares, 1)(w, x, y), GradX(w, x, y, N, K, M));
  auto [value, grads] = value_and_grad(LeastSquares, {1, 0})(w, x, y);
  double loss = 0;
  for (double r : Residual(w, x, y, N, K, M)) loss += r * r;
  EXPECT_NEAR(value.item<double>(), loss, 1e-12 * loss);
  ASSERT_EQ(grads.size(), 2u);
  ExpectClose(grads[0], GradX(w, x, y, N, K, M));
  ExpectClose(grads[1], GradW(w, x, y, N, K, M));
}

TEST(Grad, AuxOutputsComeBackUndifferentiated) {
  const Array w = Reals({K, M}, 4), x = Reals({N, K}, 5), y = Reals({N, M}, 6);
  auto with_aux = [](const Array& w, const Array& x, const Array& y) {
    const Array r = matmul(x, w) - y;
    return std::tuple{(r * r).sum(), r, r.sum() * 0.0 + 7.0};
  };
  auto [value, g] = value_and_grad(with_aux)(w, x, y);
  const auto& [loss, residual, seven] = value;
  ExpectClose(residual, matmul(x, w) - y);
  EXPECT_EQ(seven.item<double>(), 7.0);
  ExpectClose(loss, LeastSquares(w, x, y));
  ExpectClose(g, GradW(w, x, y, N, K, M));  // the aux outputs add nothing to the gradient
}

TEST(Vjp, PullbackOfAGivenCotangent) {
  const Array w = Reals({K, M}, 7), x = Reals({N, K}, 8);
  auto f = [](const Array& w, const Array& x) { return matmul(x, w); };
  auto [out, pullback] = vjp(f, w, x);
  ExpectClose(out, matmul(x, w));
  const Array ct = Reals({N, M}, 9);
  const std::vector<Array> cts = pullback(ct);
  ASSERT_EQ(cts.size(), 2u);
  // d<ct, x w>/dw = x^T ct, d/dx = ct w^T, by loops.
  const auto X = x.to_doubles(), W = w.to_doubles(), C = ct.to_doubles();
  std::vector<double> gw(K * M, 0.0), gx(N * K, 0.0);
  for (int i = 0; i < N; ++i)
    for (int t = 0; t < K; ++t)
      for (int j = 0; j < M; ++j) {
        gw[t * M + j] += X[i * K + t] * C[i * M + j];
        gx[i * K + t] += C[i * M + j] * W[t * M + j];
      }
  ExpectClose(cts[0], gw);
  ExpectClose(cts[1], gx);
  testing::ExpectThrowsWith<InvalidArgument>([&] { pullback(ct, ct); }, {"vjp pullback", "1 outputs", "2 cotangents"});
}

TEST(Grad, InsideJitIsInlinedAndTracedOnce) {
  const Array w = Reals({K, M}, 10), x = Reals({N, K}, 11), y = Reals({N, M}, 12);
  auto g = grad(LeastSquares);
  auto step = jit([g](const Array& w, const Array& x, const Array& y) { return w - g(w, x, y) * 0.1; });
  const Program p = make_program([g](const Array& w, const Array& x, const Array& y) { return g(w, x, y); })(w, x, y);
  EXPECT_GE(p.count("matmul"), 2u) << p;  // the forward product and the backward one(s)
  EXPECT_TRUE(step(w, x, y).identical(w - g(w, x, y) * 0.1));
  for (int i = 0; i < 3; ++i) step(w, x, y);
  EXPECT_EQ(step.traces(), 1u);
}

TEST(Grad, IntegerArgumentsGetZerosAndTheValueMustBeAFloatScalar) {
  const Array w = Reals({K, M}, 13), x = Reals({N, K}, 14);
  auto scaled = [](const Array& w, const Array& n) { return (w * n.astype(DType::f64)).sum(); };
  const Array n = Array::full({K, M}, 3, DType::i32);
  const auto grads = grad(scaled, {0, 1})(w, n);
  ExpectClose(grads[0], Array::full({K, M}, 3.0, DType::f64));
  EXPECT_EQ(grads[1].dtype(), DType::i32);
  EXPECT_EQ(grads[1].to_doubles(), std::vector<double>(K * M, 0.0));
  testing::ExpectThrowsWith<InvalidArgument>([&] { grad([](const Array& a) { return a * 2.0; })(w); },
                                             {"grad requires a scalar output", "float64(4, 3)", "weft::vjp"});
  testing::ExpectThrowsWith<InvalidArgument>([&] { grad([](const Array& a) { return a.sum(); })(n); },
                                             {"grad requires a floating output", "int32"});
}

// Inside pmap: a psum'ed loss of replicated parameters. Under JAX's pmap rules the transpose of psum is psum,
// so each replica's gradient is n times its own (JAX's issue 3970); pmean'ed, it is the replica's own.
TEST(Grad, InsidePmapFollowsJaxPmapRules) {
  Runtime rt({.device_count = 4});
  const Array w = Reals({K, M}, 15);
  const Array xs = Reals({4, N, K}, 16), ys = Reals({4, N, M}, 17);
  auto psummed = [](Replica& r, const Array& w, const Array& x, const Array& y) {
    return r.psum(LeastSquares(w, x, y), "i");
  };
  auto pmeaned = [](Replica& r, const Array& w, const Array& x, const Array& y) {
    return r.pmean(LeastSquares(w, x, y), "i");
  };
  auto eager = pmap(
      [&](Replica& r, const Array& x, const Array& y) {
        return std::tuple{grad(psummed)(r, w, x, y), grad(pmeaned)(r, w, x, y)};
      },
      {.axis = "i", .runtime = &rt});
  auto traced = pmap(jit([&](Replica& r, const Array& x, const Array& y) {
                       return std::tuple{grad(psummed)(r, w, x, y), grad(pmeaned)(r, w, x, y)};
                     }),
                     {.axis = "i", .runtime = &rt});
  auto [ps, pm] = eager(xs, ys);
  auto [tps, tpm] = traced(xs, ys);
  for (int d = 0; d < 4; ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    const Array x = xs[d], y = ys[d];
    ExpectClose(ps.shards()[d].data, GradW(w, x, y, N, K, M), 4.0);
    ExpectClose(pm.shards()[d].data, GradW(w, x, y, N, K, M), 1.0);
    EXPECT_TRUE(tps.shards()[d].data.identical(ps.shards()[d].data));
    EXPECT_TRUE(tpm.shards()[d].data.identical(pm.shards()[d].data));
  }
}

// Megatron's MLP block over 4 model ranks: x (replicated) enters through f, the first weight split by
// columns, the second by rows, the partial products summed by g. The differentiated program all-reduces
// exactly once forward (g) and once backward (f's transpose), and its gradients are the unsplit model's:
// each rank's weight slices get their slice of the full gradient, and x the full gradient on every rank.
TEST(Grad, MegatronBlockHasOneAllReduceEachWayAndTheFullModelsGradients) {
  constexpr int R = 4, B = 3, D = 4, H = 8;
  Runtime rt({.device_count = R});
  const ReplicaGroups all = ReplicaGroups::all(R);
  auto block = [all](Replica& r, const Array& x, const Array& w1, const Array& w2) {
    const Array h = tanh(matmul(r.all_reduce_identical_inputs(x, all), w1));
    const Array y = r.all_reduce_identical_grad_inputs(matmul(h, w2), all);
    return (y * y).sum();
  };
  auto full = [](const Array& x, const Array& w1, const Array& w2) {
    const Array y = matmul(tanh(matmul(x, w1)), w2);
    return (y * y).sum();
  };
  const Array x = Reals({B, D}, 20), w1 = Reals({D, H}, 21), w2 = Reals({H, D}, 22);
  const std::vector<Array> want = grad(full, {0, 1, 2})(x, w1, w2);

  const Program forward = make_program(block, Mesh({{"i", R}}))(x, w1.slice_axis(1, 0, H / R), w2.slice(0, H / R));
  const Program both = vjp_program(forward, {0, 1, 2});
  EXPECT_EQ(forward.count("all_reduce_identical_grad_inputs"), 1u) << forward;  // g: the forward all-reduce
  EXPECT_EQ(both.count("all_reduce_identical_grad_inputs"), 2u) << both;      // and f's transpose
  for (const char* other : {"psum", "pmean", "all_gather", "psum_scatter"}) EXPECT_EQ(both.count(other), 0u) << other;

  std::vector<Array> w1s, w2s;
  for (int d = 0; d < R; ++d) {
    w1s.push_back(w1.slice_axis(1, d * H / R, (d + 1) * H / R));
    w2s.push_back(w2.slice(d * H / R, (d + 1) * H / R));
  }
  auto step = [&](Replica& r, const Array& x, const Array& w1, const Array& w2) {
    const std::vector<Array> g = grad(block, {0, 1, 2})(r, x, w1, w2);
    return std::tuple{g[0], g[1], g[2]};
  };
  const Array xs = Array::stack({x, x, x, x});
  auto check = [&](auto run, const char* how) {
    SCOPED_TRACE(how);
    auto [gx, g1, g2] = run(xs, Array::stack(w1s), Array::stack(w2s));
    for (int d = 0; d < R; ++d) {
      SCOPED_TRACE("rank " + std::to_string(d));
      ExpectClose(gx.shards()[d].data, want[0]);
      ExpectClose(g1.shards()[d].data, want[1].slice_axis(1, d * H / R, (d + 1) * H / R));
      ExpectClose(g2.shards()[d].data, want[2].slice(d * H / R, (d + 1) * H / R));
    }
  };
  check(pmap(step, {.axis = "i", .runtime = &rt}), "eager pmap");
  check(pmap(jit(step), {.axis = "i", .runtime = &rt}), "traced pmap");
}

// C++'s custom_vjp (weft/custom_vjp.hpp): JAX's log1pexp, whose autodiff gradient at x = 100 is nan
// (exp overflows in float32) and whose custom rule gives sigmoid(x); a bwd that is not the derivative (three
// times exp's) shows the rule replaces the transposes; eager calls compute fun; bwd's cotangent count checked.
TEST(CustomVjp, TheUsersRuleReplacesTheTransposes) {
  auto log1pexp = custom_vjp(
      [](const Array& x) { return log1p(exp(x)); },
      [](const Array& x) { return std::pair{log1p(exp(x)), std::vector<Array>{x}}; },
      [](const std::vector<Array>& res, const Array& g) { return std::vector<Array>{g * sigmoid(res[0])}; },
      "log1pexp");
  const Array x = Array::from_doubles({-2.0, 0.0, 3.0, 100.0}, {4}, DType::f32);
  const std::vector<double> got = grad([&](const Array& v) { return log1pexp(v).sum(); })(x).to_doubles();
  const std::vector<double> plain = grad([](const Array& v) { return log1p(exp(v)).sum(); })(x).to_doubles();
  EXPECT_TRUE(std::isnan(plain[3]));  // autodiff: exp(100) = inf in float32, inf / inf
  const double xs[4] = {-2.0, 0.0, 3.0, 100.0};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], 1.0 / (1.0 + std::exp(-xs[i])), 1e-6) << xs[i];
  EXPECT_NEAR(log1pexp(Array::scalar(0.0, DType::f64)).item<double>(), std::log(2.0), 1e-15);  // eager: fun

  auto thrice = custom_vjp([](const Array& v) { return exp(v); },
                           [](const Array& v) { return std::pair{exp(v), std::vector<Array>{exp(v)}}; },
                           [](const std::vector<Array>& res, const Array& g) {
                             return std::vector<Array>{g * res[0] * 3.0};
                           });
  const Array y = Array::from_doubles({0.5, -1.0}, {2}, DType::f64);
  const std::vector<double> g3 = grad([&](const Array& v) { return (thrice(v) * v).sum(); })(y).to_doubles();
  // d/dv (e^v * v) with e^v's derivative taken as 3 e^v: 3 e^v v + e^v.
  for (int i = 0; i < 2; ++i) {
    const double v = y.to_doubles()[i];
    EXPECT_NEAR(g3[i], 3 * std::exp(v) * v + std::exp(v), 1e-12);
  }
  auto wrong = custom_vjp([](const Array& a, const Array& b) { return a * b; },
                          [](const Array& a, const Array& b) { return std::pair{a * b, std::vector<Array>{a}}; },
                          [](const std::vector<Array>&, const Array& g) { return std::vector<Array>{g}; }, "mul");
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] {
                            grad([&](const Array& a) { return wrong(a, a).sum(); })(y);
                          }),
                          {"mul: bwd returned 1 cotangents for 2 arguments"});
}

}  // namespace grad_test
}  // namespace
}  // namespace weft
