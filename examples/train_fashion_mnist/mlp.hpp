// The model: a multi-layer perceptron inputs-hidden-hidden-classes (784-512-512-10 for Fashion-MNIST) with
// ReLU and a softmax cross-entropy loss, its initialisation, and its forward and backward passes written
// out by hand (no autodiff) in weft's array math.
//
// The passes are written once for every parallel layout. A replica sees its slice of the batch and its slice
// of the parameters; with tensor (model) parallelism over M ranks the two hidden layers are split Megatron
// style: w1 by columns (each rank computes hidden/M of the first layer's units), w2 by rows (each rank
// multiplies its units by its rows, giving a partial sum of the second layer), and one sum over the model
// axis completes the pair. Nothing else crosses ranks in the forward pass, and nothing at all in the
// backward pass: every rank already holds the full second-layer activations and gradients.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <weft/array.hpp>
#include <weft/groups.hpp>
#include <weft/program.hpp>
#include <weft/replica.hpp>
#include <weft/random.hpp>

namespace mnist {

struct MlpShape {
  int inputs = 784;
  int hidden = 512;
  int classes = 10;
};

enum ParameterIndex { kW1, kB1, kW2, kB2, kW3, kB3, kNumParameters };
using Parameters = std::array<weft::Array, kNumParameters>;
const char* parameter_name(int index);  // "w1", "b1", ...
// Whether model parallelism splits the parameter (w1 and b1 by columns, w2 by rows) or replicates it.
bool split_by_model(int index);

// He initialisation: weights ~ N(0, 1) * sqrt(2 / fan_in) from `key` (one split key per layer), biases 0.
// The full parameters, independent of any layout.
Parameters init_parameters(const weft::random::Key& key, const MlpShape& shape, weft::DType dtype = weft::DType::f32);

// Model rank `rank` of `ranks`: its slice of each parameter (replicated ones whole).
Parameters model_slice(const Parameters& full, int rank, int ranks);
// The inverse: the full parameter from every rank's slice of it.
weft::Array join_model_slices(int index, const std::vector<weft::Array>& slices);

// Completes the partial second-layer product across the model ranks (a psum over the model axis); the
// identity without model parallelism.
using ModelSum = std::function<weft::Array(const weft::Array&)>;

struct StepResult {
  weft::Array loss;  // scalar: sum of this replica's cross-entropies / global batch
  Parameters grads;  // of that loss, for this replica's parameter slices
};

// The backward pass up to, not including, the weight gradients: the inputs of the three layers and the
// loss's gradients at their pre-activations. A weight's gradient is its layer's input^T x delta (a bias's:
// the delta summed over the batch); a layout may form those products where it likes (weight_gradients here,
// or the data-parallel sharded update in trainer.cc, over the whole batch's rows).
struct Deltas {
  weft::Array loss;                   // as in StepResult
  weft::Array h1, h2;                 // the inputs of layers 2 and 3 (layer 1's is the images)
  weft::Array d_z1, d_z2, d_logits;   // d loss / d pre-activation of layers 1, 2, 3
};
Deltas forward_deltas(const Parameters& p, const weft::Array& images, const weft::Array& labels,
                      std::int64_t global_batch, const ModelSum& model_sum);

// One training step's forward and backward pass on this replica's batch (images (b, inputs), labels (b,)
// int32). Summing `loss` and `grads` over the data-parallel replicas gives the global batch's mean loss and
// its gradient.
StepResult forward_backward(const Parameters& p, const weft::Array& images, const weft::Array& labels,
                            std::int64_t global_batch, const ModelSum& model_sum);

// The same step's loss and gradients by reverse mode (weft::value_and_grad of the loss, weft/autodiff.hpp):
// no hand-written backward pass. With model parallelism the model sum is Megatron's g (an all-reduce over
// the model groups whose transpose is the identity: Replica::all_reduce_identical_grad_inputs), so the
// backward pass needs no collective, as forward_backward's. The loss is forward_backward's, the gradients
// equal its within rounding (tests/training/). One object per model layout: its programs are traced once.
class AutodiffBackward {
 public:
  // `model_groups`: the model ranks of each data rank (tensor parallelism), or none.
  explicit AutodiffBackward(std::optional<weft::ReplicaGroups> model_groups = std::nullopt);
  // `replica` is needed with model groups (the sum meets there); may be null without.
  StepResult operator()(weft::Replica* replica, const Parameters& p, const weft::Array& images,
                        const weft::Array& labels, std::int64_t global_batch) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};
StepResult autodiff_forward_backward(const Parameters& p, const weft::Array& images, const weft::Array& labels,
                                     std::int64_t global_batch);

// The data-parallel sharded update's gradients by reverse mode (trainer.cc, one process, no model
// parallelism): one program of the loss's VJP followed by one all-reduce of the loss and the bias gradients
// and each weight gradient's reduce-scatter to this rank's rows. The program layer turns those reduce-scatters
// into gathers of the layer inputs and deltas and one product over the whole batch's rows
// (src/program/scattered_products.hpp): what the hand-written sharded update does by hand.
struct ShardedGradients {
  weft::Array sums;                         // (loss, d b1, d b2, d b3) summed over the data replicas
  std::array<weft::Array, 3> weight_rows;   // this rank's rows of d w1, d w2, d w3 (summed)
};
class ShardedAutodiff {
 public:
  ShardedAutodiff();
  // The first call (of any replica) builds the program for its shapes and the replica's mesh; the others run it.
  ShardedGradients operator()(weft::Replica& replica, const Parameters& p, const weft::Array& images,
                              const weft::Array& labels, std::int64_t global_batch) const;
  // The program the calls run (empty before the first): for tests counting its collectives.
  const weft::Program& program() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Forward only: how many of the batch's predictions (argmax of the logits) equal the labels, as a float32
// scalar. Labels -1 mark padding and never count.
weft::Array count_correct(const Parameters& p, const weft::Array& images, const weft::Array& labels,
                          const ModelSum& model_sum);

// SGD with momentum as PyTorch does it: velocity = momentum * velocity + grad; param -= lr * velocity.
void sgd_momentum(weft::Array& param, weft::Array& velocity, const weft::Array& grad, double lr, double momentum);
// The same update, with the same arithmetic per element, returning the new param (out of place: `param` may
// be a view of a buffer other replicas share) and updating `velocity` in place; `velocity` may be flattened
// (a replica-sharded variable's shard), as long as it has grad's size.
weft::Array sgd_momentum_new_param(const weft::Array& param, weft::Array& velocity, const weft::Array& grad, double lr,
                                   double momentum);

}  // namespace mnist
