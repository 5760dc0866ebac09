// ZeRO-style sharded optimizer state with a weft Session (PopXL's replicated tensor sharding).
//
// Data-parallel training keeps a full copy of the weight and of its optimizer state on every replica. ZeRO
// instead keeps the state in host ("remote") memory, sharded across the replicas: each replica owns 1/R of
// the weight and of the momentum, reduce-scatters the gradient so that it receives only the part for its
// shard, updates its shard, stores it back, and all-gathers the shards when the full weight is needed.
//
// This program trains nothing: the gradient is a made-up, replica-dependent tensor. It shows the pattern on
// 4 virtual devices whose memory is too small for the full training state (weight + momentum), checks the
// result against a plain single-threaded computation and prints "ok".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include "weft/weft.hpp"

// RuntimeOptions and SessionOptions are filled with designated initializers; g++ -Wextra would warn about
// every member left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using namespace weft;

namespace {

constexpr int kReplicas = 4;
constexpr std::int64_t kN = 1024;                 // elements of the weight: 4 KiB of float32
constexpr std::int64_t kDeviceMemory = 6 * 1024;  // bytes per device: one full tensor fits, two do not
constexpr int kSteps = 3;
constexpr float kLearningRate = 0.1f;
constexpr float kBeta = 0.9f;  // momentum decay
constexpr int kWeight = 0, kMomentum = 1;  // the two entries of the remote buffer

// The "gradient" replica `replica` computes at `step`: different on every replica, so the reduction matters.
float FakeGradient(int replica, std::int64_t i, int step) {
  return 0.01f * static_cast<float>(replica + 1) * static_cast<float>((i + step) % 7 - 3);
}

}  // namespace

int main() {
  Runtime rt({.device_count = kReplicas, .device_memory = kDeviceMemory});
  std::vector<float> initial(kN);
  for (std::int64_t i = 0; i < kN; ++i) initial[i] = 0.001f * static_cast<float>(i);

  // 1. Why shard at all: weight and momentum as ordinary on-device variables need 8 KiB per device, and the
  //    devices have 6 KiB. The weights go to the devices on the first run, which fails.
  {
    Session naive({.replicas = kReplicas, .runtime = &rt, .name = "replicated"});
    naive.variable(Array::from_vector(initial), std::nullopt, Retrieval::one_per_group, "weight");
    naive.variable(Array::zeros({kN}), std::nullopt, Retrieval::one_per_group, "momentum");
    try {
      naive.run([](Replica&) {});
      std::printf("unexpected: the replicated training state fit on the devices\n");
      return 1;
    } catch (const OutOfMemoryError& e) {
      std::printf("replicated weight + momentum: %s\n", e.what());
    }
  }

  // 2. The ZeRO layout: one replica-sharded remote buffer with two entries (weight, momentum). Each entry
  //    of each replica is a 1-d shard of ceil(kN / 4) = 256 elements in host memory; replica k holds
  //    elements [256 k, 256 k + 256) of both tensors.
  Session s({.replicas = kReplicas, .runtime = &rt, .name = "zero"});
  RemoteBuffer state = s.replica_sharded_buffer({kN}, DType::f32, std::nullopt, /*shard_over=*/0, /*entries=*/2);
  Variable weight = s.remote_replica_sharded_variable(Array::from_vector(initial), state, kWeight, std::nullopt,
                                                      Retrieval::one_per_group, "weight");
  Variable momentum = s.remote_replica_sharded_variable(Array::zeros({kN}), state, kMomentum, std::nullopt,
                                                        Retrieval::one_per_group, "momentum");
  std::printf("shard per replica and entry: %lld floats of a (%lld,) tensor\n",
              static_cast<long long>(state.shape()[0]), static_cast<long long>(kN));

  const ReplicaGroups everyone = s.replica_grouping();  // the shards are spread over all replicas
  HostStream full_weight = s.d2h_stream({kN}, DType::f32, "full_weight");
  std::map<HostStream, Array> outs;
  for (int step = 0; step < kSteps; ++step) {
    outs = s.run([&](Replica& r) {
      // The full gradient exists only briefly: reduce-scatter leaves this replica the mean over all
      // replicas of just its own shard's elements, and the full tensor is freed at the end of the scope.
      Array gradient_shard;
      {
        std::vector<float> g(kN);
        for (std::int64_t i = 0; i < kN; ++i) g[i] = FakeGradient(r.index(), i, step);
        gradient_shard = r.replicated_reduce_scatter(Array::from_vector(g), everyone, ReduceOp::mean);
      }
      // Bring this replica's shards of the weight and the momentum onto the device, update, store back.
      Array w = r.remote_load(state, kWeight);
      Array m = r.remote_load(state, kMomentum);
      w = w - kLearningRate * m;
      m = kBeta * m + gradient_shard;
      r.remote_store(state, kWeight, w);
      r.remote_store(state, kMomentum, m);
      // Free what is no longer needed before the full weight is gathered (memory is tight on purpose).
      m = Array();
      gradient_shard = Array();
      // Every replica can see the full updated weight by all-gathering the shards.
      r.host_store(full_weight, r.gather_shards(w, everyone, {kN}));
    });
  }

  // 3. The same computation, single-threaded on the host.
  std::vector<float> w = initial, m(kN, 0.0f);
  for (int step = 0; step < kSteps; ++step)
    for (std::int64_t i = 0; i < kN; ++i) {
      float sum = 0.0f;
      for (int replica = 0; replica < kReplicas; ++replica) sum += FakeGradient(replica, i, step);
      const float g = sum / static_cast<float>(kReplicas);
      w[i] = w[i] - kLearningRate * m[i];
      m[i] = kBeta * m[i] + g;
    }

  // 4. Compare: what every replica gathered, and what the session reads back from the shards.
  auto close = [](double a, double b) { return std::fabs(a - b) <= 1e-6 * std::fmax(1.0, std::fabs(b)); };
  bool ok = true;
  const std::vector<double> gathered = outs.at(full_weight).to_doubles();  // (replicas, kN)
  for (int replica = 0; replica < kReplicas; ++replica)
    for (std::int64_t i = 0; i < kN; ++i) ok = ok && close(gathered[replica * kN + i], w[i]);
  const std::vector<double> final_weight = s.get_tensor_data(weight).to_doubles();
  const std::vector<double> final_momentum = s.get_tensor_data(momentum).to_doubles();
  for (std::int64_t i = 0; i < kN; ++i)
    ok = ok && close(final_weight[i], w[i]) && close(final_momentum[i], m[i]);
  for (const Device& d : rt.devices()) ok = ok && rt.memory_in_use(d) == 0;  // nothing left on the devices

  std::printf("weight[0..4] after %d steps: %.6f %.6f %.6f %.6f (host reference %.6f %.6f %.6f %.6f)\n", kSteps,
              final_weight[0], final_weight[1], final_weight[2], final_weight[3], w[0], w[1], w[2], w[3]);
  std::printf("%s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
