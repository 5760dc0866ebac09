// The training loop and the session programs behind Trainer (see trainer.hpp for the layouts).
#include "trainer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <weft/checkpoint.hpp>
#include <weft/ops.hpp>
#include <weft/random.hpp>
#include <weft/session.hpp>

// Options structs are filled with designated initializers; g++ -Wextra would warn about every member left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace mnist {

using weft::Array;
using weft::DType;
using weft::Replica;
using weft::ReplicaGroups;
using weft::Shape;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// A training-set permutation, as host indices.
std::vector<std::int64_t> epoch_order(const weft::random::Key& data_key, int epoch, std::int64_t n) {
  const Array order = weft::random::permutation(weft::random::fold_in(data_key, static_cast<std::uint32_t>(epoch)), n);
  const std::vector<double> values = order.to_doubles();
  return {values.begin(), values.end()};
}

// Untrusted metadata text in a message: quoted, control and non-ASCII bytes as \xNN, at most 40 of them.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + (text.size() > 40 ? "...\"" : "\"");
}

// A non-negative decimal integer of at most 18 digits (so it fits in int64_t), else nullopt.
std::optional<std::int64_t> decimal(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

struct Trainer::Impl {
  TrainConfig config;
  const Dataset& data;
  weft::Runtime& runtime;
  int replicas = 0, model = 1, data_ranks = 1;
  std::int64_t per_replica_batch = 0;
  std::int64_t train_size = 0;
  int first_local = 0, local_count = 0;
  weft::random::Key init_key, data_key;
  std::unique_ptr<weft::Session> session;
  ReplicaGroups model_groups;  // the M model ranks of one data rank: consecutive replicas
  std::unique_ptr<AutodiffBackward> autodiff;  // --backward autodiff: the gradients by reverse mode
  std::unique_ptr<ShardedAutodiff> sharded_autodiff;  // the same, for the sharded update
  ReplicaGroups data_groups;   // the D data ranks of one model rank: replicas M apart
  std::array<Shape, kNumParameters> local_shapes;  // one replica's slice of each parameter
  std::array<weft::Variable, kNumParameters> weights, velocities;
  std::array<weft::RemoteBuffer, kNumParameters> buffers;  // ZeRO: entry 0 = weight, 1 = velocity
  weft::HostStream rows_in, labels_in, result_out;
  std::int64_t next_step = 0;

  Impl(TrainConfig c, const Dataset& d)
      : config(std::move(c)), data(d), runtime(config.runtime ? *config.runtime : weft::Runtime::current()) {
    replicas = config.devices > 0 ? config.devices : runtime.device_count();
    model = config.model_parallel;
    if (model < 1 || replicas % model != 0)
      throw std::invalid_argument("--model-parallel " + std::to_string(model) + " must divide the device count " +
                                  std::to_string(replicas));
    data_ranks = replicas / model;
    if (config.global_batch % data_ranks != 0)
      throw std::invalid_argument("the global batch " + std::to_string(config.global_batch) +
                                  " must divide evenly over the " + std::to_string(data_ranks) + " data-parallel replicas");
    if (config.zero && data_ranks < 2)
      throw std::invalid_argument("--zero shards the optimizer state over the data-parallel replicas and needs at least 2 of them, got " +
                                  std::to_string(data_ranks));
    per_replica_batch = config.global_batch / data_ranks;
    train_size = config.train_limit > 0 ? std::min(config.train_limit, data.train.size()) : data.train.size();
    if (train_size < config.global_batch)
      throw std::invalid_argument("the training set (" + std::to_string(train_size) + " images) is smaller than one batch of " +
                                  std::to_string(config.global_batch));
    std::tie(init_key, data_key) = weft::random::split2(weft::random::key(config.seed));
    // With the differentiated backward every replica runs the same traced programs, so the products by the
    // replicated weights may run as one for all local replicas (WEFT_SHARED_PRODUCTS decides whether they do).
    session = std::make_unique<weft::Session>(weft::SessionOptions{
        .replicas = replicas, .runtime = &runtime, .name = "train", .shared_products = config.autodiff_backward});
    first_local = session->global_replica_offset();
    local_count = session->instance_replication_factor();
    model_groups = ReplicaGroups::strided(replicas, 1, model);
    if (config.autodiff_backward) {
      autodiff = std::make_unique<AutodiffBackward>(model > 1 ? std::optional<ReplicaGroups>(model_groups) : std::nullopt);
    }
    data_groups = ReplicaGroups::strided(replicas, model, data_ranks);
    sharded_update = sharded_update_fits();
    if (config.autodiff_backward && sharded_update) sharded_autodiff = std::make_unique<ShardedAutodiff>();
    build_state();
    rows_in = session->h2d_stream({per_replica_batch}, DType::i64, "rows");
    labels_in = session->h2d_stream({per_replica_batch}, DType::i32, "labels");
    result_out = session->d2h_stream({}, config.dtype, "result");
  }

  // The host value of a variable grouped by model rank: one row per model rank (a plain value when M = 1).
  Array per_model_rank(const std::vector<Array>& slices) const {
    return model > 1 ? Array::stack(slices) : slices[0];
  }

  void build_state() {
    const Parameters full = init_parameters(init_key, config.shape, config.dtype);
    std::vector<Parameters> slices;
    for (int m = 0; m < model; ++m) slices.push_back(model_slice(full, m, model));
    for (int i = 0; i < kNumParameters; ++i) {
      local_shapes[i] = slices[0][i].shape();
      std::vector<Array> values, zeros;
      for (int m = 0; m < model; ++m) {
        values.push_back(slices[m][i]);
        zeros.push_back(Array::zeros(local_shapes[i], config.dtype));
      }
      const std::string name = parameter_name(i);
      if (config.zero) {
        // Grouped by model rank (replicated parameters hold M equal copies) and sharded over its data ranks.
        Shape buffer_shape = local_shapes[i];
        if (model > 1) buffer_shape.insert(buffer_shape.begin(), model);
        buffers[i] = session->replica_sharded_buffer(buffer_shape, config.dtype, data_groups, data_ranks, 2);
        weights[i] = session->remote_replica_sharded_variable(per_model_rank(values), buffers[i], 0, data_groups,
                                                              weft::Retrieval::one_per_group, name);
        velocities[i] = session->remote_replica_sharded_variable(per_model_rank(zeros), buffers[i], 1, data_groups,
                                                                 weft::Retrieval::one_per_group, name + "_velocity");
      } else if (split_by_model(i) && model > 1) {
        weights[i] = session->variable(per_model_rank(values), data_groups, weft::Retrieval::one_per_group, name);
        velocities[i] = session->variable(per_model_rank(zeros), data_groups, weft::Retrieval::one_per_group, name + "_velocity");
      } else {
        weights[i] = session->variable(values[0], std::nullopt, weft::Retrieval::one_per_group, name);
        // The sharded update keeps each weight's velocity where it is used: a data rank holds its rows only.
        velocities[i] = sharded_update && (i == kW1 || i == kW2 || i == kW3)
                            ? session->replica_sharded_variable(zeros[0], std::nullopt, 0, weft::Retrieval::one_per_group,
                                                                name + "_velocity")
                            : session->variable(zeros[0], std::nullopt, weft::Retrieval::one_per_group, name + "_velocity");
      }
    }
  }

  ModelSum model_sum(Replica& r) const {
    if (model == 1) return [](const Array& x) { return x; };
    return [&r, this](const Array& x) { return r.all_reduce(x, model_groups); };
  }

  Array data_sum(Replica& r, const Array& x) const { return data_ranks > 1 ? r.all_reduce(x, data_groups) : x; }

  // This replica's parameters: its variables' values, or (ZeRO) the weights all-gathered from the shards.
  // The parameters in the passes' dtype (cast at use under mixed precision).
  Parameters acquire(Replica& r) const {
    Parameters p;
    for (int i = 0; i < kNumParameters; ++i) {
      p[i] = config.zero ? r.gather_shards(r.remote_load(buffers[i], 0), data_groups, local_shapes[i]) : r.value(weights[i]);
      if (mixed()) p[i] = p[i].astype(compute_dtype());
    }
    return p;
  }
  weft::DType compute_dtype() const { return config.compute_dtype.value_or(config.dtype); }
  bool mixed() const { return compute_dtype() != config.dtype; }
  // A gradient, loss or delta of the passes in the parameters' dtype (a no-op without mixed precision).
  Array to_param_dtype(const Array& x) const { return x.dtype() == config.dtype ? x : x.astype(config.dtype); }

  // The batch's images in the training dtype: the host streams each replica the indices of its rows, and the
  // replica takes them from the split (one array in host memory that every replica reads). The replicas
  // gather their rows in parallel instead of the host copying the whole batch while they wait.
  Array images(Replica& r, const Split& split) const {
    Array x = weft::take(split.images, r.host_load(rows_in), 0);
    return x.dtype() == compute_dtype() ? x : x.astype(compute_dtype());
  }

  // Data parallelism with the update sharded over the data ranks (used when every weight's rows divide over
  // them; see sharded_update_fits). All-reducing every replica's gradients and updating every parameter on
  // every replica, as DDP does, leaves 8 replicas on 2 cores each reading and writing all 670k parameters
  // and their velocities a step (21 MB of weights alone) after a reduction over 8 full gradients. Instead
  // each data rank owns 1/D of every weight's rows: the replicas gather the batch's layer inputs and deltas
  // (a few hundred KiB each, one shared buffer per group), each forms its rows' gradient from the whole
  // batch (input[:, rows]^T x delta: one product over 256 rows rather than 8 over 32, no reduction), updates
  // those rows of the weight and velocity, and gathering the rows gives every replica the new weights in
  // one shared buffer. The arithmetic per element is the update's; only the order of the batch sum differs
  // (it is the 1-device run's). Biases are small: their gradients are all-reduced and updated everywhere.
  // Within one process only: across processes each gather goes through the transport's allgatherv and is
  // then copied out per member, and the transport's native all-reduce wins (2 instances x 4: 25-28k against
  // 32-34k samples/s).
  bool sharded_update_fits() const {
    return model == 1 && !config.zero && !config.replicated_update && data_ranks > 1 &&
           config.shape.inputs % data_ranks == 0 && config.shape.hidden % data_ranks == 0 &&
           runtime.process_count() == 1;
  }
  bool sharded_update = false;  // sharded_update_fits(), decided once before the state is built

  // The same update with the gradients by reverse mode: one program (ShardedAutodiff) gives the summed loss
  // and bias gradients and this rank's rows of each weight's gradient.
  void train_program_sharded_autodiff(Replica& r) const {
    Parameters p = acquire(r);
    const Array images = this->images(r, data.train);
    const Array labels = r.host_load(labels_in);
    ShardedGradients g = (*sharded_autodiff)(r, p, images, labels, config.global_batch);
    p = Parameters{};
    const std::int64_t hidden = config.shape.hidden;
    const Array sums = to_param_dtype(g.sums);
    const Array bias_grads[3] = {sums.slice(1, 1 + hidden), sums.slice(1 + hidden, 1 + 2 * hidden),
                                 sums.slice(1 + 2 * hidden, sums.shape()[0])};
    const int rank = r.index() / model;
    const int layer_weights[3] = {kW1, kW2, kW3}, layer_biases[3] = {kB1, kB2, kB3};
    for (int l = 0; l < 3; ++l) {
      const int w = layer_weights[l];
      const std::int64_t rows = local_shapes[w][0] / data_ranks, begin = rank * rows;
      const Array grad = to_param_dtype(g.weight_rows[static_cast<std::size_t>(l)]);
      g.weight_rows[static_cast<std::size_t>(l)] = Array();
      r.value(weights[w]) = r.all_gather(sgd_momentum_new_param(r.value(weights[w]).slice(begin, begin + rows),
                                                                r.value(velocities[w]), grad, config.learning_rate,
                                                                config.momentum),
                                         data_groups, 0, /*tiled=*/true);
      sgd_momentum(r.value(weights[layer_biases[l]]), r.value(velocities[layer_biases[l]]), bias_grads[l],
                   config.learning_rate, config.momentum);
    }
    r.host_store(result_out, sums.slice(0, 1).reshape({}));
  }

  void train_program_sharded_update(Replica& r) const {
    if (sharded_autodiff) return train_program_sharded_autodiff(r);
    Parameters p = acquire(r);
    const Array images = this->images(r, data.train);
    const Array labels = r.host_load(labels_in);
    Deltas d = forward_deltas(p, images, labels, config.global_batch, model_sum(r));
    p = Parameters{};
    // The loss and the bias gradients are small: one all-reduce for the four (each replica meets the others
    // once per collective, and a meeting costs more than these sums).
    const std::int64_t hidden = config.shape.hidden;
    const Array sums = data_sum(
        r, to_param_dtype(Array::concatenate({d.loss.reshape({1}), d.d_z1.sum(0), d.d_z2.sum(0), d.d_logits.sum(0)})));
    const Array bias_grads[3] = {sums.slice(1, 1 + hidden), sums.slice(1 + hidden, 1 + 2 * hidden),
                                 sums.slice(1 + 2 * hidden, sums.shape()[0])};
    auto gather = [&](const Array& x, int axis) { return r.all_gather(x, data_groups, axis, /*tiled=*/true); };
    const int rank = r.index() / model;
    struct Layer {
      int weight, bias;
      Array input, delta;
    };
    // The four hidden-width pieces (both hidden layers are `hidden` wide) stacked and gathered in one
    // collective; each comes back as a first-axis view of the shared result (no copies, unlike pieces side by
    // side, which would need column slices).
    const Array hidden_pieces = gather(Array::stack({d.d_z1, d.h1, d.d_z2, d.h2}), 1);
    Layer layers[3] = {{kW1, kB1, gather(images, 0), hidden_pieces[0]},
                       {kW2, kB2, hidden_pieces[1], hidden_pieces[2]},
                       {kW3, kB3, hidden_pieces[3], gather(d.d_logits, 0)}};
    d = Deltas{};
    for (int l = 0; l < 3; ++l) {
      Layer& layer = layers[l];
      const std::int64_t rows = local_shapes[layer.weight][0] / data_ranks, begin = rank * rows;
      const Array grad = to_param_dtype(
          weft::matmul(layer.input.slice_axis(1, begin, begin + rows), layer.delta, {.transpose_a = true}));
      layer.input = layer.delta = Array();
      // This rank's rows of the new weight (its velocity rows are its shard, updated in place), gathered.
      r.value(weights[layer.weight]) =
          gather(sgd_momentum_new_param(r.value(weights[layer.weight]).slice(begin, begin + rows),
                                        r.value(velocities[layer.weight]), grad, config.learning_rate, config.momentum),
                 0);
      sgd_momentum(r.value(weights[layer.bias]), r.value(velocities[layer.bias]), bias_grads[l], config.learning_rate,
                   config.momentum);
    }
    r.host_store(result_out, sums.slice(0, 1).reshape({}));
  }

  void train_program(Replica& r) const {
    if (sharded_update) return train_program_sharded_update(r);
    Parameters p = acquire(r);
    const Array images = this->images(r, data.train);
    const Array labels = r.host_load(labels_in);
    StepResult s = autodiff ? (*autodiff)(&r, p, images, labels, config.global_batch)
                            : forward_backward(p, images, labels, config.global_batch, model_sum(r));
    p = Parameters{};  // drop the references so that the updates below write in place
    const Array loss = data_sum(r, to_param_dtype(s.loss));
    for (int i = 0; i < kNumParameters; ++i) {
      s.grads[i] = to_param_dtype(s.grads[i]);
      if (config.zero) {
        const Array grad = r.replicated_reduce_scatter(s.grads[i], data_groups, weft::ReduceOp::sum);
        s.grads[i] = Array();
        Array w = r.remote_load(buffers[i], 0);
        Array v = r.remote_load(buffers[i], 1);
        sgd_momentum(w, v, grad, config.learning_rate, config.momentum);
        r.remote_store(buffers[i], 0, w);
        r.remote_store(buffers[i], 1, v);
      } else {
        const Array grad = data_sum(r, s.grads[i]);
        s.grads[i] = Array();
        sgd_momentum(r.value(weights[i]), r.value(velocities[i]), grad, config.learning_rate, config.momentum);
      }
    }
    r.host_store(result_out, loss);
  }

  void eval_program(Replica& r) const {
    const Parameters p = acquire(r);
    const Array images = this->images(r, data.test);
    const Array labels = r.host_load(labels_in);
    r.host_store(result_out, data_sum(r, count_correct(p, images, labels, model_sum(r)).astype(config.dtype)));
  }

  // The session inputs for one global batch: each local replica gets the rows of its data rank. `rows` holds
  // up to global_batch indices into `split`; missing rows are padding (label -1).
  std::map<weft::HostStream, Array> batch_inputs(const Split& split, const std::vector<std::int64_t>& rows) const {
    const std::int64_t b = per_replica_batch;
    std::vector<std::int64_t> index(static_cast<std::size_t>(local_count * b), 0);
    std::vector<std::int32_t> labels(index.size(), -1);
    const auto all_labels = split.labels.data<std::int32_t>();
    for (int l = 0; l < local_count; ++l) {
      const std::int64_t d = (first_local + l) / model;
      for (std::int64_t k = 0; k < b; ++k) {
        const std::size_t src = static_cast<std::size_t>(d * b + k);
        if (src < rows.size()) {
          index[l * b + k] = rows[src];
          labels[l * b + k] = all_labels[rows[src]];
        }
      }
    }
    Array row_array = Array::from_vector(index);
    Array label_array = Array::from_vector(labels);
    if (local_count > 1) {
      row_array = row_array.reshape({local_count, b});
      label_array = label_array.reshape({local_count, b});
    }
    return {{rows_in, row_array}, {labels_in, label_array}};
  }

  double first_local_result(const std::map<weft::HostStream, Array>& outputs) const {
    return outputs.at(result_out).value_at(0);
  }

  double evaluate() {
    const std::int64_t n = data.test.size();
    double correct = 0;
    for (std::int64_t begin = 0; begin < n; begin += config.global_batch) {
      std::vector<std::int64_t> rows;
      for (std::int64_t i = begin; i < std::min(n, begin + config.global_batch); ++i) rows.push_back(i);
      correct += first_local_result(session->run([this](Replica& r) { eval_program(r); }, batch_inputs(data.test, rows)));
    }
    return correct / static_cast<double>(n);
  }

  std::string layout_text() const {
    return std::to_string(replicas) + " replicas, " + std::to_string(data_ranks) + " data x " + std::to_string(model) +
           " model" + (config.zero ? ", zero" : "");
  }

  void save(std::int64_t step) {
    weft::save_checkpoint(*session, config.checkpoint_path,
                          {{"step", std::to_string(step)}, {"seed", std::to_string(config.seed)},
                           {"layout", layout_text()}, {"global_batch", std::to_string(config.global_batch)}});
  }

  std::int64_t total_steps() const {
    return config.steps > 0 ? config.steps : config.epochs * (train_size / config.global_batch);
  }

  // The checkpoint is untrusted input: its step must be one this run can resume at, [0, total), written as
  // save() writes it (decimal digits); anything else is refused with the file, the field and its text.
  void resume() {
    const auto meta = weft::load_checkpoint(*session, config.resume_path);
    auto field = [&](const std::string& key) -> std::string {
      const auto it = meta.find(key);
      if (it == meta.end()) throw std::runtime_error(config.resume_path + ": not a train_fashion_mnist checkpoint (no '" + key + "')");
      return it->second;
    };
    if (field("seed") != std::to_string(config.seed) || field("global_batch") != std::to_string(config.global_batch))
      throw std::runtime_error(config.resume_path + ": written with seed " + quoted(field("seed")) + " and global batch " +
                               quoted(field("global_batch")) + "; resume with the same --seed and batch");
    const std::string text = field("step");
    const std::int64_t total = total_steps();
    const std::optional<std::int64_t> step = decimal(text);
    if (step && *step == total)
      throw std::runtime_error(config.resume_path + ": it was saved after step " + text + " of " + std::to_string(total) +
                               ": this run has nothing left to train (raise --epochs or --steps)");
    if (!step || *step > total)
      throw std::runtime_error(config.resume_path + ": metadata \"step\" = " + quoted(text) +
                               " is not a step of this run (an integer from 0 to " + std::to_string(total - 1) + ")");
    next_step = *step;
  }

  // Instance 0 writes the checkpoints: find out now, not after the first epoch, that it cannot.
  void check_checkpoint_path() const {
    const std::string& path = config.checkpoint_path;
    if (path.empty() || runtime.process_index() != 0) return;
    const std::string what = "--checkpoint '" + path + "'";
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw std::invalid_argument(what + " is a directory");
    const std::size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    std::string probe = dir + "/.train_fashion_mnist-probe-XXXXXX";
    const int fd = ::mkstemp(probe.data());
    if (fd < 0) throw std::invalid_argument(what + ": cannot write in '" + dir + "': " + std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
  }
};

Trainer::Trainer(TrainConfig config, const Dataset& data) : impl_(std::make_unique<Impl>(std::move(config), data)) {
  impl_->check_checkpoint_path();
  if (!impl_->config.resume_path.empty()) impl_->resume();
}

Trainer::~Trainer() = default;

std::int64_t Trainer::steps_per_epoch() const { return impl_->train_size / impl_->config.global_batch; }

TrainResult Trainer::run(const TrainObserver& observer) {
  Impl& m = *impl_;
  const TrainConfig& c = m.config;
  const std::int64_t per_epoch = steps_per_epoch();
  const std::int64_t total = c.steps > 0 ? c.steps : c.epochs * per_epoch;
  TrainResult result;
  result.devices = m.replicas;
  result.instances = m.runtime.process_count();
  result.data_parallel = m.data_ranks;
  result.model_parallel = m.model;
  result.zero = c.zero;
  result.test_accuracy = std::numeric_limits<double>::quiet_NaN();

  m.session->weights_from_host();
  const Clock::time_point start = Clock::now();
  std::vector<std::int64_t> order;
  int order_epoch = -1;
  std::vector<double> step_seconds;
  double epoch_loss = 0, epoch_seconds = 0;
  std::int64_t epoch_steps = 0;
  const std::int64_t first_step = m.next_step;
  for (std::int64_t step = m.next_step; step < total; ++step) {
    const int epoch = static_cast<int>(step / per_epoch);
    if (epoch != order_epoch) {
      order = epoch_order(m.data_key, epoch, m.train_size);
      order_epoch = epoch;
    }
    const std::int64_t k = step % per_epoch;
    const Clock::time_point t0 = Clock::now();
    const std::vector<std::int64_t> rows(order.begin() + k * c.global_batch, order.begin() + (k + 1) * c.global_batch);
    const double loss = m.first_local_result(m.session->run([&m](Replica& r) { m.train_program(r); }, m.batch_inputs(m.data.train, rows)));
    const double seconds = seconds_since(t0);
    step_seconds.push_back(seconds);
    StepRecord record{epoch, step, seconds_since(start), loss, static_cast<double>(c.global_batch) / seconds};
    result.steps.push_back(record);
    result.final_loss = loss;
    epoch_loss += loss;
    epoch_seconds += seconds;
    ++epoch_steps;
    m.next_step = step + 1;
    if (observer.on_step) observer.on_step(record, per_epoch, total);
    const bool epoch_done = (step + 1) % per_epoch == 0;
    const bool last = step + 1 == total;
    if (epoch_done || last) {
      EpochRecord e{epoch, 0, epoch_loss / static_cast<double>(epoch_steps), std::numeric_limits<double>::quiet_NaN(),
                    static_cast<double>(epoch_steps * c.global_batch) / epoch_seconds};
      if (c.evaluate) e.test_accuracy = result.test_accuracy = m.evaluate();
      e.elapsed_s = seconds_since(start);
      result.epochs.push_back(e);
      if (observer.on_epoch) observer.on_epoch(e);
      if (!c.checkpoint_path.empty()) m.save(step + 1);
      epoch_loss = epoch_seconds = 0;
      epoch_steps = 0;
    }
  }
  // Steady state: leave out the first steps (first touches of buffers, caches, page faults).
  const std::size_t warmup = std::min<std::size_t>(5, step_seconds.size() / 2);
  const double step_s = median(std::vector<double>(step_seconds.begin() + static_cast<std::ptrdiff_t>(warmup), step_seconds.end()));
  result.step_ms = step_s * 1e3;
  result.samples_per_s = static_cast<double>(c.global_batch) / step_s;
  (void)first_step;
  return result;
}

Parameters Trainer::parameters() {
  Impl& m = *impl_;
  Parameters p;
  for (int i = 0; i < kNumParameters; ++i) {
    const Array host = m.session->get_tensor_data(m.weights[i]);
    // One row per model rank when the variable is grouped by model rank (ZeRO groups every parameter so).
    const bool grouped = m.model > 1 && (m.config.zero || split_by_model(i));
    if (!grouped) {
      p[i] = host;
      continue;
    }
    std::vector<Array> slices;
    for (int r = 0; r < m.model; ++r) slices.push_back(host[r]);
    p[i] = join_model_slices(i, slices);
  }
  return p;
}

}  // namespace mnist
