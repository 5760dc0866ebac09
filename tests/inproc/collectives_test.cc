// Collectives against a naive host reference (shared/spec/reliability.md R14, R15, R17; shared/spec/jax-pmap.md
// sections 3.1-3.8). The reference below is written from the spec, independently of src/collectives: replica
// groups from mesh coordinates, reductions elementwise in double / int64 with explicit wrap-around, and the
// data-movement collectives as slices, stacks and concatenations of host arrays.
//
// Inputs depend only on (replica, element index). Integers must match exactly; floats within a tolerance
// that grows with the sum of magnitudes (the runtime accumulates float32 in member order and 16-bit floats
// in float32). Members of a group must hold bitwise identical results (R17).
//
// A seeded random sweep covers meshes (8), (2,4), (4,2), (2,2,2); groups over all axes, each single axis,
// axis tuples out of mesh order, axis_index_groups (uneven ones for reductions) and explicit ReplicaGroups
// (strided PopXL groupings, explicit lists); every dtype; sizes 0, 1, 7 and 1024 elements; plus a few
// collectives above the runtime's split-work threshold (256 KiB results) so both execution paths run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "weft/weft.hpp"

// PmapOptions is meant for designated initializers, but some members have no default member initializer,
// so g++ -Wextra warns about every one left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace collectives_test {

using Lists = std::vector<std::vector<int>>;
using Names = std::vector<std::string>;
constexpr int kReplicas = 8;

// ---------------------------------------------------------------------------------------------------
// Host arrays for the reference: values and a per-element tolerance, row-major.

struct Host {
  Shape shape;
  std::vector<double> v;
  std::vector<double> tol;
};

std::int64_t Count(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

std::int64_t Prod(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// h[..., b:e, ...] along `axis`.
Host Slice(const Host& h, int axis, std::int64_t b, std::int64_t e) {
  const std::size_t a = static_cast<std::size_t>(axis);
  const std::int64_t outer = Prod(h.shape, 0, a), inner = Prod(h.shape, a + 1, h.shape.size()), n = h.shape[a];
  Host out;
  out.shape = h.shape;
  out.shape[a] = e - b;
  out.v.reserve(static_cast<std::size_t>(outer * (e - b) * inner));
  out.tol.reserve(out.v.capacity());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = b; j < e; ++j)
      for (std::int64_t i = 0; i < inner; ++i) {
        const std::size_t at = static_cast<std::size_t>((o * n + j) * inner + i);
        out.v.push_back(h.v[at]);
        out.tol.push_back(h.tol[at]);
      }
  return out;
}

// h[..., k, ...]: the axis is removed.
Host Take(const Host& h, int axis, std::int64_t k) {
  Host out = Slice(h, axis, k, k + 1);
  out.shape.erase(out.shape.begin() + axis);
  return out;
}

// Joins `parts` along `axis`; with `stack`, each part gets a new size-1 axis there first.
Host Join(const std::vector<const Host*>& parts, int axis, bool stack) {
  const std::size_t a = static_cast<std::size_t>(axis);
  const Shape& s0 = parts[0]->shape;
  Host out;
  out.shape = s0;
  if (stack) {
    out.shape.insert(out.shape.begin() + axis, static_cast<std::int64_t>(parts.size()));
  } else {
    out.shape[a] = 0;
    for (const Host* p : parts) out.shape[a] += p->shape[a];
  }
  const std::int64_t outer = Prod(s0, 0, a);
  const std::size_t n = static_cast<std::size_t>(Count(out.shape));
  out.v.reserve(n);
  out.tol.reserve(n);
  for (std::int64_t o = 0; o < outer; ++o)
    for (const Host* p : parts) {
      const std::int64_t chunk = Prod(p->shape, a, p->shape.size());  // the part's [axis:] block
      const auto begin = static_cast<std::ptrdiff_t>(o * chunk), end = static_cast<std::ptrdiff_t>((o + 1) * chunk);
      out.v.insert(out.v.end(), p->v.begin() + begin, p->v.begin() + end);
      out.tol.insert(out.tol.end(), p->tol.begin() + begin, p->tol.begin() + end);
    }
  return out;
}

Host Concat(const std::vector<const Host*>& parts, int axis) { return Join(parts, axis, false); }
Host Stack(const std::vector<const Host*>& parts, int axis) { return Join(parts, axis, true); }

// ---------------------------------------------------------------------------------------------------
// Inputs: a pure function of (dtype, replica, index). Values for 16-bit floats are multiples of 1/4 in
// [-8, 8] (exact in float16 and bfloat16); "small" inputs (for products) stay in [-1, 1] / [-2, 2].

double Gen(DType dt, bool small, int r, std::int64_t i) {
  const std::int64_t a = r * 7 + i * 3, b = r * 13 + i * 5;
  if (small) {
    switch (dt) {
      case DType::u8: return static_cast<double>(a % 3);
      case DType::boolean: return (r + i) % 5 != 0 ? 1 : 0;
      case DType::i8:
      case DType::i32:
      case DType::i64: return static_cast<double>(a % 5 - 2);
      default: return static_cast<double>(a % 5 - 2) * 0.5;
    }
  }
  switch (dt) {
    case DType::f32: return static_cast<double>(static_cast<float>(std::sin(r * 1.37 + static_cast<double>(i) * 0.071) * 8));
    case DType::f64: return std::sin(r * 1.37 + static_cast<double>(i) * 0.071) * 8 + r * 1e-9;
    case DType::f16:
    case DType::bf16: return static_cast<double>(b % 65 - 32) * 0.25;
    case DType::i8: return static_cast<double>((r * 37 + i * 11) % 256 - 128);
    case DType::u8: return static_cast<double>((r * 37 + i * 11) % 256);
    case DType::i32: return static_cast<double>((r * 1000003 + i * 7919) % 2000001 - 1000000);
    case DType::i64: return static_cast<double>((std::int64_t{r} + 1) * (std::int64_t{1} << 40) - (i % 7) * (std::int64_t{1} << 44) + i * 1234567);
    case DType::boolean: return (r * 3 + i * 7) % 4 == 0 ? 1 : 0;
  }
  return 0;
}

Host InputHost(DType dt, bool small, const Shape& shape, int r) {
  Host h;
  h.shape = shape;
  const std::int64_t n = Count(shape);
  h.v.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) h.v[static_cast<std::size_t>(i)] = Gen(dt, small, r, i);
  h.tol.assign(h.v.size(), 0);
  return h;
}

Array InputArray(DType dt, bool small, const Shape& shape, int r) {
  return Array::from_doubles(InputHost(dt, small, shape, r).v, shape, dt);
}

// ---------------------------------------------------------------------------------------------------
// Reductions, one element at a time.

bool IsFloat(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16; }

// The dtype a reduction returns: mean of integers is a float (float64 for int64), sums and products of
// bools are int32 (JAX converts bool to int32 before summing); everything else keeps its dtype.
DType ReducedDtype(DType in, ReduceOp op) {
  if (op == ReduceOp::mean) return IsFloat(in) ? in : (in == DType::i64 ? DType::f64 : DType::f32);
  if (in == DType::boolean && (op == ReduceOp::sum || op == ReduceOp::prod)) return DType::i32;
  return in;
}

double Wrap(DType dt, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  switch (dt) {
    case DType::i8: return static_cast<std::int8_t>(static_cast<std::uint8_t>(u & 0xffu));
    case DType::u8: return static_cast<std::uint8_t>(u & 0xffu);
    case DType::i32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(u & 0xffffffffu));
    default: return static_cast<double>(v);
  }
}

double RelTol(DType out) {
  switch (out) {
    case DType::f64: return 1e-14;
    case DType::f32: return 2e-6;
    case DType::f16: return 1.5e-3;
    case DType::bf16: return 1.2e-2;
    default: return 0;
  }
}

// Reduces `vals` (the members' elements, in member order); sets *tol.
double Reduce(DType in, ReduceOp op, const std::vector<double>& vals, double* tol) {
  *tol = 0;
  const auto n = static_cast<double>(vals.size());
  if (in == DType::boolean || !IsFloat(in)) {
    std::int64_t sum = 0, prod = 1;
    std::int64_t mx = static_cast<std::int64_t>(vals[0]), mn = mx;
    for (double d : vals) {
      const auto x = static_cast<std::int64_t>(d);
      sum += x;
      prod = static_cast<std::int64_t>(static_cast<std::uint64_t>(prod) * static_cast<std::uint64_t>(x));
      mx = std::max(mx, x);
      mn = std::min(mn, x);
    }
    const DType wrap_as = in == DType::boolean ? DType::i32 : in;
    switch (op) {
      case ReduceOp::sum: return Wrap(wrap_as, sum);
      case ReduceOp::prod: return Wrap(wrap_as, prod);
      case ReduceOp::max: return static_cast<double>(mx);
      case ReduceOp::min: return static_cast<double>(mn);
      case ReduceOp::mean: {
        const double m = Wrap(wrap_as, sum) / n;
        *tol = RelTol(ReducedDtype(in, op)) * std::abs(m);
        return m;
      }
    }
  }
  double sum = 0, abs_sum = 0, prod = 1, mx = vals[0], mn = vals[0];
  for (double x : vals) {
    sum += x;
    abs_sum += std::abs(x);
    prod *= x;
    mx = std::max(mx, x);
    mn = std::min(mn, x);
  }
  const double rel = RelTol(in);
  // Accumulation error (float32 at worst: 16-bit floats are accumulated in float32) plus the final rounding.
  const double acc = (in == DType::f64 ? 1e-14 : 1e-6) * abs_sum;
  switch (op) {
    case ReduceOp::sum: *tol = acc + rel * std::abs(sum); return sum;
    case ReduceOp::mean: *tol = acc / n + rel * std::abs(sum / n); return sum / n;
    case ReduceOp::prod: *tol = rel * std::abs(prod); return prod;
    case ReduceOp::max: return mx;
    case ReduceOp::min: return mn;
  }
  return 0;
}

Host ReduceHosts(const std::vector<const Host*>& inputs, DType in, ReduceOp op) {
  Host out;
  out.shape = inputs[0]->shape;
  const std::size_t n = inputs[0]->v.size();
  out.v.reserve(n);
  out.tol.reserve(n);
  std::vector<double> vals(inputs.size());
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t m = 0; m < inputs.size(); ++m) vals[m] = inputs[m]->v[i];
    double tol = 0;
    out.v.push_back(Reduce(in, op, vals, &tol));
    out.tol.push_back(tol);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Replica groups, from the spec's definitions (jax-pmap.md 3.1; PopXL's ReplicaGrouping).

std::vector<int> Coords(const std::vector<MeshAxis>& mesh, int r) {
  std::vector<int> c(mesh.size());
  for (int j = static_cast<int>(mesh.size()) - 1; j >= 0; --j) {
    c[static_cast<std::size_t>(j)] = r % mesh[static_cast<std::size_t>(j)].size;
    r /= mesh[static_cast<std::size_t>(j)].size;
  }
  return c;
}

int Position(const std::vector<MeshAxis>& mesh, const std::string& name) {
  for (std::size_t j = 0; j < mesh.size(); ++j)
    if (mesh[j].name == name) return static_cast<int>(j);
  return -1;
}

// Groups of a collective over `axes`: replicas sharing every other coordinate; members ordered row-major
// over `axes` as written; then split by axis_index_groups.
Lists AxisGroups(const std::vector<MeshAxis>& mesh, const Names& axes, const AxisIndexGroups& index_groups) {
  std::vector<bool> in(mesh.size(), false);
  for (const std::string& a : axes) in[static_cast<std::size_t>(Position(mesh, a))] = true;
  int members = 1, groups = 1;
  for (std::size_t j = 0; j < mesh.size(); ++j) (in[j] ? members : groups) *= mesh[j].size;
  Lists out(static_cast<std::size_t>(groups), std::vector<int>(static_cast<std::size_t>(members)));
  for (int r = 0; r < kReplicas; ++r) {
    const std::vector<int> c = Coords(mesh, r);
    int key = 0, pos = 0;
    for (std::size_t j = 0; j < mesh.size(); ++j)
      if (!in[j]) key = key * mesh[j].size + c[j];
    for (const std::string& a : axes) {
      const auto j = static_cast<std::size_t>(Position(mesh, a));
      pos = pos * mesh[j].size + c[j];
    }
    out[static_cast<std::size_t>(key)][static_cast<std::size_t>(pos)] = r;
  }
  if (index_groups.empty()) return out;
  Lists split;
  for (const std::vector<int>& g : out)
    for (const std::vector<int>& u : index_groups) {
      std::vector<int> sub;
      for (int i : u) sub.push_back(g[static_cast<std::size_t>(i)]);
      split.push_back(sub);
    }
  return split;
}

// PopXL: members of a group are `stride` apart; blocks of stride x size replicas hold `stride` groups.
Lists StridedGroups(int stride, int size) {
  if (size == 0) size = kReplicas / stride;
  Lists out;
  std::vector<bool> done(kReplicas, false);
  for (int r = 0; r < kReplicas; ++r) {
    if (done[static_cast<std::size_t>(r)]) continue;
    std::vector<int> g;
    for (int k = 0; k < size; ++k) {
      g.push_back(r + k * stride);
      done[static_cast<std::size_t>(r + k * stride)] = true;
    }
    out.push_back(g);
  }
  return out;
}

std::string ListsStr(const Lists& l) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < l.size(); ++i) {
    os << (i ? ", [" : "[");
    for (std::size_t j = 0; j < l[i].size(); ++j) os << (j ? ", " : "") << l[i][j];
    os << "]";
  }
  os << "]";
  return os.str();
}

// ---------------------------------------------------------------------------------------------------
// Cases

enum class Op { psum, pmean, pmax, pmin, all_gather, psum_scatter, all_to_all, ppermute,
                g_all_reduce, g_all_gather, g_reduce_scatter, g_all_to_all, g_ppermute };

const char* OpName(Op op) {
  constexpr const char* names[] = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all",
                                   "ppermute", "all_reduce(groups)", "all_gather(groups)", "reduce_scatter(groups)",
                                   "all_to_all(groups)", "ppermute(groups)"};
  return names[static_cast<int>(op)];
}

bool Explicit(Op op) { return op >= Op::g_all_reduce; }

struct Case {
  std::vector<MeshAxis> mesh;
  Names axes;                  // named-axis collectives
  AxisIndexGroups index_groups;
  ReplicaGroups groups;        // explicit-group collectives (built by the library's factories)
  Lists ref_groups;            // the reference's own groups
  Op op = Op::psum;
  ReduceOp reduce = ReduceOp::sum;
  DType dtype = DType::f32;
  Shape shape;
  int axis = 0;
  int concat_axis = 0;
  bool tiled = false;
  Permutation perm;

  bool small() const { return reduce == ReduceOp::prod; }
  bool reduces() const {
    return op == Op::psum || op == Op::pmean || op == Op::pmax || op == Op::pmin || op == Op::psum_scatter ||
           op == Op::g_all_reduce || op == Op::g_reduce_scatter;
  }
  // Results every member of a group shares bitwise (R17).
  bool group_shared() const {
    return op == Op::psum || op == Op::pmean || op == Op::pmax || op == Op::pmin || op == Op::all_gather ||
           op == Op::g_all_reduce || op == Op::g_all_gather;
  }
  std::string str() const {
    std::ostringstream os;
    os << OpName(op) << " " << dtype_name(dtype) << shape_str(shape) << " mesh {";
    for (std::size_t i = 0; i < mesh.size(); ++i) os << (i ? ", " : "") << mesh[i].name << ": " << mesh[i].size;
    os << "}";
    if (!Explicit(op)) {
      os << " axes (";
      for (std::size_t i = 0; i < axes.size(); ++i) os << (i ? ", " : "") << axes[i];
      os << ")";
      if (!index_groups.empty()) os << " axis_index_groups " << ListsStr(index_groups);
    }
    os << " groups " << ListsStr(ref_groups);
    if (reduces()) os << " op=" << reduce_op_name(reduce);
    if (op == Op::all_gather || op == Op::g_all_gather || op == Op::psum_scatter || op == Op::g_reduce_scatter ||
        op == Op::all_to_all || op == Op::g_all_to_all)
      os << " axis=" << axis << " tiled=" << tiled;
    if (op == Op::all_to_all || op == Op::g_all_to_all) os << " concat_axis=" << concat_axis;
    if (op == Op::ppermute || op == Op::g_ppermute) {
      os << " perm=[";
      for (std::size_t i = 0; i < perm.size(); ++i) os << (i ? ", " : "") << "(" << perm[i].first << ", " << perm[i].second << ")";
      os << "]";
    }
    return os.str();
  }
};

Array Apply(const Case& c, Replica& r, const Array& x) {
  const Axes axes(c.axes);
  switch (c.op) {
    case Op::psum: return r.psum(x, axes, c.index_groups);
    case Op::pmean: return r.pmean(x, axes, c.index_groups);
    case Op::pmax: return r.pmax(x, axes, c.index_groups);
    case Op::pmin: return r.pmin(x, axes, c.index_groups);
    case Op::all_gather: return r.all_gather(x, axes, c.axis, c.tiled, c.index_groups);
    case Op::psum_scatter: return r.psum_scatter(x, axes, c.axis, c.tiled, c.index_groups);
    case Op::all_to_all: return r.all_to_all(x, axes, c.axis, c.concat_axis, c.tiled, c.index_groups);
    case Op::ppermute: return r.ppermute(x, axes, c.perm);
    case Op::g_all_reduce: return r.all_reduce(x, c.groups, c.reduce);
    case Op::g_all_gather: return r.all_gather(x, c.groups, c.axis, c.tiled);
    case Op::g_reduce_scatter: return r.reduce_scatter(x, c.groups, c.reduce, c.axis, c.tiled);
    case Op::g_all_to_all: return r.all_to_all(x, c.groups, c.axis, c.concat_axis, c.tiled);
    case Op::g_ppermute: return r.ppermute(x, c.groups, c.perm);
  }
  return x;
}

// The reference for one case: every replica's input computed once, reductions once per group.
class Reference {
 public:
  explicit Reference(const Case& c) : c_(c) {
    for (int r = 0; r < kReplicas; ++r) inputs_.push_back(InputHost(c.dtype, c.small(), c.shape, r));
  }
  // What replica `r` must hold after the case's collective.
  Host Expected(int r, DType* dtype);

 private:
  const Host& Reduced(int group_index, const std::vector<const Host*>& in) {
    auto it = reduced_.find(group_index);
    if (it == reduced_.end()) it = reduced_.emplace(group_index, ReduceHosts(in, c_.dtype, c_.reduce)).first;
    return it->second;
  }
  const Case& c_;
  std::vector<Host> inputs_;
  std::map<int, Host> reduced_;
};

Host Reference::Expected(int r, DType* dtype) {
  const Case& c = c_;
  int group_index = -1, k = 0;
  for (std::size_t gi = 0; gi < c.ref_groups.size(); ++gi)
    for (std::size_t i = 0; i < c.ref_groups[gi].size(); ++i)
      if (c.ref_groups[gi][i] == r) {
        group_index = static_cast<int>(gi);
        k = static_cast<int>(i);
      }
  const std::vector<int>& group = c.ref_groups[static_cast<std::size_t>(group_index)];
  const int size = static_cast<int>(group.size());
  std::vector<const Host*> in;
  for (int m : group) in.push_back(&inputs_[static_cast<std::size_t>(m)]);
  const int rank = static_cast<int>(c.shape.size());
  *dtype = c.reduces() ? ReducedDtype(c.dtype, c.reduce) : c.dtype;
  switch (c.op) {
    case Op::psum:
    case Op::pmean:
    case Op::pmax:
    case Op::pmin:
    case Op::g_all_reduce:
      return Reduced(group_index, in);
    case Op::all_gather:
    case Op::g_all_gather:
      if (c.tiled) return Concat(in, c.axis < 0 ? c.axis + rank : c.axis);
      return Stack(in, c.axis < 0 ? c.axis + rank + 1 : c.axis);
    case Op::psum_scatter:
    case Op::g_reduce_scatter: {
      const Host& sum = Reduced(group_index, in);
      const int d = c.axis < 0 ? c.axis + rank : c.axis;
      if (!c.tiled) return Take(sum, d, k);
      const std::int64_t chunk = c.shape[static_cast<std::size_t>(d)] / size;
      return Slice(sum, d, k * chunk, (k + 1) * chunk);
    }
    case Op::all_to_all:
    case Op::g_all_to_all: {
      const int s = c.axis < 0 ? c.axis + rank : c.axis;
      const int cat = c.concat_axis < 0 ? c.concat_axis + rank : c.concat_axis;
      std::vector<Host> pieces;
      const std::int64_t chunk = c.tiled ? c.shape[static_cast<std::size_t>(s)] / size : 1;
      for (const Host* h : in) pieces.push_back(c.tiled ? Slice(*h, s, k * chunk, (k + 1) * chunk) : Take(*h, s, k));
      std::vector<const Host*> views;
      for (const Host& p : pieces) views.push_back(&p);
      return c.tiled ? Concat(views, cat) : Stack(views, cat);
    }
    case Op::ppermute:
    case Op::g_ppermute: {
      for (auto [src, dst] : c.perm) {
        if (((dst % size) + size) % size == k) return *in[static_cast<std::size_t>(((src % size) + size) % size)];
      }
      Host zeros = *in[0];
      std::fill(zeros.v.begin(), zeros.v.end(), 0.0);
      return zeros;
    }
  }
  return *in[0];
}

// Runs `c` on 8 replicas; returns each replica's result.
std::vector<Array> Execute(Runtime& rt, const Case& c) {
  PmapOptions options{.runtime = &rt, .name = "sweep"};
  Shape dummy;
  if (c.mesh.size() == 1) {
    options.axis = c.mesh[0].name;
  } else {
    options.mesh = c.mesh;
  }
  for (const MeshAxis& a : c.mesh) dummy.push_back(a.size);
  auto f = pmap([&c](Replica& r, const Array&) { return Apply(c, r, InputArray(c.dtype, c.small(), c.shape, r.index())); },
                options);
  const ShardedArray out = f(Array::zeros(dummy));
  std::vector<Array> results;
  for (const Shard& s : out.shards()) results.push_back(s.data);
  return results;
}

// Checks every replica's result against the reference and the group members against each other.
// Returns false (after reporting) on the first kind of problem found.
bool Check(const Case& c, const std::vector<Array>& got) {
  if (got.size() != static_cast<std::size_t>(kReplicas)) {
    ADD_FAILURE() << c.str() << ": " << got.size() << " results";
    return false;
  }
  Reference reference(c);
  for (int r = 0; r < kReplicas; ++r) {
    DType dtype{};
    const Host want = reference.Expected(r, &dtype);
    const Array& a = got[static_cast<std::size_t>(r)];
    if (a.dtype() != dtype || a.shape() != want.shape) {
      ADD_FAILURE() << c.str() << "\nreplica " << r << ": got " << dtype_name(a.dtype()) << shape_str(a.shape())
                    << ", want " << dtype_name(dtype) << shape_str(want.shape);
      return false;
    }
    const std::vector<double> v = a.to_doubles();
    int wrong = 0;
    std::ostringstream first;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const bool ok = IsFloat(dtype) ? std::abs(v[i] - want.v[i]) <= want.tol[i] : v[i] == want.v[i];
      if (!ok && wrong++ < 3)
        first << "\n  [" << i << "] got " << v[i] << " want " << want.v[i] << " (tolerance " << want.tol[i] << ")";
    }
    if (wrong > 0) {
      ADD_FAILURE() << c.str() << "\nreplica " << r << ": #wrong = " << wrong << " of " << v.size() << first.str();
      return false;
    }
  }
  if (c.group_shared()) {
    for (const std::vector<int>& g : c.ref_groups) {
      const Array& a = got[static_cast<std::size_t>(g[0])];
      for (int m : g) {
        const Array& b = got[static_cast<std::size_t>(m)];
        if (a.nbytes() != b.nbytes() || (a.nbytes() > 0 && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) != 0)) {
          ADD_FAILURE() << c.str() << "\nreplicas " << g[0] << " and " << m << " of one group differ bitwise";
          return false;
        }
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Random case generation

const std::vector<std::vector<MeshAxis>>& Meshes() {
  static const std::vector<std::vector<MeshAxis>> meshes = {
      {{"x", 8}}, {{"x", 2}, {"y", 4}}, {{"x", 4}, {"y", 2}}, {{"x", 2}, {"y", 2}, {"z", 2}}};
  return meshes;
}

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::i8,
                             DType::u8,  DType::bf16, DType::f16, DType::boolean};

class Generator {
 public:
  explicit Generator(unsigned seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(int one_in = 2) { return Uniform(1, one_in) == 1; }
  template <class T>
  const T& Pick(const std::vector<T>& v) { return v[static_cast<std::size_t>(Uniform(0, static_cast<int>(v.size()) - 1))]; }

  // A random partition of 0..n-1 into groups; equal sizes unless `uneven` (then at least two sizes).
  Lists Partition(int n, bool uneven) {
    std::vector<int> idx(static_cast<std::size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng_);
    std::vector<int> sizes;
    if (uneven) {
      const int first = Uniform(1, n - 2);  // n >= 3: sizes `first` and the rest, split once more maybe
      sizes = {first, n - first};
      if (sizes[0] == sizes[1]) sizes = {1, first - 1, n - first};
    } else {
      std::vector<int> divisors;
      for (int d = 1; d <= n; ++d)
        if (n % d == 0) divisors.push_back(d);
      const int size = Pick(divisors);
      sizes.assign(static_cast<std::size_t>(n / size), size);
    }
    Lists out;
    std::size_t at = 0;
    for (int s : sizes) {
      out.emplace_back(idx.begin() + static_cast<std::ptrdiff_t>(at), idx.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(s)));
      at += static_cast<std::size_t>(s);
    }
    return out;
  }

  // Non-reducing operand shapes by size class: 0, 1, 7 or 1024 elements.
  Shape Dims(int size_class) {
    switch (size_class) {
      case 0: return Pick(std::vector<Shape>{{0}, {3, 0}});
      case 1: return Pick(std::vector<Shape>{{}, {1}, {1, 1}});
      case 2: return Pick(std::vector<Shape>{{7}, {7, 1}});
      default: return Pick(std::vector<Shape>{{1024}, {32, 32}, {4, 16, 16}});
    }
  }
  // The dimensions besides a scatter / split dimension.
  Shape Rest(int size_class) {
    switch (size_class) {
      case 0: return {0};
      case 1: return {};
      case 2: return {7};
      default: return Pick(std::vector<Shape>{{1024}, {16, 64}});
    }
  }

  Permutation Perm(int g) {
    std::vector<int> dst(static_cast<std::size_t>(g));
    std::iota(dst.begin(), dst.end(), 0);
    Permutation p;
    switch (Uniform(0, 4)) {
      case 0: {  // cyclic shift
        const int k = g > 1 ? Uniform(1, g - 1) : 0;
        for (int i = 0; i < g; ++i) p.emplace_back(i, (i + k) % g);
        break;
      }
      case 1:  // non-cyclic shift
        for (int i = 0; i + 1 < g; ++i) p.emplace_back(i, i + 1);
        break;
      case 2:  // swap first and last with negative indices
        p = {{-1, 0}, {0, -1}};
        if (g == 1) p = {{0, -1}};
        break;
      case 3: {  // random partial permutation
        std::shuffle(dst.begin(), dst.end(), rng_);
        std::vector<int> src(static_cast<std::size_t>(g));
        std::iota(src.begin(), src.end(), 0);
        std::shuffle(src.begin(), src.end(), rng_);
        const int m = Uniform(0, g);
        for (int i = 0; i < m; ++i) p.emplace_back(src[static_cast<std::size_t>(i)], dst[static_cast<std::size_t>(i)]);
        break;
      }
      default:  // empty: everyone receives zeros
        break;
    }
    for (auto& [s, d] : p) {  // sometimes spelled negatively
      if (Coin(4) && s >= 0) s -= g;
      if (Coin(4) && d >= 0) d -= g;
    }
    return p;
  }

  // Fills shape and axis parameters of `c` for group size `g`.
  void Operand(Case& c, int g, int size_class) {
    switch (c.op) {
      case Op::all_gather:
      case Op::g_all_gather: {
        c.tiled = Coin();
        c.shape = Dims(size_class);
        if (c.tiled && c.shape.empty()) c.shape = {1};
        const int rank = static_cast<int>(c.shape.size());
        const int slots = c.tiled ? rank : rank + 1;
        c.axis = Uniform(0, slots - 1);
        if (Coin(4)) c.axis -= slots;
        break;
      }
      case Op::psum_scatter:
      case Op::g_reduce_scatter:
      case Op::all_to_all:
      case Op::g_all_to_all: {
        c.tiled = Coin();
        c.shape = Rest(size_class);
        const int d = Uniform(0, static_cast<int>(c.shape.size()));
        c.shape.insert(c.shape.begin() + d, c.tiled ? g * Uniform(1, 3) : g);
        const int rank = static_cast<int>(c.shape.size());
        c.axis = Coin(4) ? d - rank : d;
        if (c.op == Op::all_to_all || c.op == Op::g_all_to_all) {
          c.concat_axis = Uniform(0, rank - 1);
          if (Coin(4)) c.concat_axis -= rank;
        }
        break;
      }
      case Op::ppermute:
      case Op::g_ppermute:
        c.shape = Dims(size_class);
        c.perm = Perm(g);
        break;
      default:
        c.shape = Dims(size_class);
        break;
    }
  }

  Case Named() {
    Case c;
    c.mesh = Pick(Meshes());
    c.op = Pick(std::vector<Op>{Op::psum, Op::pmean, Op::pmax, Op::pmin, Op::all_gather, Op::psum_scatter,
                                Op::all_to_all, Op::ppermute});
    c.reduce = c.op == Op::pmean ? ReduceOp::mean : c.op == Op::pmax ? ReduceOp::max
               : c.op == Op::pmin ? ReduceOp::min : ReduceOp::sum;
    c.dtype = kDtypes[Uniform(0, 8)];
    Names all;
    for (const MeshAxis& a : c.mesh) all.push_back(a.name);
    const bool reduction = c.op == Op::psum || c.op == Op::pmean || c.op == Op::pmax || c.op == Op::pmin;
    switch (Uniform(0, 3)) {
      case 0: c.axes = all; break;
      case 1: c.axes = {Pick(all)}; break;
      case 2:  // several axes, not in mesh order
        if (all.size() == 1) {
          c.axes = all;
        } else if (all.size() == 2 || Coin()) {
          c.axes = all;
          std::reverse(c.axes.begin(), c.axes.end());
          if (all.size() == 3 && Coin()) c.axes.erase(c.axes.begin() + 1);  // (z, x)
        } else {
          c.axes = Pick(std::vector<Names>{{"y", "x", "z"}, {"x", "z", "y"}, {"z", "x", "y"}, {"y", "z", "x"}});
        }
        break;
      default: {  // axis_index_groups on one axis
        const MeshAxis& a = Pick(c.mesh);
        c.axes = {a.name};
        if (c.op != Op::ppermute && a.size >= 2) c.index_groups = Partition(a.size, reduction && a.size >= 3 && Coin());
        break;
      }
    }
    c.ref_groups = AxisGroups(c.mesh, c.axes, c.index_groups);
    Operand(c, static_cast<int>(c.ref_groups[0].size()), Uniform(0, 3));
    return c;
  }

  Case Grouped() {
    Case c;
    c.mesh = Meshes()[0];
    c.op = Pick(std::vector<Op>{Op::g_all_reduce, Op::g_all_reduce, Op::g_all_gather, Op::g_reduce_scatter,
                                Op::g_reduce_scatter, Op::g_all_to_all, Op::g_ppermute});
    c.reduce = Pick(std::vector<ReduceOp>{ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod});
    c.dtype = kDtypes[Uniform(0, 8)];
    if (Coin(4)) {
      const bool uneven = c.op == Op::g_all_reduce && Coin();
      c.ref_groups = Partition(kReplicas, uneven);
      c.groups = ReplicaGroups::from_lists(kReplicas, c.ref_groups, uneven);
    } else {
      static const std::vector<std::pair<int, int>> strided = {{1, 1}, {1, 2}, {2, 2}, {1, 4}, {2, 4},
                                                               {4, 2}, {1, 8}, {2, 0}, {4, 0}, {8, 1}};
      const auto [stride, size] = Pick(strided);
      c.ref_groups = StridedGroups(stride, size);
      c.groups = ReplicaGroups::strided(kReplicas, stride, size);
    }
    Operand(c, static_cast<int>(c.ref_groups[0].size()), Uniform(0, 3));
    return c;
  }

 private:
  std::mt19937 rng_;
};

// Runs `n` generated cases; stops reporting after a few failures so one bug does not flood the log.
void Sweep(Runtime& rt, const std::function<Case()>& next, int n) {
  int failures = 0;
  for (int i = 0; i < n && failures < 5; ++i) {
    const Case c = next();
    std::vector<Array> got;
    try {
      got = Execute(rt, c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << i << ": " << c.str() << "\nthrew: " << e.what();
      ++failures;
      continue;
    }
    if (!Check(c, got)) {
      ++failures;
      continue;
    }
    // R17: the same case again gives bitwise the same results (every 8th case, to keep the sweep fast).
    if (i % 8 == 0) {
      const std::vector<Array> again = Execute(rt, c);
      for (int r = 0; r < kReplicas; ++r)
        EXPECT_TRUE(again[static_cast<std::size_t>(r)].identical(got[static_cast<std::size_t>(r)]))
            << c.str() << "\nreplica " << r << " differs between two runs";
    }
  }
}

TEST(CollectiveSweep, ReferenceSelfCheck) {
  // The reference's groups reproduce the spec's tables (jax-pmap.md 3.2).
  const std::vector<MeshAxis> m42 = {{"i", 4}, {"j", 2}};
  EXPECT_EQ(ListsStr(AxisGroups(m42, {"i"}, {})), "[[0, 2, 4, 6], [1, 3, 5, 7]]");
  EXPECT_EQ(ListsStr(AxisGroups(m42, {"j"}, {})), "[[0, 1], [2, 3], [4, 5], [6, 7]]");
  EXPECT_EQ(ListsStr(AxisGroups(m42, {"j", "i"}, {})), "[[0, 2, 4, 6, 1, 3, 5, 7]]");
  EXPECT_EQ(ListsStr(AxisGroups({{"r", 2}, {"c", 4}}, {"r"}, {})), "[[0, 4], [1, 5], [2, 6], [3, 7]]");
  EXPECT_EQ(ListsStr(AxisGroups({{"i", 8}}, {"i"}, {{0, 2}, {7, 1, 3}, {4, 5, 6}})), "[[0, 2], [7, 1, 3], [4, 5, 6]]");
  EXPECT_EQ(ListsStr(StridedGroups(2, 2)), "[[0, 2], [1, 3], [4, 6], [5, 7]]");
  EXPECT_EQ(ListsStr(StridedGroups(1, 4)), "[[0, 1, 2, 3], [4, 5, 6, 7]]");
  EXPECT_EQ(ListsStr(StridedGroups(4, 0)), "[[0, 4], [1, 5], [2, 6], [3, 7]]");
  // ... and agree with the library's factories (which the explicit-group cases hand to the runtime).
  for (auto [s, g] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 2}, {1, 4}, {2, 4}, {4, 2}, {1, 8}, {2, 0}, {8, 1}})
    EXPECT_EQ(ReplicaGroups::strided(kReplicas, s, g).groups(), StridedGroups(s, g)) << s << " " << g;
}

TEST(CollectiveSweep, NamedAxesRandom) {
  Runtime rt({.device_count = kReplicas, .collective_warn_s = 60, .collective_timeout_s = 120});
  Generator gen(20240611);
  Sweep(rt, [&] { return gen.Named(); }, 480);
}

TEST(CollectiveSweep, ExplicitGroupsRandom) {
  Runtime rt({.device_count = kReplicas, .collective_warn_s = 60, .collective_timeout_s = 120});
  Generator gen(777);
  Sweep(rt, [&] { return gen.Grouped(); }, 240);
}

// Every op on every dtype at least once, on the full 8-replica group and on pairs, 7 elements.
TEST(CollectiveSweep, EveryOpAndDtype) {
  Runtime rt({.device_count = kReplicas, .collective_warn_s = 60, .collective_timeout_s = 120});
  Generator gen(5);
  std::vector<Case> cases;
  for (DType dt : kDtypes) {
    for (Op op : {Op::psum, Op::pmean, Op::pmax, Op::pmin, Op::all_gather, Op::psum_scatter, Op::all_to_all, Op::ppermute}) {
      for (const Names& axes : {Names{"x", "y"}, Names{"y"}}) {
        Case c;
        c.mesh = {{"x", 2}, {"y", 4}};
        c.axes = axes;
        c.op = op;
        c.dtype = dt;
        c.reduce = op == Op::pmean ? ReduceOp::mean : op == Op::pmax ? ReduceOp::max : op == Op::pmin ? ReduceOp::min : ReduceOp::sum;
        c.ref_groups = AxisGroups(c.mesh, c.axes, {});
        gen.Operand(c, static_cast<int>(c.ref_groups[0].size()), 2);
        cases.push_back(c);
      }
    }
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod}) {
      for (Op kind : {Op::g_all_reduce, Op::g_reduce_scatter}) {
        Case c;
        c.mesh = Meshes()[0];
        c.op = kind;
        c.reduce = op;
        c.dtype = dt;
        c.ref_groups = StridedGroups(2, 2);
        c.groups = ReplicaGroups::strided(kReplicas, 2, 2);
        gen.Operand(c, 2, 2);
        cases.push_back(c);
      }
    }
  }
  std::size_t i = 0;
  Sweep(rt, [&] { return cases[i++ % cases.size()]; }, static_cast<int>(cases.size()));
}

// Cases whose results reach the split threshold, so all members of a group compute them together (the
// split-work path). Sizes are the default threshold's (256 KiB and more) divided by `scale_down`: 256 gives
// 1.5 KiB results, for a runtime whose split threshold is 1 KiB (WEFT_SPLIT_BYTES). Odd lengths, so the
// members' shares are uneven.
std::vector<Case> SplitCases(std::int64_t scale_down) {
  auto odd = [scale_down](std::int64_t n) { return (n / scale_down) | 1; };
  auto named = [](Op op, DType dt, std::vector<MeshAxis> mesh, Names axes, Shape shape) {
    Case c;
    c.mesh = std::move(mesh);
    c.axes = std::move(axes);
    c.op = op;
    c.dtype = dt;
    c.reduce = op == Op::pmean ? ReduceOp::mean : op == Op::pmax ? ReduceOp::max : op == Op::pmin ? ReduceOp::min : ReduceOp::sum;
    c.shape = std::move(shape);
    c.ref_groups = AxisGroups(c.mesh, c.axes, {});
    return c;
  };
  const std::vector<MeshAxis> m8 = {{"x", 8}}, m24 = {{"x", 2}, {"y", 4}}, m42 = {{"x", 4}, {"y", 2}},
                              m222 = {{"x", 2}, {"y", 2}, {"z", 2}};
  std::vector<Case> cases;
  cases.push_back(named(Op::psum, DType::f32, m8, {"x"}, {odd(100003)}));
  cases.push_back(named(Op::pmean, DType::bf16, m24, {"y"}, {odd(200003)}));
  cases.push_back(named(Op::psum, DType::i8, m42, {"y", "x"}, {odd(400009)}));
  cases.push_back(named(Op::pmax, DType::f64, m222, {"z"}, {odd(50021)}));
  cases.push_back(named(Op::psum, DType::boolean, m8, {"x"}, {odd(100003)}));
  Case gather = named(Op::all_gather, DType::f32, m8, {"x"}, {odd(12503)});
  gather.tiled = true;
  cases.push_back(gather);
  Case gather2 = named(Op::all_gather, DType::i32, m24, {"x", "y"}, {3, odd(4201)});
  gather2.axis = 2;  // untiled, gathered dimension last
  cases.push_back(gather2);
  Case scatter = named(Op::psum_scatter, DType::i32, m8, {"x"}, {8 * odd(12503)});
  scatter.tiled = true;
  cases.push_back(scatter);
  Case scatter2 = named(Op::psum_scatter, DType::f32, m42, {"x"}, {odd(25007), 4});
  scatter2.axis = 1;
  cases.push_back(scatter2);
  Case a2a = named(Op::all_to_all, DType::f32, m8, {"x"}, {8, odd(12503)});
  a2a.concat_axis = 1;
  cases.push_back(a2a);
  Case a2a_tiled = named(Op::all_to_all, DType::f32, m8, {"x"}, {8 * odd(12503)});
  a2a_tiled.tiled = true;
  cases.push_back(a2a_tiled);
  Case shift = named(Op::ppermute, DType::f32, m8, {"x"}, {odd(100003)});
  for (int i = 0; i < 8; ++i) shift.perm.emplace_back(i, (i + 1) % 8);
  cases.push_back(shift);
  Case uneven;
  uneven.mesh = m8;
  uneven.op = Op::g_all_reduce;
  uneven.reduce = ReduceOp::max;
  uneven.dtype = DType::u8;
  uneven.shape = {odd(400009)};
  uneven.ref_groups = {{0, 5, 2}, {7, 1, 3, 4, 6}};
  uneven.groups = ReplicaGroups::from_lists(kReplicas, uneven.ref_groups, true);
  cases.push_back(uneven);
  Case rs;
  rs.mesh = m8;
  rs.op = Op::g_reduce_scatter;
  rs.reduce = ReduceOp::prod;
  rs.dtype = DType::f16;
  rs.shape = {4, odd(50021)};
  rs.ref_groups = StridedGroups(2, 4);
  rs.groups = ReplicaGroups::strided(kReplicas, 2, 4);
  cases.push_back(rs);
  return cases;
}

// Results of 256 KiB and more are computed by all members of a group together (the split-work path).
TEST(CollectiveSweep, AboveTheSplitThreshold) {
  Runtime rt({.device_count = kReplicas, .collective_warn_s = 60, .collective_timeout_s = 120});
  const std::vector<Case> cases = SplitCases(1);
  std::size_t i = 0;
  // Sweep re-runs case 0 and 8 to compare bitwise across runs.
  Sweep(rt, [&] { return cases[i++]; }, static_cast<int>(cases.size()));
}

// The same path with a split threshold of 1 KiB (WEFT_SPLIT_BYTES): the cases at 1/256 of their size, then
// random cases, many of which now split too. Says which input sizes ran.
TEST(CollectiveSweep, AboveASmallSplitThreshold) {
  Runtime rt({.device_count = kReplicas, .collective_warn_s = 60, .collective_timeout_s = 120, .split_bytes = 1024});
  const std::vector<Case> cases = SplitCases(256);
  std::string sizes;
  for (const Case& c : cases) sizes += (sizes.empty() ? "" : ", ") + std::to_string(num_elements(c.shape) * dtype_size(c.dtype));
  std::cout << "[ split threshold 1024 bytes ] split path cases with input sizes " << sizes << " bytes\n";
  RecordProperty("split_input_sizes", sizes);
  std::size_t i = 0;
  Sweep(rt, [&] { return cases[i++]; }, static_cast<int>(cases.size()));
  Generator gen(1024);
  Sweep(rt, [&] { return gen.Named(); }, 160);
}

// ---------------------------------------------------------------------------------------------------
// The spec's worked examples (jax-pmap.md 3.3-3.8), 4 devices.

std::vector<double> Row(const ShardedArray& a, int i) { return a.shards()[static_cast<std::size_t>(i)].data.to_doubles(); }

TEST(CollectiveExamples, AllGatherWithAxisIndexGroups) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](Replica& r, const Array& x) { return r.all_gather(x, "i", 0, false, {{0, 2}, {3, 1}}); },
                {.axis = "i", .runtime = &rt});
  const ShardedArray out = f(Array::arange(16).reshape({4, 4}));
  EXPECT_EQ(out.shape(), (Shape{4, 2, 4}));
  const std::vector<double> x0 = {0, 1, 2, 3}, x1 = {4, 5, 6, 7}, x2 = {8, 9, 10, 11}, x3 = {12, 13, 14, 15};
  auto cat = [](std::vector<double> a, const std::vector<double>& b) { a.insert(a.end(), b.begin(), b.end()); return a; };
  EXPECT_EQ(Row(out, 0), cat(x0, x2));
  EXPECT_EQ(Row(out, 2), cat(x0, x2));
  EXPECT_EQ(Row(out, 3), cat(x3, x1));
  EXPECT_EQ(Row(out, 1), cat(x3, x1));
}

TEST(CollectiveExamples, PsumScatterUntiledTiledAndGrouped) {
  Runtime rt({.device_count = 4});
  const Array x = Array::arange(16).reshape({4, 4});
  auto untiled = pmap([](Replica& r, const Array& v) { return r.psum_scatter(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto tiled = pmap([](Replica& r, const Array& v) { return r.psum_scatter(v, "i", 0, true); }, {.axis = "i", .runtime = &rt});
  auto grouped = pmap([](Replica& r, const Array& v) { return r.psum_scatter(v, "i", 0, true, {{0, 2}, {3, 1}}); },
                      {.axis = "i", .runtime = &rt});
  const ShardedArray a = untiled(x);
  EXPECT_EQ(a.shape(), (Shape{4}));
  EXPECT_EQ(a.to_host().to_doubles(), (std::vector<double>{24, 28, 32, 36}));
  const ShardedArray b = tiled(x);
  EXPECT_EQ(b.shape(), (Shape{4, 1}));
  EXPECT_EQ(b.to_host().to_doubles(), (std::vector<double>{24, 28, 32, 36}));
  const ShardedArray c = grouped(x);
  EXPECT_EQ(c.shape(), (Shape{4, 2}));
  EXPECT_EQ(c.to_host().to_doubles(), (std::vector<double>{8, 10, 20, 22, 12, 14, 16, 18}));
}

TEST(CollectiveExamples, PpermuteDirectionShiftsAndZeros) {
  Runtime rt({.device_count = 4});
  const Array x = Array::from_list<float>({1, 11, 21, 31});
  auto right = pmap([](Replica& r, const Array& v) { return r.ppermute(v, "i", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); },
                    {.axis = "i", .runtime = &rt});
  auto shift = pmap([](Replica& r, const Array& v) { return r.ppermute(v, "i", {{0, 1}, {1, 2}, {2, 3}}); },
                    {.axis = "i", .runtime = &rt});
  auto left = pmap([](Replica& r, const Array& v) { return r.ppermute(v, "i", {{1, 0}, {2, 1}, {3, 2}, {0, -1}}); },
                   {.axis = "i", .runtime = &rt});
  EXPECT_EQ(right(x).to_host().to_doubles(), (std::vector<double>{31, 1, 11, 21}));  // np.roll(x, 1)
  EXPECT_EQ(shift(x).to_host().to_doubles(), (std::vector<double>{0, 1, 11, 21}));
  EXPECT_EQ(left(x).to_host().to_doubles(), (std::vector<double>{11, 21, 31, 1}));
  // Within every group of a 2x2 mesh: a ppermute over "cols" permutes inside each row.
  auto cols = pmap([](Replica& r, const Array& v) { return r.ppermute(v, "cols", {{0, 1}}); },
                   {.mesh = {{"rows", 2}, {"cols", 2}}, .runtime = &rt});
  EXPECT_EQ(cols(x.reshape({2, 2})).to_host().to_doubles(), (std::vector<double>{0, 1, 0, 21}));
}

TEST(CollectiveExamples, AllToAllGlobalView) {
  // y = moveaxis(X, (0, split+1), (concat+1, 0)) for X of shape (4, 4, 3) on 4 replicas.
  Runtime rt({.device_count = 4});
  const Array x = Array::arange(48).reshape({4, 4, 3});
  auto f = pmap([](Replica& r, const Array& v) { return r.all_to_all(v, "i", 0, 0); }, {.axis = "i", .runtime = &rt});
  const std::vector<double> got = f(x).to_host().to_doubles();
  std::vector<double> want;
  for (int d = 0; d < 4; ++d)        // device
    for (int s = 0; s < 4; ++s)      // source
      for (int k = 0; k < 3; ++k) want.push_back(s * 12 + d * 3 + k);  // X[s, d, k]
  EXPECT_EQ(got, want);
}

TEST(CollectiveExamples, BoolAndIntegerReductionDtypes) {
  Runtime rt({.device_count = 4});
  auto sum = pmap([](Replica& r, const Array& v) { return r.psum(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto any = pmap([](Replica& r, const Array& v) { return r.pmax(v, "i"); }, {.axis = "i", .runtime = &rt});
  auto mean = pmap([](Replica& r, const Array& v) { return r.pmean(v, "i"); }, {.axis = "i", .runtime = &rt});
  const Array flags = Array::from_vector<bool>({true, false, true, true});
  const ShardedArray s = sum(flags);
  EXPECT_EQ(s.dtype(), DType::i32) << "bool is summed as int32";
  EXPECT_EQ(s.to_host().to_doubles(), (std::vector<double>{3, 3, 3, 3}));
  EXPECT_EQ(any(flags).dtype(), DType::boolean);
  const ShardedArray m = mean(Array::arange(4, DType::i32));
  EXPECT_EQ(m.dtype(), DType::f32) << "pmean of integers divides like psum(x) / n";
  EXPECT_EQ(m.to_host().to_doubles(), (std::vector<double>{1.5, 1.5, 1.5, 1.5}));
}

TEST(CollectiveExamples, MaxAndMinPropagateNan) {
  Runtime rt({.device_count = 4});
  auto f = pmap([](Replica& r, const Array& v) { return std::tuple{r.pmax(v, "i"), r.pmin(v, "i")}; },
                {.axis = "i", .runtime = &rt});
  auto [mx, mn] = f(Array::from_list<float>({1, NAN, -3, 2}));
  for (double v : mx.to_host().to_doubles()) EXPECT_TRUE(std::isnan(v));
  for (double v : mn.to_host().to_doubles()) EXPECT_TRUE(std::isnan(v));
}

}  // namespace collectives_test
}  // namespace
}  // namespace weft
