// The control-flow primitives' transformation rules (issue 47 §2; src/program/ops/control.cc) beyond the
// one-equation rows of tests/support/transform_rows.hpp: grad through a scan of 100 tanh steps against the
// same body unrolled 100 times, the structure the rules promise (a JVP runs its loop once, a VJP runs one
// forward scan and one reverse scan, not the whole forward per step), vmap of a body with a collective over
// vmap's own axis, and while_loop's reverse-mode refusal (JAX's message).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace control_flow_rules_test {

constexpr std::int64_t kSteps = 100, kWidth = 4;

ValueType F64(std::vector<std::int64_t> shape) { return {DType::f64, std::move(shape), {}}; }
const ValueType kState = F64({kWidth});

Array Random(std::vector<std::int64_t> shape, std::mt19937_64& rng, double scale) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(rng);
  return Array::from_doubles(v, shape, DType::f64);
}

int Emit(ProgramBuilder& b, const char* op, std::vector<int> ins, ProgramParams params = {}) {
  return b.emit(op, ins, std::move(params))[0];
}

// One tanh-RNN step, h' = tanh(h W + x), emitted into `b`: the scan's body and each unrolled step alike.
int Step(ProgramBuilder& b, int h, int x, int w) { return Emit(b, "tanh", {Emit(b, "add", {Emit(b, "matmul", {h, w}), x})}); }

// loss(h0, xs, W) = sum(h_T * h_T) + sum(ys) over T = `steps` steps, the ys being each step's h' (stacked), as a
// scan; the body's equations all in checkpoint region `region` (none: -1).
Program ScanLossOf(std::int64_t steps, std::int64_t region) {
  ProgramBuilder body;
  const int h = body.input(kState), x = body.input(kState), w = body.input(F64({kWidth, kWidth}));
  ProgramParams marked;
  if (region >= 0) marked["checkpoint"] = region;
  const int pre = body.emit("add", {body.emit("matmul", {h, w}, marked)[0], x}, marked)[0];
  const int next = body.emit("tanh", {pre}, marked)[0];
  body.set_outputs({next, next});
  ProgramBuilder b;
  const int h0 = b.input(kState), xs = b.input(F64({steps, kWidth})), W = b.input(F64({kWidth, kWidth}));
  const std::vector<int> outs =
      b.emit("scan", {h0, xs, W},
             {{"body", SubPrograms{std::make_shared<const Program>(body.build())}}, {"length", steps},
              {"reverse", false}, {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}});
  const int last = Emit(b, "sum", {Emit(b, "multiply", {outs[0], outs[0]})});
  b.set_outputs({Emit(b, "add", {last, Emit(b, "sum", {outs[1]})})});
  return b.build();
}
Program ScanLoss() { return ScanLossOf(kSteps, -1); }

// The same loss with the step inlined 100 times (x_t sliced from xs, each h' stacked by concatenation).
Program UnrolledLoss() {
  ProgramBuilder b;
  int h = b.input(kState);
  const int xs = b.input(F64({kSteps, kWidth})), W = b.input(F64({kWidth, kWidth}));
  std::vector<int> ys;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    const int row = Emit(b, "slice", {xs}, {{"start", std::vector<std::int64_t>{t, 0}},
                                            {"limit", std::vector<std::int64_t>{t + 1, kWidth}},
                                            {"step", std::vector<std::int64_t>{1, 1}}});
    h = Step(b, h, Emit(b, "reshape", {row}, {{"shape", std::vector<std::int64_t>{kWidth}}}), W);
    ys.push_back(h);
  }
  const int stacked = Emit(b, "concatenate", ys, {{"axis", std::int64_t{0}}});
  const int last = Emit(b, "sum", {Emit(b, "multiply", {h, h})});
  b.set_outputs({Emit(b, "add", {last, Emit(b, "sum", {stacked})})});
  return b.build();
}

TEST(ControlFlowRules, GradThroughAScanOf100TanhStepsEqualsTheUnrolledGradient) {
  std::mt19937_64 rng(47);
  const std::vector<Array> args = {Random({kWidth}, rng, 1.0), Random({kSteps, kWidth}, rng, 1.0),
                                   Random({kWidth, kWidth}, rng, 0.6)};
  std::vector<Array> with_seed = args;
  with_seed.push_back(Array::scalar(1.0, DType::f64));
  const std::vector<Array> scanned = run_program(vjp_program(ScanLoss(), {0, 1, 2}), with_seed);
  const std::vector<Array> unrolled = run_program(vjp_program(UnrolledLoss(), {0, 1, 2}), with_seed);
  ASSERT_EQ(scanned.size(), 4u);
  ASSERT_EQ(unrolled.size(), 4u);
  const char* names[] = {"the loss", "d/dh0", "d/dxs", "d/dW"};
  for (std::size_t k = 0; k < 4; ++k) {
    ASSERT_EQ(scanned[k].shape(), unrolled[k].shape()) << names[k];
    const std::vector<double> got = scanned[k].to_doubles(), want = unrolled[k].to_doubles();
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0) << names[k] << " is zero: nothing was compared";
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(std::abs(got[i] - want[i]), 1e-12 * scale)
          << names[k] << " element " << i << ": scan " << got[i] << ", unrolled " << want[i];
    }
  }
}

// Two tanh layers a step, h' = tanh(tanh(h W + x) W), none of it returned as ys: loss = sum(h_T * h_T). Its
// equations all in checkpoint region `region` (none: -1).
Program TwoLayerLoss(std::int64_t steps, std::int64_t region) {
  ProgramBuilder body;
  const int h = body.input(kState), x = body.input(kState), w = body.input(F64({kWidth, kWidth}));
  ProgramParams marked;
  if (region >= 0) marked["checkpoint"] = region;
  const int a = body.emit("tanh", {body.emit("add", {body.emit("matmul", {h, w}, marked)[0], x}, marked)[0]}, marked)[0];
  body.set_outputs({body.emit("tanh", {body.emit("matmul", {a, w}, marked)[0]}, marked)[0]});
  ProgramBuilder b;
  const int h0 = b.input(kState), xs = b.input(F64({steps, kWidth})), W = b.input(F64({kWidth, kWidth}));
  const int last = b.emit("scan", {h0, xs, W},
                          {{"body", SubPrograms{std::make_shared<const Program>(body.build())}}, {"length", steps},
                           {"reverse", false}, {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}})[0];
  b.set_outputs({Emit(b, "sum", {Emit(b, "multiply", {last, last})})});
  return b.build();
}

// The scan's VJP stores the forward's values its backward reads, stacked (here the carry and both tanh results,
// as JAX's scan does); a checkpoint over the body stores its inputs only (the carry: x and W are the scan's
// own operands) and recomputes the rest in the backward. The same gradient, with less memory live.
TEST(ControlFlowRules, CheckpointInsideAScanBodyTradesStoredResidualsForRecomputation) {
  constexpr std::int64_t steps = 200;
  const Program stored = vjp_program(TwoLayerLoss(steps, -1), {0, 1, 2});
  const Program recomputed = vjp_program(TwoLayerLoss(steps, detail::new_checkpoint_region()), {0, 1, 2});
  // Two stacked [steps, 4] residuals less (the tanh results), one more kept live (the xs, read again).
  EXPECT_LE(recomputed.peak_live_bytes() + steps * kWidth * 8, stored.peak_live_bytes())
      << "stored:\n" << stored.text() << "\nrecomputed:\n" << recomputed.text();
  std::mt19937_64 rng(473);
  const std::vector<Array> args = {Random({kWidth}, rng, 1.0), Random({steps, kWidth}, rng, 1.0),
                                   Random({kWidth, kWidth}, rng, 0.6), Array::scalar(1.0, DType::f64)};
  const std::vector<Array> a = run_program(stored, args), b = run_program(recomputed, args);
  ASSERT_EQ(a.size(), 4u);
  for (std::size_t k = 0; k < a.size(); ++k) {
    const std::string diff = a[k].to_doubles() == b[k].to_doubles() ? "" : "differs";
    EXPECT_TRUE(diff.empty()) << "output " << k << ": recomputing in the backward gives other values";
  }
}

// The VJP stacks each iteration's carry in its forward scan and runs the body's VJP in one reverse scan: two
// scans, whatever the length (recomputing the forward per step would hold a scan inside the reverse body).
TEST(ControlFlowRules, ScanVjpIsOneForwardAndOneReverseScan) {
  const Program vjp = vjp_program(ScanLoss(), {0, 1, 2});
  EXPECT_EQ(vjp.count("scan"), 2u) << vjp.text();
  const std::string text = vjp.text();
  EXPECT_NE(text.find("reverse=True"), std::string::npos) << text;
}

// A JVP rule computes the primal results with the tangents, so the primal loop (or cond) runs once.
TEST(ControlFlowRules, JvpRunsEachControlFlowEquationOnce) {
  EXPECT_EQ(jvp_program(ScanLoss()).count("scan"), 1u) << jvp_program(ScanLoss()).text();

  ProgramBuilder branch_a, branch_b;
  branch_a.set_outputs({Emit(branch_a, "tanh", {branch_a.input(kState)})});
  branch_b.set_outputs({Emit(branch_b, "exp", {branch_b.input(kState)})});
  ProgramBuilder c;
  const int index = c.input({DType::i32, {}, {}}), x = c.input(kState);
  c.set_outputs(c.emit("cond", {index, x},
                       {{"branches", SubPrograms{std::make_shared<const Program>(branch_a.build()),
                                                 std::make_shared<const Program>(branch_b.build())}}}));
  const Program cond_jvp = jvp_program(c.build());
  EXPECT_EQ(cond_jvp.count("cond"), 1u) << cond_jvp.text();
  // And it is right: branch 1 (exp) at x, along v.
  std::mt19937_64 rng(470);
  const Array at = Random({kWidth}, rng, 1.0), along = Random({kWidth}, rng, 1.0);
  const std::vector<Array> out = run_program(cond_jvp, {Array::scalar(1, DType::i32), at, Array::scalar(0, DType::i32), along});
  const std::vector<double> xv = at.to_doubles(), vv = along.to_doubles(), t = out[1].to_doubles();
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(t[i], std::exp(xv[i]) * vv[i], 1e-15 * std::exp(xv[i]) * 2);
}

// while i < n: (i + 1, x * 1.1): n = 5 gives x * 1.1^5. Built for the refusal and the JVP's structure.
Program WhileProgram() {
  const ValueType counter{DType::i32, {}, {}};
  ProgramBuilder test;
  const int i = test.input(counter);
  test.input(kState);
  test.set_outputs({Emit(test, "less", {i, test.input(counter)})});
  ProgramBuilder body;
  const int j = body.input(counter), x = body.input(kState);
  body.set_outputs({Emit(body, "add", {j, body.constant(Array::scalar(1, DType::i32))}),
                    Emit(body, "multiply", {x, body.constant(Array::scalar(1.1, DType::f64))})});
  ProgramBuilder b;
  const int i0 = b.input(counter), x0 = b.input(kState), n = b.input(counter);
  b.set_outputs(b.emit("while_loop", {i0, x0, n},
                       {{"cond", SubPrograms{std::make_shared<const Program>(test.build())}},
                        {"body", SubPrograms{std::make_shared<const Program>(body.build())}},
                        {"cond_nconsts", std::int64_t{1}},
                        {"body_nconsts", std::int64_t{0}}}));
  return b.build();
}

TEST(ControlFlowRules, WhileLoopReverseModeIsRefusedWithJaxsMessage) {
  const std::string message = testing::ErrorOf<InvalidArgument>([] { vjp_program(WhileProgram(), {1}); });
  EXPECT_NE(message.find("while_loop"), std::string::npos) << message;
  EXPECT_NE(message.find("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
                         "dynamic start/stop values. Try using lax.scan, or using fori_loop with static start/stop."),
            std::string::npos)
      << message;
}

TEST(ControlFlowRules, WhileLoopJvpCarriesTangentsThroughOneLoop) {
  const Program jvp = jvp_program(WhileProgram());
  EXPECT_EQ(jvp.count("while_loop"), 1u) << jvp.text();
  std::mt19937_64 rng(471);
  const Array x = Random({kWidth}, rng, 1.0), v = Random({kWidth}, rng, 1.0);
  const std::vector<Array> out = run_program(
      jvp, {Array::scalar(0, DType::i32), x, Array::scalar(5, DType::i32), Array::scalar(0, DType::i32), v,
            Array::scalar(0, DType::i32)});
  ASSERT_EQ(out.size(), 4u);
  const std::vector<double> vv = v.to_doubles(), t = out[3].to_doubles();
  for (std::size_t i = 0; i < vv.size(); ++i) EXPECT_NEAR(t[i], std::pow(1.1, 5) * vv[i], 1e-14);
}

// vmap over a mesh axis that a scan's body sums over, with no operand batched: the body is batched anyway
// (its psum becomes a sum along the batch axis: every example the same value, so 4 times it).
// c' = 0.5 c + 0.25 psum(c, 'i'), 3 steps: c * (0.5 + 0.25 * 4)^3.
TEST(ControlFlowRules, VmapBatchesABodyWhoseCollectiveNamesItsAxisEvenWhenNoOperandIsBatched) {
  const Mesh ring({{"i", 4}});
  ProgramBuilder body(ring);
  const int c = body.input({DType::f64, {kWidth}, {"i"}});
  const int half = Emit(body, "multiply", {c, body.constant(Array::scalar(0.5, DType::f64))});
  const int quarter = Emit(body, "multiply", {Emit(body, "psum", {c}, {{"axes", std::vector<std::string>{"i"}}}),
                                              body.constant(Array::scalar(0.25, DType::f64))});
  body.set_outputs({Emit(body, "add", {half, quarter})});
  ProgramBuilder b(ring);
  const int c0 = b.input({DType::f64, {kWidth}, {"i"}});
  b.set_outputs(b.emit("scan", {c0},
                       {{"body", SubPrograms{std::make_shared<const Program>(body.build())}},
                        {"length", std::int64_t{3}},
                        {"reverse", false},
                        {"num_carry", std::int64_t{1}},
                        {"num_consts", std::int64_t{0}}}));
  const BatchedProgram batched = batch_program(b.build(), {false}, 4, "i");
  std::mt19937_64 rng(472);
  const Array x = Random({kWidth}, rng, 1.0);
  const std::vector<Array> out = run_program(batched.program, {x});
  const std::vector<double> xv = x.to_doubles(), got = out[0].to_doubles();
  const std::size_t examples = batched.out_batched[0] ? 4 : 1;
  ASSERT_EQ(got.size(), examples * xv.size());
  for (std::size_t e = 0; e < examples; ++e) {
    for (std::size_t i = 0; i < xv.size(); ++i) {
      EXPECT_NEAR(got[e * xv.size() + i], xv[i] * std::pow(1.5, 3), 1e-14) << "example " << e << " element " << i;
    }
  }
}

// Under shard_map a value's type says which mesh axes it varies over, and a zero tangent or cotangent is
// invariant where its primal varies: the rules type a loop's carried tangents, and every branch's, as their
// primals (a body keeps its carry's type, every branch returns the same types). Here a varying carry whose
// tangent the body zeroes (stop_gradient), and a cond whose branch 1 has a zero tangent.
TEST(ControlFlowRules, TangentsAndCotangentsKeepTheirPrimalsVaryingAxesUnderShardMap) {
  const Mesh mesh({{"i", 2}});
  const ValueType varying{DType::f64, {kWidth}, {"i"}};
  ProgramBuilder body(mesh, CollectiveRules::shard_map);
  const int a = body.input(varying), b = body.input(varying), x = body.input(varying);
  body.set_outputs({Emit(body, "multiply", {a, x}), Emit(body, "stop_gradient", {b}), Emit(body, "tanh", {a})});
  ProgramBuilder f(mesh, CollectiveRules::shard_map);
  const int a0 = f.input(varying), b0 = f.input(varying), xs = f.input({DType::f64, {3, kWidth}, {"i"}});
  f.set_outputs(f.emit("scan", {a0, b0, xs},
                       {{"body", SubPrograms{std::make_shared<const Program>(body.build())}}, {"length", std::int64_t{3}},
                        {"reverse", false}, {"num_carry", std::int64_t{2}}, {"num_consts", std::int64_t{0}}}));
  const Program scanned = f.build();
  EXPECT_NO_THROW(jvp_program(scanned));
  EXPECT_NO_THROW(vjp_program(scanned, {0, 1, 2}));

  // An invariant const beside a varying carry stays invariant (the body takes it so): c' = tanh(c * w).
  ProgramBuilder step(mesh, CollectiveRules::shard_map);
  const int carried = step.input(varying), w = step.input({DType::f64, {kWidth}, {}});
  step.set_outputs({Emit(step, "tanh", {Emit(step, "multiply", {carried, w})})});
  ProgramBuilder g(mesh, CollectiveRules::shard_map);
  const int c0 = g.input(varying), w0 = g.input({DType::f64, {kWidth}, {}});
  g.set_outputs(g.emit("scan", {c0, w0},
                       {{"body", SubPrograms{std::make_shared<const Program>(step.build())}}, {"length", std::int64_t{3}},
                        {"reverse", false}, {"num_carry", std::int64_t{1}}, {"num_consts", std::int64_t{1}}}));
  const Program with_invariant = g.build();
  EXPECT_NO_THROW(jvp_program(with_invariant));
  EXPECT_NO_THROW(vjp_program(with_invariant, {0, 1}));

  ProgramBuilder branch_a(mesh, CollectiveRules::shard_map), branch_b(mesh, CollectiveRules::shard_map);
  branch_a.set_outputs({Emit(branch_a, "tanh", {branch_a.input(varying)})});
  branch_b.set_outputs({Emit(branch_b, "stop_gradient", {branch_b.input(varying)})});
  ProgramBuilder c(mesh, CollectiveRules::shard_map);
  const int index = c.input({DType::i32, {}, {}}), operand = c.input(varying);
  c.set_outputs(c.emit("cond", {index, operand},
                       {{"branches", SubPrograms{std::make_shared<const Program>(branch_a.build()),
                                                 std::make_shared<const Program>(branch_b.build())}}}));
  const Program chosen = c.build();
  EXPECT_NO_THROW(jvp_program(chosen));
  EXPECT_NO_THROW(vjp_program(chosen, {1}));
}

}  // namespace control_flow_rules_test
}  // namespace
}  // namespace weft
