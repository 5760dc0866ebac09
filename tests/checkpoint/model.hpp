// A session of 8 replicas holding one of everything a checkpoint stores, and a training-like step that
// changes all of it; shared by tests/inproc/checkpoint_test.cc (one process) and checkpoint_program.cc
// (two instances under weftrun).
//
// Updates keep the replicas of a group equal (they depend on the group, or go through an all-reduce over
// the variable's grouping), as a real model's do: a checkpoint stores one value per group. Sharded values
// depend only on (group, shard index), and the zero padding of the last shard stays zero (as it does under
// reduce-scattered gradients): a checkpoint stores the variable's value, not the padding, and a load pads
// with zeros again. Unbound remote buffer entries are per-replica scratch and may differ everywhere. Every float value is a small dyadic number, so sums are exact in any order and two instances
// compute bit for bit what one process computes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/session.hpp"

namespace weft::testing {

class CheckpointModel {
 public:
  static constexpr int kReplicas = 8;

  explicit CheckpointModel(Session& s)
      : all_(s.replica_grouping()),
        stride2_(s.replica_grouping(2, 4)),
        pairs_(s.replica_grouping(1, 2)),
        halves_(s.replica_grouping(1, 4)) {
    plain_ = s.variable(Ramp({4, 3}, DType::f32, 0.5, 0.5), std::nullopt, Retrieval::one_per_group, "plain");
    grouped_ = s.variable(Ramp({2, 5}, DType::i32, -3, 7), stride2_, Retrieval::all_replicas, "grouped");
    pairs_v_ = s.variable(Ramp({4, 2, 2}, DType::f64, 1.25, -0.5), pairs_, Retrieval::one_per_group, "pairs");
    half_ = s.variable(Ramp({3}, DType::bf16, -1.5, 0.75), std::nullopt, Retrieval::one_per_group, "half");
    mask_ = s.variable(Array::from_vector<bool>({true, false, false, true, false, true, true, false}, {2, 4}), halves_,
                       Retrieval::all_replicas, "mask");
    scratch_ = s.remote_buffer({6}, DType::f32, 3);
    remote_ = s.remote_variable(Ramp({2, 6}, DType::f32, 100, 1), scratch_, 1, halves_, Retrieval::one_per_group, "remote");
    shards_ = s.replica_sharded_buffer({2, 10}, DType::f32, halves_, 2);
    sharded_remote_ = s.remote_replica_sharded_variable(Ramp({2, 10}, DType::f32, -20, 0.25), shards_, 0, halves_,
                                                        Retrieval::all_replicas, "sharded_remote");
    sharded_ = s.replica_sharded_variable(Ramp({7}, DType::i32, 1000, -3), all_, 4, Retrieval::one_per_group, "sharded");
    auto dump = [&](const std::string& name, Shape shape, DType dtype) { dumps_.push_back(s.d2h_stream(std::move(shape), dtype, name)); };
    dump("dump.plain", {4, 3}, DType::f32);
    dump("dump.grouped", {5}, DType::i32);
    dump("dump.pairs", {2, 2}, DType::f64);
    dump("dump.half", {3}, DType::bf16);
    dump("dump.mask", {4}, DType::boolean);
    dump("dump.scratch.0", {6}, DType::f32);
    dump("dump.scratch.1", {6}, DType::f32);
    dump("dump.scratch.2", {6}, DType::f32);
    dump("dump.shards", {5}, DType::f32);
    dump("dump.sharded", {2}, DType::i32);
  }

  // One training step `t` (1, 2, ...).
  void step(Replica& r, int t) const {
    const int i = r.index();
    Array& plain = r.value(plain_);
    plain = plain * 0.5 + r.all_reduce(Array::full({4, 3}, i + t, DType::f32), all_);
    r.value(grouped_) += r.all_reduce(Array::arange(5, DType::i32) * static_cast<double>(i + 1), stride2_);
    Array& pairs = r.value(pairs_v_);
    pairs = pairs * 2.0 - r.all_reduce(Array::full({2, 2}, i * t, DType::f64), pairs_, ReduceOp::max);
    Array& half = r.value(half_);
    half = (half + 0.5) * -1.0;
    r.value(mask_) = r.value(mask_) ^ Array::full({4}, t % 2, DType::boolean);
    r.remote_store(scratch_, 1, r.remote_load(scratch_, 1) + r.all_reduce(Array::full({6}, i, DType::f32), halves_));
    const Array e0 = r.remote_load(scratch_, 0) + static_cast<double>(10 * i + t);
    r.remote_store(scratch_, 0, e0);
    r.remote_store(scratch_, 2, r.remote_load(scratch_, 2) * 2.0 + e0);
    const int shard = halves_.rank_in_group(i) % 2, group = halves_.group_of(i);
    r.remote_store(shards_, 0, r.remote_load(shards_, 0) + static_cast<double>(10 * group + shard + t));
    // Shard 3 holds element 6 and the padding element 7: the padding stays zero.
    Array delta = Array::full({2}, i % 4 + t, DType::i32);
    if (i % 4 == 3) delta = delta * Array::from_vector<std::int32_t>({1, 0});
    r.value(sharded_) += delta;
  }

  // Every value each replica holds, one d2h stream per stored thing (shards as they are).
  void dump(Replica& r) const {
    r.host_store(dumps_[0], r.value(plain_));
    r.host_store(dumps_[1], r.value(grouped_));
    r.host_store(dumps_[2], r.value(pairs_v_));
    r.host_store(dumps_[3], r.value(half_));
    r.host_store(dumps_[4], r.value(mask_));
    for (int e = 0; e < 3; ++e) r.host_store(dumps_[5 + e], r.remote_load(scratch_, e));
    r.host_store(dumps_[8], r.remote_load(shards_, 0));
    r.host_store(dumps_[9], r.value(sharded_));
  }

  // A dump run's outputs by stream name, in the order above.
  std::vector<std::pair<std::string, Array>> dump_all(Session& s) const {
    auto outputs = s.run([&](Replica& r) { dump(r); });
    std::vector<std::pair<std::string, Array>> out;
    for (const HostStream& h : dumps_) out.emplace_back(h.name(), outputs.at(h));
    return out;
  }

  void run_steps(Session& s, int first, int last) const {
    for (int t = first; t <= last; ++t) s.run([&](Replica& r) { step(r, t); });
  }

  std::vector<Variable> variables() const {
    return {plain_, grouped_, pairs_v_, half_, mask_, remote_, sharded_remote_, sharded_};
  }

 private:
  // start, start + step, ... shaped `shape`.
  static Array Ramp(const Shape& shape, DType dtype, double start, double step) {
    std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = start + step * static_cast<double>(k);
    return Array::from_doubles(v, shape, dtype);
  }

  ReplicaGroups all_, stride2_, pairs_, halves_;
  Variable plain_, grouped_, pairs_v_, half_, mask_, remote_, sharded_remote_, sharded_;
  RemoteBuffer scratch_, shards_;
  std::vector<HostStream> dumps_;
};

}  // namespace weft::testing
