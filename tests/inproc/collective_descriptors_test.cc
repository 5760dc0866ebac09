// The collectives' table (src/core/collective.hpp), one row per collective:
// - every collective op of the registry points at its row (the same name; the parameters the row reads are
//   exactly the op's parameters), no array op or session effect has one, and every row over named axes is an
//   op of the registry;
// - each row's kind, reduction and form are what its name means (a table written here, not read from the
//   row), and running the op as a one-equation program (the executor's path) and the Replica method of the
//   same name (eager) on 4 replica threads both give, bit for bit, a naive reference computed here from every
//   replica's input (small integers in float64: every sum and product is exact in any order).
// - a parameter the row reads with a bad value (PopXL's reduction name) is refused naming the equation;
// - every collective declares and gives JAX's dtype for bool, integer and float16 operands, and a result of
//   another type than its equation declares is refused (the executor checks it).
// In the inproc tier: the collectives run on replica threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "core/collective.hpp"
#include "program/op_registry.hpp"
#include "weft/weft.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace weft {
namespace {
namespace collective_descriptors_test {

constexpr int kMembers = 4;

Runtime& runtime() {
  static Runtime rt({.device_count = kMembers, .collective_warn_s = 20, .collective_timeout_s = 60, .log_level = "error"});
  return rt;
}

// ---- the table against the registry -------------------------------------------------------------------------

std::set<std::string> row_param_names(const CollectiveDescriptor& row) {
  std::set<std::string> names;
  for (int bit = 0; bit < kCollectiveParamCount; ++bit) {
    const auto p = static_cast<CollectiveParam>(1u << bit);
    if (row.reads(p)) names.insert(collective_param_name(p));
  }
  return names;
}

TEST(CollectiveDescriptors, EveryCollectiveOpOfTheRegistryPointsAtItsRow) {
  std::vector<program::OpInfo> collective_ops;
  program::register_collective_ops(collective_ops);
  int with_rows = 0;
  for (const program::OpInfo& family_op : collective_ops) {
    SCOPED_TRACE(family_op.name());
    const program::OpInfo* op = program::find_op(family_op.name());
    ASSERT_NE(op, nullptr);
    if (op->kernel != nullptr) {
      // pvary: a change of type only, an array kernel (the identity), no communication.
      EXPECT_EQ(op->collective, nullptr);
      continue;
    }
    ASSERT_NE(op->collective, nullptr) << "a collective op without a kernel has no row of the collectives' table";
    EXPECT_EQ(std::string(op->collective->name), op->name());
    EXPECT_EQ(find_collective(op->name()), op->collective);
    std::set<std::string> params;
    for (const program::ParamSpec& spec : op->params) params.insert(spec.name);
    EXPECT_EQ(row_param_names(*op->collective), params);
    ++with_rows;
  }
  EXPECT_GE(with_rows, 15);
  for (const std::string& name : program::registered_ops()) {
    const program::OpInfo* op = program::find_op(name);
    const bool in_family = std::any_of(collective_ops.begin(), collective_ops.end(),
                                       [&](const program::OpInfo& c) { return c.name() == name; });
    if (!in_family) {
      EXPECT_EQ(op->collective, nullptr) << name << " is not a collective but has a row";
    }
  }
  // Every row over named axes is a program op; the others are the Replica's methods over explicit groups.
  for (const CollectiveDescriptor* row : collective_descriptors()) {
    SCOPED_TRACE(row->name);
    const program::OpInfo* op = program::find_op(row->name);
    if (row->named()) {
      ASSERT_NE(op, nullptr);
      EXPECT_EQ(op->collective, row);
    } else {
      EXPECT_EQ(op, nullptr);
    }
  }
}

// ---- each row against its meaning, run both ways ----------------------------------------------------------

using Inputs = std::vector<std::vector<double>>;  // every member's input, flattened
using Reference = std::function<std::vector<double>(const Inputs& in, int member)>;
using Method = std::function<Array(Replica& r, const Array& x)>;

struct Case {
  std::string op;
  CollectiveKind kind;
  ReduceOp reduce;
  CollectiveForm form;
  Shape in_shape;  // per member
  ProgramParams params;
  Method method;   // the Replica's method of the op's name; null where it has none (pbroadcast)
  Shape out_shape;
  Reference reference;
  DType out_dtype = DType::f64;
};

// Member m's input: 10 m + k + 1 at flat index k.
Inputs inputs_for(const Shape& shape) {
  Inputs in(kMembers);
  for (int m = 0; m < kMembers; ++m) {
    for (std::int64_t k = 0; k < num_elements(shape); ++k) in[m].push_back(10.0 * m + static_cast<double>(k) + 1);
  }
  return in;
}

Reference reduce_all(ReduceOp op) {
  return [op](const Inputs& in, int) {
    std::vector<double> out = in[0];
    for (int m = 1; m < kMembers; ++m) {
      for (std::size_t k = 0; k < out.size(); ++k) {
        const double v = in[m][k];
        switch (op) {
          case ReduceOp::sum:
          case ReduceOp::mean: out[k] += v; break;
          case ReduceOp::max: out[k] = std::max(out[k], v); break;
          case ReduceOp::min: out[k] = std::min(out[k], v); break;
          case ReduceOp::prod: out[k] *= v; break;
        }
      }
    }
    if (op == ReduceOp::mean) {
      for (double& v : out) v /= kMembers;
    }
    return out;
  };
}

// The flattened input zero-padded to kMembers chunks of `chunk`.
std::vector<double> padded(std::vector<double> v, std::int64_t chunk) {
  v.resize(static_cast<std::size_t>(chunk * kMembers), 0.0);
  return v;
}

std::vector<Case> cases() {
  using K = CollectiveKind;
  using F = CollectiveForm;
  const ProgramParam over_i = std::vector<std::string>{"i"};
  const auto groups = [](Replica& r) { return r.groups("i"); };
  const Permutation perm = {{0, 2}, {3, 1}};
  std::vector<Case> all = {
      {"psum", K::all_reduce, ReduceOp::sum, F::direct, {4, 2}, {{"axes", over_i}},
       [](Replica& r, const Array& x) { return r.psum(x, "i"); }, {4, 2}, reduce_all(ReduceOp::sum)},
      {"pmean", K::all_reduce, ReduceOp::mean, F::direct, {4, 2}, {{"axes", over_i}},
       [](Replica& r, const Array& x) { return r.pmean(x, "i"); }, {4, 2}, reduce_all(ReduceOp::mean)},
      {"pmax", K::all_reduce, ReduceOp::max, F::direct, {4, 2}, {{"axes", over_i}},
       [](Replica& r, const Array& x) { return r.pmax(x, "i"); }, {4, 2}, reduce_all(ReduceOp::max)},
      {"pmin", K::all_reduce, ReduceOp::min, F::direct, {4, 2}, {{"axes", over_i}},
       [](Replica& r, const Array& x) { return r.pmin(x, "i"); }, {4, 2}, reduce_all(ReduceOp::min)},
      // No Replica::pprod: the Replica spells it all_reduce with ReduceOp::prod.
      {"pprod", K::all_reduce, ReduceOp::prod, F::direct, {4, 2}, {{"axes", over_i}},
       [=](Replica& r, const Array& x) { return r.all_reduce(x, groups(r), ReduceOp::prod); }, {4, 2},
       reduce_all(ReduceOp::prod)},
      // [4, 2] gathered tiled along axis 1: [4, 8], member m's block at columns 2m, 2m + 1.
      {"all_gather", K::all_gather, ReduceOp::sum, F::direct, {4, 2},
       {{"axes", over_i}, {"axis", std::int64_t{1}}, {"tiled", true}},
       [](Replica& r, const Array& x) { return r.all_gather(x, "i", 1, true); }, {4, 8},
       [](const Inputs& in, int) {
         std::vector<double> out;
         for (int a = 0; a < 4; ++a)
           for (int m = 0; m < kMembers; ++m)
             for (int b = 0; b < 2; ++b) out.push_back(in[m][a * 2 + b]);
         return out;
       }},
      // Member r gets row r of the sum.
      {"psum_scatter", K::reduce_scatter, ReduceOp::sum, F::direct, {4, 2}, {{"axes", over_i}, {"axis", std::int64_t{0}}},
       [](Replica& r, const Array& x) { return r.psum_scatter(x, "i", 0); }, {2},
       [](const Inputs& in, int r) {
         const std::vector<double> sum = reduce_all(ReduceOp::sum)(in, r);
         return std::vector<double>{sum[r * 2], sum[r * 2 + 1]};
       }},
      // Untiled, split 0 / concat 1: out_r[b][m] = x_m[r][b].
      {"all_to_all", K::all_to_all, ReduceOp::sum, F::direct, {4, 2},
       {{"axes", over_i}, {"split_axis", std::int64_t{0}}, {"concat_axis", std::int64_t{1}}},
       [](Replica& r, const Array& x) { return r.all_to_all(x, "i", 0, 1); }, {2, 4},
       [](const Inputs& in, int r) {
         std::vector<double> out;
         for (int b = 0; b < 2; ++b)
           for (int m = 0; m < kMembers; ++m) out.push_back(in[m][r * 2 + b]);
         return out;
       }},
      // A partial permutation: members no pair sends to get zeros.
      {"ppermute", K::ppermute, ReduceOp::sum, F::direct, {3}, {{"axes", over_i}, {"perm", perm}},
       [=](Replica& r, const Array& x) { return r.ppermute(x, "i", perm); }, {3},
       [=](const Inputs& in, int r) {
         for (const auto& [from, to] : perm) {
           if (to == r) return in[from];
         }
         return std::vector<double>(3, 0.0);
       }},
      {"pbroadcast", K::all_gather, ReduceOp::sum, F::broadcast, {2, 3}, {{"axes", over_i}, {"source", std::int64_t{2}}},
       nullptr, {2, 3}, [](const Inputs& in, int) { return in[2]; }},
      {"axis_index", K::all_reduce, ReduceOp::sum, F::axis_index, {1}, {{"axes", over_i}},
       [](Replica& r, const Array&) -> Array { return r.axis_index("i"); }, {},
       [](const Inputs&, int r) { return std::vector<double>{static_cast<double>(r)}; }, DType::i32},
      {"all_reduce_identical_inputs", K::all_reduce, ReduceOp::sum, F::identity, {3}, {{"axes", over_i}},
       [=](Replica& r, const Array& x) { return r.all_reduce_identical_inputs(x, groups(r)); }, {3},
       [](const Inputs& in, int r) { return in[r]; }},
      {"all_reduce_identical_grad_inputs", K::all_reduce, ReduceOp::sum, F::direct, {3}, {{"axes", over_i}},
       [=](Replica& r, const Array& x) { return r.all_reduce_identical_grad_inputs(x, groups(r)); }, {3},
       reduce_all(ReduceOp::sum)},
      // 9 elements padded to 12: member r's chunk of 3, averaged over the members.
      {"replicated_reduce_scatter", K::reduce_scatter, ReduceOp::sum, F::flat_scatter, {3, 3},
       {{"axes", over_i}, {"op", std::string("mean")}},
       [=](Replica& r, const Array& x) { return r.replicated_reduce_scatter(x, groups(r), ReduceOp::mean); }, {3},
       [](const Inputs& in, int r) {
         Inputs flat;
         for (const auto& v : in) flat.push_back(padded(v, 3));
         const std::vector<double> mean = reduce_all(ReduceOp::mean)(flat, r);
         return std::vector<double>(mean.begin() + r * 3, mean.begin() + r * 3 + 3);
       }},
      {"replica_sharded_slice", K::reduce_scatter, ReduceOp::sum, F::flat_slice, {3, 3}, {{"axes", over_i}},
       [=](Replica& r, const Array& x) { return r.replica_sharded_slice(x, groups(r)); }, {3},
       [](const Inputs& in, int r) {
         const std::vector<double> flat = padded(in[r], 3);
         return std::vector<double>(flat.begin() + r * 3, flat.begin() + r * 3 + 3);
       }},
      // 4 shards of 3 hold the 10 elements of [2, 5]: the first 10 of their concatenation.
      {"gather_shards", K::all_gather, ReduceOp::sum, F::gather_shards, {3},
       {{"axes", over_i}, {"shape", std::vector<std::int64_t>{2, 5}}},
       [=](Replica& r, const Array& x) { return r.gather_shards(x, groups(r), {2, 5}); }, {2, 5},
       [](const Inputs& in, int) {
         std::vector<double> out;
         for (const auto& v : in) out.insert(out.end(), v.begin(), v.end());
         out.resize(10);
         return out;
       }},
  };
  return all;
}

// x stacked over the members: [kMembers, shape...].
Array stacked(const Inputs& in, const Shape& shape) {
  std::vector<double> all;
  for (const auto& v : in) all.insert(all.end(), v.begin(), v.end());
  Shape s = shape;
  s.insert(s.begin(), kMembers);
  return Array::from_doubles(all, s, DType::f64);
}

std::vector<Array> per_member(const ReplicaFunction& fn, const Array& input) {
  PmapOptions options{.runtime = &runtime()};
  options.mesh = {{"i", kMembers}};
  PmapProgram run(fn, options);
  const Array out = run({PmapArg(input)}).at(0).to_host();
  std::vector<Array> members;
  for (int m = 0; m < kMembers; ++m) members.push_back(out[m].copy());
  return members;
}

void expect_reference(const Case& c, const Inputs& in, const std::vector<Array>& got, const char* how) {
  for (int m = 0; m < kMembers; ++m) {
    SCOPED_TRACE(std::string(how) + ", member " + std::to_string(m));
    EXPECT_EQ(got[m].dtype(), c.out_dtype);
    EXPECT_EQ(got[m].shape(), c.out_shape);
    EXPECT_EQ(got[m].to_doubles(), c.reference(in, m));
  }
}

TEST(CollectiveDescriptors, EachRowIsWhatItsNameMeansInAProgramAndInTheReplicaMethod) {
  const std::vector<Case> all = cases();
  std::set<std::string> covered;
  for (const Case& c : all) {
    SCOPED_TRACE(c.op);
    covered.insert(c.op);
    const CollectiveDescriptor* row = find_collective(c.op);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->kind, c.kind) << collective_kind_name(row->kind);
    EXPECT_EQ(row->reduce, c.reduce) << reduce_op_name(row->reduce);
    EXPECT_EQ(row->form, c.form);
    const Inputs in = inputs_for(c.in_shape);
    const Array x = stacked(in, c.in_shape);

    ProgramBuilder b(Mesh({{"i", kMembers}}));
    const int input = b.input({DType::f64, c.in_shape, {"i"}});
    const std::vector<int> operand = c.form == CollectiveForm::axis_index ? std::vector<int>{} : std::vector<int>{input};
    b.set_outputs({b.emit(c.op, operand, c.params)[0]});
    const Program program = b.build();
    expect_reference(c, in,
                     per_member([&](Replica& r, std::span<Array> a) { return run_program(program, r, std::vector<Array>{a[0]}); }, x),
                     "the program");
    if (c.method) {
      expect_reference(c, in,
                       per_member([&](Replica& r, std::span<Array> a) { return std::vector<Array>{c.method(r, a[0])}; }, x),
                       "the Replica's method");
    }
  }
  // Every row over named axes is covered above.
  for (const CollectiveDescriptor* row : collective_descriptors()) {
    if (row->named()) {
      EXPECT_TRUE(covered.count(row->name)) << row->name << " has no case here";
    }
  }
}

TEST(CollectiveDescriptors, ABadReductionNameIsRefusedAtItsEquation) {
  ProgramBuilder b(Mesh({{"i", kMembers}}));
  const int input = b.input({DType::f64, {8}, {"i"}});
  b.set_outputs({b.emit("replicated_reduce_scatter", {input},
                        {{"axes", std::vector<std::string>{"i"}}, {"op", std::string("bogus")}}, "model.py:7")[0]});
  const Program program = b.build();
  const Array x = Array::full({kMembers, 8}, 1.0, DType::f64);
  testing::ExpectThrowsWith<InvalidArgument>(
      [&] { per_member([&](Replica& r, std::span<Array> a) { return run_program(program, r, std::vector<Array>{a[0]}); }, x); },
      {"replicated_reduce_scatter", "model.py:7", "unknown reduce op \"bogus\"; use add, mean, mul, min or max"});
}

// Every collective's program type and its run give JAX's dtype for every operand dtype: psum-like reductions
// of bool give int32 (JAX's psum converts bool first), pmean of integers or bool a float (psum(x) / n: float32,
// float64 for int64), the rest the operand's dtype. The expectations are written here, not read from the rule.
TEST(CollectiveDescriptors, EachCollectiveDeclaresAndGivesJaxsDtype) {
  enum class Promotes { none, sum, mean };
  const std::map<std::string, Promotes> promoting = {
      {"psum", Promotes::sum},
      {"pprod", Promotes::sum},
      {"psum_scatter", Promotes::sum},
      {"all_reduce_identical_grad_inputs", Promotes::sum},
      {"pmean", Promotes::mean},
      {"replicated_reduce_scatter", Promotes::mean}};  // its case reduces with op='mean'
  const auto expected = [&](const std::string& op, DType in) {
    const Promotes p = promoting.count(op) ? promoting.at(op) : Promotes::none;
    if (p == Promotes::sum && in == DType::boolean) return DType::i32;
    if (p == Promotes::mean && in == DType::i64) return DType::f64;
    if (p == Promotes::mean && !is_floating(in)) return DType::f32;
    return in;
  };
  for (const Case& c : cases()) {
    for (const DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f16}) {
      SCOPED_TRACE(c.op + " of " + std::string(dtype_name(dtype)));
      ProgramBuilder b(Mesh({{"i", kMembers}}));
      const int input = b.input({dtype, c.in_shape, {"i"}});
      const bool operand = c.form != CollectiveForm::axis_index;
      b.set_outputs({b.emit(c.op, operand ? std::vector<int>{input} : std::vector<int>{}, c.params)[0]});
      const Program program = b.build();
      const DType want = operand ? expected(c.op, dtype) : DType::i32;
      EXPECT_EQ(program.output_types().at(0).dtype, want) << dtype_name(program.output_types()[0].dtype);
      const Array x = stacked(inputs_for(c.in_shape), c.in_shape).astype(dtype);
      const std::vector<Array> got = per_member(
          [&](Replica& r, std::span<Array> a) { return run_program(program, r, std::vector<Array>{a[0]}); }, x);
      EXPECT_EQ(got[0].dtype(), want) << dtype_name(got[0].dtype());
    }
  }
}

// A collective's result is checked against its equation's declared type, as a kernel's is. A program built
// for a mesh of 2 replicas and run on 4 types its collectives for 2: the results below have the 4 replicas'
// shapes (written out here from what the op means), and each run is refused naming the replica, the equation,
// its source and both types, instead of handing a value of the wrong shape to what follows.
TEST(CollectiveDescriptors, AResultOfAnotherTypeThanItsEquationDeclaresIsRefused) {
  const std::vector<std::string> i{"i"};
  struct ResultCase {
    std::string op;
    ProgramParams params;
    std::string declared, gave;  // for 2 replicas (the program's mesh), for the 4 it runs on
  };
  const std::vector<ResultCase> cases = {
      {"all_gather", {{"axes", i}, {"axis", std::int64_t{0}}, {"tiled", true}}, "f64[8]", "f64[16]"},
      {"all_gather", {{"axes", i}, {"axis", std::int64_t{0}}}, "f64[2,4]", "f64[4,4]"},
      {"psum_scatter", {{"axes", i}, {"axis", std::int64_t{0}}, {"tiled", true}}, "f64[2]", "f64[1]"},
  };
  for (const ResultCase& c : cases) {
    SCOPED_TRACE(c.op + " " + c.declared);
    ProgramBuilder b(Mesh({{"i", 2}}));
    const int input = b.input({DType::f64, {4}, {"i"}});
    b.set_outputs({b.emit(c.op, {input}, c.params, "model.py:9")[0]});
    const Program program = b.build();
    const Array x = Array::full({kMembers, 4}, 1.0, DType::f64);
    testing::ExpectThrowsWith<Error>(
        [&] { per_member([&](Replica& r, std::span<Array> a) { return run_program(program, r, std::vector<Array>{a[0]}); }, x); },
        {": the collective gave " + c.gave + " where its equation declares " + c.declared, "(model.py:9)",
         "= " + c.op + "[", "(the program was built for mesh {i: 2}, the replica runs on mesh {i: 4})"});
  }
}

}  // namespace collective_descriptors_test
}  // namespace
}  // namespace weft
