#include "collectives/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "array/member_reductions.hpp"
#include "weft/error.hpp"

namespace weft::collectives {
namespace {

// A mean is summed and divided block by block (the kernels' block).
constexpr std::int64_t kBlock = kernels::kReductionBlock;

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

// The reduction of one range as the request asks: a mean sums block by block (in sum_dtype), then divides
// each block by the group size into the mean's output dtype.
void reduce_request_range(const Request& r, std::span<const std::byte* const> in, std::byte* out, std::int64_t count,
                          int group_size) {
  const DType dtype = r.input->dtype();
  if (!divides_by_group(r)) return kernels::reduce_in_order(dtype, r.reduce, in, out, count);
  const DType sums = sum_dtype(r), out_dtype = output_dtype(r);
  const std::size_t in_es = dtype_size(dtype), out_es = dtype_size(out_dtype);
  alignas(64) std::byte block[kBlock * sizeof(double)];
  std::vector<const std::byte*> at(in.size());
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    for (std::size_t m = 0; m < in.size(); ++m) at[m] = in[m] + base * in_es;
    kernels::reduce_in_order(dtype, ReduceOp::sum, at, block, len, sums != dtype && sums == DType::f32);
    kernels::divide_sums(sums, block, out_dtype, out + base * out_es, len, group_size);
  }
}

// Cache-line aligned share [begin, end) of `count` elements for member `k` of `g`.
std::pair<std::int64_t, std::int64_t> share(std::int64_t count, int k, int g) {
  auto edge = [&](int i) { return i == g ? count : (count * i / g) & ~std::int64_t{15}; };
  return {edge(k), edge(k + 1)};
}

struct GroupView {
  const std::vector<int>& members;
  int rank;  // position of the executing replica in members
};

GroupView group_view(const Request& r) {
  const int g = r.groups->group_of(r.replica);
  return {r.groups->members(g), r.groups->rank_in_group(r.replica)};
}

void all_reduce_part(const Plan& plan, int replica) {
  const Request& r = *plan.requests[replica];
  GroupView gv = group_view(r);
  const int g = static_cast<int>(gv.members.size());
  const Array& out = plan.outputs[replica];
  const std::int64_t n = r.input->size();
  auto [begin, end] = share(n, gv.rank, g);
  if (begin >= end) return;
  const std::size_t in_es = dtype_size(r.input->dtype()), out_es = dtype_size(out.dtype());
  std::vector<const std::byte*> in(g);
  for (int m = 0; m < g; ++m) in[m] = plan.requests[gv.members[m]]->input->bytes() + begin * in_es;
  // The output buffer is shared by the group and not yet published: each member writes its own share.
  std::byte* dst = plan.output_data[replica] + begin * out_es;
  reduce_request_range(r, in, dst, end - begin, g);
}

void all_gather_part(const Plan& plan, int replica) {
  const Request& r = *plan.requests[replica];
  GroupView gv = group_view(r);
  const int g = static_cast<int>(gv.members.size());
  const Shape& s = r.input->shape();
  const int rank = static_cast<int>(s.size());
  const int a = positive_axis(r.axis, r.tiled ? rank : rank + 1);
  // Output viewed as [outer, g, inner]; member k fills [:, k, :] with its input viewed as [outer, inner].
  const std::int64_t outer = product(s, 0, a);
  const std::size_t inner = static_cast<std::size_t>(product(s, a, s.size())) * dtype_size(r.input->dtype());
  std::byte* dst = plan.output_data[replica];
  const std::byte* src = r.input->bytes();
  for (std::int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * g + gv.rank) * inner, src + o * inner, inner);
}

void reduce_scatter_part(const Plan& plan, int replica) {
  const Request& r = *plan.requests[replica];
  GroupView gv = group_view(r);
  const int g = static_cast<int>(gv.members.size());
  const Shape& s = r.input->shape();
  const int rank = static_cast<int>(s.size());
  const int d = positive_axis(r.axis, rank);
  // Inputs viewed as [outer, g, inner]; member k reduces the [:, k, :] pieces.
  const std::int64_t outer = product(s, 0, d);
  const std::int64_t inner = (r.tiled ? s[d] / g : 1) * product(s, d + 1, s.size());
  const std::size_t in_es = dtype_size(r.input->dtype());
  const Array& out = plan.outputs[replica];
  const std::size_t out_es = dtype_size(out.dtype());
  std::vector<const std::byte*> in(g);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (int m = 0; m < g; ++m)
      in[m] = plan.requests[gv.members[m]]->input->bytes() + ((o * g + gv.rank) * inner) * in_es;
    reduce_request_range(r, in, plan.output_data[replica] + o * inner * out_es, inner, g);
  }
}

void all_to_all_part(const Plan& plan, int replica) {
  const Request& r = *plan.requests[replica];
  GroupView gv = group_view(r);
  const int g = static_cast<int>(gv.members.size());
  const Shape& s = r.input->shape();
  const int rank = static_cast<int>(s.size());
  const int split = positive_axis(r.axis, rank);
  const int concat = positive_axis(r.concat_axis, rank);
  const std::int64_t chunk = r.tiled ? s[split] / g : 1;
  if (split == 0 && concat == 0) {
    // Contiguous fast path: output piece s is chunk k of member s's input.
    const std::size_t bytes = static_cast<std::size_t>(chunk * product(s, 1, s.size())) * dtype_size(r.input->dtype());
    std::byte* dst = plan.output_data[replica];
    for (int m = 0; m < g; ++m)
      std::memcpy(dst + m * bytes, plan.requests[gv.members[m]]->input->bytes() + gv.rank * bytes, bytes);
    return;
  }
  std::vector<Array> pieces;
  pieces.reserve(g);
  for (int m = 0; m < g; ++m) {
    Array piece = plan.requests[gv.members[m]]->input->slice_axis(split, gv.rank * chunk, (gv.rank + 1) * chunk);
    pieces.push_back(r.tiled ? piece : piece.squeeze(split));
  }
  Array result = r.tiled ? Array::concatenate(pieces, concat) : Array::stack(pieces, concat);
  std::memcpy(plan.output_data[replica], result.bytes(), result.nbytes());
}

}  // namespace

std::shared_ptr<Plan> make_plan(std::span<const Request* const> requests,
                                const std::function<std::shared_ptr<MemoryAccount>(int)>& account_of,
                                const Thresholds& sizes, const std::vector<char>* group_mask) {
  auto plan = std::make_shared<Plan>();
  const int n = static_cast<int>(requests.size());
  plan->requests.assign(requests.begin(), requests.end());
  plan->outputs.resize(n);
  plan->output_data.assign(n, nullptr);
  const Request* first_ptr = nullptr;
  for (const Request* r : requests)
    if (r) {
      first_ptr = r;
      break;
    }
  const Request& first = *first_ptr;
  const ReplicaGroups& groups = *first.groups;
  const DType out_dtype = output_dtype(first);
  auto planned = [&](int g) { return !group_mask || (*group_mask)[g]; };
  std::size_t largest = 0;

  if (first.kind == Kind::ppermute) {
    // Arrays are immutable, so the destination simply takes the source's array: no bytes move.
    for (int gi = 0; gi < groups.num_groups(); ++gi) {
      if (!planned(gi)) continue;
      const std::vector<int>& members = groups.members(gi);
      const int g = static_cast<int>(members.size());
      std::vector<char> received(g, 0);
      for (auto [s, d] : *first.perm) {
        const int ms = ((s % g) + g) % g, md = ((d % g) + g) % g;
        plan->outputs[members[md]] = *requests[members[ms]]->input;
        received[md] = 1;
      }
      for (int k = 0; k < g; ++k)
        if (!received[k]) plan->outputs[members[k]] = Array::zeros(first.input->shape(), first.input->dtype());
    }
    return plan;
  }

  const bool shared_output = first.kind == Kind::all_reduce || first.kind == Kind::all_gather;
  for (int gi = 0; gi < groups.num_groups(); ++gi) {
    if (!planned(gi)) continue;
    const std::vector<int>& members = groups.members(gi);
    if (shared_output) {
      // One result buffer per group, handed to every member as an immutable array.
      const Shape shape = output_shape(*requests[members[0]]);
      Array out = Array::empty(shape, out_dtype, account_of(members[0]));
      std::byte* data = out.mutable_bytes();  // before the members share it (copy-on-write would copy after)
      largest = std::max(largest, out.nbytes());
      for (int m : members) {
        plan->outputs[m] = out;
        plan->output_data[m] = data;
      }
    } else {
      for (int m : members) {
        plan->outputs[m] = Array::empty(output_shape(*requests[m]), out_dtype, account_of(m));
        plan->output_data[m] = plan->outputs[m].mutable_bytes();
        largest = std::max(largest, plan->outputs[m].nbytes() * members.size());
      }
    }
    if (first.kind == Kind::all_reduce || first.kind == Kind::reduce_scatter)
      for (int m : members) plan->bytes_reduced += requests[m]->input->nbytes();
  }

  plan->split_work = !group_mask && largest >= sizes.split_bytes;
  if (!plan->split_work)
    for (int gi = 0; gi < groups.num_groups(); ++gi)
      if (planned(gi))
        for (int m : groups.members(gi)) execute_part(*plan, m);
  return plan;
}

std::pair<std::int64_t, std::int64_t> share_of(std::int64_t count, int k, int parts) { return share(count, k, parts); }

void execute_part(const Plan& plan, int replica) {
  switch (plan.requests[replica]->kind) {
    case Kind::all_reduce: return all_reduce_part(plan, replica);
    case Kind::all_gather: return all_gather_part(plan, replica);
    case Kind::reduce_scatter: return reduce_scatter_part(plan, replica);
    case Kind::all_to_all: return all_to_all_part(plan, replica);
    case Kind::ppermute: return;  // done while planning
  }
}

}  // namespace weft::collectives
