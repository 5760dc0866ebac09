// weft::jvp, jacfwd, jacrev, hessian and vmap on C++ functions (weft/transforms.hpp, issue 46): derivatives
// against central differences of the same function run plainly (float64), vmap against a loop over the
// examples, the transforms composed (vmap of grad: per-example gradients; hessian = jacfwd of jacrev; inside
// jit), one trace per signature, and JAX's errors for bad axes and arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace transforms_api_test {

Array Random(const Shape& shape, std::mt19937_64& rng, double low = -1.0, double high = 1.0) {
  std::uniform_real_distribution<double> dist(low, high);
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(rng);
  return Array::from_doubles(v, shape, DType::f64);
}

// x with element i moved by h.
Array Moved(const Array& x, std::size_t i, double h) {
  std::vector<double> v = x.to_doubles();
  v[i] += h;
  return Array::from_doubles(v, x.shape(), x.dtype());
}

void ExpectNear(const Array& got, const std::vector<double>& want, double tol, const std::string& what) {
  const std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  double scale = 1e-3;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], tol * scale) << what << ", element " << i;
  }
}

// A small nonlinear map R^(3x2) x R^(2) -> R^(4, 2)... of several ops with JVP, VJP and batching rules.
Array Layer(const Array& x, const Array& w) { return tanh(matmul(x, w)) * x.sum() + exp(w * 0.5).sum(); }
Array Loss(const Array& w, const Array& x) { return (tanh(matmul(x, w)) * tanh(matmul(x, w))).sum(); }

// d f(args) / d args[k], column by column of central differences: out.shape + args[k].shape, flattened.
template <class F>
std::vector<double> NumericJacobian(F f, std::vector<Array> args, std::size_t k, double h = 1e-6) {
  const std::size_t n = static_cast<std::size_t>(args[k].size());
  const std::size_t m = static_cast<std::size_t>(f(args).size());
  std::vector<double> jac(m * n);
  const Array base = args[k];
  for (std::size_t i = 0; i < n; ++i) {
    args[k] = Moved(base, i, h);
    const std::vector<double> plus = f(args).to_doubles();
    args[k] = Moved(base, i, -h);
    const std::vector<double> minus = f(args).to_doubles();
    for (std::size_t r = 0; r < m; ++r) jac[r * n + i] = (plus[r] - minus[r]) / (2 * h);
  }
  return jac;
}

TEST(TransformsApi, JvpMatchesCentralDifferences) {
  std::mt19937_64 rng(1);
  const Array x = Random({3, 2}, rng), w = Random({2, 4}, rng);
  const Array dx = Random({3, 2}, rng), dw = Random({2, 4}, rng);
  const auto [y, dy] = jvp(Layer, {x, w}, {dx, dw});
  EXPECT_EQ(y.to_doubles(), Layer(x, w).to_doubles());
  const double h = 1e-6;
  const auto along = [&](double s) {
    const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles(), dxv = dx.to_doubles(), dwv = dw.to_doubles();
    std::vector<double> xs(xv.size()), ws(wv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) xs[i] = xv[i] + s * dxv[i];
    for (std::size_t i = 0; i < wv.size(); ++i) ws[i] = wv[i] + s * dwv[i];
    return Layer(Array::from_doubles(xs, x.shape(), DType::f64), Array::from_doubles(ws, w.shape(), DType::f64)).to_doubles();
  };
  const std::vector<double> plus = along(h), minus = along(-h);
  std::vector<double> want(plus.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = (plus[i] - minus[i]) / (2 * h);
  ExpectNear(dy, want, 1e-7, "jvp tangent");
}

TEST(TransformsApi, JvpOfATupleResult) {
  std::mt19937_64 rng(2);
  const Array x = Random({4}, rng), dx = Random({4}, rng);
  const auto f = [](const Array& a) { return std::tuple<Array, Array>{a * a, exp(a).sum()}; };
  const auto [ys, ts] = jvp(f, {x}, {dx});
  const std::vector<double> xv = x.to_doubles(), dv = dx.to_doubles();
  std::vector<double> square(4);
  double total = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    square[i] = 2 * xv[i] * dv[i];
    total += std::exp(xv[i]) * dv[i];
  }
  ExpectNear(std::get<0>(ts), square, 1e-14, "d(x*x)");
  ExpectNear(std::get<1>(ts), {total}, 1e-14, "d sum(exp(x))");
  EXPECT_EQ(std::get<0>(ys).to_doubles(), (x * x).to_doubles());
}

TEST(TransformsApi, JacfwdAndJacrevMatchCentralDifferencesForEachArgument) {
  std::mt19937_64 rng(3);
  const Array x = Random({3, 2}, rng), w = Random({2, 4}, rng);
  const auto plain = [](const std::vector<Array>& a) { return Layer(a[0], a[1]); };
  for (int argnum : {0, 1}) {
    SCOPED_TRACE("argnum " + std::to_string(argnum));
    const std::vector<double> want = NumericJacobian(plain, {x, w}, static_cast<std::size_t>(argnum));
    const Array forward = jacfwd(Layer, argnum)(x, w);
    const Array reverse = jacrev(Layer, argnum)(x, w);
    Shape shape = {3, 4};
    const Shape in = argnum == 0 ? x.shape() : w.shape();
    shape.insert(shape.end(), in.begin(), in.end());
    EXPECT_EQ(forward.shape(), shape);
    EXPECT_EQ(reverse.shape(), shape);
    ExpectNear(forward, want, 1e-7, "jacfwd");
    ExpectNear(reverse, want, 1e-7, "jacrev");
  }
}

TEST(TransformsApi, JacobianOfAScalarAndOfSeveralOutputs) {
  std::mt19937_64 rng(4);
  const Array w = Random({2, 3}, rng), x = Random({5, 2}, rng);
  const std::vector<double> grad_want = NumericJacobian([](const std::vector<Array>& a) { return Loss(a[0], a[1]); },
                                                        {w, x}, 0);
  const Array g = jacrev(Loss)(w, x);
  EXPECT_EQ(g.shape(), w.shape());
  ExpectNear(g, grad_want, 1e-7, "jacrev of a scalar");
  ExpectNear(jacfwd(Loss)(w, x), grad_want, 1e-7, "jacfwd of a scalar");

  const auto two = [](const Array& a) { return std::tuple<Array, Array>{tanh(a), (a * a).sum()}; };
  const Array a = Random({3}, rng);
  const auto [j0, j1] = jacfwd(two)(a);
  const auto [r0, r1] = jacrev(two)(a);
  const std::vector<double> av = a.to_doubles();
  std::vector<double> diag(9, 0.0), grad(3);
  for (std::size_t i = 0; i < 3; ++i) {
    diag[i * 3 + i] = 1 - std::tanh(av[i]) * std::tanh(av[i]);
    grad[i] = 2 * av[i];
  }
  ExpectNear(j0, diag, 1e-14, "jacfwd output 0");
  ExpectNear(r0, diag, 1e-14, "jacrev output 0");
  ExpectNear(j1, grad, 1e-14, "jacfwd output 1");
  ExpectNear(r1, grad, 1e-14, "jacrev output 1");
}

TEST(TransformsApi, HessianMatchesSecondCentralDifferences) {
  std::mt19937_64 rng(5);
  const Array w = Random({2, 2}, rng), x = Random({3, 2}, rng);
  const Array H = hessian(Loss)(w, x);
  EXPECT_EQ(H.shape(), (Shape{2, 2, 2, 2}));
  const double h = 1e-4;
  const std::size_t n = 4;
  std::vector<double> want(n * n);
  const auto at = [&](std::size_t i, double a, std::size_t j, double b) {
    return Loss(Moved(Moved(w, i, a), j, b), x).item<double>();
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      want[i * n + j] = (at(i, h, j, h) - at(i, h, j, -h) - at(i, -h, j, h) + at(i, -h, j, -h)) / (4 * h * h);
    }
  }
  ExpectNear(H, want, 1e-6, "hessian");
  // Symmetric up to rounding, as a Hessian is.
  const std::vector<double> hv = H.to_doubles();
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) EXPECT_NEAR(hv[i * n + j], hv[j * n + i], 1e-12);
  }
}

// vmap against the per-example loop it replaces, for several in_axes / out_axes.
TEST(TransformsApi, VmapEqualsALoopOverExamples) {
  std::mt19937_64 rng(6);
  const Array w = Random({2, 4}, rng);
  const Array xs = Random({5, 3, 2}, rng);       // 5 examples on axis 0
  const Array xs_last = xs.moveaxis(0, 2);       // the same examples on axis 2
  std::vector<Array> loop;
  for (std::int64_t e = 0; e < 5; ++e) loop.push_back(Layer(xs[e], w));
  const Array want = Array::stack(loop);         // [5, 3, 4]

  EXPECT_EQ(vmap(Layer, {0, std::nullopt})(xs, w).to_doubles(), want.to_doubles());
  EXPECT_EQ(vmap(Layer, {-1, std::nullopt})(xs_last, w).to_doubles(), want.to_doubles());
  const Array out1 = vmap(Layer, {0, std::nullopt}, {1})(xs, w);
  EXPECT_EQ(out1.shape(), (Shape{3, 5, 4}));
  EXPECT_EQ(out1.to_doubles(), want.moveaxis(0, 1).to_doubles());
  const Array out_last = vmap(Layer, {2, std::nullopt}, {-1})(xs_last, w);
  EXPECT_EQ(out_last.to_doubles(), want.moveaxis(0, 2).to_doubles());

  // Both arguments mapped; an output that does not depend on the example is broadcast (out_axes 0) or kept
  // as is (out_axes None).
  const Array ws = Random({5, 2, 4}, rng);
  std::vector<Array> both;
  for (std::int64_t e = 0; e < 5; ++e) both.push_back(Layer(xs[e], ws[e]));
  EXPECT_EQ(vmap(Layer)(xs, ws).to_doubles(), Array::stack(both).to_doubles());
  const auto with_constant = [](const Array& x, const Array& c) { return std::tuple<Array, Array>{x * 2.0, c + c}; };
  const Array c = Random({3}, rng);
  const auto [doubled, kept] = vmap(with_constant, {0, std::nullopt}, {0, std::nullopt})(xs, c);
  EXPECT_EQ(doubled.to_doubles(), (xs * 2.0).to_doubles());
  EXPECT_EQ(kept.shape(), c.shape());
  EXPECT_EQ(kept.to_doubles(), (c + c).to_doubles());
  const auto [doubled0, broadcast] = vmap(with_constant, {0, std::nullopt})(xs, c);
  EXPECT_EQ(broadcast.shape(), (Shape{5, 3}));
  for (std::int64_t e = 0; e < 5; ++e) EXPECT_EQ(broadcast[e].to_doubles(), (c + c).to_doubles());
}

TEST(TransformsApi, VmapOfGradGivesPerExampleGradients) {
  std::mt19937_64 rng(7);
  const Array w = Random({2, 3}, rng), xs = Random({4, 5, 2}, rng);
  const auto per_example = vmap(grad(Loss), {std::nullopt, 0});
  const Array got = per_example(w, xs);
  EXPECT_EQ(got.shape(), (Shape{4, 2, 3}));
  const auto g = grad(Loss);
  for (std::int64_t e = 0; e < 4; ++e) {
    const std::vector<double> one = g(w, xs[e]).to_doubles();
    ExpectNear(got[e], one, 1e-14, "example " + std::to_string(e));
  }
  // One trace per signature: the second call with the same shapes runs the cached program.
  per_example(w, Random({4, 5, 2}, rng));
  EXPECT_EQ(per_example.traces(), 1u);
  per_example(w, Random({3, 5, 2}, rng));
  EXPECT_EQ(per_example.traces(), 2u);
}

TEST(TransformsApi, TransformsInlineIntoAnEnclosingJit) {
  std::mt19937_64 rng(8);
  const Array w = Random({2, 3}, rng), x = Random({5, 2}, rng), xs = Random({4, 3, 2}, rng);
  const auto jitted = jit([](const Array& a, const Array& b) { return jacrev(Loss)(a, b); });
  EXPECT_EQ(jitted(w, x).to_doubles(), jacrev(Loss)(w, x).to_doubles());
  const auto mapped = jit([](const Array& a, const Array& b) { return vmap(Layer, {0, std::nullopt})(b, a); });
  EXPECT_EQ(mapped(Random({2, 4}, rng), xs).shape(), (Shape{4, 3, 4}));
}

TEST(TransformsApi, JaxsErrorsForBadAxesAndArguments) {
  const Array a = Array::zeros({3, 2}, DType::f64), b = Array::zeros({4, 2}, DType::f64);
  const auto add = [](const Array& x, const Array& y) { return x + y; };
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vmap(add)(a, b); }),
                          {"vmap got inconsistent sizes for array axes to be mapped",
                           "argument 0 has size 3 along axis 0", "argument 1 has size 4 along axis 0"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vmap(add, {std::nullopt, std::nullopt})(a, a); }),
                          {"vmap must have at least one non-None value in in_axes"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vmap(add, {2, 0})(a, a); }),
                          {"in_axes[0] = 2 is out of range for argument 0 of rank 2"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vmap(add, {0})(a, a); }),
                          {"in_axes has 1 entries for a call with 2 argument(s)"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vmap(add, {0, 0}, {std::nullopt})(a, a); }),
                          {"output 0 depends on the mapped axis, but its out_axes entry is None"});
  const Array n = Array::from_vector<std::int32_t>({1, 2});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jacfwd([](const Array& x) { return x * x; })(n); }),
                          {"jacfwd requires real-valued inputs", "argument 0 is int32"});
  testing::ExpectContains(
      testing::ErrorOf<InvalidArgument>([&] { jacrev([](const Array& x) { return argmax(x); })(a.reshape({6})); }),
      {"jacrev requires real-valued outputs", "output 0 is int32"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jvp(add, {a, a}, {a, b}); }),
                          {"jvp called with different primal and tangent shapes", "argument 1 has shape (3, 2)",
                           "its tangent (4, 2)"});
  testing::ExpectContains(
      testing::ErrorOf<InvalidArgument>([&] { jvp(add, {a, a}, {a, Array::zeros({3, 2}, DType::f32)}); }),
      {"jvp: primal and tangent arguments do not match: argument 1 has dtype float64, its tangent float32"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jacfwd(add, 2)(a, a); }),
                          {"jacfwd: argnum 2 is out of range for a function of 2 argument(s)"});
}

}  // namespace transforms_api_test
}  // namespace
}  // namespace weft
