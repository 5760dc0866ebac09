// Results of pmap: one shard per device, readable as one global array.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/array.hpp"
#include "weft/runtime.hpp"

namespace weft {
namespace detail {
struct RuntimeCounters;
}

struct Shard {
  Device device;
  Array data;  // this device's slice (the mapped axes removed)
};

class ShardedArray {
 public:
  ShardedArray() = default;
  // `mesh_shape` = the sharded leading dimensions (empty = replicated: every shard holds the whole value).
  // `mapped_axis` = where the (1-d) mapped axis sits in the global array.
  ShardedArray(std::vector<Shard> shards, Shape mesh_shape, Runtime* runtime = nullptr, int mapped_axis = 0);

  const std::vector<Shard>& shards() const { return shards_; }
  std::vector<Device> devices() const;
  DType dtype() const;
  Shape shape() const;  // global shape
  int ndim() const { return static_cast<int>(shape().size()); }
  const Shape& mesh_shape() const { return mesh_shape_; }
  int mapped_axis() const { return mapped_axis_; }
  bool replicated() const { return mesh_shape_.empty(); }

  // Copies every shard to the host and assembles the array (counted as device-to-host bytes). Its shape
  // depends on how many processes share the program's devices (docs/using-weft.md, "Results across
  // instances"), as in JAX, where a process holds only its own devices' shards:
  //   - one process holding every replica: the global array, (*mesh shape, *shard shape), e.g. (2, 4, 3)
  //     for a (2, 4) mesh of (3,) shards; with out_axes k the mapped axis sits at k;
  //   - under weftrun, each process gets only its own replicas' shards, in global replica order, their
  //     mesh axes flattened into one: (local replicas, *shard shape), e.g. (4, 3) on each of 2 instances
  //     of 4 devices, for a 1-d pmap and a (2, 4) mesh alike;
  //   - a replicated result (out_axes nullopt): the one value, the same everywhere.
  // For the same global value in every process, gather inside the pmap (all_gather, then out_axes nullopt).
  Array to_host() const;
  // First-axis index: with a 1-d mesh this is shard i itself, still on its device, no copy.
  Array operator[](std::int64_t index) const;
  // First-axis slice [begin, end), read back to the host.
  Array slice(std::int64_t begin, std::int64_t end) const;

 private:
  std::vector<Shard> shards_;
  Shape mesh_shape_;
  // The runtime's transfer counters (reads count device-to-host bytes), shared: a sharded array may outlive
  // its runtime, and its shards keep their buffers and memory accounts alive themselves.
  std::shared_ptr<detail::RuntimeCounters> counters_;
  int mapped_axis_ = 0;
};

// A copy of `array` committed to `device` (counted as host-to-device bytes unless already there).
Array device_put(const Array& array, const Device& device, Runtime& runtime = Runtime::current());
// shards[i] on devices[i], stacked on a new leading axis. Errors name both lengths / both shapes.
ShardedArray device_put_sharded(const std::vector<Array>& shards, const std::vector<Device>& devices,
                                Runtime& runtime = Runtime::current());
// One full copy of `array` per device, stacked on a new leading axis.
ShardedArray device_put_replicated(const Array& array, const std::vector<Device>& devices,
                                   Runtime& runtime = Runtime::current());

// JAX 0.3's repr: "ShardedDeviceArray([[0. , 1. ], ...], dtype=float32)".
std::string repr(const ShardedArray& array);
std::ostream& operator<<(std::ostream& os, const ShardedArray& array);

}  // namespace weft
