// The replica-sharded layout (PopXL's, docs/popxl.md): a tensor is flattened, zero-padded to a multiple of
// the shard count and cut into equal 1-d shards. One rule, used by the replica's PopXL-style collectives
// (replica.cc) and by the session's replica-sharded variables (session.cc).
#pragma once
#include <memory>
#include <vector>

#include "weft/array.hpp"
#include "weft/memory.hpp"

namespace weft::detail {

// x flattened and zero-padded to a multiple of `parts` elements (x itself, reshaped, when no padding is due).
Array flat_padded(const Array& x, int parts);

// Elements [index * P, (index + 1) * P) of the flattened `full`, P = ceil(n / count), zero-padded; charged
// to `account`.
Array shard_of(const Array& full, int index, int count, const std::shared_ptr<MemoryAccount>& account);

// Inverse of shard_of over all shards: concatenate, drop the padding, reshape.
Array unshard(const std::vector<Array>& shards, const Shape& shape);

}  // namespace weft::detail
