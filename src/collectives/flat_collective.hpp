// The seam under the collectives' semantics. A Request speaks JAX's terms (named axes or groups, pmean,
// booleans, axis / tiled / concat options, shapes); lower() turns it, once per round, into a FlatCollective:
// element counts, dtypes, an element-wise op and block layouts. That is all the layers below see: the
// shared-memory algorithms (shared_memory.*), the communicator between processes (process_communicator.*)
// and their composition (hierarchical.cc), behind one interface (flat_communicator.hpp). Nothing below this
// line knows a shape, an axis or a mean (XLA's collectives take flat buffers the same way).
#pragma once
#include <cstdint>

#include "collectives/request.hpp"

namespace weft::collectives {

// A buffer viewed as [outer, group size, inner] elements: block k of row o is the part that belongs to (or
// comes from) group member k.
struct BlockLayout {
  std::int64_t outer = 1;
  std::int64_t inner = 0;
};

struct FlatCollective {
  Kind kind = Kind::all_reduce;
  DType dtype = DType::f32;      // the inputs' elements
  DType out_dtype = DType::f32;  // the outputs' (psum of booleans: int32; pmean of integers: a float)
  // all_reduce and reduce_scatter: sum, prod, max or min (a mean is lowered to a sum, then `mean`).
  ReduceOp op = ReduceOp::sum;
  bool mean = false;             // divide the group's sums by its size, into out_dtype
  DType sum_dtype = DType::f32;  // a mean's sums before the division (float32 for 16-bit floats)
  std::int64_t count = 0;        // elements of one member's input
  std::int64_t out_count = 0;    // elements of one member's output
  // all_gather: the output's blocks (member k's whole input is block k); reduce_scatter: the input's (member
  // k's output reduces block k of every input); all_to_all: both (block k of the input goes to member k,
  // block k of the output came from member k).
  BlockLayout in, out;
  const Permutation* perm = nullptr;  // ppermute: (source, destination) member indices, modulo the group size

  std::size_t in_bytes() const { return static_cast<std::size_t>(count) * dtype_size(dtype); }
  std::size_t out_bytes() const { return static_cast<std::size_t>(out_count) * dtype_size(out_dtype); }
  // The group's members all receive the same result, so they share one output buffer.
  bool shared_output() const { return kind == Kind::all_reduce || kind == Kind::all_gather; }
};

// `request` (validated) as flat buffers, for a group of its group's size (all groups of the kinds with
// layouts have one size; an all-reduce's groups may differ, its mean takes each group's own size).
FlatCollective lower(const Request& request);

}  // namespace weft::collectives
