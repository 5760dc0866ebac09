// train_fashion_mnist: trains an MLP 784-512-512-10 on Fashion-MNIST with weft, in any parallel layout:
//
//   train_fashion_mnist                              # data parallel over every device (8 by default)
//   train_fashion_mnist --devices 1                  # one device
//   train_fashion_mnist --devices 8 --model-parallel 2   # 4 data x 2 model (Megatron-style hidden layers)
//   train_fashion_mnist --zero                       # optimizer state + master weights sharded in host memory
//   weftrun --num-instances 2 --num-replicas 8 train_fashion_mnist   # the same across two processes
//
// SGD with momentum 0.9, learning rate 0.1, global batch 256, softmax cross-entropy, fixed seeds. With --json
// the last line of stdout is one JSON object summarising the run (docs/training.md).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <weft/error.hpp>
#include <weft/ops.hpp>
#include <weft/runtime.hpp>

#include "dataset.hpp"
#include "progress.hpp"
#include "trainer.hpp"

namespace {

nlohmann::json summary_json(const mnist::TrainResult& r, const mnist::TrainConfig& config) {
  auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"epochs", config.epochs},
          {"param_dtype", std::string(weft::dtype_name(config.dtype))},
          {"compute_dtype", std::string(weft::dtype_name(config.compute_dtype.value_or(config.dtype)))},
          {"devices", r.devices},
          {"instances", r.instances},
          {"data_parallel", r.data_parallel},
          {"model_parallel", r.model_parallel},
          {"zero", r.zero},
          {"final_loss", number(r.final_loss)},
          {"test_accuracy", number(r.test_accuracy)},
          {"samples_per_s", number(r.samples_per_s)},
          {"step_ms", number(r.step_ms)},
          {"matmul", weft::matmul_backend()}};
}

}  // namespace

int main(int argc, char** argv) {
  weft::tune_process_malloc();  // the trainer owns its process: weft's measured malloc tuning (weft/memory.hpp)
  CLI::App app{"Trains an MLP 784-512-512-10 on Fashion-MNIST with weft (data, model and ZeRO parallel)"};
  mnist::TrainConfig config;
  std::string data_dir = mnist::kDefaultDataDir;
  std::string metrics_path;
  bool json = false;
  app.add_option("--data", data_dir, "directory of the Fashion-MNIST IDX files (.gz or plain)");
  app.add_option("--devices", config.devices, "replicas (default: every device; WEFT_DEVICE_COUNT per process)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--model-parallel", config.model_parallel, "model ranks: mesh data x model = devices/M x M")
      ->check(CLI::PositiveNumber);
  app.add_flag("--zero", config.zero, "shard optimizer state and f32 master weights over the data ranks in remote buffers");
  app.add_flag("--replicated-update", config.replicated_update,
               "data parallel as DDP does it: all-reduce every gradient and update every parameter on every replica "
               "(default: each data rank updates its rows of the weights from the gathered batch)");
  app.add_option("--backward", config.autodiff_backward,
                 "hand: the hand-written backward pass (mlp.cc); autodiff: weft::value_and_grad of the loss (with "
                 "the all-reduce update in place of the sharded one)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"hand", false}, {"autodiff", true}}));
  app.add_option("--epochs", config.epochs, "epochs to train")->check(CLI::PositiveNumber);
  app.add_option("--steps", config.steps, "stop after this many steps in all (0: the epochs decide)")->check(CLI::NonNegativeNumber);
  app.add_option("--train-limit", config.train_limit, "use only the first N training images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", config.global_batch, "global batch")->check(CLI::PositiveNumber);
  app.add_option("--dtype", config.dtype,
                 "parameters and arithmetic: f32; f64 to compare layouts over many steps; bf16: mixed precision "
                 "(float32 parameters and optimizer state, the passes in bfloat16, gradients cast back)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, weft::DType>{
          {"f32", weft::DType::f32}, {"f64", weft::DType::f64}, {"bf16", weft::DType::bf16}}));
  app.add_option("--lr", config.learning_rate, "learning rate");
  app.add_option("--momentum", config.momentum, "SGD momentum");
  app.add_option("--seed", config.seed, "seed of the initialisation and the data order");
  app.add_flag("!--no-eval", config.evaluate, "skip the test-set evaluation");
  app.add_option("--metrics", metrics_path, "write per-step and per-epoch metrics to this CSV file");
  app.add_option("--checkpoint", config.checkpoint_path, "save a checkpoint here after each epoch and at the end");
  app.add_option("--resume", config.resume_path, "continue from this checkpoint (same layout, seed and batch)");
  app.add_flag("--json", json, "print a JSON summary as the last line");
  CLI11_PARSE(app, argc, argv);
  if (config.dtype == weft::DType::bf16) {  // --dtype bf16: the mixed-precision policy, not bf16 parameters
    config.dtype = weft::DType::f32;
    config.compute_dtype = weft::DType::bf16;
  }

  try {
    weft::Runtime runtime;
    config.runtime = &runtime;
    const bool leader = runtime.process_index() == 0;
    const mnist::Dataset data = mnist::load_dataset(data_dir);
    mnist::Trainer trainer(config, data);
    mnist::ProgressDisplay progress(stderr, leader && isatty(STDERR_FILENO));
    std::unique_ptr<mnist::MetricsFile> metrics;
    if (leader && !metrics_path.empty()) metrics = std::make_unique<mnist::MetricsFile>(metrics_path);
    mnist::TrainObserver observer;
    observer.on_step = [&](const mnist::StepRecord& r, std::int64_t per_epoch, std::int64_t total) {
      progress.step(r, per_epoch, total);
      if (metrics) metrics->step(r);
    };
    observer.on_epoch = [&](const mnist::EpochRecord& r) {
      if (leader) progress.epoch(r);
      if (metrics) metrics->epoch(r);
    };
    const mnist::TrainResult result = trainer.run(observer);
    if (leader) {
      std::printf("trained %zu steps on %d device%s (%d data x %d model%s, %d instance%s): final loss %.4f, test accuracy %.4f, "
                  "%.0f samples/s, %.2f ms/step\n",
                  result.steps.size(), result.devices, result.devices == 1 ? "" : "s", result.data_parallel, result.model_parallel,
                  result.zero ? ", zero" : "", result.instances, result.instances == 1 ? "" : "s", result.final_loss,
                  result.test_accuracy, result.samples_per_s, result.step_ms);
      std::printf("matmul: %s\n", weft::matmul_backend().c_str());
      if (json) std::printf("%s\n", summary_json(result, config).dump().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
