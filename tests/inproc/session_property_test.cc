// Seeded property test of PopXL-style sessions (shared/spec/popxl-replication.md sections 1, 2, 4, 5)
// against a naive reference written here with plain loops over std::vector<double>:
//  - groupings: group(r) = (r mod s) + s * floor(r / (s G)), member k of group g = first(g) + k s;
//  - grouped variables: replica r holds row group(r); get_tensor_data one_per_group = row per group read from
//    the group's first replica, all_replicas = row per replica in replica order;
//  - replica-sharded variables (on device and in a remote buffer): the flattened tensor is cut into
//    shard_over shards of P = ceil(n / shard_over) elements, zero-padded; member k holds shard k mod
//    shard_over; gather_shards over replica_grouping(s, shard_over) gives the full tensor back;
//    get_tensor_data returns the original exactly (padding dropped);
//  - replicated_reduce_scatter: flatten, zero-pad to a multiple of G, reduce over the group in member
//    order, member k gets chunk k; all_reduce; all_gather (member order); replica_sharded_slice.
// Reductions are folded in member order and rounded to the dtype after every step (integers wrap modulo
// 2^bits, "mul" is a true product, integer "mean" is float32(sum) / G as the runtime documents), so every
// comparison is exact.
//
// Each iteration draws R in {2, 4, 6, 8}, a variable grouping (stride, group size), shard_over dividing the
// group size, a collective grouping, a shape of rank 0..3 (sizes often not divisible by shard_over) and a
// dtype among int32, float32, int8, float64.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#if defined(__SANITIZE_THREAD__)
#define WEFT_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TEST_TSAN 1
#endif
#endif

namespace weft {
namespace {
namespace session_property_test {

#ifdef WEFT_TEST_TSAN
constexpr int kIterations = 100;
#else
constexpr int kIterations = 200;
#endif

using Values = std::vector<double>;

std::int64_t Count(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// ---- the naive reference ------------------------------------------------------------------------------

struct RefGrouping {
  int R, s, G;
  int num_groups() const { return R / G; }
  int group(int r) const { return (r % s) + s * (r / (s * G)); }
  int first(int g) const { return (g / s) * s * G + (g % s); }
  int member(int g, int k) const { return first(g) + k * s; }
  int rank(int r) const { return (r - first(group(r))) / s; }
};

std::int64_t AsInt(double v) { return static_cast<std::int64_t>(v); }

// An integer result modulo 2^bits of `dtype`, as a double.
double WrapInt(std::uint64_t u, DType dtype) {
  if (dtype == DType::i8) return static_cast<std::int8_t>(u);
  return static_cast<std::int32_t>(u);
}

bool IsInt(DType dtype) { return dtype == DType::i8 || dtype == DType::i32; }

// One fold step of `op` in `dtype`: integers wrap, float32 rounds after each step.
double Combine(ReduceOp op, double a, double b, DType dtype) {
  if (op == ReduceOp::max) return a > b ? a : b;
  if (op == ReduceOp::min) return a < b ? a : b;
  const bool product = op == ReduceOp::prod;
  if (IsInt(dtype)) {
    const std::uint64_t ua = static_cast<std::uint64_t>(AsInt(a)), ub = static_cast<std::uint64_t>(AsInt(b));
    return WrapInt(product ? ua * ub : ua + ub, dtype);
  }
  const double exact = product ? a * b : a + b;  // exact in double for two float32 values
  return dtype == DType::f32 ? static_cast<double>(static_cast<float>(exact)) : exact;
}

DType ResultDType(ReduceOp op, DType dtype) { return op == ReduceOp::mean && IsInt(dtype) ? DType::f32 : dtype; }

// Reduction of element e over `members`' values (x[replica] is that replica's flat value).
double Reduce(ReduceOp op, const std::vector<Values>& x, const std::vector<int>& members, std::size_t e, DType dtype) {
  double acc = x[members[0]][e];
  const ReduceOp fold = op == ReduceOp::mean ? ReduceOp::sum : op;
  for (std::size_t m = 1; m < members.size(); ++m) acc = Combine(fold, acc, x[members[m]][e], dtype);
  if (op != ReduceOp::mean) return acc;
  const double g = static_cast<double>(members.size());
  if (dtype == DType::f64) return acc / g;
  return static_cast<double>(static_cast<float>(acc) / static_cast<float>(g));
}

// Shard `index` of `count` of a flat value: P = ceil(n / count) elements, zero-padded.
Values Shard(const Values& flat, int index, int count) {
  const std::size_t n = flat.size(), per = (n + count - 1) / count;
  Values out(per, 0.0);
  for (std::size_t j = 0; j < per; ++j)
    if (index * per + j < n) out[j] = flat[index * per + j];
  return out;
}

Values Row(const Values& v, int row, std::int64_t cols) {
  return {v.begin() + row * cols, v.begin() + (row + 1) * cols};
}

void Append(Values& to, const Values& from) { to.insert(to.end(), from.begin(), from.end()); }

// ---- random draws ---------------------------------------------------------------------------------------

struct Rng {
  std::mt19937 gen;
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
  template <class T>
  const T& Pick(const std::vector<T>& v) { return v[static_cast<std::size_t>(Int(0, static_cast<int>(v.size()) - 1))]; }
};

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Values exactly representable in `dtype`, small enough that sums of 8 stay exact for the floats.
Values RandomValues(Rng& rng, std::int64_t n, DType dtype) {
  Values v(static_cast<std::size_t>(n));
  for (double& x : v) {
    switch (dtype) {
      case DType::i8: x = rng.Int(-20, 20); break;
      case DType::i32: x = rng.Int(-100000, 100000); break;
      case DType::f32: x = rng.Int(-12, 12) / 4.0; break;
      default: x = rng.Int(-1000, 1000) / 8.0; break;
    }
  }
  return v;
}

// (stride, group size) with R % (stride * size) == 0.
std::pair<int, int> RandomGrouping(Rng& rng, int R) {
  const int stride = rng.Pick(Divisors(R));
  const int size = rng.Pick(Divisors(R / stride));
  return {stride, size};
}

std::string Describe(const Values& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  s += "]";
  return s;
}

void ExpectArray(const Array& actual, const Shape& shape, DType dtype, const Values& values, const std::string& what) {
  ASSERT_EQ(actual.shape(), shape) << what << ": shape " << shape_str(actual.shape()) << " expected " << shape_str(shape);
  ASSERT_EQ(actual.dtype(), dtype) << what << ": dtype " << dtype_name(actual.dtype());
  const Values got = actual.to_doubles();
  EXPECT_EQ(got, values) << what << "\n  got      " << Describe(got) << "\n  expected " << Describe(values);
}

// ---- the property -----------------------------------------------------------------------------------------

struct Coverage {
  int padded_shards = 0, padded_chunks = 0, multi_group = 0, strided = 0, partial_shard_over = 0;
};

void RunIteration(Runtime& rt, std::uint32_t seed, Coverage& coverage) {
  Rng rng{std::mt19937(seed)};
  const int R = rng.Pick(std::vector<int>{2, 4, 6, 8});
  const auto [stride, size] = RandomGrouping(rng, R);
  // shard_over: the group size (the default), 1, or a divisor strictly in between when there is one.
  std::vector<int> between;
  for (int d : Divisors(size))
    if (d > 1 && d < size) between.push_back(d);
  const int pick = rng.Int(0, 3);
  const int D = pick == 0 ? size : pick == 1 ? 1 : between.empty() ? size : rng.Pick(between);
  const auto [cstride, csize] = RandomGrouping(rng, R);
  const DType dtype = rng.Pick(std::vector<DType>{DType::i32, DType::f32, DType::i8, DType::f64});
  Shape S;
  const int rank = rng.Int(0, 3);
  for (int i = 0; i < rank; ++i) S.push_back(rng.Int(1, 7));
  const std::int64_t n = Count(S);
  const Retrieval sharded_mode = rng.Int(0, 1) ? Retrieval::all_replicas : Retrieval::one_per_group;
  const Retrieval remote_mode = rng.Int(0, 1) ? Retrieval::all_replicas : Retrieval::one_per_group;
  const int entry = rng.Int(0, 1);

  SCOPED_TRACE("seed " + std::to_string(seed) + ": R " + std::to_string(R) + ", grouping (" + std::to_string(stride) + ", " +
               std::to_string(size) + "), shard_over " + std::to_string(D) + ", collective grouping (" +
               std::to_string(cstride) + ", " + std::to_string(csize) + "), shape " + shape_str(S) + ", " +
               std::string(dtype_name(dtype)));

  const RefGrouping ref{R, size == 1 ? 1 : stride, size}, cref{R, csize == 1 ? 1 : cstride, csize};
  const int NG = ref.num_groups();
  const std::int64_t P = (n + D - 1) / D, C = (n + csize - 1) / csize;
  coverage.padded_shards += n % D != 0;
  coverage.padded_chunks += n % csize != 0;
  coverage.multi_group += NG > 1;
  coverage.strided += stride > 1 && size > 1;
  coverage.partial_shard_over += D < size;

  Session s({.replicas = R, .runtime = &rt});
  const ReplicaGroups g = s.replica_grouping(stride, size), cg = s.replica_grouping(cstride, csize);
  const ReplicaGroups domain = s.replica_grouping(stride, D);
  std::vector<int> expected_assignment;
  for (int r = 0; r < R; ++r) expected_assignment.push_back(ref.group(r));
  EXPECT_EQ(g.assignment(), expected_assignment);

  Shape host_shape = S;
  if (NG > 1) host_shape.insert(host_shape.begin(), NG);
  const Values hostA = RandomValues(rng, NG * n, dtype), hostB = RandomValues(rng, NG * n, dtype),
               hostC = RandomValues(rng, NG * n, dtype), hostD = RandomValues(rng, NG * n, dtype);
  std::vector<Values> x(R);
  Values x_flat;
  for (int r = 0; r < R; ++r) {
    x[r] = RandomValues(rng, n, dtype);
    Append(x_flat, x[r]);
  }
  auto make = [&](const Values& v, const Shape& shape) { return Array::from_doubles(v, shape, dtype); };

  Variable v_one = s.variable(make(hostA, host_shape), g, Retrieval::one_per_group, "a_one");
  Variable v_all = s.variable(make(hostA, host_shape), g, Retrieval::all_replicas, "a_all");
  Variable sv = s.replica_sharded_variable(make(hostB, host_shape), g, D, sharded_mode, "b");
  RemoteBuffer buf = s.replica_sharded_buffer(host_shape, dtype, g, D, 2);
  ASSERT_EQ(buf.shape(), (Shape{P}));
  ASSERT_EQ(buf.meta_shape(), S);
  Variable rv = s.remote_replica_sharded_variable(make(hostC, host_shape), buf, entry, g, remote_mode, "c");

  HostStream in = s.h2d_stream(S, dtype, "x");
  HostStream o_val = s.d2h_stream(S, dtype), o_shard = s.d2h_stream({P}, dtype), o_full = s.d2h_stream(S, dtype);
  HostStream o_rshard = s.d2h_stream({P}, dtype), o_rfull = s.d2h_stream(S, dtype), o_other = s.d2h_stream({P}, dtype);
  const std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod};
  std::vector<HostStream> o_rs, o_ar;
  for (ReduceOp op : ops) {
    o_rs.push_back(s.d2h_stream({C}, ResultDType(op, dtype), std::string("rs_") + reduce_op_name(op)));
    o_ar.push_back(s.d2h_stream(S, ResultDType(op, dtype), std::string("ar_") + reduce_op_name(op)));
  }
  Shape gathered_shape = S;
  gathered_shape.insert(gathered_shape.begin(), csize);
  HostStream o_ag = s.d2h_stream(gathered_shape, dtype), o_slice = s.d2h_stream({C}, dtype);

  const Array input = make(x_flat, [&] {
    Shape shape = S;
    shape.insert(shape.begin(), R);
    return shape;
  }());
  auto outs = s.run(
      [&](Replica& r) {
        r.host_store(o_val, r.value(v_one));
        const Array shard = r.value(sv);
        r.host_store(o_shard, shard);
        r.host_store(o_full, r.gather_shards(shard, domain, S));
        const Array remote = r.remote_load(buf, entry);
        r.host_store(o_rshard, remote);
        r.host_store(o_rfull, r.gather_shards(remote, domain, S));
        r.host_store(o_other, r.remote_load(buf, Array::scalar(1 - entry, DType::i32)));
        const Array xr = r.host_load(in);
        for (std::size_t i = 0; i < ops.size(); ++i) {
          r.host_store(o_rs[i], r.replicated_reduce_scatter(xr, cg, ops[i]));
          r.host_store(o_ar[i], r.all_reduce(xr, cg, ops[i]));
        }
        r.host_store(o_ag, r.all_gather(xr, cg));
        r.host_store(o_slice, r.replica_sharded_slice(xr, cg));
        const Array delta = Array::scalar(r.index() + 1, dtype);
        r.value(v_one) += delta;
        r.value(v_all) += delta;
        r.value(sv) += Array::scalar(1, dtype);
      },
      {{in, input}});

  // What each replica held at the start of the run.
  Values e_val, e_shard, e_full, e_rshard, e_rfull;
  for (int r = 0; r < R; ++r) {
    const int grp = ref.group(r), k = ref.rank(r) % D;
    Append(e_val, Row(hostA, grp, n));
    Append(e_shard, Shard(Row(hostB, grp, n), k, D));
    Append(e_full, Row(hostB, grp, n));
    Append(e_rshard, Shard(Row(hostC, grp, n), k, D));
    Append(e_rfull, Row(hostC, grp, n));
  }
  auto per_replica = [&](const Shape& shape) {
    Shape out = shape;
    out.insert(out.begin(), R);
    return out;
  };
  ExpectArray(outs.at(o_val), per_replica(S), dtype, e_val, "value(grouped variable)");
  ExpectArray(outs.at(o_shard), per_replica({P}), dtype, e_shard, "value(replica-sharded variable)");
  ExpectArray(outs.at(o_full), per_replica(S), dtype, e_full, "gather_shards of the on-device shards");
  ExpectArray(outs.at(o_rshard), per_replica({P}), dtype, e_rshard, "remote_load of the sharded entry");
  ExpectArray(outs.at(o_rfull), per_replica(S), dtype, e_rfull, "gather_shards of the remote shards");
  ExpectArray(outs.at(o_other), per_replica({P}), dtype, Values(static_cast<std::size_t>(R * P), 0.0), "the other entry");

  // Collectives over the collective grouping.
  for (std::size_t i = 0; i < ops.size(); ++i) {
    Values e_rs, e_ar;
    for (int r = 0; r < R; ++r) {
      std::vector<int> members;
      for (int m = 0; m < csize; ++m) members.push_back(cref.member(cref.group(r), m));
      const int k = cref.rank(r);
      for (std::int64_t j = 0; j < C; ++j) {
        const std::int64_t e = k * C + j;
        e_rs.push_back(e < n ? Reduce(ops[i], x, members, static_cast<std::size_t>(e), dtype) : 0.0);
      }
      for (std::int64_t e = 0; e < n; ++e) e_ar.push_back(Reduce(ops[i], x, members, static_cast<std::size_t>(e), dtype));
    }
    const DType rd = ResultDType(ops[i], dtype);
    ExpectArray(outs.at(o_rs[i]), per_replica({C}), rd, e_rs, std::string("replicated_reduce_scatter ") + reduce_op_name(ops[i]));
    ExpectArray(outs.at(o_ar[i]), per_replica(S), rd, e_ar, std::string("all_reduce ") + reduce_op_name(ops[i]));
  }
  Values e_ag, e_slice;
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < csize; ++m) Append(e_ag, x[cref.member(cref.group(r), m)]);
    Append(e_slice, Shard(x[r], cref.rank(r), csize));
  }
  ExpectArray(outs.at(o_ag), per_replica(gathered_shape), dtype, e_ag, "all_gather");
  ExpectArray(outs.at(o_slice), per_replica({C}), dtype, e_slice, "replica_sharded_slice");

  // Weights back on the host, both retrieval modes.
  auto wrap = [&](double v) { return IsInt(dtype) ? WrapInt(static_cast<std::uint64_t>(AsInt(v)), dtype) : v; };
  Values e_one, e_all;
  for (int grp = 0; grp < NG; ++grp)
    for (double v : Row(hostA, grp, n)) e_one.push_back(wrap(v + ref.first(grp) + 1));
  for (int r = 0; r < R; ++r)
    for (double v : Row(hostA, ref.group(r), n)) e_all.push_back(wrap(v + r + 1));
  ExpectArray(s.get_tensor_data(v_one), host_shape, dtype, e_one, "get_tensor_data one_per_group");
  ExpectArray(s.get_tensor_data(v_all), per_replica(S), dtype, e_all, "get_tensor_data all_replicas");

  auto expected_sharded = [&](const Values& host, Retrieval mode, Values* values) {
    values->clear();
    if (mode == Retrieval::one_per_group) {
      *values = host;
      return host_shape;
    }
    for (int r = 0; r < R; ++r) Append(*values, Row(host, ref.group(r), n));
    return per_replica(S);
  };
  Values plus1 = hostB, expected;
  for (double& v : plus1) v = wrap(v + 1);
  Shape shape = expected_sharded(plus1, sharded_mode, &expected);
  ExpectArray(s.get_tensor_data(sv), shape, dtype, expected, "replica-sharded variable after += 1");
  shape = expected_sharded(hostC, remote_mode, &expected);
  ExpectArray(s.get_tensor_data(rv), shape, dtype, expected, "remote replica-sharded round trip");

  // write_variable_data re-shards into the buffer entry.
  s.write_variable_data(rv, make(hostD, host_shape));
  shape = expected_sharded(hostD, remote_mode, &expected);
  ExpectArray(s.get_tensor_data(rv), shape, dtype, expected, "after write_variable_data");
  outs = s.run([&](Replica& r) { r.host_store(o_rshard, r.remote_load(buf, entry)); }, {{in, input}});
  Values e_dshard;
  for (int r = 0; r < R; ++r) Append(e_dshard, Shard(Row(hostD, ref.group(r), n), ref.rank(r) % D, D));
  ExpectArray(outs.at(o_rshard), per_replica({P}), dtype, e_dshard, "shards after write_variable_data");
}

TEST(SessionPropertyTest, MatchesNaiveReference) {
  Runtime rt({.device_count = 8});
  Coverage coverage;
  for (int i = 0; i < kIterations; ++i) {
    RunIteration(rt, 1000u + static_cast<std::uint32_t>(i), coverage);
    if (HasFailure()) break;  // the first failing seed is the useful one
  }
  // The draws do reach the interesting cases.
  std::printf("%d iterations: %d with padded shards, %d with padded reduce-scatter chunks, %d with several groups, "
              "%d strided, %d with shard_over < group size\n",
              kIterations, coverage.padded_shards, coverage.padded_chunks, coverage.multi_group, coverage.strided,
              coverage.partial_shard_over);
  EXPECT_GT(coverage.padded_shards, kIterations / 10);
  EXPECT_GT(coverage.padded_chunks, kIterations / 10);
  EXPECT_GT(coverage.multi_group, kIterations / 10);
  EXPECT_GT(coverage.strided, kIterations / 20);
  EXPECT_GT(coverage.partial_shard_over, kIterations / 20);
}

}  // namespace session_property_test
}  // namespace
}  // namespace weft
