// custom_vjp's program form (src/program/custom_calls.hpp; weft.custom_vjp records it from Python): a
// custom_vjp_call equation built by hand, its bwd registered as a program. It runs as the identity on fwd's
// outputs, the VJP inlines bwd (a deliberately wrong derivative, so the numbers prove bwd ran), and the
// C++ checks name the call: a bwd cotangent of the wrong shape, an unregistered rule.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace autodiff_custom_vjp_test {

const ValueType kVec{DType::f64, {3}, {}};

// bwd(r, g) = 3 * g * r: three times exp's derivative when r = exp(x).
std::int64_t TripledExpRule() {
  ProgramBuilder b;
  const int r = b.input(kVec);
  const int g = b.input(kVec);
  const int three = b.constant(Array::scalar(3.0, DType::f64));
  b.set_outputs({b.emit("multiply", {b.emit("multiply", {g, r})[0], three})[0]});
  return detail::register_custom_vjp(b.build(), "tripled_exp");
}

// y = custom_vjp_call(x; fwd's y = exp(x); residual y), then the program's output 2 * y.
Program CallOf(std::int64_t rule) {
  ProgramBuilder b;
  const int x = b.input(kVec);
  const int y = b.emit("exp", {x})[0];
  const int out = b.emit("custom_vjp_call", {x, y, y},
                         {{"rule", ProgramParam{rule}}, {"primals", ProgramParam{std::int64_t{1}}},
                          {"outputs", ProgramParam{std::int64_t{1}}}, {"name", ProgramParam{std::string("tripled_exp")}}})[0];
  b.set_outputs({b.emit("multiply", {out, b.constant(Array::scalar(2.0, DType::f64))})[0]});
  return b.build();
}

TEST(AutodiffCustomVjp, TheCallRunsFwdAndTheVjpInlinesBwd) {
  const Program p = CallOf(TripledExpRule());
  EXPECT_NE(p.text().find("custom_vjp_call[name='tripled_exp' outputs=1 primals=1 rule="), std::string::npos) << p;
  const Array x = Array::from_doubles({-1.0, 0.5, 2.0}, {3}, DType::f64);
  const Array ct = Array::from_doubles({1.0, -2.0, 0.25}, {3}, DType::f64);
  const std::vector<double> value = run_program(p, std::vector<Array>{x})[0].to_doubles();
  const Program vjp = vjp_program(p, {0});
  const std::vector<Array> out = run_program(vjp, std::vector<Array>{x, ct});
  const std::vector<double> xs = x.to_doubles(), cts = ct.to_doubles();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(value[i], 2 * std::exp(xs[i]));
    EXPECT_DOUBLE_EQ(out[0].to_doubles()[i], value[i]);
    // d(2 y)/dy = 2, then bwd: 3 * g * exp(x) (exp's own rule would give 1 * g * exp(x)).
    EXPECT_NEAR(out[1].to_doubles()[i], 3 * 2 * cts[i] * std::exp(xs[i]), 1e-12 * std::exp(xs[i]));
  }
  EXPECT_EQ(vjp.count("exp"), 1U) << vjp;  // fwd's, not transposed
}

TEST(AutodiffCustomVjp, ABwdCotangentOfTheWrongShapeAndAnUnknownRuleAreNamed) {
  ProgramBuilder bwd;
  const int r = bwd.input(kVec);
  const int g = bwd.input(kVec);
  bwd.set_outputs({bwd.emit("sum", {bwd.emit("multiply", {g, r})[0]})[0]});  // f64[], not f64[3]
  const Program p = CallOf(detail::register_custom_vjp(bwd.build(), "tripled_exp"));
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { vjp_program(p, {0}); }),
                          {"custom_vjp_call", "custom_vjp(tripled_exp): bwd returned a f64[] cotangent for primal input 0, a f64[3]"});
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { CallOf(1 << 30); }),
                          {"custom_vjp_call: no custom_vjp rule 1073741824 is registered"});
}

}  // namespace autodiff_custom_vjp_test
}  // namespace
}  // namespace weft
