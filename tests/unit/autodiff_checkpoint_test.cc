// Checkpoint regions in the VJP (weft.checkpoint's program form; issue 23): equations carrying
// `checkpoint=<region>` are emitted again right before their backward rules, so the differentiated program
// holds more equations, the same cotangents bit for bit, and a lower planned peak of live bytes (liveness frees
// the forward pass's values at their last forward use). The marker is the one parameter any op accepts, and
// must be an integer.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "weft/ops.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {
namespace autodiff_checkpoint_test {

// s = sum(tanh(...tanh(x))), nine tanhs, each one's rule reading its result; with `regions`, three regions of
// three tanhs.
Program Chain(bool regions) {
  ProgramBuilder b;
  const int x = b.input({DType::f64, {64, 64}, {}});
  int v = x;
  for (std::int64_t k = 0; k < 9; ++k) {
    ProgramParams params;
    if (regions) params["checkpoint"] = ProgramParam{k / 3};
    v = b.emit("tanh", {v}, params)[0];
  }
  b.set_outputs({b.emit("sum", {v})[0]});
  return b.build();
}

TEST(AutodiffCheckpoint, RegionsAreRecomputedWithTheSameCotangentsAndALowerPeak) {
  const Program plain = vjp_program(Chain(false), {0});
  const Program checkpointed = vjp_program(Chain(true), {0});
  // Each tanh once more in the backward pass; the result is a plain program (no markers left).
  EXPECT_EQ(plain.count("tanh"), 9U);
  EXPECT_EQ(checkpointed.count("tanh"), 18U);
  EXPECT_EQ(checkpointed.text().find("checkpoint="), std::string::npos) << checkpointed;
  // Between the passes only the regions' inputs stay live (x and two tanhs), not all nine tanhs; then one
  // region's three at a time: 7 buffers at the peak against 11.
  EXPECT_LE(checkpointed.peak_live_bytes() * 10, plain.peak_live_bytes() * 7)
      << checkpointed.peak_live_bytes() << " against " << plain.peak_live_bytes();

  std::vector<double> xs(64 * 64);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 0.01 * static_cast<double>(i % 37) - 0.2;
  const std::vector<Array> in{Array::from_doubles(xs, {64, 64}, DType::f64), Array::scalar(1.0, DType::f64)};
  const std::vector<Array> want = run_program(plain, in);
  const std::vector<Array> got = run_program(checkpointed, in);
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got[0].to_doubles(), want[0].to_doubles());  // the value, from the forward pass
  EXPECT_EQ(got[1].to_doubles(), want[1].to_doubles());  // the cotangent, from the recomputed values
}

TEST(AutodiffCheckpoint, TheMarkerIsAnIntegerAnyOpAccepts) {
  ProgramBuilder b;
  const int x = b.input({DType::f32, {4}, {}});
  EXPECT_NO_THROW(b.emit("sum", {x}, {{"axes", std::vector<std::int64_t>{0}}, {"checkpoint", std::int64_t{3}}}));
  const std::string text =
      testing::ErrorOf<InvalidArgument>([&] { b.emit("tanh", {x}, {{"checkpoint", std::string("a")}}); });
  testing::ExpectContains(text, {"parameter 'checkpoint' must be an int"});
}

// weft::checkpoint around a C++-traced function: its equations carry the marker, so the VJP of the traced
// program recomputes them, with the same cotangents.
TEST(AutodiffCheckpoint, CppTracedFunctionsCheckpointToo) {
  const auto layer = [](const Array& x, const Array& w) { return tanh(matmul(x, w)); };
  const auto loss = [&](auto f) {
    return [f](const Array& x, const Array& w) { return f(f(x, w), w).sum(); };
  };
  std::vector<double> xs(8 * 8), ws(8 * 8);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    xs[i] = 0.05 * static_cast<double>(i % 11) - 0.25;
    ws[i] = 0.03 * static_cast<double>(i % 7) - 0.1;
  }
  const Array x = Array::from_doubles(xs, {8, 8}, DType::f64), w = Array::from_doubles(ws, {8, 8}, DType::f64);
  const Program plain = vjp_program(make_program(loss(layer))(x, w), {1});
  const Program traced = make_program(loss(checkpoint(layer)))(x, w);
  EXPECT_NE(traced.text().find("tanh[checkpoint="), std::string::npos) << traced;
  const Program checkpointed = vjp_program(traced, {1});
  EXPECT_EQ(checkpointed.count("tanh"), plain.count("tanh") + 2) << checkpointed;
  const std::vector<Array> in{x, w, Array::scalar(1.0, DType::f64)};
  EXPECT_EQ(run_program(checkpointed, in)[1].to_doubles(), run_program(plain, in)[1].to_doubles());
  // Untraced, it just computes the function.
  EXPECT_EQ(checkpoint(layer)(x, w).to_doubles(), layer(x, w).to_doubles());
}

}  // namespace autodiff_checkpoint_test
}  // namespace
}  // namespace weft
