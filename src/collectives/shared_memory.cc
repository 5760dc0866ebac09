// The shared-memory algorithms (shared_memory.hpp): index math over the flat layouts and the one reduction
// kernel set.
#include "collectives/shared_memory.hpp"

#include <algorithm>
#include <cstring>

#include "array/member_reductions.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {

// A mean is summed and divided block by block (the kernels' block).
constexpr std::int64_t kBlock = kernels::kReductionBlock;

// Reduces `count` elements of every member's input into `out` as `c` asks: a mean sums block by block (in
// its sum dtype), then divides each block by the group size into the output dtype.
void reduce_range(const FlatCollective& c, std::span<const std::byte* const> in, std::byte* out, std::int64_t count) {
  if (!c.mean) return kernels::reduce_in_order(c.dtype, c.op, in, out, count);
  const std::size_t in_es = dtype_size(c.dtype), out_es = dtype_size(c.out_dtype);
  const bool wide = c.sum_dtype != c.dtype && c.sum_dtype == DType::f32;
  alignas(64) std::byte block[kBlock * sizeof(double)];
  std::vector<const std::byte*> at(in.size());
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    for (std::size_t m = 0; m < in.size(); ++m) at[m] = in[m] + base * in_es;
    kernels::reduce_in_order(c.dtype, ReduceOp::sum, at, block, len, wide);
    kernels::divide_sums(c.sum_dtype, block, c.out_dtype, out + base * out_es, len, static_cast<int>(in.size()));
  }
}

void all_reduce_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  auto [begin, end] = share_of(c.count, k, b.size());
  if (begin >= end) return;
  const std::size_t in_es = dtype_size(c.dtype), out_es = dtype_size(c.out_dtype);
  std::vector<const std::byte*> in(b.in.size());
  for (std::size_t m = 0; m < in.size(); ++m) in[m] = b.in[m] + begin * in_es;
  reduce_range(c, in, b.shared_out() + begin * out_es, end - begin);
}

void all_gather_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  // Member k's input, viewed as [outer, inner], fills the output's [:, k, :].
  const int g = b.size();
  const std::size_t inner = static_cast<std::size_t>(c.out.inner) * dtype_size(c.dtype);
  std::byte* dst = b.shared_out();
  for (std::int64_t o = 0; o < c.out.outer; ++o) std::memcpy(dst + (o * g + k) * inner, b.in[k] + o * inner, inner);
}

void reduce_scatter_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  // Member k reduces block k of every input, row by row.
  const int g = b.size();
  const std::int64_t inner = c.in.inner;
  const std::size_t in_es = dtype_size(c.dtype), out_es = dtype_size(c.out_dtype);
  std::vector<const std::byte*> in(g);
  for (std::int64_t o = 0; o < c.in.outer; ++o) {
    for (int m = 0; m < g; ++m) in[m] = b.in[m] + ((o * g + k) * inner) * in_es;
    reduce_range(c, in, b.out[k] + o * inner * out_es, inner);
  }
}

void all_to_all_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  // Block k of member m's input goes to block m of member k's output; the piece is read in row-major order
  // on both sides, in runs contiguous in both (the whole piece when both layouts have one row).
  const int g = b.size();
  const std::size_t es = dtype_size(c.dtype);
  const std::int64_t piece = c.in.outer * c.in.inner, from = c.in.inner, to = c.out.inner;
  for (int m = 0; m < g; ++m) {
    for (std::int64_t i = 0; i < piece;) {
      const std::int64_t a = i / from, x = i % from, o = i / to, y = i % to;
      const std::int64_t run = std::min(from - x, to - y);
      std::memcpy(b.out[k] + ((o * g + m) * to + y) * es, b.in[m] + ((a * g + k) * from + x) * es,
                  static_cast<std::size_t>(run) * es);
      i += run;
    }
  }
}

void ppermute_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  // Destination k takes its source's input; a destination no pair names receives zeros.
  const int g = b.size();
  for (auto [s, d] : *c.perm)
    if (((d % g) + g) % g == k) {
      std::memcpy(b.out[k], b.in[((s % g) + g) % g], c.in_bytes());
      return;
    }
  std::memset(b.out[k], 0, c.out_bytes());
}

}  // namespace

std::byte* GroupBuffers::shared_out() const {
  for (std::byte* o : out)
    if (o) return o;
  throw Error("internal: a collective without an output buffer for the members held");
}

std::pair<std::int64_t, std::int64_t> share_of(std::int64_t count, int k, int parts) {
  auto edge = [&](int i) { return i == parts ? count : (count * i / parts) & ~std::int64_t{15}; };
  return {edge(k), edge(k + 1)};
}

void SharedMemoryCommunicator::run_share(const FlatCollective& c, const GroupBuffers& b, int k) {
  switch (c.kind) {
    case Kind::all_reduce: return all_reduce_share(c, b, k);
    case Kind::all_gather: return all_gather_share(c, b, k);
    case Kind::reduce_scatter: return reduce_scatter_share(c, b, k);
    case Kind::all_to_all: return all_to_all_share(c, b, k);
    case Kind::ppermute: return ppermute_share(c, b, k);
  }
}

void SharedMemoryCommunicator::run(const FlatCollective& c, GroupBuffers& b, const transport::PollContext&) {
  for (int k = 0; k < b.size(); ++k)
    if (c.shared_output() || b.out[k]) run_share(c, b, k);
}

}  // namespace weft::collectives
