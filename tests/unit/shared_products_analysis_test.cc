// The shared-products analysis (program/shared_products.hpp), table-driven: for small programs, which
// products it calls shared and along which axes the weight truly varies. The expectations are read off each
// program by hand: a weight is shared only when every replica that agrees on its axes would compute it
// bitwise alike. The cases that must not share are the ones where the declared types understate what differs
// (a grouped all-reduce under pmap's rules, PopXL's identity-forward all-reduce, a session's variable).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "program/builder.hpp"
#include "program/kernels.hpp"
#include "program/shared_products.hpp"

namespace weft::program {
namespace {

using Axes = std::vector<std::string>;

ValueType f32(std::vector<std::int64_t> shape, Axes varying = {}) {
  return ValueType{DType::f32, std::move(shape), std::move(varying)};
}

Params over(Axes axes) { return {{"axes", axes_param(std::move(axes))}}; }

struct Case {
  std::string name;
  CollectiveRules rules;
  // Builds the program on a {data: 4, model: 2} mesh from x (f32[4,3], varying over both axes); returns the
  // product whose verdict is checked, the program's output.
  std::function<ValueId(Builder&, ValueId x)> build;
  bool shared;
  Axes weight_axes;  // when shared
};

class SharedProductsAnalysis : public ::testing::TestWithParam<Case> {};

TEST_P(SharedProductsAnalysis, CallsAProductSharedOnlyWhenItsWeightIsProvablyEqual) {
  const Case& c = GetParam();
  Builder b(Mesh({{"data", 4}, {"model", 2}}), c.rules);
  const ValueId x = b.input(f32({4, 3}, {"data", "model"}));
  b.set_outputs({c.build(b, x)});
  const Program p = b.build();
  ASSERT_EQ(p.equations.back().op, "matmul") << c.name;
  std::vector<bool> local(p.equations.size());
  for (std::size_t i = 0; i < p.equations.size(); ++i) local[i] = find_kernel(p.equations[i].op) != nullptr;
  const auto verdicts = find_shared_products(p, local);
  const auto& last = verdicts.back();
  EXPECT_EQ(last.has_value(), c.shared) << c.name;
  if (last && c.shared) {
    EXPECT_EQ(last->weight_axes, c.weight_axes) << c.name;
  }
  // Only the product may be shared: nothing else is a matmul.
  for (std::size_t i = 0; i + 1 < verdicts.size(); ++i) EXPECT_FALSE(verdicts[i].has_value()) << c.name << " eq " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Table, SharedProductsAnalysis,
    ::testing::Values(
        Case{"invariant_weight_through_pvary", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) { return b.emit1("matmul", {x, b.input(f32({3, 5}))}); }, true, {}},
        Case{"weight_by_model_through_pvary", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) { return b.emit1("matmul", {x, b.input(f32({3, 5}, {"model"}))}); }, true, {"model"}},
        Case{"a_cast_and_a_scale_of_the_weight_stay_shared", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) {
               const ValueId w = b.emit1("multiply", {b.input(f32({3, 5})), b.input(f32({3, 5}))});
               return b.emit1("matmul", {x, w});
             },
             true, {}},
        Case{"weight_varying_like_the_rows", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) { return b.emit1("matmul", {x, b.input(f32({3, 5}, {"data", "model"}))}); }, false, {}},
        Case{"weight_mixed_with_varying_data", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) {
               const ValueId w = b.emit1("add", {b.input(f32({3, 5})), b.input(f32({3, 5}, {"data", "model"}))});
               return b.emit1("matmul", {x, w});
             },
             false, {}},
        Case{"a_psum_makes_the_weight_invariant", CollectiveRules::shard_map,
             [](Builder& b, ValueId x) {
               return b.emit1("matmul", {x, b.emit1("psum", {b.input(f32({3, 5}, {"data", "model"}))}, over({"data", "model"}))});
             },
             true, {}},
        Case{"a_broadcast_weight_under_pmap_rules", CollectiveRules::pmap,
             [](Builder& b, ValueId x) { return b.emit1("matmul", {x, b.input(f32({3, 5}))}); }, true, {}},
        // pmap's rules type a grouped psum as invariant over 'data'; its groups' sums differ.
        Case{"a_grouped_psum_under_pmap_rules", CollectiveRules::pmap,
             [](Builder& b, ValueId x) {
               Params grouped = over({"data"});
               grouped["groups"] = std::vector<std::vector<int>>{{0, 1}, {2, 3}};
               const ValueId w = b.emit1("psum", {b.input(f32({3, 5}, {"data"}))}, grouped);
               return b.emit1("matmul", {x, w});
             },
             true, {"data"}},  // shared only by replicas with the same 'data' and so the same group: all of 'model'
        Case{"identity_forward_all_reduce_keeps_its_operands_axes", CollectiveRules::pmap,
             [](Builder& b, ValueId x) {
               const ValueId w =
                   b.emit1("all_reduce_identical_inputs", {b.input(f32({3, 5}, {"data", "model"}))}, over({"data"}));
               return b.emit1("matmul", {x, w});
             },
             false, {}},
        Case{"a_session_variable_may_differ_everywhere", CollectiveRules::pmap,
             [](Builder& b, ValueId x) {
               const ValueId w = b.emit1("variable_read", {},
                                         {{"variable", string_param("w")},
                                          {"dtype", Param{DType::f32}},
                                          {"shape", ints_param({3, 5})}});
               return b.emit1("matmul", {x, w});
             },
             false, {}},
        Case{"a_weight_scaled_by_axis_index", CollectiveRules::pmap,
             [](Builder& b, ValueId x) {
               const ValueId i = b.emit1("axis_index", {}, over({"data"}));
               const ValueId s = b.emit1("astype", {i}, {{"dtype", Param{DType::f32}}});
               return b.emit1("matmul", {x, b.emit1("multiply", {b.input(f32({3, 5})), s})});
             },
             true, {"data"}},
        Case{"transposed_rows_are_not_stacked", CollectiveRules::shard_map,
             [](Builder& b, ValueId) {
               return b.emit1("matmul", {b.input(f32({3, 4}, {"data"})), b.input(f32({3, 5}))},
                       {{"transpose_a", bool_param(true)}});
             },
             false, {}},
        Case{"vector_rows", CollectiveRules::shard_map,
             [](Builder& b, ValueId) { return b.emit1("matmul", {b.input(f32({3}, {"data"})), b.input(f32({3, 5}))}); },
             false, {}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace weft::program
