// The trainer's checkpoints as untrusted input, in seconds (issue 21, items 1 and 14): a tiny synthetic data
// set and model stand in for Fashion-MNIST. The step a checkpoint records is checked before training
// resumes (before: a negative or huge step crashed, "abc" gave only "stoll", "1.5" read as 1, and a step at
// or past the end "trained" 0 steps and reported a loss of 0); an unwritable --checkpoint path is refused
// when training starts, not after its first epoch.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <weft/weft.hpp>

#include "../support/errors.hpp"  // ExpectContains
#include "../support/safetensors_file.hpp"
#include "../support/temp_dir.hpp"
#include "dataset.hpp"
#include "trainer.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace mnist {
namespace {

using weft::testing::ExpectContains;
using weft::testing::TempDir;

// The trainer's errors are std::runtime_error, std::invalid_argument or weft's: the message of whichever.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}

constexpr std::int64_t kBatch = 8;
constexpr std::int64_t kImages = 4 * kBatch;  // 4 steps an epoch

Split Synthetic(std::int64_t n) {
  std::vector<float> pixels(static_cast<std::size_t>(n * kImagePixels));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 7) / 7.0f;
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % kClasses);
  return {weft::Array::from_vector<float>(pixels, {n, kImagePixels}), weft::Array::from_vector<std::int32_t>(labels, {n})};
}

const Dataset& Data() {
  static const Dataset data{Synthetic(kImages), Synthetic(kBatch)};
  return data;
}

TrainConfig Config(weft::Runtime& rt) {
  TrainConfig c;
  c.devices = 2;
  c.epochs = 2;  // 8 steps in all
  c.global_batch = kBatch;
  c.shape = {kImagePixels, 8, kClasses};
  c.evaluate = false;
  c.runtime = &rt;
  return c;
}

TEST(TrainerFiles, ResumeChecksTheStepItReads) {
  TempDir dir;
  weft::Runtime rt({.device_count = 2});
  const std::string path = dir.file("run.safetensors");
  {
    TrainConfig c = Config(rt);
    c.steps = 2;
    c.checkpoint_path = path;
    Trainer(c, Data()).run();
  }
  const std::string good = weft::testing::ReadBytes(path);
  const weft::testing::SafetensorsBytes f = weft::testing::ParseSafetensorsBytes(good);
  struct Case {
    std::string step, error;
  };
  const std::vector<Case> cases = {
      {"-1", "metadata \"step\" = \"-1\" is not a step of this run (an integer from 0 to 7)"},
      {"abc", "metadata \"step\" = \"abc\" is not a step of this run (an integer from 0 to 7)"},
      {"1.5", "metadata \"step\" = \"1.5\" is not a step of this run (an integer from 0 to 7)"},
      {"", "metadata \"step\" = \"\" is not a step of this run (an integer from 0 to 7)"},
      {"99999999999999999999", "metadata \"step\" = \"99999999999999999999\" is not a step of this run (an integer from 0 to 7)"},
      {"9223372036854775807", "metadata \"step\" = \"9223372036854775807\" is not a step of this run (an integer from 0 to 7)"},
      {"8", "it was saved after step 8 of 8: this run has nothing left to train (raise --epochs or --steps)"},
      {"12", "metadata \"step\" = \"12\" is not a step of this run (an integer from 0 to 7)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("step " + c.step);
    nlohmann::json header = f.header;
    header["__metadata__"]["step"] = c.step;
    const std::string bad = dir.file("bad.safetensors");
    weft::testing::WriteBytes(bad, weft::testing::SafetensorsWithHeader(header, f.data));
    TrainConfig config = Config(rt);
    config.resume_path = bad;
    const std::string error = ErrorOf([&] { Trainer(config, Data()).run(); });
    ExpectContains(error, {bad + ": ", c.error});
  }
  // The intact file resumes at step 2 and trains the 6 steps left.
  TrainConfig config = Config(rt);
  config.resume_path = path;
  const TrainResult r = Trainer(config, Data()).run();
  ASSERT_EQ(r.steps.size(), 6u);
  EXPECT_EQ(r.steps.front().step, 2);
}

TEST(TrainerFiles, AnUnwritableCheckpointPathIsRefusedAtTheStart) {
  TempDir dir;
  weft::Runtime rt({.device_count = 2});
  for (const std::string& path : {dir.file("no-such-dir/run.safetensors"), dir.path()}) {
    SCOPED_TRACE(path);
    TrainConfig c = Config(rt);
    c.checkpoint_path = path;
    int steps = 0;
    TrainObserver observer;
    observer.on_step = [&](const StepRecord&, std::int64_t, std::int64_t) { ++steps; };
    const std::string error = ErrorOf([&] { Trainer(c, Data()).run(observer); });
    ExpectContains(error, {"--checkpoint '" + path + "'"});
    EXPECT_EQ(steps, 0) << "trained before refusing the path";
  }
}

}  // namespace
}  // namespace mnist
