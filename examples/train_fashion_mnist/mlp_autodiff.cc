// The MLP's gradients by reverse mode: weft::value_and_grad of the loss (weft/autodiff.hpp), traced once per
// signature and run as one program on each replica, instead of mlp.cc's hand-written backward pass (which
// the tests keep as the oracle).
#include <mutex>

#include <weft/autodiff.hpp>
#include <weft/ops.hpp>
#include <weft/program.hpp>

#include "mlp.hpp"

namespace mnist {

using weft::Array;
using weft::Replica;

namespace {

// The loss of one replica's batch as mlp.cc's forward pass computes it, the second layer's partial product
// completed by `model_sum`; `scale` (1 / global batch) is a scalar input so that one program serves every batch.
template <class ModelSum>
Array loss_of(const ModelSum& model_sum, const Array& w1, const Array& b1, const Array& w2, const Array& b2,
              const Array& w3, const Array& b3, const Array& images, const Array& labels, const Array& scale) {
  const Array h1 = weft::relu(weft::matmul(images, w1) + b1);
  const Array h2 = weft::relu(model_sum(weft::matmul(h1, w2)) + b2);
  const Array logits = weft::matmul(h2, w3) + b3;
  const Array targets = weft::one_hot(labels, static_cast<int>(logits.shape().back()), logits.dtype());
  return (targets * weft::log_softmax(logits, -1)).sum() * -scale;
}

Array local_loss(const Array& w1, const Array& b1, const Array& w2, const Array& b2, const Array& w3, const Array& b3,
                 const Array& images, const Array& labels, const Array& scale) {
  return loss_of([](const Array& x) { return x; }, w1, b1, w2, b2, w3, b3, images, labels, scale);
}

// With model parallelism: the partial products summed over the model ranks by Megatron's g.
struct SplitLoss {
  weft::ReplicaGroups model_groups;
  Array operator()(Replica& r, const Array& w1, const Array& b1, const Array& w2, const Array& b2, const Array& w3,
                   const Array& b3, const Array& images, const Array& labels, const Array& scale) const {
    auto model_sum = [&](const Array& x) { return r.all_reduce_identical_grad_inputs(x, model_groups); };
    return loss_of(model_sum, w1, b1, w2, b2, w3, b3, images, labels, scale);
  }
};

const std::vector<int> kAllParameters = {kW1, kB1, kW2, kB2, kW3, kB3};

StepResult step_result(std::pair<Array, std::vector<Array>> value_and_grads) {
  StepResult out;
  out.loss = std::move(value_and_grads.first);
  for (int i = 0; i < kNumParameters; ++i) out.grads[i] = std::move(value_and_grads.second[static_cast<std::size_t>(i)]);
  return out;
}

}  // namespace

struct AutodiffBackward::Impl {
  explicit Impl(std::optional<weft::ReplicaGroups> groups)
      : split_model(groups.has_value()),
        local(&local_loss, kAllParameters, "mlp loss"),
        split(SplitLoss{groups.value_or(weft::ReplicaGroups())}, kAllParameters, "mlp loss (model parallel)") {}

  bool split_model;
  weft::ValueAndGrad<decltype(&local_loss), true> local;
  weft::ValueAndGrad<SplitLoss, true> split;
};

AutodiffBackward::AutodiffBackward(std::optional<weft::ReplicaGroups> model_groups)
    : impl_(std::make_shared<const Impl>(std::move(model_groups))) {}

StepResult AutodiffBackward::operator()(Replica* replica, const Parameters& p, const Array& images,
                                        const Array& labels, std::int64_t global_batch) const {
  const Array scale = Array::scalar(1.0 / static_cast<double>(global_batch), p[kW1].dtype());
  if (!impl_->split_model) {
    return step_result(impl_->local(p[kW1], p[kB1], p[kW2], p[kB2], p[kW3], p[kB3], images, labels, scale));
  }
  if (replica == nullptr) throw std::invalid_argument("AutodiffBackward: model parallelism needs the replica");
  return step_result(impl_->split(*replica, p[kW1], p[kB1], p[kW2], p[kB2], p[kW3], p[kB3], images, labels, scale));
}

struct ShardedAutodiff::Impl {
  std::once_flag once;
  weft::Program program;
};

ShardedAutodiff::ShardedAutodiff() : impl_(std::make_shared<Impl>()) {}

namespace {

// loss -> (loss, grads) by vjp_program, then the reductions, as one program over `mesh`.
weft::Program sharded_gradients_program(const weft::Mesh& mesh, const std::vector<Array>& inputs) {
  std::vector<std::string> axes;
  for (const weft::MeshAxis& a : mesh.axes()) axes.push_back(a.name);
  std::vector<weft::ValueType> types;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    // The parameters are the same on every replica; the batch and the scale's use vary.
    types.push_back({inputs[k].dtype(), inputs[k].shape(), k < kNumParameters ? std::vector<std::string>{} : axes});
  }
  weft::Program loss;
  {
    weft::ProgramTrace trace(mesh, "mlp loss (sharded update)");
    std::vector<Array> in;
    for (const weft::ValueType& t : types) in.push_back(trace.input(t));
    loss = trace.finish({local_loss(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8])});
  }
  const weft::Program vjp = weft::vjp_program(loss, kAllParameters);
  weft::ProgramBuilder b(mesh);
  std::vector<int> ins;
  for (const weft::ValueType& t : types) ins.push_back(b.input(t));
  ins.push_back(b.constant(Array::scalar(1.0, inputs[0].dtype())));  // d loss / d loss
  const std::vector<int> out = b.inline_program(vjp, ins);           // loss, then one gradient per parameter
  const weft::ProgramParams over_data{{"axes", axes}};
  const int loss_row = b.emit("reshape", {out[0]}, {{"shape", std::vector<std::int64_t>{1}}})[0];
  const int pieces = b.emit("concatenate", {loss_row, out[1 + kB1], out[1 + kB2], out[1 + kB3]}, {{"axis", std::int64_t{0}}})[0];
  std::vector<int> results{b.emit("psum", {pieces}, over_data)[0]};
  for (int w : {kW1, kW2, kW3}) {
    weft::ProgramParams scatter = over_data;
    scatter["axis"] = std::int64_t{0};
    scatter["tiled"] = true;
    results.push_back(b.emit("psum_scatter", {out[1 + w]}, scatter)[0]);
  }
  b.set_outputs(results);
  return b.build();
}

}  // namespace

ShardedGradients ShardedAutodiff::operator()(Replica& replica, const Parameters& p, const Array& images,
                                             const Array& labels, std::int64_t global_batch) const {
  std::vector<Array> inputs(p.begin(), p.end());
  inputs.push_back(images);
  inputs.push_back(labels);
  inputs.push_back(Array::scalar(1.0 / static_cast<double>(global_batch), p[kW1].dtype()));
  std::call_once(impl_->once, [&] { impl_->program = sharded_gradients_program(replica.mesh(), inputs); });
  std::vector<Array> out = weft::run_program(impl_->program, replica, std::move(inputs));
  return {std::move(out[0]), {std::move(out[1]), std::move(out[2]), std::move(out[3])}};
}

const weft::Program& ShardedAutodiff::program() const { return impl_->program; }

StepResult autodiff_forward_backward(const Parameters& p, const Array& images, const Array& labels,
                                     std::int64_t global_batch) {
  static const AutodiffBackward backward;  // one per process: its program cache serves every replica and step
  return backward(nullptr, p, images, labels, global_batch);
}

}  // namespace mnist
