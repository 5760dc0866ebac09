// custom_jvp's program form and the custom-rule calls' transformation rules (src/program/custom_calls.hpp;
// weft.custom_jvp records the call from Python): custom_jvp_call equations built by hand, their jvp rules
// registered as programs that deliberately disagree with f's own derivative, so the numbers prove the rule
// ran: forward mode inlines the rule, reverse mode transposes its tangent part (also twice: a second
// derivative), vmap batches it, with batched and shared operands mixed; f's own equations are never
// differentiated; a custom_vjp call is refused in forward mode and batched; the checks name the call.
// References are the derivatives written out by hand, in double.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace autodiff_custom_jvp_test {

const ValueType kVec{DType::f64, {3}, {}};

ProgramParams CallParams(std::int64_t rule, std::int64_t primals, std::int64_t outputs, const std::string& name) {
  return {{"rule", ProgramParam{rule}}, {"primals", ProgramParam{primals}}, {"outputs", ProgramParam{outputs}},
          {"name", ProgramParam{name}}};
}

int Add(ProgramBuilder& b, int x, int y) { return b.emit("add", {x, y})[0]; }
int Mul(ProgramBuilder& b, int x, int y) { return b.emit("multiply", {x, y})[0]; }
int Scalar(ProgramBuilder& b, double v) { return b.constant(Array::scalar(v, DType::f64)); }

Array Vec(std::vector<double> v) { return Array::from_doubles(v, {static_cast<std::int64_t>(v.size())}, DType::f64); }

// jvp rule of "tripled_exp": (x, t) -> (exp(x), 3 t exp(x)): three times exp's own derivative.
std::int64_t TripledExpRule() {
  ProgramBuilder b;
  const int x = b.input(kVec);
  const int t = b.input(kVec);
  const int y = b.emit("exp", {x})[0];
  b.set_outputs({y, Mul(b, Mul(b, t, y), Scalar(b, 3.0))});
  return detail::register_custom_jvp(b.build(), "tripled_exp");
}

// y = custom_jvp_call(x; f's y = exp(x)); the program's output y + y.
Program ExpCallOf(std::int64_t rule) {
  ProgramBuilder b;
  const int x = b.input(kVec);
  const int y = b.emit("custom_jvp_call", {x, b.emit("exp", {x})[0]}, CallParams(rule, 1, 1, "tripled_exp"))[0];
  b.set_outputs({Add(b, y, y)});
  return b.build();
}

TEST(AutodiffCustomJvp, TheCallRunsFAndForwardModeInlinesTheRule) {
  const Program p = ExpCallOf(TripledExpRule());
  EXPECT_NE(p.text().find("custom_jvp_call[name='tripled_exp' outputs=1 primals=1 rule="), std::string::npos) << p;
  const std::vector<double> xs{-1.0, 0.5, 2.0}, ts{1.0, -2.0, 0.25};
  const Program jvp = jvp_program(p);
  const std::vector<Array> out = run_program(jvp, std::vector<Array>{Vec(xs), Vec(ts)});
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(out[0].to_doubles()[i], 2 * std::exp(xs[i]));
    // d(y + y) = 2 dy, dy = the rule's 3 t exp(x) (exp's own rule: t exp(x)).
    EXPECT_NEAR(out[1].to_doubles()[i], 2 * 3 * ts[i] * std::exp(xs[i]), 1e-12 * std::exp(xs[i]));
  }
}

TEST(AutodiffCustomJvp, ReverseModeTransposesTheRuleOnceAndTwice) {
  const Program p = ExpCallOf(TripledExpRule());
  const std::vector<double> xs{-1.0, 0.5, 2.0}, gs{1.0, -2.0, 0.25};
  const Program vjp = vjp_program(p, {0});
  const std::vector<Array> out = run_program(vjp, std::vector<Array>{Vec(xs), Vec(gs)});
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(out[0].to_doubles()[i], 2 * std::exp(xs[i]));
    EXPECT_NEAR(out[1].to_doubles()[i], 2 * 3 * gs[i] * std::exp(xs[i]), 1e-12 * std::exp(xs[i]));
  }
  // The second derivative: the VJP of (x, g) -> 6 g exp(x) with respect to x, seeded with 1 on that output
  // only, is 6 g exp(x) again (the rule's own equations are differentiated, not f's).
  const Program second = vjp_program(vjp, {0});
  const Array zeros = Vec({0, 0, 0}), ones = Vec({1, 1, 1});
  const std::vector<Array> twice = run_program(second, std::vector<Array>{Vec(xs), Vec(gs), zeros, ones});
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(twice[2].to_doubles()[i], 6 * gs[i] * std::exp(xs[i]), 1e-12 * std::exp(xs[i]));
  }
}

// f's own equations are never differentiated, in either mode, nor the rule's primal outputs in reverse mode
// (only its tangent part is transposed): here f is pmax (no derivative in JAX), the rule says (pmax(x), t).
TEST(AutodiffCustomJvp, FsOwnEquationsAndTheRulesPrimalOutputsAreNotDifferentiated) {
  const Mesh mesh({{"i", 2}});
  const ProgramParams over_i{{"axes", ProgramParam{std::vector<std::string>{"i"}}}};
  ProgramBuilder r(mesh);
  const int rx = r.input(kVec);
  r.set_outputs({r.emit("pmax", {rx}, over_i)[0], r.input(kVec)});
  const std::int64_t rule = detail::register_custom_jvp(r.build(), "pmax_through");
  ProgramBuilder b(mesh);
  const int x = b.input(kVec);
  const int m = b.emit("pmax", {x}, over_i)[0];
  b.set_outputs({b.emit("custom_jvp_call", {x, m}, CallParams(rule, 1, 1, "pmax_through"))[0]});
  const Program p = b.build();
  EXPECT_NO_THROW(jvp_program(p));
  EXPECT_NO_THROW(vjp_program(p, {0}));
}

// vmap of a call: f(x, w) = x + w; the rule says (x + w, 2 tw) (f's own: tx + tw). The rule is batched with
// the operands (its tangent output stays shared: only the shared w's tangent reaches it), and the batched call
// differentiates in both modes: a tangent of w reaches every example, a shared w's cotangent sums the
// examples'.
TEST(AutodiffCustomJvp, VmapBatchesTheRuleWithBatchedAndSharedOperands) {
  ProgramBuilder r;
  const int x = r.input(kVec), w = r.input(kVec), tx = r.input(kVec), tw = r.input(kVec);
  r.set_outputs({Add(r, x, w), Add(r, tw, tw)});
  (void)tx;
  const std::int64_t rule = detail::register_custom_jvp(r.build(), "skewed_add");
  ProgramBuilder b;
  const int bx = b.input(kVec), bw = b.input(kVec);
  b.set_outputs({b.emit("custom_jvp_call", {bx, bw, Add(b, bx, bw)}, CallParams(rule, 2, 1, "skewed_add"))[0]});
  const Program p = b.build();

  const BatchedProgram batched = batch_program(p, {true, false}, 2);
  ASSERT_EQ(batched.out_batched, std::vector<bool>{true});
  EXPECT_EQ(batched.program.count("custom_jvp_call"), 1U) << batched.program;
  const Array xs = Array::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  const std::vector<double> ws{10, 20, 30};
  EXPECT_EQ(run_program(batched.program, std::vector<Array>{xs, Vec(ws)})[0].to_doubles(),
            (std::vector<double>{11, 22, 33, 14, 25, 36}));

  // forward mode: 2 tw for each example (the batched rule's tangent output is broadcast to the call's type)
  const Array no_tx = Array::from_doubles({0, 0, 0, 0, 0, 0}, {2, 3}, DType::f64);
  const std::vector<Array> jvp =
      run_program(jvp_program(batched.program), std::vector<Array>{xs, Vec(ws), no_tx, Vec({1, -1, 0.5})});
  EXPECT_EQ(jvp[1].to_doubles(), (std::vector<double>{2, -2, 1, 2, -2, 1}));

  // reverse mode: x's cotangent is zero (the rule ignores tx), w's the examples' g summed, twice
  const Array g = Array::from_doubles({1, 2, 3, -1, -2, -3.5}, {2, 3}, DType::f64);
  const std::vector<Array> vjp = run_program(vjp_program(batched.program, {0, 1}), std::vector<Array>{xs, Vec(ws), g});
  EXPECT_EQ(vjp[1].to_doubles(), no_tx.to_doubles());
  EXPECT_EQ(vjp[2].to_doubles(), (std::vector<double>{0, 0, -1}));
}

// custom_vjp's call: forward mode is refused (JAX's rule), vmap batches bwd. fwd y = x + w, bwd(g) = (g + g,
// g) (f's own: (g, g)).
TEST(AutodiffCustomJvp, ACustomVjpCallIsRefusedInForwardModeAndBatched) {
  ProgramBuilder r;
  const int rg = r.input(kVec);
  r.set_outputs({Add(r, rg, rg), rg});
  const std::int64_t rule = detail::register_custom_vjp(r.build(), "doubled_x");
  ProgramBuilder b;
  const int x = b.input(kVec), w = b.input(kVec);
  b.set_outputs({b.emit("custom_vjp_call", {x, w, Add(b, x, w)}, CallParams(rule, 2, 1, "doubled_x"))[0]});
  const Program p = b.build();
  testing::ExpectContains(testing::ErrorOf<InvalidArgument>([&] { jvp_program(p); }),
                          {"custom_vjp_call", "can't apply forward-mode autodiff (jvp) to a custom_vjp function",
                           "doubled_x"});

  const BatchedProgram batched = batch_program(p, {true, false}, 2);
  ASSERT_EQ(batched.out_batched, std::vector<bool>{true});
  const Array xs = Array::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  const Array g = Array::from_doubles({1, 2, 3, -1, -2, -3.5}, {2, 3}, DType::f64);
  const std::vector<Array> vjp =
      run_program(vjp_program(batched.program, {0, 1}), std::vector<Array>{xs, Vec({10, 20, 30}), g});
  EXPECT_EQ(vjp[0].to_doubles(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(vjp[1].to_doubles(), (std::vector<double>{2, 4, 6, -2, -4, -7}));  // 2 g per example
  EXPECT_EQ(vjp[2].to_doubles(), (std::vector<double>{0, 0, -0.5}));          // g summed over the examples
}

// The checks a hand-built call meets (Python's custom_jvp checks the rule when it traces it), by table.
TEST(AutodiffCustomJvp, RuleAndLayoutErrorsNameTheCall) {
  ProgramBuilder wrong;  // a f64[] tangent for a f64[3] output
  const int wx = wrong.input(kVec);
  wrong.set_outputs({wx, wrong.emit("sum", {wrong.input(kVec)})[0]});
  const Program p = ExpCallOf(detail::register_custom_jvp(wrong.build(), "tripled_exp"));
  ProgramBuilder bwd;
  bwd.set_outputs({bwd.input(kVec)});
  const std::int64_t vjp_rule = detail::register_custom_vjp(bwd.build(), "a_vjp");
  struct Case {
    const char* what;
    std::function<void()> run;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases{
      {"a tangent of the wrong shape", [&] { jvp_program(p); },
       {"custom_jvp_call", "custom_jvp(tripled_exp): the jvp rule gave a f64[] tangent for output 0, a f64[3]"}},
      {"an unknown rule", [&] { ExpCallOf(1 << 30); },
       {"custom_jvp_call: no custom_jvp rule 1073741824 is registered"}},
      {"a custom_vjp rule's number", [&] { ExpCallOf(vjp_rule); },
       {"custom_jvp_call: no custom_jvp rule " + std::to_string(vjp_rule)}},
      {"residual operands", [&] {
         ProgramBuilder b;
         const int x = b.input(kVec);
         b.emit("custom_jvp_call", {x, x, x}, CallParams(TripledExpRule(), 1, 1, "tripled_exp"));
       },
       {"custom_jvp_call: 1 primal inputs and 1 outputs are 2 operands, got 3 (a custom_jvp call has no residuals)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string text = testing::ErrorOf<InvalidArgument>(c.run);
    for (const std::string& part : c.parts) EXPECT_NE(text.find(part), std::string::npos) << text;
  }
}

}  // namespace autodiff_custom_jvp_test
}  // namespace
}  // namespace weft

namespace weft {
namespace {
namespace autodiff_custom_jvp_test {

// A jvp rule (x, t) -> (exp(x), tangent(b, x, t)) for the table below.
using TangentOf = std::function<int(ProgramBuilder&, int x, int t)>;
std::int64_t RuleWithTangent(const TangentOf& tangent, const std::string& name) {
  ProgramBuilder b;
  const int x = b.input(kVec);
  const int t = b.input(kVec);
  b.set_outputs({b.emit("exp", {x})[0], tangent(b, x, t)});
  return detail::register_custom_jvp(b.build(), name);
}

// Reverse mode transposes the rule's tangent part, which JAX requires to be linear in the tangents (it raises
// for a rule that is not: "Transpose rule ... for 'sin' not implemented", or mul's one-linear-operand
// assertion). A linear rule, coefficients from the primals, is transposed (its VJP equals the hand-written
// coefficient times the cotangent); one that is not is refused, naming its equation and why, instead of being
// transposed at zero tangents.
TEST(AutodiffCustomJvp, ReverseModeRefusesARuleThatIsNotLinearInItsTangents) {
  const auto emit = [](ProgramBuilder& b, const char* op, std::vector<int> ins) { return b.emit(op, ins)[0]; };
  struct Linear {
    const char* what;
    TangentOf tangent;
    std::function<double(double)> coefficient;  // d tangent / d t at x, by hand
  };
  const std::vector<Linear> linear{
      {"t * x", [&](ProgramBuilder& b, int x, int t) { return Mul(b, t, x); }, [](double x) { return x; }},
      {"t / x", [&](ProgramBuilder& b, int x, int t) { return emit(b, "divide", {t, x}); },
       [](double x) { return 1 / x; }},
      {"affine t + exp(x)", [&](ProgramBuilder& b, int x, int t) { return Add(b, t, emit(b, "exp", {x})); },
       [](double) { return 1.0; }},
      {"where(x > 0, t, -t)",
       [&](ProgramBuilder& b, int x, int t) {
         return emit(b, "where", {emit(b, "greater", {x, Scalar(b, 0)}), t, emit(b, "negative", {t})});
       },
       [](double x) { return x > 0 ? 1.0 : -1.0; }},
      {"tanh(x) * (t + t)", [&](ProgramBuilder& b, int x, int t) { return Mul(b, emit(b, "tanh", {x}), Add(b, t, t)); },
       [](double x) { return 2 * std::tanh(x); }},
  };
  const std::vector<double> xs{-1.0, 0.5, 2.0}, gs{1.0, -2.0, 0.25};
  for (const Linear& c : linear) {
    SCOPED_TRACE(c.what);
    const Program p = ExpCallOf(RuleWithTangent(c.tangent, "linear"));
    const std::vector<Array> out = run_program(vjp_program(p, {0}), std::vector<Array>{Vec(xs), Vec(gs)});
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(out[1].to_doubles()[i], 2 * gs[i] * c.coefficient(xs[i]), 1e-12);
  }
  struct Nonlinear {
    const char* what;
    TangentOf tangent;
    std::vector<std::string> parts;
  };
  const std::vector<Nonlinear> nonlinear{
      {"exp(t)", [&](ProgramBuilder& b, int, int t) { return emit(b, "exp", {t}); },
       {"= exp b` is not linear in operand 0 (made from a tangent): its derivative depends on it"}},
      {"t * t", [&](ProgramBuilder& b, int, int t) { return Mul(b, t, t); },
       {"= multiply b b` is not linear in operand 0 (made from a tangent): its derivative depends on it"}},
      {"x / t", [&](ProgramBuilder& b, int x, int t) { return emit(b, "divide", {x, t}); },
       {"= divide a b` is not linear in operand 1"}},
      {"relu(t) * x", [&](ProgramBuilder& b, int x, int t) { return Mul(b, emit(b, "relu", {t}), x); },
       {"= relu b` is not linear in operand 0"}},
      {"where(t > 0, t, 0)",
       [&](ProgramBuilder& b, int, int t) {
         return emit(b, "where", {emit(b, "greater", {t, Scalar(b, 0)}), t, Scalar(b, 0)});
       },
       {"= where f d b` reads a bool[3] made from a tangent"}},
      {"sign(t)", [&](ProgramBuilder& b, int, int t) { return emit(b, "sign", {t}); },
       {"= sign b` has a zero derivative"}},
  };
  for (const Nonlinear& c : nonlinear) {
    SCOPED_TRACE(c.what);
    const Program p = ExpCallOf(RuleWithTangent(c.tangent, "bent"));
    std::vector<std::string> parts{"custom_jvp(tripled_exp): the jvp rule is not linear in its tangents, so reverse "
                                   "mode cannot transpose it"};
    parts.insert(parts.end(), c.parts.begin(), c.parts.end());
    const std::string text = testing::ErrorOf<InvalidArgument>([&] { vjp_program(p, {0}); });
    for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << text;
    // Forward mode runs the rule as written: nothing to transpose.
    EXPECT_NO_THROW(jvp_program(p));
  }
}

}  // namespace autodiff_custom_jvp_test
}  // namespace
}  // namespace weft
