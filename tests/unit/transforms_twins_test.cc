// C++ twins of Python's vmap(axis_name=) and custom_jvp (weft/transforms.hpp, issue 46): vmap of a function
// with collectives over its named axis against the same function under weft::pmap over an axis of that name,
// bit for bit, table-driven; custom_jvp's rule used by jvp, grad, jacfwd and vmap (a rule unlike fun's own
// derivative, so it shows which one ran) against the rule written out and central differences; its checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace transforms_twins_test {

Array Random(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(rng);
  return Array::from_doubles(v, shape, DType::f64);
}

// ---- vmap with an axis_name against pmap -------------------------------------------------------------------

using ReplicaFn = std::function<Array(Replica&, const Array&)>;

TEST(VmapAxisName, CollectivesOverTheBatchAxisEqualPmap) {
  struct Case {
    std::string name;
    ReplicaFn f;
  };
  const std::vector<Case> cases = {
      {"psum", [](Replica& r, const Array& x) { return x / r.psum(x * x, "b"); }},
      {"pmean_pmax", [](Replica& r, const Array& x) { return r.pmean(tanh(x), "b") + r.pmax(x, "b"); }},
      {"axis_index", [](Replica& r, const Array& x) { return x * Array(r.axis_index("b")).astype(DType::f64); }},
      {"all_gather", [](Replica& r, const Array& x) { return r.all_gather(x, "b").sum(0) * x; }},
      {"ppermute", [](Replica& r, const Array& x) { return r.ppermute(x, "b", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }},
  };
  constexpr int n = 4;
  Runtime rt({.device_count = n});
  const Array xs = Random({n, 3}, 7);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::vector<double> mapped = vmap(k.f, {}, {}, "b")(xs).to_doubles();
    const std::vector<double> pmapped = pmap(k.f, {.axis = "b", .runtime = &rt})(xs).to_host().to_doubles();
    EXPECT_EQ(mapped, pmapped);  // bit for bit
  }
}

TEST(VmapAxisName, NamesTheAxisOrRefuses) {
  const Array xs = Random({2, 3}, 1);
  // a function of a Replica& needs the axis its collectives run over
  testing::ExpectContains(
      testing::ErrorOf<InvalidArgument>([&] { vmap([](Replica& r, const Array& x) { return r.psum(x, "b"); })(xs); }),
      {"vmap: the function takes a Replica&", "axis_name"});
  // a collective over another name is unbound, as under pmap
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] {
                            vmap([](Replica& r, const Array& x) { return r.psum(x, "i"); }, {}, {}, "b")(xs);
                          }),
                          {"unbound axis name: i"});
  // a plain function with an axis_name is vmap's plain result
  EXPECT_EQ(vmap([](const Array& x) { return x * 2.0; }, {}, {}, "b")(xs).to_doubles(), (xs * 2.0).to_doubles());
}

// ---- custom_jvp ---------------------------------------------------------------------------------------------

// fun = tanh(x) * y; the rule's tangent is deliberately 3x the true one in x (and true in y), so each result
// shows whether the rule or fun's own derivative ran.
Array Fun(const Array& x, const Array& y) { return tanh(x) * y; }
std::pair<Array, Array> Rule(const std::vector<Array>& p, const std::vector<Array>& t) {
  const Array th = tanh(p[0]);
  return {th * p[1], (1.0 - th * th) * p[1] * t[0] * 3.0 + th * t[1]};
}
// The rule's tangent written out on doubles (the reference).
std::vector<double> RuleTangent(const Array& x, const Array& y, const Array& dx, const Array& dy) {
  const auto xv = x.to_doubles(), yv = y.to_doubles(), dxv = dx.to_doubles(), dyv = dy.to_doubles();
  std::vector<double> out(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double th = std::tanh(xv[i]);
    out[i] = (1 - th * th) * yv[i] * dxv[i] * 3.0 + th * dyv[i];
  }
  return out;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

TEST(CustomJvp, ForwardModeRunsTheRule) {
  const auto f = custom_jvp(Fun, Rule, "scaled");
  const Array x = Random({4}, 2), y = Random({4}, 3), dx = Random({4}, 4), dy = Random({4}, 5);
  EXPECT_EQ(f(x, y).to_doubles(), Fun(x, y).to_doubles());  // eager: fun itself
  const auto [out, t] = jvp(f, {x, y}, {dx, dy});
  EXPECT_EQ(out.to_doubles(), Fun(x, y).to_doubles());
  ExpectNear(t.to_doubles(), RuleTangent(x, y, dx, dy), 1e-14);
  // jacfwd: column i is the rule along unit vector i (diagonal here)
  const Array J = jacfwd(f)(x, y);
  const Array ones = Array::from_doubles(std::vector<double>(4, 1.0), {4}, DType::f64);
  const Array zeros = Array::from_doubles(std::vector<double>(4, 0.0), {4}, DType::f64);
  const std::vector<double> diag = RuleTangent(x, y, ones, zeros);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(J.to_doubles()[i * 4 + j], i == j ? diag[i] : 0.0, 1e-14);
  }
}

TEST(CustomJvp, ReverseModeTransposesTheRule) {
  const auto f = custom_jvp(Fun, Rule, "scaled");
  const Array x = Random({4}, 6), y = Random({4}, 7);
  const std::vector<Array> g2 = grad([&](const Array& a, const Array& b) { return f(a, b).sum(); }, {0, 1})(x, y);
  const Array& gx = g2.at(0);
  const Array& gy = g2.at(1);
  const Array ones = Array::from_doubles(std::vector<double>(4, 1.0), {4}, DType::f64);
  const Array zeros = Array::from_doubles(std::vector<double>(4, 0.0), {4}, DType::f64);
  ExpectNear(gx.to_doubles(), RuleTangent(x, y, ones, zeros), 1e-14);  // elementwise: the rule's diagonal
  ExpectNear(gy.to_doubles(), RuleTangent(x, y, zeros, ones), 1e-14);
  // a rule equal to fun's derivative agrees with central differences of fun
  const auto exact = custom_jvp(Fun, [](const std::vector<Array>& p, const std::vector<Array>& t) {
    const Array th = tanh(p[0]);
    return std::pair{th * p[1], (1.0 - th * th) * p[1] * t[0] + th * t[1]};
  });
  const Array g = grad([&](const Array& a) { return exact(a, y).sum(); })(x);
  std::vector<double> numeric;
  for (std::size_t i = 0; i < 4; ++i) {
    std::vector<double> up = x.to_doubles(), down = up;
    up[i] += 1e-6;
    down[i] -= 1e-6;
    numeric.push_back((Fun(Array::from_doubles(up, {4}, DType::f64), y).sum().to_doubles()[0] -
                       Fun(Array::from_doubles(down, {4}, DType::f64), y).sum().to_doubles()[0]) /
                      2e-6);
  }
  ExpectNear(g.to_doubles(), numeric, 1e-8);
}

TEST(CustomJvp, VmapBatchesTheRule) {
  const auto f = custom_jvp(Fun, Rule, "scaled");
  const Array xs = Random({3, 4}, 8), y = Random({4}, 9), dxs = Random({3, 4}, 10);
  const Array zeros = Array::from_doubles(std::vector<double>(4, 0.0), {4}, DType::f64);
  const Array ts = vmap([&](const Array& x, const Array& dx) { return jvp(f, {x, y}, {dx, zeros}).second; })(xs, dxs);
  const std::vector<double> all = ts.to_doubles();
  for (int e = 0; e < 3; ++e) {
    const Array x = xs.slice(e, e + 1).reshape({4}), dx = dxs.slice(e, e + 1).reshape({4});
    const std::vector<double> row(all.begin() + 4 * e, all.begin() + 4 * (e + 1));
    ExpectNear(row, RuleTangent(x, y, dx, zeros), 1e-14);
  }
}

TEST(CustomJvp, ChecksTheRulesOutputs) {
  const Array x = Random({3}, 11), y = Random({3}, 12);
  const auto wrong_tangent = custom_jvp(Fun, [](const std::vector<Array>& p, const std::vector<Array>& t) {
    return std::pair{Fun(p[0], p[1]), t[0].sum()};
  }, "bad");
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jvp(wrong_tangent, {x, y}, {x, y}); }),
                          {"bad: the jvp rule's tangent output is float64()", "float64(3,)"});
  const auto wrong_primal = custom_jvp(Fun, [](const std::vector<Array>& p, const std::vector<Array>& t) {
    return std::pair{p[0].sum(), t[0]};
  }, "bad");
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jvp(wrong_primal, {x, y}, {x, y}); }),
                          {"bad: the jvp rule's primal output is float64()", "the function's float64(3,)"});
}

}  // namespace transforms_twins_test
}  // namespace
}  // namespace weft
