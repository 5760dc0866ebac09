// JAX's semantics lowered to flat buffers, in one place (flat_collective.hpp).
#include "collectives/flat_collective.hpp"

namespace weft::collectives {
namespace {

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

}  // namespace

FlatCollective lower(const Request& r) {
  FlatCollective c;
  c.kind = r.kind;
  c.dtype = r.input->dtype();
  c.out_dtype = output_dtype(r);
  c.op = reduction_of(r);
  c.mean = divides_by_group(r);
  c.sum_dtype = sum_dtype(r);
  c.count = r.input->size();
  c.perm = r.perm;
  const Shape& s = r.input->shape();
  const int rank = static_cast<int>(s.size());
  const int g = static_cast<int>(r.groups->members(r.groups->group_of(r.replica)).size());
  switch (r.kind) {
    case Kind::all_reduce:
    case Kind::ppermute:
      c.out_count = c.count;
      break;
    case Kind::all_gather: {
      // The gathered dimension goes at `axis`: everything before it is the outer dimension.
      const int a = positive_axis(r.axis, r.tiled ? rank : rank + 1);
      c.out = {product(s, 0, a), product(s, a, s.size())};
      c.out_count = c.count * g;
      break;
    }
    case Kind::reduce_scatter: {
      const int d = positive_axis(r.axis, rank);
      c.in = {product(s, 0, d), (r.tiled ? s[d] / g : 1) * product(s, d + 1, s.size())};
      c.out_count = c.count / g;
      break;
    }
    case Kind::all_to_all: {
      // Member k's piece (chunk k of the split axis) is [in.outer, in.inner] and, read as the output's
      // [out.outer, out.inner] (the same elements in row-major order), lands in the output's block k along
      // the concat axis.
      const int split = positive_axis(r.axis, rank), concat = positive_axis(r.concat_axis, rank);
      const std::int64_t chunk = r.tiled ? s[split] / g : 1;
      c.in = {product(s, 0, split), chunk * product(s, split + 1, s.size())};
      Shape piece = s;
      if (r.tiled) piece[split] = chunk;
      else piece.erase(piece.begin() + split);  // untiled: the split axis (of size g) goes, a new one comes
      c.out = {product(piece, 0, concat), product(piece, concat, piece.size())};
      c.out_count = c.count;
      break;
    }
  }
  return c;
}

}  // namespace weft::collectives
