// The MLP's passes in weft's array math (see mlp.hpp for the layout story).
#include "mlp.hpp"

#include <cmath>
#include <stdexcept>
#include <span>
#include <string>

#include <weft/ops.hpp>

namespace mnist {

using weft::Array;

const char* parameter_name(int index) {
  static constexpr const char* names[kNumParameters] = {"w1", "b1", "w2", "b2", "w3", "b3"};
  return names[index];
}

bool split_by_model(int index) { return index == kW1 || index == kB1 || index == kW2; }

Parameters init_parameters(const weft::random::Key& key, const MlpShape& shape, weft::DType dtype) {
  const std::vector<weft::random::Key> keys = weft::random::split(key, 3);
  auto dense = [&](const weft::random::Key& k, int fan_in, int fan_out) {
    return (weft::random::normal(k, {fan_in, fan_out}) * std::sqrt(2.0 / fan_in)).astype(dtype);
  };
  Parameters p;
  p[kW1] = dense(keys[0], shape.inputs, shape.hidden);
  p[kB1] = Array::zeros({shape.hidden}, dtype);
  p[kW2] = dense(keys[1], shape.hidden, shape.hidden);
  p[kB2] = Array::zeros({shape.hidden}, dtype);
  p[kW3] = dense(keys[2], shape.hidden, shape.classes);
  p[kB3] = Array::zeros({shape.classes}, dtype);
  return p;
}

Parameters model_slice(const Parameters& full, int rank, int ranks) {
  const std::int64_t hidden = full[kB1].shape()[0];
  if (hidden % ranks != 0)
    throw std::invalid_argument("model parallelism over " + std::to_string(ranks) + " ranks needs a hidden width divisible by it, got " +
                                std::to_string(hidden));
  const std::int64_t width = hidden / ranks;
  const std::int64_t begin = rank * width, end = begin + width;
  Parameters slice = full;
  slice[kW1] = full[kW1].slice_axis(1, begin, end);
  slice[kB1] = full[kB1].slice_axis(0, begin, end);
  slice[kW2] = full[kW2].slice_axis(0, begin, end);
  return slice;
}

Array join_model_slices(int index, const std::vector<Array>& slices) {
  if (!split_by_model(index)) return slices.at(0);
  return Array::concatenate(slices, index == kW1 ? 1 : 0);
}

namespace {

struct Activations {
  Array z1, h1, z2, h2, logits;
};

Activations forward(const Parameters& p, const Array& x, const ModelSum& model_sum) {
  Activations a;
  a.z1 = weft::matmul(x, p[kW1]) + p[kB1];
  a.h1 = weft::relu(a.z1);
  a.z2 = model_sum(weft::matmul(a.h1, p[kW2])) + p[kB2];
  a.h2 = weft::relu(a.z2);
  a.logits = weft::matmul(a.h2, p[kW3]) + p[kB3];
  return a;
}

// The gradient through a ReLU: g where z > 0, else 0, written into g (fresh from its matmul, so not shared).
// One pass instead of a mask array and a `where` (together ~5 % of an 8-replica step).
template <class T>
void relu_backward_in_place(Array& g, const Array& z) {
  const std::span<T> out = g.mutable_data<T>();
  const std::span<const T> pre = z.data<T>();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pre[i] > T(0) ? out[i] : T(0);
}

Array relu_backward(Array g, const Array& z) {
  if (g.shape() == z.shape() && g.dtype() == z.dtype()) {
    if (g.dtype() == weft::DType::f32) return relu_backward_in_place<float>(g, z), g;
    if (g.dtype() == weft::DType::f64) return relu_backward_in_place<double>(g, z), g;
  }
  return weft::where(z > Array::scalar(0.0, z.dtype()), g, 0.0);
}

}  // namespace

Deltas forward_deltas(const Parameters& p, const Array& images, const Array& labels, std::int64_t global_batch,
                      const ModelSum& model_sum) {
  const Activations a = forward(p, images, model_sum);
  const int classes = static_cast<int>(p[kB3].shape()[0]);
  const Array targets = weft::one_hot(labels, classes, a.logits.dtype());
  const Array log_probs = weft::log_softmax(a.logits, -1);
  const double scale = 1.0 / static_cast<double>(global_batch);
  Deltas d;
  d.loss = (targets * log_probs).sum() * -scale;
  // d loss / d logits of the mean cross-entropy: (softmax - one_hot) / global batch.
  d.d_logits = (weft::exp(log_probs) - targets) * scale;
  d.d_z2 = relu_backward(weft::matmul(d.d_logits, p[kW3], {.transpose_b = true}), a.z2);
  d.d_z1 = relu_backward(weft::matmul(d.d_z2, p[kW2], {.transpose_b = true}), a.z1);
  d.h1 = a.h1;
  d.h2 = a.h2;
  return d;
}

StepResult forward_backward(const Parameters& p, const Array& images, const Array& labels, std::int64_t global_batch,
                            const ModelSum& model_sum) {
  const Deltas d = forward_deltas(p, images, labels, global_batch, model_sum);
  StepResult out;
  out.loss = d.loss;
  out.grads[kW3] = weft::matmul(d.h2, d.d_logits, {.transpose_a = true});
  out.grads[kB3] = d.d_logits.sum(0);
  out.grads[kW2] = weft::matmul(d.h1, d.d_z2, {.transpose_a = true});
  out.grads[kB2] = d.d_z2.sum(0);
  out.grads[kW1] = weft::matmul(images, d.d_z1, {.transpose_a = true});
  out.grads[kB1] = d.d_z1.sum(0);
  return out;
}

Array count_correct(const Parameters& p, const Array& images, const Array& labels, const ModelSum& model_sum) {
  const Activations a = forward(p, images, model_sum);
  return weft::equal(weft::argmax(a.logits, -1), labels).astype(weft::DType::f32).sum();
}

namespace {
// One pass over the three buffers instead of three passes and a temporary (the update was ~22 % of an
// 8-replica step). Each element: v = momentum * v + g; p -= lr * v, in T, as the array ops compute it.
// Reads (param_in, velocity_in), writes (param_out, velocity_out); in place when they are the same memory.
template <class T>
void sgd_momentum_kernel(const T* param_in, const T* velocity_in, const T* grad, T* param_out, T* velocity_out,
                         std::size_t n, double lr, double momentum) {
  const T m = static_cast<T>(momentum), rate = static_cast<T>(lr);
  for (std::size_t i = 0; i < n; ++i) {
    const T vi = velocity_in[i] * m + grad[i];
    velocity_out[i] = vi;
    param_out[i] = param_in[i] - vi * rate;
  }
}

template <class T>
void fused_sgd_momentum(Array& param, Array& velocity, const Array& grad, double lr, double momentum) {
  const std::span<T> p = param.mutable_data<T>();
  const std::span<T> v = velocity.mutable_data<T>();
  sgd_momentum_kernel<T>(p.data(), v.data(), grad.data<T>().data(), p.data(), v.data(), p.size(), lr, momentum);
}

template <class T>
Array sgd_momentum_new_param_kernel(const Array& param, Array& velocity, const Array& grad, double lr, double momentum) {
  Array out = Array::empty(param.shape(), param.dtype());
  T* v = velocity.mutable_data<T>().data();
  sgd_momentum_kernel<T>(param.data<T>().data(), v, grad.data<T>().data(), out.mutable_data<T>().data(), v,
                         static_cast<std::size_t>(param.size()), lr, momentum);
  return out;
}
}  // namespace

void sgd_momentum(Array& param, Array& velocity, const Array& grad, double lr, double momentum) {
  const bool fusable = param.shape() == grad.shape() && velocity.shape() == grad.shape() &&
                       param.dtype() == grad.dtype() && velocity.dtype() == grad.dtype();
  if (fusable && grad.dtype() == weft::DType::f32) return fused_sgd_momentum<float>(param, velocity, grad, lr, momentum);
  if (fusable && grad.dtype() == weft::DType::f64) return fused_sgd_momentum<double>(param, velocity, grad, lr, momentum);
  velocity *= momentum;
  velocity += grad;
  param -= velocity * lr;
}

Array sgd_momentum_new_param(const Array& param, Array& velocity, const Array& grad, double lr, double momentum) {
  const bool fusable = param.shape() == grad.shape() && velocity.size() == grad.size() &&
                       param.dtype() == grad.dtype() && velocity.dtype() == grad.dtype();
  if (fusable && grad.dtype() == weft::DType::f32) return sgd_momentum_new_param_kernel<float>(param, velocity, grad, lr, momentum);
  if (fusable && grad.dtype() == weft::DType::f64) return sgd_momentum_new_param_kernel<double>(param, velocity, grad, lr, momentum);
  Array p = param, v = velocity.reshape(grad.shape());
  sgd_momentum(p, v, grad, lr, momentum);
  velocity = v.reshape(velocity.shape());
  return p;
}

}  // namespace mnist
