// Training the MLP on weft in any parallel layout, through a PopXL-style Session:
//
//   data parallel     replicas = data ranks; every parameter is a replicated variable. By default the
//                     update is sharded: the replicas gather the batch's layer inputs and deltas, each data
//                     rank forms the gradient of its 1/D of every weight's rows from the whole batch, updates
//                     those rows and their velocity (a replica-sharded variable: each rank holds its rows),
//                     and gathering the rows gives every replica the new weights (trainer.cc says why).
//                     Otherwise every velocity is a replicated variable. --replicated-update (or rows that do not divide, or a
//                     job of several processes) does it as DDP does: one all-reduce per parameter, every
//                     replica updating everything.
//   + model parallel  replicas form a data x model mesh (replica = d * M + m); w1, b1, w2 are grouped
//                     variables with one value per model rank (grouping: stride M, group size D), the others
//                     replicated; the forward pass sums the second layer over the model ranks; gradients
//                     are summed over the data ranks of each model rank.
//   ZeRO (--zero)     every parameter and its velocity live in a replica-sharded remote buffer (host memory),
//                     sharded over the data ranks: a step all-gathers the weights, reduce-scatters the
//                     gradients, and each replica updates only its shard of the f32 master weights.
//
// Every layout starts from the same parameters and reads the same global batches (a permutation per epoch
// from the seed), so losses agree with the 1-device run up to summation order.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <weft/runtime.hpp>

#include "dataset.hpp"
#include "mlp.hpp"

namespace mnist {

struct TrainConfig {
  int devices = 0;         // replicas (global); 0 = every device of the runtime
  int model_parallel = 1;  // M: model ranks per data rank
  bool zero = false;
  bool replicated_update = false;  // data parallel: all-reduce the gradients and update on every replica
  // The gradients by reverse mode (weft::value_and_grad: mlp.hpp's AutodiffBackward) instead of the
  // hand-written backward pass, in the all-reduce update (DDP's), ZeRO and model parallelism (its sum as
  // Megatron's g); the default one-process sharded update consumes the hand-written pass's deltas, so this
  // runs the all-reduce update instead.
  bool autodiff_backward = false;
  int epochs = 2;
  std::int64_t steps = 0;  // stop after this many steps in all (counted from step 0, also when resuming); 0 = epochs
  std::int64_t train_limit = 0;  // use only the first N training images (tests); 0 = all
  std::int64_t global_batch = 256;
  double learning_rate = 0.1;
  double momentum = 0.9;
  std::uint64_t seed = 0;
  MlpShape shape{};
  // Parameters, activations and optimizer state. f64 makes the layouts comparable over many steps: in f32 a
  // rounding difference flips some ReLU gate within a few dozen steps and the runs drift apart (tests).
  weft::DType dtype = weft::DType::f32;
  // Mixed precision (programs.md section 5, jmp's policy): the dtype of the forward and backward passes when
  // it is not `dtype` (unset: `dtype`; bf16: each step casts the parameters and images to bfloat16 at use, its products run on
  // the bfloat16 kernels, and the gradients and loss are cast back to `dtype` before they are reduced and
  // applied; parameters and optimizer state stay `dtype`).
  std::optional<weft::DType> compute_dtype;
  bool evaluate = true;             // test accuracy at the end of each epoch and of training
  std::string checkpoint_path;      // written at the end of each epoch and of training
  std::string resume_path;          // read before the first step
  weft::Runtime* runtime = nullptr;  // default Runtime::current()
};

struct StepRecord {
  int epoch = 0;
  std::int64_t step = 0;    // global step index
  double elapsed_s = 0;     // since training started
  double loss = 0;          // the global batch's mean loss
  double samples_per_s = 0; // this step
};

struct EpochRecord {
  int epoch = 0;
  double elapsed_s = 0;
  double loss = 0;           // mean of the epoch's step losses
  double test_accuracy = 0;  // NaN when not evaluated
  double samples_per_s = 0;  // over the epoch's steps
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  double final_loss = 0;
  double test_accuracy = 0;  // NaN when not evaluated
  double samples_per_s = 0;  // steady state: median over steps after the first few
  double step_ms = 0;        // median step time
  int devices = 0, instances = 1, data_parallel = 1, model_parallel = 1;
  bool zero = false;
};

// Called as training goes (on every instance; print on instance 0 only).
struct TrainObserver {
  std::function<void(const StepRecord&, std::int64_t steps_per_epoch, std::int64_t total_steps)> on_step;
  std::function<void(const EpochRecord&)> on_epoch;
};

class Trainer {
 public:
  // Validates the layout (devices divisible by model_parallel, the batch by the data ranks, ...) and builds the
  // session; throws std::invalid_argument / weft::InvalidArgument with the rule broken.
  Trainer(TrainConfig config, const Dataset& data);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainResult run(const TrainObserver& observer = {});
  // The model's current full parameters, read back from the replicas.
  Parameters parameters();
  std::int64_t steps_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnist
