#include <cstring>
#include <ostream>

#include "runtime/internal.hpp"
#include "weft/error.hpp"
#include "weft/sharded_array.hpp"

namespace weft {

ShardedArray::ShardedArray(std::vector<Shard> shards, Shape mesh_shape, Runtime* runtime, int mapped_axis)
    : shards_(std::move(shards)),
      mesh_shape_(std::move(mesh_shape)),
      counters_(runtime ? runtime->impl().counters : nullptr),
      mapped_axis_(mapped_axis) {
  if (shards_.empty()) throw InvalidArgument("a sharded array needs at least one shard");
  if (!mesh_shape_.empty() && num_elements(mesh_shape_) != static_cast<std::int64_t>(shards_.size()))
    throw InvalidArgument("a sharded array over mesh shape " + shape_str(mesh_shape_) + " needs " +
                          std::to_string(num_elements(mesh_shape_)) + " shards, got " + std::to_string(shards_.size()));
}

std::vector<Device> ShardedArray::devices() const {
  std::vector<Device> d;
  for (const Shard& s : shards_) d.push_back(s.device);
  return d;
}

DType ShardedArray::dtype() const { return shards_.empty() ? DType::f32 : shards_[0].data.dtype(); }

Shape ShardedArray::shape() const {
  if (shards_.empty()) return {0};
  Shape local = shards_[0].data.shape();
  if (mesh_shape_.empty()) return local;
  if (mapped_axis_ != 0) {
    local.insert(local.begin() + mapped_axis_, mesh_shape_[0]);
    return local;
  }
  Shape s = mesh_shape_;
  s.insert(s.end(), local.begin(), local.end());
  return s;
}

Array ShardedArray::to_host() const {
  if (shards_.empty()) return Array();
  auto count = [&](std::size_t bytes) {
    if (counters_) counters_->d2h += bytes;
  };
  if (mesh_shape_.empty()) {
    count(shards_[0].data.nbytes());
    return shards_[0].data.copy().with_device(-1);
  }
  std::vector<Array> parts;
  parts.reserve(shards_.size());
  for (const Shard& s : shards_) {
    count(s.data.nbytes());
    parts.push_back(s.data);
  }
  Array stacked = Array::stack(parts, mapped_axis_);
  if (mapped_axis_ == 0) stacked = stacked.reshape(shape());
  return stacked.with_device(-1);
}

Array ShardedArray::operator[](std::int64_t index) const {
  const Shape s = shape();
  if (s.empty()) throw InvalidArgument("cannot index a 0-d sharded array");
  if (index < -s[0] || index >= s[0])
    throw InvalidArgument("index " + std::to_string(index) + " is out of bounds for axis 0 with size " + std::to_string(s[0]));
  if (index < 0) index += s[0];
  if (mesh_shape_.size() == 1 && mapped_axis_ == 0) return shards_[index].data;  // zero copy, on its device
  return to_host()[index];
}

Array ShardedArray::slice(std::int64_t begin, std::int64_t end) const { return to_host().slice(begin, end); }

Array device_put(const Array& array, const Device& device, Runtime& runtime) {
  runtime.impl().device(device, "device_put");
  if (array.device() == device.id) return array;
  if (array.device() < 0) runtime.impl().stats.h2d += array.nbytes();
  Array placed = Array::empty(array.shape(), array.dtype(), runtime.memory_account(device), device.id);
  std::memcpy(placed.mutable_bytes(), array.bytes(), array.nbytes());
  return placed;
}

ShardedArray device_put_sharded(const std::vector<Array>& shards, const std::vector<Device>& devices, Runtime& runtime) {
  if (shards.size() != devices.size())
    throw InvalidArgument("device_put_sharded: len(shards) = " + std::to_string(shards.size()) +
                          " must equal len(devices) = " + std::to_string(devices.size()) + ".");
  if (shards.empty()) throw InvalidArgument("device_put_sharded: needs at least one shard");
  std::vector<Shard> placed;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].shape() != shards[0].shape() || shards[i].dtype() != shards[0].dtype())
      throw InvalidArgument("device_put_sharded: the shards must have consistent shape and dtype, but got " +
                            std::string(dtype_name(shards[0].dtype())) + shape_str(shards[0].shape()) + " and " +
                            std::string(dtype_name(shards[i].dtype())) + shape_str(shards[i].shape()) + " (shard " +
                            std::to_string(i) + ").");
    placed.push_back({devices[i], device_put(shards[i], devices[i], runtime)});
  }
  return ShardedArray(std::move(placed), Shape{static_cast<std::int64_t>(shards.size())}, &runtime);
}

ShardedArray device_put_replicated(const Array& array, const std::vector<Device>& devices, Runtime& runtime) {
  return device_put_sharded(std::vector<Array>(devices.size(), array), devices, runtime);
}

std::string repr(const ShardedArray& array) { return repr(array.to_host(), "ShardedDeviceArray"); }
std::ostream& operator<<(std::ostream& os, const ShardedArray& array) { return os << to_string(array.to_host()); }

}  // namespace weft
