// weft/control_flow.hpp (issue 47 §2, the C++ twins of weft.lax's control flow): each of cond, switch_index,
// scan, while_loop and fori_loop against the same computation written as a C++ loop or if, bit for bit (the
// same kernels run either way), traced (jit, with values closed over from the trace around) and eager; scan
// with collectives in its body under pmap(jit(f)) against the unrolled loop; the recorded program holds one
// equation; a carry that changes type is refused naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // (ScanOptions{.reverse = ...}: the rest default)

namespace weft {
namespace {
namespace control_flow_test {

Array Values(Shape shape, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(num_elements(shape)));
  std::uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0);
  }
  return Array::from_vector(v, shape);
}

void ExpectSame(const Array& a, const Array& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.to_doubles(), b.to_doubles());
}

// h = tanh(h @ w + x_i), y_i = sum(h): the RNN step a scan body and a C++ loop both compute.
Array Step(const Array& h, const Array& w, const Array& x) { return tanh(matmul(h, w) + x); }

TEST(Scan, TracedEqualsTheLoopAndIsOneEquation) {
  const Array h0 = Values({3}, 1), w = Values({3, 3}, 2), xs = Values({6, 3}, 3);
  for (const bool reverse : {false, true}) {
    auto scanned = [reverse](const Array& h, const Array& w, const Array& xs) {
      ScanResult r = scan(
          [&](const std::vector<Array>& c, const std::vector<Array>& x) {
            const Array next = Step(c[0], w, x[0]);  // w: a value of the jit trace, captured by the body
            return ScanResult{{next}, {next.sum()}};
          },
          {h}, {xs}, {.reverse = reverse});
      return std::tuple{r.carry[0], r.ys[0]};
    };
    auto [h, ys] = jit(scanned)(h0, w, xs);
    Array want = h0;
    std::vector<Array> want_ys(6);
    for (int s = 0; s < 6; ++s) {
      const int i = reverse ? 5 - s : s;
      want = jit(Step)(want, w, xs[i]);
      want_ys[static_cast<std::size_t>(i)] = jit([](const Array& a) { return a.sum(); })(want);
    }
    ExpectSame(h, want);
    ExpectSame(ys, Array::stack(want_ys));
    const Program p = make_program(scanned)(h0, w, xs);
    EXPECT_EQ(p.num_equations(), 1u) << p;
    EXPECT_EQ(p.count("scan"), 1u) << p;
    // outside any trace the call is traced and run: the same values
    ScanResult eager = scan(
        [&](const std::vector<Array>& c, const std::vector<Array>& x) {
          const Array next = Step(c[0], w, x[0]);
          return ScanResult{{next}, {next.sum()}};
        },
        {h0}, {xs}, {.reverse = reverse});
    ExpectSame(eager.carry[0], want);
    ExpectSame(eager.ys[0], ys);
  }
}

TEST(Scan, LengthAndCarryErrors) {
  auto id = [](const std::vector<Array>& c, const std::vector<Array>&) { return ScanResult{c, {}}; };
  testing::ExpectThrowsWith<InvalidArgument>([&] { scan(id, {Array::zeros({})}, {}); },
                                             {"weft::scan", "no xs to scan over and no length given"});
  testing::ExpectThrowsWith<InvalidArgument>([&] { scan(id, {Array::zeros({})}, {Array::zeros({3})}, {.length = 4}); },
                                             {"length 4 disagrees with an xs' leading axis of 3"});
  // a carry that changes dtype: the type rule names the carry and both types
  testing::ExpectThrowsWith<InvalidArgument>(
      [&] {
        scan([](const std::vector<Array>& c,
                const std::vector<Array>&) { return ScanResult{{c[0].astype(DType::i32)}, {}}; },
             {Array::zeros({})}, {}, {.length = 2});
      },
      {"scan", "carry 0", "i32[]", "f32[]"});
}

TEST(ForiAndWhile, EqualTheirLoops) {
  const Array x0 = Values({4}, 5);
  auto body = [](const Array& i, const std::vector<Array>& c) {
    return std::vector<Array>{c[0] * 0.5 + i.astype(DType::f32)};
  };
  Array want = x0;
  for (int i = 2; i < 9; ++i) want = jit([i](const Array& v) { return v * 0.5 + static_cast<double>(i); })(want);
  ExpectSame(fori_loop(2, 9, body, {x0})[0], want);  // eager, a scan
  auto traced_bounds =
      jit([&](const Array& lo, const Array& hi, const Array& x) { return fori_loop(lo, hi, body, {x})[0]; });
  const Array lo = Array::scalar(2, DType::i32), hi = Array::scalar(9, DType::i32);
  ExpectSame(traced_bounds(lo, hi, x0), want);
  EXPECT_EQ(make_program([&](const Array& l, const Array& h, const Array& x) { return fori_loop(l, h, body, {x})[0]; })(
                lo, hi, x0)
                .count("while_loop"),
            1u);
  ExpectSame(traced_bounds(hi, lo, x0), x0);  // upper <= lower: no iterations
  // while_loop: double until the sum passes a bound closed over from the trace
  auto grow = jit([](const Array& x, const Array& limit) {
    return while_loop([&](const std::vector<Array>& c) { return c[0].sum() < limit; },
                      [](const std::vector<Array>& c) { return std::vector<Array>{c[0] * 2.0 + 1.0}; }, {x})[0];
  });
  Array v = Array::ones({3});
  while (v.sum().item<float>() < 100.0f) v = jit([](const Array& a) { return a * 2.0 + 1.0; })(v);
  ExpectSame(grow(Array::ones({3}), Array::scalar(100)), v);
}

TEST(CondAndSwitch, RunTheBranchTheIndexPicks) {
  const Array x = Values({3}, 7), a = Values({3}, 8), b = Values({3}, 9);
  // the branches close over different values of the trace: each takes them all
  auto f = jit([](const Array& p, const Array& x, const Array& a, const Array& b) {
    return cond(p, [&](const std::vector<Array>& o) { return std::vector<Array>{o[0] * a}; },
                [&](const std::vector<Array>& o) { return std::vector<Array>{o[0] - b}; }, {x})[0];
  });
  ExpectSame(f(Array::scalar(1, DType::boolean), x, a, b),
             jit([](const Array& x, const Array& a) { return x * a; })(x, a));
  ExpectSame(f(Array::scalar(0, DType::boolean), x, a, b),
             jit([](const Array& x, const Array& b) { return x - b; })(x, b));
  const std::vector<BranchFn> branches = {
      [](const std::vector<Array>& o) { return std::vector<Array>{o[0] + 1.0}; },
      [](const std::vector<Array>& o) { return std::vector<Array>{o[0] * 10.0}; },
      [](const std::vector<Array>& o) { return std::vector<Array>{-o[0]}; }};
  for (const int i : {-3, 0, 1, 2, 9}) {  // clamped to [0, 2], as lax.switch
    const Array got = switch_index(Array::scalar(i, DType::i32), branches, {x})[0];  // eager
    const Array want = branches[static_cast<std::size_t>(std::clamp(i, 0, 2))]({x})[0];
    ExpectSame(got, want);
  }
}

TEST(Scan, CollectivesInTheBodyUnderPmapOfJit) {
  Runtime rt({.device_count = 4});
  const Permutation ring = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  auto scanned = pmap(jit([&](Replica& r, const Array& x) {
                        ScanResult out = scan(
                            [&](const std::vector<Array>& c, const std::vector<Array>&) {
                              const Array moved = r.ppermute(c[0], "i", ring);
                              const Array next = moved + r.psum(c[0], "i") * 0.25;
                              return ScanResult{{next}, {next}};
                            },
                            {x}, {}, {.length = 3});
                        return Array::concatenate({out.carry[0], out.ys[0].reshape({9})});
                      }),
                      {.axis = "i", .runtime = &rt});
  auto unrolled = pmap(jit([&](Replica& r, const Array& x) {
                         Array c = x;
                         std::vector<Array> ys;
                         for (int s = 0; s < 3; ++s) {
                           const Array moved = r.ppermute(c, "i", ring);
                           c = moved + r.psum(c, "i") * 0.25;
                           ys.push_back(c);
                         }
                         return Array::concatenate({c, Array::stack(ys).reshape({9})});
                       }),
                       {.axis = "i", .runtime = &rt});
  const Array x = Values({4, 3}, 11);
  ExpectSame(scanned(x).to_host(), unrolled(x).to_host());
}

}  // namespace control_flow_test
}  // namespace
}  // namespace weft
