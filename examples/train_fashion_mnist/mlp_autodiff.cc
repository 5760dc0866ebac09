// The MLP's gradients by reverse mode: weft::value_and_grad of the loss (weft/autodiff.hpp), traced once per
// signature and run as one program on each replica, instead of mlp.cc's hand-written backward pass (which
// the tests keep as the oracle).
#include <weft/autodiff.hpp>
#include <weft/ops.hpp>

#include "mlp.hpp"

namespace mnist {

using weft::Array;

namespace {

// The loss as a function of the six parameters, the batch and the scale (a scalar input, so that one
// program serves every global batch).
Array loss_of(const Array& w1, const Array& b1, const Array& w2, const Array& b2, const Array& w3, const Array& b3,
              const Array& images, const Array& labels, const Array& scale) {
  const Array h1 = weft::relu(weft::matmul(images, w1) + b1);
  const Array h2 = weft::relu(weft::matmul(h1, w2) + b2);
  const Array logits = weft::matmul(h2, w3) + b3;
  const Array targets = weft::one_hot(labels, static_cast<int>(logits.shape().back()), logits.dtype());
  return (targets * weft::log_softmax(logits, -1)).sum() * -scale;
}

}  // namespace

StepResult autodiff_forward_backward(const Parameters& p, const Array& images, const Array& labels,
                                     std::int64_t global_batch) {
  // One per process: its program cache is shared by every replica and step (safe to call concurrently).
  static const auto value_and_grad = weft::value_and_grad(loss_of, {kW1, kB1, kW2, kB2, kW3, kB3}, "mlp loss");
  const Array scale = Array::scalar(1.0 / static_cast<double>(global_batch), p[kW1].dtype());
  auto [loss, grads] = value_and_grad(p[kW1], p[kB1], p[kW2], p[kB2], p[kW3], p[kB3], images, labels, scale);
  StepResult out;
  out.loss = loss;
  for (int i = 0; i < kNumParameters; ++i) out.grads[i] = std::move(grads[static_cast<std::size_t>(i)]);
  return out;
}

}  // namespace mnist
