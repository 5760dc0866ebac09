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
#include "program/shared_products.hpp"

namespace weft::program {
namespace {
namespace shared_products_analysis_test {

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
  ASSERT_EQ(p.equations.back().prim(), Prim::matmul) << c.name;
  std::vector<bool> local(p.equations.size());
  for (std::size_t i = 0; i < p.equations.size(); ++i) local[i] = p.equations[i].info().kernel != nullptr;
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
        // A grouped psum's sums differ between its groups: its type keeps 'data' (ops/collectives.cc).
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

// The replica classes behind it (issue 45, item 1), read off by hand: per axis of {data: 4, model: 2}, the class
// of each coordinate. A reduction in axis index groups along 'data' gives a class per group there and keeps its
// operand's classes along 'model'; groups over both axes (a flattened index) are taken as varying freely.
TEST(ReplicaClassesAnalysis, AGroupedReductionGivesAClassPerGroup) {
  struct Row {
    std::string name;
    std::function<ValueId(Builder&)> build;
    std::vector<std::vector<int>> classes;  // [data coordinates, model coordinates]
  };
  const auto grouped = [](Axes axes, std::vector<std::vector<int>> groups) {
    Params p = over(std::move(axes));
    p["groups"] = std::move(groups);
    return p;
  };
  const std::vector<Row> rows = {
      {"halves", [&](Builder& b) { return b.emit1("psum", {b.input(f32({3}, {"data", "model"}))}, grouped({"data"}, {{0, 1}, {2, 3}})); },
       {{0, 0, 1, 1}, {0, 1}}},
      {"interleaved_pmax", [&](Builder& b) { return b.emit1("pmax", {b.input(f32({3}, {"data", "model"}))}, grouped({"data"}, {{0, 2}, {1, 3}})); },
       {{0, 1, 0, 1}, {0, 1}}},
      {"gathered_in_groups", [&](Builder& b) {
         Params p = grouped({"data"}, {{0, 3}, {1, 2}});
         p["axis"] = int_param(0);
         return b.emit1("all_gather", {b.input(f32({3}, {"data"}))}, p);
       },
       {{0, 1, 1, 0}, {0, 0}}},
      {"invariant_operand", [&](Builder& b) { return b.emit1("psum", {b.input(f32({3}))}, grouped({"data"}, {{0, 1}, {2, 3}})); },
       {{0, 0, 0, 0}, {0, 0}}},
      {"ungrouped", [&](Builder& b) { return b.emit1("psum", {b.input(f32({3}, {"data", "model"}))}, over({"data"})); },
       {{0, 0, 0, 0}, {0, 1}}},
      {"groups_over_both_axes", [&](Builder& b) {
         return b.emit1("psum", {b.input(f32({3}, {"data", "model"}))}, grouped({"data", "model"}, {{0, 1, 2, 3}, {4, 5, 6, 7}}));
       },
       {{0, 1, 2, 3}, {0, 1}}},
      {"then_local_work_with_a_model_value", [&](Builder& b) {
         const ValueId s = b.emit1("psum", {b.input(f32({3}, {"data"}))}, grouped({"data"}, {{0, 1}, {2, 3}}));
         return b.emit1("add", {b.emit1("exp", {s}), b.input(f32({3}, {"model"}))});
       },
       {{0, 0, 1, 1}, {0, 1}}},
  };
  for (const Row& row : rows) {
    Builder b(Mesh({{"data", 4}, {"model", 2}}), CollectiveRules::pmap);
    const ValueId out = row.build(b);
    b.set_outputs({out});
    const Program p = b.build();
    std::vector<bool> local(p.equations.size());
    for (std::size_t i = 0; i < p.equations.size(); ++i) local[i] = p.equations[i].info().kernel != nullptr;
    EXPECT_EQ(replica_classes(p, local)[out].per_axis, row.classes) << row.name;
  }
}

}  // namespace shared_products_analysis_test
}  // namespace
}  // namespace weft::program
