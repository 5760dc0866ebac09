#include "collectives/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "weft/error.hpp"

namespace weft::collectives {
namespace {

// Elements per block of the reduction kernels: the accumulator stays in L1 while the inputs stream by.
constexpr std::int64_t kBlock = 2048;

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

// ---- reduction kernels ---------------------------------------------------------------------------------
// out[i] = in[0][i] (op) in[1][i] (op) ... in member order, so every member of a group gets bitwise the same
// result. Load converts an input element to the accumulator type, Combine folds, Store writes the output.
template <class In, class Acc, class Out, class Load, class Combine, class Store>
void reduce_blocks(std::span<const std::byte* const> inputs, std::byte* output, std::int64_t count, Load load,
                   Combine combine, Store store) {
  Acc acc[kBlock];
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    const In* x0 = reinterpret_cast<const In*>(inputs[0]) + base;
    for (std::int64_t i = 0; i < len; ++i) acc[i] = load(x0[i]);
    for (std::size_t m = 1; m < inputs.size(); ++m) {
      const In* xm = reinterpret_cast<const In*>(inputs[m]) + base;
      for (std::int64_t i = 0; i < len; ++i) acc[i] = combine(acc[i], load(xm[i]));
    }
    Out* out = reinterpret_cast<Out*>(output) + base;
    for (std::int64_t i = 0; i < len; ++i) out[i] = store(acc[i]);
  }
}

// The same fold for types reduced in place (no conversion): out = x0 (op) x1, then two more inputs per pass,
// always in member order. Works straight in the output through restrict pointers so the compiler
// vectorises it, blocked so the output block stays in L1 while the inputs stream by.
template <class T, class Combine>
void reduce_direct(std::span<const std::byte* const> inputs, std::byte* output, std::int64_t count, Combine combine) {
  T* __restrict out = reinterpret_cast<T*>(output);
  const std::size_t n = inputs.size();
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    T* __restrict o = out + base;
    const T* __restrict x0 = reinterpret_cast<const T*>(inputs[0]) + base;
    if (n == 1) {
      for (std::int64_t i = 0; i < len; ++i) o[i] = x0[i];
      continue;
    }
    const T* __restrict x1 = reinterpret_cast<const T*>(inputs[1]) + base;
    for (std::int64_t i = 0; i < len; ++i) o[i] = combine(x0[i], x1[i]);
    std::size_t m = 2;
    for (; m + 1 < n; m += 2) {
      const T* __restrict a = reinterpret_cast<const T*>(inputs[m]) + base;
      const T* __restrict b = reinterpret_cast<const T*>(inputs[m + 1]) + base;
      for (std::int64_t i = 0; i < len; ++i) o[i] = combine(combine(o[i], a[i]), b[i]);
    }
    if (m < n) {
      const T* __restrict a = reinterpret_cast<const T*>(inputs[m]) + base;
      for (std::int64_t i = 0; i < len; ++i) o[i] = combine(o[i], a[i]);
    }
  }
}

template <class T>
T float_max(T a, T b) { return (a != a || a >= b) ? a : b; }  // propagates NaN like XLA
template <class T>
T float_min(T a, T b) { return (a != a || a <= b) ? a : b; }

// Floating inputs, accumulated in Acc (float for 16-bit floats) and stored back as In; a 16-bit sum can be kept
// in float32 instead (`wide`: a mean's sums, divided before they are rounded).
template <class In, class Acc, class Load, class Store>
void reduce_float(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n, Load load,
                  Store store, bool wide) {
  auto add = [](Acc a, Acc b) { return a + b; };
  if constexpr (std::is_same_v<In, Acc>) {
    switch (op) {
      case ReduceOp::sum: return reduce_direct<In>(in, out, n, add);
      case ReduceOp::prod: return reduce_direct<In>(in, out, n, [](Acc a, Acc b) { return a * b; });
      case ReduceOp::max: return reduce_direct<In>(in, out, n, float_max<Acc>);
      case ReduceOp::min: return reduce_direct<In>(in, out, n, float_min<Acc>);
      default: return;
    }
  } else {
    if (wide) return reduce_blocks<In, Acc, Acc>(in, out, n, load, add, [](Acc a) { return a; });
    switch (op) {
      case ReduceOp::sum: return reduce_blocks<In, Acc, In>(in, out, n, load, add, store);
      case ReduceOp::prod: return reduce_blocks<In, Acc, In>(in, out, n, load, [](Acc a, Acc b) { return a * b; }, store);
      case ReduceOp::max: return reduce_blocks<In, Acc, In>(in, out, n, load, float_max<Acc>, store);
      case ReduceOp::min: return reduce_blocks<In, Acc, In>(in, out, n, load, float_min<Acc>, store);
      default: return;
    }
  }
}

// Integer inputs: sums and products wrap modulo 2^bits (computed unsigned, so no undefined behaviour).
template <class T>
void reduce_int(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::sum:
      return reduce_direct<T>(in, out, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); });
    case ReduceOp::prod:
      return reduce_direct<T>(in, out, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
    case ReduceOp::max: return reduce_direct<T>(in, out, n, [](T a, T b) { return std::max(a, b); });
    case ReduceOp::min: return reduce_direct<T>(in, out, n, [](T a, T b) { return std::min(a, b); });
    default: return;
  }
}

// bool: JAX sums (and multiplies) bools as int32; max is "or", min is "and".
void reduce_bool(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n) {
  using I = std::int32_t;
  auto load = [](std::uint8_t v) { return static_cast<I>(v != 0); };
  auto same = [](I a) { return a; };
  auto to_bool = [](I a) { return static_cast<std::uint8_t>(a); };
  switch (op) {
    case ReduceOp::sum: return reduce_blocks<std::uint8_t, I, I>(in, out, n, load, [](I a, I b) { return a + b; }, same);
    case ReduceOp::prod: return reduce_blocks<std::uint8_t, I, I>(in, out, n, load, [](I a, I b) { return a * b; }, same);
    case ReduceOp::max: return reduce_blocks<std::uint8_t, I, std::uint8_t>(in, out, n, load, [](I a, I b) { return a | b; }, to_bool);
    case ReduceOp::min: return reduce_blocks<std::uint8_t, I, std::uint8_t>(in, out, n, load, [](I a, I b) { return a & b; }, to_bool);
    default: return;
  }
}

// Reduces `count` elements with sum, prod, max or min: inputs point at the first element of each member's
// range, `out` at the output's, whose elements have psum's dtype for the op (int32 for a boolean sum or
// product), or float32 for a 16-bit float sum kept `wide`. A mean never comes here (request.hpp lowers it).
void reduce_range(DType dtype, ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t count,
                  bool wide = false) {
  if (op == ReduceOp::mean) throw Error("internal error: a mean reached the reduction kernels (it is a sum and a division)");
  if (count <= 0) return;
  auto same = [](auto v) { return v; };
  switch (dtype) {
    case DType::f32: return reduce_float<float, float>(op, in, out, count, same, same, wide);
    case DType::f64: return reduce_float<double, double>(op, in, out, count, same, same, wide);
    case DType::f16: return reduce_float<std::uint16_t, float>(op, in, out, count, half_to_float, float_to_half, wide);
    case DType::bf16: return reduce_float<std::uint16_t, float>(op, in, out, count, bf16_to_float, float_to_bf16, wide);
    case DType::i8: return reduce_int<std::int8_t>(op, in, out, count);
    case DType::u8: return reduce_int<std::uint8_t>(op, in, out, count);
    case DType::i32: return reduce_int<std::int32_t>(op, in, out, count);
    case DType::i64: return reduce_int<std::int64_t>(op, in, out, count);
    case DType::boolean: return reduce_bool(op, in, out, count);
  }
}

// out[i] = convert(sums[i] / divisor) for i < count: a sum in Sum, divided in Div, stored as Out. May run in
// place when Sum and Out are the same type.
template <class Sum, class Div, class Out, class Store>
void divide_as(const std::byte* sums, std::byte* out, std::int64_t count, int divisor, Store store) {
  const Div d = static_cast<Div>(divisor);
  for (std::int64_t i = 0; i < count; ++i) {
    Sum s;
    std::memcpy(&s, sums + i * sizeof(Sum), sizeof(Sum));
    const Out o = store(static_cast<Div>(s) / d);
    std::memcpy(out + i * sizeof(Out), &o, sizeof(Out));
  }
}

// The reduction of one range as the request asks: a mean sums block by block (in sum_dtype), then divides
// each block by the group size into the mean's output dtype.
void reduce_request_range(const Request& r, std::span<const std::byte* const> in, std::byte* out, std::int64_t count,
                          int group_size) {
  const DType dtype = r.input->dtype();
  if (!divides_by_group(r)) return reduce_range(dtype, r.reduce, in, out, count);
  const DType sums = sum_dtype(r), out_dtype = output_dtype(r);
  const std::size_t in_es = dtype_size(dtype), out_es = dtype_size(out_dtype);
  alignas(64) std::byte block[kBlock * sizeof(double)];
  std::vector<const std::byte*> at(in.size());
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    for (std::size_t m = 0; m < in.size(); ++m) at[m] = in[m] + base * in_es;
    reduce_range(dtype, ReduceOp::sum, at, block, len, sums != dtype && sums == DType::f32);
    divide_range(sums, block, out_dtype, out + base * out_es, len, group_size);
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

void reduce_inputs(DType dtype, ReduceOp op, std::span<const std::byte* const> inputs, std::byte* out, std::int64_t count) {
  reduce_range(dtype, op, inputs, out, count);
}

void divide_range(DType sums_dtype, const std::byte* sums, DType out_dtype, std::byte* out, std::int64_t count,
                  int divisor) {
  auto same = [](auto v) { return v; };
  switch (sums_dtype) {
    case DType::f32:
      if (out_dtype == DType::f16) return divide_as<float, float, std::uint16_t>(sums, out, count, divisor, float_to_half);
      if (out_dtype == DType::bf16) return divide_as<float, float, std::uint16_t>(sums, out, count, divisor, float_to_bf16);
      return divide_as<float, float, float>(sums, out, count, divisor, same);
    case DType::f64: return divide_as<double, double, double>(sums, out, count, divisor, same);
    case DType::i8: return divide_as<std::int8_t, float, float>(sums, out, count, divisor, same);
    case DType::u8: return divide_as<std::uint8_t, float, float>(sums, out, count, divisor, same);
    case DType::i32: return divide_as<std::int32_t, float, float>(sums, out, count, divisor, same);
    case DType::i64: return divide_as<std::int64_t, double, double>(sums, out, count, divisor, same);
    default: throw Error("internal error: no mean of " + std::string(dtype_name(sums_dtype)) + " sums");
  }
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
