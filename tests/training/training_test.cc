// The training workload is right (issue 7, item 6): every parallel layout follows the 1-device run's losses
// step by step (same initialisation, same batches; only summation order differs), the same layout run twice
// is bit-identical, resuming from a checkpoint continues bit-identically, the hand-written backward pass
// matches finite differences (also split over model ranks), and bad data files give clear errors.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <weft/ops.hpp>
#include <weft/weft.hpp>
#include <weft/ops.hpp>
#include <weft/random.hpp>

#include "dataset.hpp"
#include "mlp.hpp"
#include "trainer.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace mnist {
namespace {

using weft::Array;

constexpr std::int64_t kSteps = 100;
constexpr std::int64_t kTrainLimit = kSteps * 256;  // one pass over the first 25600 images, no epoch boundary

const Dataset& FashionMnist() {
  static const Dataset data = load_dataset(kDefaultDataDir);
  return data;
}

std::vector<double> Losses(const TrainResult& r) {
  std::vector<double> losses;
  for (const StepRecord& s : r.steps) losses.push_back(s.loss);
  return losses;
}

TrainResult Train(TrainConfig config) {
  weft::Runtime rt({.device_count = 8});
  config.runtime = &rt;
  if (config.train_limit == 0) config.train_limit = kTrainLimit;
  if (config.steps == 0) config.steps = kSteps;
  config.evaluate = false;
  Trainer trainer(config, FashionMnist());
  return trainer.run();
}

const std::vector<double>& OneDeviceLosses(weft::DType dtype) {
  static std::map<weft::DType, std::vector<double>> losses;
  if (!losses.count(dtype)) losses[dtype] = Losses(Train({.devices = 1, .dtype = dtype}));
  return losses[dtype];
}

struct Layout {
  const char* name;
  TrainConfig config;
};

class LayoutTest : public ::testing::TestWithParam<Layout> {};

// In float64 every layout follows the 1-device run for all 100 steps to within 1e-12: the layouts differ
// only in the order of additions (each replica's batch slice, the psums over data and model ranks), and in
// float64 those rounding differences (~1e-16) stay far from flipping any ReLU gate or argmax. (Measured:
// at most 1.3e-15.)
TEST_P(LayoutTest, FollowsTheOneDeviceLossesForAHundredStepsInFloat64) {
  const std::vector<double>& reference = OneDeviceLosses(weft::DType::f64);
  TrainConfig config = GetParam().config;
  config.dtype = weft::DType::f64;
  const std::vector<double> losses = Losses(Train(config));
  ASSERT_EQ(losses.size(), reference.size());
  // The loss falls (the model learns), and every step agrees.
  EXPECT_LT(reference.back(), 0.75 * reference.front());
  for (std::size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], reference[i], 1e-12 * std::fabs(reference[i])) << "step " << i;
}

// In float32 the same holds within 1e-5 until the rounding differences (~1e-7) first flip a ReLU gate: each
// flip changes a gradient by a finite amount, and with lr 0.1 and momentum 0.9 the runs then drift apart
// (measured: <= 1.2e-6 up to step 25, 3e-4 at step 30, 7% by step 85, the same for data, model and ZeRO
// layouts, all of which share the 8-way summation). The float64 test above covers all 100 steps.
TEST_P(LayoutTest, FollowsTheOneDeviceLossesInFloat32UntilRoundingFlipsAGate) {
  const std::vector<double>& reference = OneDeviceLosses(weft::DType::f32);
  TrainConfig config = GetParam().config;
  config.steps = 20;
  const std::vector<double> losses = Losses(Train(config));
  ASSERT_EQ(losses.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) EXPECT_NEAR(losses[i], reference[i], 1e-5 * std::fabs(reference[i])) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutTest,
    ::testing::Values(Layout{"data8", {.devices = 8}}, Layout{"data8_replicated_update", {.devices = 8, .replicated_update = true}},
                      Layout{"data4_model2", {.devices = 8, .model_parallel = 2}},
                      Layout{"model8", {.devices = 8, .model_parallel = 8}}, Layout{"zero8", {.devices = 8, .zero = true}},
                      Layout{"zero2x4", {.devices = 8, .model_parallel = 4, .zero = true}},
                      // The gradients by reverse mode (weft::value_and_grad), not the hand-written backward pass.
                      Layout{"one_device_autodiff", {.devices = 1, .autodiff_backward = true}},
                      Layout{"data8_autodiff", {.devices = 8, .autodiff_backward = true}},
                      Layout{"zero8_autodiff", {.devices = 8, .zero = true, .autodiff_backward = true}},
                      // Tensor parallelism's model sum as Megatron's g: no collective in the backward pass.
                      Layout{"data4_model2_autodiff", {.devices = 8, .model_parallel = 2, .autodiff_backward = true}},
                      Layout{"zero2x4_autodiff", {.devices = 8, .model_parallel = 4, .zero = true, .autodiff_backward = true}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Training, SameLayoutTwiceIsBitIdentical) {
  for (const TrainConfig& config : {TrainConfig{.devices = 8, .steps = 20}, TrainConfig{.devices = 8, .model_parallel = 2, .steps = 20},
                                    TrainConfig{.devices = 8, .zero = true, .steps = 20}}) {
    const std::vector<double> a = Losses(Train(config));
    const std::vector<double> b = Losses(Train(config));
    ASSERT_EQ(a.size(), 20u);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;  // bitwise
  }
}

TEST(Training, ResumeFromACheckpointContinuesBitIdentically) {
  const std::string path = ::testing::TempDir() + "/mnist-resume.safetensors";
  for (const TrainConfig& layout : {TrainConfig{.devices = 8}, TrainConfig{.devices = 8, .model_parallel = 2},
                                    TrainConfig{.devices = 4, .zero = true}}) {
    TrainConfig straight = layout;
    straight.steps = 30;
    const std::vector<double> expected = Losses(Train(straight));

    TrainConfig first = layout;
    first.steps = 15;
    first.checkpoint_path = path;
    Train(first);
    TrainConfig second = layout;
    second.steps = 30;
    second.resume_path = path;
    const TrainResult resumed = Train(second);
    ASSERT_EQ(resumed.steps.size(), 15u);
    EXPECT_EQ(resumed.steps.front().step, 15);
    for (std::size_t i = 0; i < resumed.steps.size(); ++i)
      EXPECT_EQ(resumed.steps[i].loss, expected[15 + i]) << "step " << 15 + i;  // bitwise
  }
  std::filesystem::remove(path);
}

TEST(Training, ResumeRefusesAnotherSeed) {
  const std::string path = ::testing::TempDir() + "/mnist-seed.safetensors";
  Train({.devices = 2, .steps = 2, .checkpoint_path = path});
  try {
    Train({.devices = 2, .steps = 4, .seed = 7, .resume_path = path});
    ADD_FAILURE() << "resumed with another seed";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("resume with the same --seed"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// ---- the backward pass against finite differences, in float64 on a small model ---------------------------

struct GradientCase {
  MlpShape shape{12, 8, 5};
  std::int64_t batch = 6;
  Parameters params;
  Array images, labels;
  GradientCase() {
    params = init_parameters(weft::random::key(3), shape, weft::DType::f64);
    // Non-zero biases so that their gradients are exercised away from the initial point.
    for (int i : {kB1, kB2, kB3}) params[i] = weft::random::normal(weft::random::key(10 + i), params[i].shape(), weft::DType::f64) * 0.1;
    images = weft::random::uniform(weft::random::key(4), {batch, shape.inputs}, weft::DType::f64);
    labels = Array::from_vector(std::vector<std::int32_t>{0, 4, 2, 2, 1, 3});
  }
  double loss(const Parameters& p) const {
    return forward_backward(p, images, labels, batch, [](const Array& x) { return x; }).loss.item<double>();
  }
  // Central differences of the full model's loss with respect to every element of parameter `index`.
  std::vector<double> numeric_gradient(int index) const {
    const double eps = 1e-6;
    std::vector<double> values = params[index].to_doubles(), grad(values.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
      Parameters p = params;
      std::vector<double> plus = values, minus = values;
      plus[k] += eps;
      minus[k] -= eps;
      p[index] = Array::from_doubles(plus, params[index].shape(), weft::DType::f64);
      const double up = loss(p);
      p[index] = Array::from_doubles(minus, params[index].shape(), weft::DType::f64);
      grad[k] = (up - loss(p)) / (2 * eps);
    }
    return grad;
  }
};

void ExpectGradientsClose(const std::vector<double>& analytic, const std::vector<double>& numeric, const char* name) {
  ASSERT_EQ(analytic.size(), numeric.size()) << name;
  for (std::size_t k = 0; k < numeric.size(); ++k)
    EXPECT_NEAR(analytic[k], numeric[k], 1e-7 + 1e-5 * std::fabs(numeric[k])) << name << "[" << k << "]";
}

TEST(GradientCheck, BackwardMatchesFiniteDifferences) {
  const GradientCase c;
  const StepResult s = forward_backward(c.params, c.images, c.labels, c.batch, [](const Array& x) { return x; });
  for (int i = 0; i < kNumParameters; ++i) ExpectGradientsClose(s.grads[i].to_doubles(), c.numeric_gradient(i), parameter_name(i));
}

// The hand-written backward pass is the oracle of the autodiff one: the same loss bit for bit (the same
// forward ops), every gradient within 1e-12 (the VJP rules reach them by other arithmetic: log_softmax's
// rule, the one-hot product's), and both against finite differences above.
TEST(GradientCheck, AutodiffMatchesTheHandWrittenBackward) {
  const GradientCase c;
  const StepResult hand = forward_backward(c.params, c.images, c.labels, c.batch, [](const Array& x) { return x; });
  const StepResult autodiff = autodiff_forward_backward(c.params, c.images, c.labels, c.batch);
  EXPECT_EQ(autodiff.loss.item<double>(), hand.loss.item<double>());
  for (int i = 0; i < kNumParameters; ++i) {
    const std::vector<double> a = autodiff.grads[i].to_doubles(), h = hand.grads[i].to_doubles();
    ASSERT_EQ(autodiff.grads[i].shape(), hand.grads[i].shape()) << parameter_name(i);
    for (std::size_t k = 0; k < h.size(); ++k) {
      EXPECT_NEAR(a[k], h[k], 1e-12 * (1e-3 + std::fabs(h[k]))) << parameter_name(i) << "[" << k << "]";
    }
  }
}

// The sharded update's gradients by reverse mode (ShardedAutodiff) on 8 data replicas: each rank's rows of
// every weight gradient and the summed loss and bias gradients equal the hand-written backward's summed over
// the replicas (1e-12, float64); and the program has no reduce-scatter left: at these shapes every weight's
// gradient comes from an all_to_all of the layer input and an all_gather of its delta.
TEST(GradientCheck, ShardedAutodiffGivesEachRankItsRowsOfTheSummedGradients) {
  const MlpShape shape{64, 64, 5};
  const std::int64_t per_replica = 2, replicas = 8;
  const Parameters params = init_parameters(weft::random::key(5), shape, weft::DType::f64);
  const Array images = weft::random::uniform(weft::random::key(6), {replicas, per_replica, shape.inputs}, weft::DType::f64);
  std::vector<std::int32_t> label_values;
  for (int k = 0; k < replicas * per_replica; ++k) label_values.push_back(k % shape.classes);
  const Array labels = Array::from_vector(label_values).reshape({replicas, per_replica});
  const ShardedAutodiff sharded;
  weft::Runtime rt({.device_count = static_cast<int>(replicas)});
  auto run = weft::pmap(
      [&](weft::Replica& r, const Array& x, const Array& y) {
        const ShardedGradients got = sharded(r, params, x, y, replicas * per_replica);
        const StepResult hand = forward_backward(params, x, y, replicas * per_replica, [](const Array& v) { return v; });
        const Array sums = r.psum(Array::concatenate({hand.loss.reshape({1}), hand.grads[kB1], hand.grads[kB2],
                                                      hand.grads[kB3]}), "i");
        double worst = (weft::abs(got.sums - sums).max() / weft::abs(sums).max()).item<double>();
        const int weights[3] = {kW1, kW2, kW3};
        for (int l = 0; l < 3; ++l) {
          const Array full = r.psum(hand.grads[weights[l]], "i");
          const std::int64_t rows = full.shape()[0] / replicas, begin = r.index() * rows;
          const Array want = full.slice(begin, begin + rows);
          worst = std::max(worst, (weft::abs(got.weight_rows[l] - want).max() / weft::abs(want).max()).item<double>());
        }
        return Array::from_doubles({worst}, {1}, weft::DType::f64);
      },
      {.axis = "i", .runtime = &rt});
  const std::vector<double> errors = run(images, labels).to_host().to_doubles();
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_LE(errors[r], 1e-12) << "replica " << r;
  const weft::Program& program = sharded.program();
  EXPECT_EQ(program.count("psum_scatter"), 0u) << program;
  EXPECT_EQ(program.count("all_to_all"), 3u);
  EXPECT_EQ(program.count("all_gather"), 3u);
  EXPECT_EQ(program.count("psum"), 1u);
}

TEST(GradientCheck, ModelParallelBackwardMatchesFiniteDifferences) {
  // Two model ranks (w1, b1 split by columns, w2 by rows) and two data ranks, each with half the batch:
  // joined slices of the data-summed gradients are the full model's gradient.
  const GradientCase c;
  weft::Runtime rt({.device_count = 4});
  std::vector<Array> per_replica_images, per_replica_labels;
  for (int r = 0; r < 4; ++r) {
    const int d = r / 2;
    per_replica_images.push_back(c.images.slice(d * 3, d * 3 + 3));
    per_replica_labels.push_back(c.labels.slice(d * 3, d * 3 + 3));
  }
  auto step = weft::pmap(
      [&](weft::Replica& r, const Array& images, const Array& labels) {
        const Parameters slice = model_slice(c.params, r.axis_index("model"), 2);
        StepResult s = forward_backward(slice, images, labels, c.batch,
                                        [&](const Array& x) { return r.psum(x, "model"); });
        std::vector<Array> out{r.psum(s.loss, "data")};
        for (const Array& g : s.grads) out.push_back(r.psum(g, "data"));
        return out;
      },
      {.mesh = {{"data", 2}, {"model", 2}}, .runtime = &rt});
  const auto out = step(Array::stack(per_replica_images).reshape({2, 2, 3, c.shape.inputs}),
                        Array::stack(per_replica_labels).reshape({2, 2, 3}));
  EXPECT_NEAR(out[0].to_host().value_at(0), c.loss(c.params), 1e-12);
  for (int i = 0; i < kNumParameters; ++i) {
    const Array host = out[1 + i].to_host();  // (data, model, *slice)
    std::vector<Array> slices{host[0][0], host[0][1]};
    ExpectGradientsClose(join_model_slices(i, slices).to_doubles(), c.numeric_gradient(i), parameter_name(i));
  }
}

// ---- data files -----------------------------------------------------------------------------------------

std::string WriteGzip(const std::string& path, const std::vector<std::uint8_t>& bytes, std::size_t keep) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  if (keep < bytes.size()) {  // cut the compressed file short
    std::filesystem::resize_file(path, std::min<std::uintmax_t>(keep, std::filesystem::file_size(path)));
  }
  return path;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Dataset, ClearErrorsForMissingAndCorruptFiles) {
  const std::string dir = ::testing::TempDir() + "/mnist-bad";
  std::filesystem::remove_all(dir);
  EXPECT_NE(ErrorOf([&] { load_dataset(dir); }).find(dir + " does not exist"), std::string::npos);
  std::filesystem::create_directories(dir);
  EXPECT_NE(ErrorOf([&] { load_dataset(dir); }).find("train-images-idx3-ubyte"), std::string::npos);

  // A labels file whose header promises more bytes than it holds.
  std::vector<std::uint8_t> labels{0, 0, 8, 1, 0, 0, 0, 5, 1, 2, 3};
  WriteGzip(dir + "/short-labels.gz", labels, SIZE_MAX);
  EXPECT_NE(ErrorOf([&] { read_idx(dir + "/short-labels.gz", 1); }).find("promises 5 bytes of data, the file has 3"),
            std::string::npos);
  // Bad magic, wrong rank, a compressed stream cut short, a label out of range.
  EXPECT_NE(ErrorOf([&] { parse_idx({1, 0, 8, 1}, 1, "x"); }).find("bad magic"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { parse_idx({0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, "x"); }).find("rank 3, expected 1"),
            std::string::npos);
  // A valid labels header over 100000 pseudo-random bytes (incompressible, so cutting the file at half its
  // size cuts the deflate stream itself, not just its trailer).
  std::vector<std::uint8_t> big(100008);
  std::uint32_t state = 12345;
  for (std::uint8_t& b : big) b = static_cast<std::uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  const std::uint8_t header[8] = {0, 0, 8, 1, 0, 1, 0x86, 0xa0};  // ubyte, rank 1, 100000 items
  std::copy(header, header + 8, big.begin());
  WriteGzip(dir + "/cut.gz", big, 50000);
  EXPECT_NE(ErrorOf([&] { read_idx(dir + "/cut.gz", 1); }).find("corrupt or truncated"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mnist
