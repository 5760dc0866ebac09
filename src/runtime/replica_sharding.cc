// The replica-sharded layout (replica_sharding.hpp): flatten, zero-pad, cut into equal shards, and back.
#include "runtime/replica_sharding.hpp"

#include <algorithm>
#include <cstring>

namespace weft::detail {

Array flat_padded(const Array& x, int parts) {
  const std::int64_t n = x.size();
  const std::int64_t padded = (n + parts - 1) / parts * parts;
  if (padded == n) return x.reshape({n});
  Array out = Array::zeros({padded}, x.dtype());
  std::memcpy(out.mutable_bytes(), x.bytes(), x.nbytes());
  return out;
}

Array shard_of(const Array& full, int index, int count, const std::shared_ptr<MemoryAccount>& account) {
  const std::int64_t n = full.size();
  const std::int64_t per = (n + count - 1) / count;
  Array shard = Array::empty({per}, full.dtype(), account);
  std::byte* dst = shard.mutable_bytes();
  const std::size_t es = dtype_size(full.dtype());
  std::memset(dst, 0, shard.nbytes());
  const std::int64_t begin = std::min(n, index * per), end = std::min(n, begin + per);
  std::memcpy(dst, full.bytes() + begin * es, static_cast<std::size_t>(end - begin) * es);
  return shard;
}

Array unshard(const std::vector<Array>& shards, const Shape& shape) {
  Array flat = Array::concatenate(shards, 0);
  return flat.slice(0, num_elements(shape)).copy().reshape(shape);
}

}  // namespace weft::detail
